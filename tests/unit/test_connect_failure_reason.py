"""How a failed connect attempt is described: the cause alone, in words, once (issue 21)."""

from __future__ import annotations

import socket

from akresil import errors
from akresil.net.connection import connect_failure_reason


def test_unresolvable_name() -> None:
    exc = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    assert connect_failure_reason(exc) == "host name does not resolve (Name or service not known)"


def test_refused_behind_anyios_all_attempts_failed() -> None:
    """anyio tries every address of a host and raises a bare OSError; the real error is its ``__cause__``."""
    refused = ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 1)")
    outer = OSError("All connection attempts failed")
    outer.__cause__ = refused
    assert connect_failure_reason(outer) == "connection refused"
    assert connect_failure_reason(refused) == "connection refused"


def test_other_errors_keep_their_text() -> None:
    assert connect_failure_reason(OSError(113, "No route to host")) == "[Errno 113] No route to host"
    assert connect_failure_reason(OSError()) == "OSError"


def test_connection_error_reason_defaults_to_the_message() -> None:
    assert errors.KafkaConnectionError("closed by the peer").reason == "closed by the peer"
    assert errors.KafkaConnectionError("cannot connect to x:1: refused", reason="refused").reason == "refused"
    assert errors.KafkaConnectionError().reason == ""
