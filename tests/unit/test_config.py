from __future__ import annotations

import pytest

from akresil.config import OPTIONS, resolve
from akresil.errors import ConfigError


def test_defaults_follow_java() -> None:
    c = resolve("producer", {})
    assert (c.retry_backoff_ms, c.retry_backoff_max_ms, c.delivery_timeout_ms) == (100, 1000, 120_000)
    assert (c.request_timeout_ms, c.acks, c.enable_idempotence) == (30_000, -1, True)
    # deliberate deviation (docs/architecture.md): 256 KiB batches, not Java's 16 KiB
    assert c.batch_size == 262_144
    assert c.max_in_flight_requests_per_connection == 5


def test_bootstrap_servers_string_is_split() -> None:
    assert resolve("admin", {"bootstrap_servers": "a:1, b:2"}).bootstrap_servers == ["a:1", "b:2"]


@pytest.mark.parametrize(("kind", "kwargs", "names"), [
    ("producer", {"lingerms": 5}, "lingerms"),
    ("producer", {"linger_ms": "5"}, "linger_ms"),
    ("producer", {"linger_ms": True}, "linger_ms"),
    ("producer", {"linger_ms": -1}, "linger_ms"),
    ("producer", {"compression_type": "brotli"}, "compression_type"),
    ("producer", {"group_id": "g"}, "group_id"),
    ("consumer", {"acks": 1}, "acks"),
    ("producer", {"bootstrap_servers": "nohostport"}, "bootstrap_servers"),
    ("producer", {"bootstrap_servers": "h:99999"}, "bootstrap_servers"),
    ("producer", {"delivery_timeout_ms": 1000, "linger_ms": 10, "request_timeout_ms": 995}, "delivery_timeout_ms"),
    ("producer", {"acks": 1}, "enable_idempotence"),
    ("producer", {"max_in_flight_requests_per_connection": 6}, "max_in_flight_requests_per_connection"),
    ("consumer", {"heartbeat_interval_ms": 50_000}, "heartbeat_interval_ms"),
    ("consumer", {"auto_offset_reset": "smallest"}, "auto_offset_reset"),
    ("admin", {"security_protocol": "SASL_PLAINTEXT"}, "sasl_plain_username"),
])
def test_bad_values_name_the_key(kind: str, kwargs: dict, names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        resolve(kind, kwargs)


def test_delivery_timeout_error_names_all_three_keys() -> None:
    with pytest.raises(ConfigError) as e:
        resolve("producer", {"delivery_timeout_ms": 100, "linger_ms": 0, "request_timeout_ms": 200})
    assert all(k in str(e.value) for k in ("delivery_timeout_ms", "linger_ms", "request_timeout_ms"))


def test_delivery_timeout_boundary_is_allowed() -> None:
    c = resolve("producer", {"delivery_timeout_ms": 1005, "linger_ms": 5, "request_timeout_ms": 1000})
    assert c.delivery_timeout_ms == 1005


def test_weaker_acks_without_idempotence() -> None:
    assert resolve("producer", {"acks": 1, "enable_idempotence": False}).acks == 1
    assert resolve("producer", {"acks": "0", "enable_idempotence": False}).acks == 0


def test_password_not_in_repr() -> None:
    c = resolve("admin", {"security_protocol": "SASL_PLAINTEXT", "sasl_plain_username": "u",
                          "sasl_plain_password": "hunter2"})
    assert "hunter2" not in repr(c)


def test_every_option_default_validates() -> None:
    for opt in OPTIONS:
        if opt.default is not None and opt.check is None and opt.name != "partition_assignment_strategy":
            assert opt.validate(opt.default) == opt.default


def test_config_is_immutable() -> None:
    c = resolve("producer", {})
    with pytest.raises(AttributeError):
        c.linger_ms = 7  # type: ignore[misc]
    assert c.replace(linger_ms=7).linger_ms == 7
