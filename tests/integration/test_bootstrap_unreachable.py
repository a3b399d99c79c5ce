"""An unreachable bootstrap address (issue 21): one clear error, a bounded wait, and WARNINGs that back off
(rounds 1, 2, 4, 8 ...: at most one per back-off step, issue 32).

A refused port (a loopback port nobody listens on) and a name that cannot resolve (``.invalid`` is reserved,
RFC 2606), for each client: they share ``Cluster``'s bootstrap and its ``bootstrap_timeout_ms``.
"""

from __future__ import annotations

import logging
import socket
import time
from typing import Any

import anyio
import pytest

from akresil import Admin, Consumer, Producer
from akresil.errors import ConfigError, NoBrokersAvailableError

TIMEOUT_MS = 300
#: generous: the wait ends at the option's deadline; the rest is event-loop and resolver slack on a loaded machine
BOUND_S = 5.0
UNRESOLVABLE = "akresil-no-such-host.invalid:9092"


def refused_address() -> str:
    """A loopback port that was free a moment ago: connecting to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def client(kind: str, bootstrap: str, bootstrap_timeout_ms: int = TIMEOUT_MS) -> Any:
    config: dict[str, Any] = dict(bootstrap_servers=bootstrap, bootstrap_timeout_ms=bootstrap_timeout_ms)
    if kind == "producer":
        return Producer(**config)
    if kind == "consumer":
        return Consumer("t", group_id="g", **config)
    return Admin(**config)


async def start_and_fail(kind: str, bootstrap: str) -> tuple[NoBrokersAvailableError, float]:
    started = time.monotonic()
    with pytest.raises(NoBrokersAvailableError) as info:
        async with client(kind, bootstrap):
            pass
    return info.value, time.monotonic() - started


@pytest.mark.parametrize("kind", ["producer", "consumer", "admin"])
async def test_refused_port_gives_one_clear_error_within_the_timeout(kind: str, caplog: pytest.LogCaptureFixture
                                                                     ) -> None:
    address = refused_address()
    caplog.set_level(logging.WARNING, logger="akresil.net.cluster")
    error, elapsed = await start_and_fail(kind, address)
    message = str(error)
    assert message.count(address) == 1, message
    assert message.count("connection refused") == 1, message
    assert f"bootstrap_timeout_ms={TIMEOUT_MS}" in message
    assert "cannot connect" not in message  # the address is named once, not again inside its cause
    assert elapsed < BOUND_S
    rounds = [r for r in caplog.records if r.levelno == logging.WARNING and "no bootstrap server answered" in
              r.getMessage()]
    assert rounds, "the first failed round logs a WARNING"
    for record in rounds:
        text = record.getMessage()
        assert text.count(address) == 1 and "connection refused" in text and "next attempt in" in text, text


async def test_unresolvable_name_and_refused_port_are_each_named_once_with_their_cause(
        caplog: pytest.LogCaptureFixture) -> None:
    refused = refused_address()
    caplog.set_level(logging.WARNING, logger="akresil.net.cluster")
    error, elapsed = await start_and_fail("producer", f"{UNRESOLVABLE},{refused}")
    message = str(error)
    assert message.count(UNRESOLVABLE) == 1 and message.count(refused) == 1, message
    assert message.count("does not resolve") == 1 and message.count("connection refused") == 1, message
    assert message.index(UNRESOLVABLE) < message.index("does not resolve") < message.index(refused), message
    assert elapsed < BOUND_S
    first = next(r.getMessage() for r in caplog.records if "no bootstrap server answered" in r.getMessage())
    assert "round 1" in first and UNRESOLVABLE in first and refused in first


async def test_the_option_bounds_the_wait() -> None:
    """The longer setting keeps trying longer (lower bound exact: start() never gives up early)."""
    address = refused_address()
    _, short = await start_and_fail("admin", address)
    started = time.monotonic()
    with pytest.raises(NoBrokersAvailableError, match="bootstrap_timeout_ms=1200"):
        async with Admin(bootstrap_servers=address, bootstrap_timeout_ms=1200):
            pass
    long = time.monotonic() - started
    assert TIMEOUT_MS / 1000 <= short < BOUND_S
    assert 1.2 <= long < 1.2 + BOUND_S


async def test_rounds_back_off_like_retries_not_at_the_reconnect_pace(caplog: pytest.LogCaptureFixture) -> None:
    """A refused port fails in microseconds and its reconnect backoff caps at 250 ms (a returning broker is
    noticed soon), but a bootstrap round is a retried request: rounds back off as KIP-580 retries do."""
    address = refused_address()
    caplog.set_level(logging.DEBUG, logger="akresil.net.cluster")
    with pytest.raises(NoBrokersAvailableError):
        async with Producer(bootstrap_servers=address, bootstrap_timeout_ms=2_500, retry_backoff_ms=100,
                            retry_backoff_max_ms=1_000, reconnect_backoff_ms=50, reconnect_backoff_max_ms=250):
            pass
    rounds = [r for r in caplog.records if "no bootstrap server answered (round" in r.getMessage()]
    # ~100 + 200 + 400 + 800 ms (±20%) fit in 2.5 s: 4-5 rounds; at the reconnect pace there would be ~11
    assert 3 <= len(rounds) <= 6, [r.getMessage() for r in rounds]


async def test_the_warnings_back_off_too(caplog: pytest.LogCaptureFixture) -> None:
    """One WARNING per round made 60 lines in the default 60 s at the 1 s retry cap; rounds 1, 2, 4, 8 ... log
    one each (the others at DEBUG), each saying when the next one comes."""
    address = refused_address()
    caplog.set_level(logging.DEBUG, logger="akresil.net.cluster")
    with pytest.raises(NoBrokersAvailableError):
        async with Producer(bootstrap_servers=address, bootstrap_timeout_ms=400, retry_backoff_ms=5,
                            retry_backoff_max_ms=10, reconnect_backoff_ms=1, reconnect_backoff_max_ms=2):
            pass
    rounds = [r for r in caplog.records if "no bootstrap server answered (round" in r.getMessage()]
    assert len(rounds) >= 9, len(rounds)      # ~10 ms rounds in 400 ms: dozens
    loud = [int(r.getMessage().split("(round ")[1].split(")")[0]) for r in rounds if r.levelno == logging.WARNING]
    assert loud == [2 ** i for i in range(len(loud))] and len(loud) <= len(rounds).bit_length(), loud
    first = next(r.getMessage() for r in rounds if r.levelno == logging.WARNING)
    assert "logged again after round 2" in first


@pytest.mark.parametrize("kind", ["producer", "consumer", "admin"])
async def test_a_list_of_names_that_do_not_resolve_is_refused_at_once(kind: str, caplog: pytest.LogCaptureFixture
                                                                      ) -> None:
    """As Java's client (ConfigException): a typo is not retried for bootstrap_timeout_ms (10 min here; the
    guard only keeps a regression from hanging the run), and no bootstrap round is logged."""
    other = "akresil-no-such-host-2.invalid:9093"
    caplog.set_level(logging.WARNING, logger="akresil.net.cluster")
    with anyio.fail_after(30), pytest.raises(ConfigError) as info:
        async with client(kind, f"{UNRESOLVABLE},{other}", bootstrap_timeout_ms=600_000):
            pass
    message = str(info.value)
    assert message.startswith("bootstrap_servers: no host name resolves") and UNRESOLVABLE in message \
        and other in message, message
    assert not [r for r in caplog.records if "no bootstrap server answered" in r.getMessage()]


async def test_names_that_do_not_resolve_next_to_one_that_does_get_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="akresil.net.cluster")
    await start_and_fail("admin", f"{UNRESOLVABLE},{refused_address()}")
    [warning] = [r.getMessage() for r in caplog.records if "bootstrap_servers:" in r.getMessage()]
    assert UNRESOLVABLE in warning and "does not resolve" in warning and "trying the others" in warning
