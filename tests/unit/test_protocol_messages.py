"""The typed message views (akresil/protocol/messages.py) follow the compiled schemas, and say what the codec does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import NotRequired, get_origin, get_type_hints

from akresil.protocol import messages, specs
from akresil.protocol.api import ApiKey, decode_response, encode_response

ROOT = Path(__file__).resolve().parents[2]


def test_messages_module_is_current() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_messages.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_every_api_has_its_request_and_response_type() -> None:
    for key in ApiKey:
        request, response = messages.BY_API_KEY[key]
        assert request.__name__.endswith("Request") and response.__name__.endswith("Response")


def _required(typed: type) -> set[str]:
    # the module uses postponed annotations, so typing's own __required_keys__ cannot see NotRequired
    hints = get_type_hints(typed, include_extras=True)
    return {name for name, hint in hints.items() if get_origin(hint) is not NotRequired}


def test_required_response_keys_are_the_keys_every_version_decodes() -> None:
    # a key a type marks required must be in the decoded dict of the oldest and newest version alike
    for key in (ApiKey.METADATA, ApiKey.PRODUCE, ApiKey.FETCH):
        schema = next(m for m in specs.ALL if m.api_key == key and m.kind == "response")
        response_type = messages.BY_API_KEY[key][1]
        for version in (schema.valid.lo, schema.valid.hi):
            frame = encode_response(key, version, 7, {})
            decoded = decode_response(key, version, frame[4:])
            assert _required(response_type) <= decoded.keys(), (key, version)
            assert decoded.keys() <= set(get_type_hints(response_type)), (key, version)


def test_the_clients_do_not_load_the_typed_views_at_run_time() -> None:
    """The TypedDicts are for type checkers: building ~400 classes at import would slow every process that starts
    a client (Spark starts several per query). Fresh interpreter: this one has them loaded."""
    code = ("import sys, akresil.consumer, akresil.producer, akresil.admin, akresil.share_consumer\n"
            "print('akresil.protocol.messages' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False"]
