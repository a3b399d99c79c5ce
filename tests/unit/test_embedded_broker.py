"""EmbeddedBroker's choice of broker and its errors, without starting one (no JVM, no Tansu here)."""

from __future__ import annotations

import logging
import socket

import pytest

from akresil.testing import broker as broker_module
from akresil.testing.broker import TANSU_LACKS, BrokerStartError, EmbeddedBroker, embedded_kafka_features
from akresil.pytest_plugin import BROKER_KINDS, broker_kind


def test_auto_is_the_default_and_bad_arguments_name_themselves() -> None:
    assert EmbeddedBroker().requested_kind == "auto"
    with pytest.raises(ValueError, match="kind must be one of 'auto', 'kafka', 'tansu', 'noida'"):
        EmbeddedBroker(kind="apache")        # type: ignore[arg-type]
    with pytest.raises(ValueError, match="extra_args.*broker_config"):
        EmbeddedBroker(kind="kafka", extra_args=["--x"])
    with pytest.raises(ValueError, match="broker_config: server.properties are Apache Kafka's"):
        EmbeddedBroker(kind="tansu", broker_config={"num.partitions": 3})
    with pytest.raises(ValueError, match="port must be in 1..65535"):
        EmbeddedBroker(port=70000)
    with pytest.raises(ValueError, match="Kafka version"):
        EmbeddedBroker(kafka_version="newest")


def test_without_java_auto_picks_tansu_and_warns_once_naming_the_cause_and_what_tansu_lacks(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(broker_module, "_warned_fallback", False)
    caplog.set_level(logging.WARNING, logger="akresil.testing.broker")
    first, second = EmbeddedBroker(), EmbeddedBroker(kind="auto")
    assert first._resolve_kind() == "tansu" and second._resolve_kind() == "tansu"
    assert first.fallback_reason is not None and "Java 17+" in first.fallback_reason
    [record] = caplog.records                            # one warning per process, not one per broker
    message = record.getMessage()
    assert "apt-get install -y openjdk-17-jdk-headless" in message
    assert all(lack in message for lack in TANSU_LACKS) and "kind='tansu'" in message
    assert EmbeddedBroker(kind="tansu")._resolve_kind() == "tansu" and len(caplog.records) == 1


def test_a_port_in_use_is_named_before_anything_starts() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for kind in ("tansu", "kafka"):
            with pytest.raises(BrokerStartError, match=f"port {port} on 127.0.0.1 is in use.*another port"):
                EmbeddedBroker(kind=kind, port=port).start()         # type: ignore[arg-type]


def test_embedded_kafka_turns_on_share_groups_and_transactions_v2_where_the_release_has_them() -> None:
    assert embedded_kafka_features("4.4.0") == {"transaction.version": 2, "share.version": 1}
    assert embedded_kafka_features("4.0.0") == {"transaction.version": 2}
    assert embedded_kafka_features("3.9.1") == {}


class _Config:
    def __init__(self, option: str | None, ini: str) -> None:
        self.option, self.ini = option, ini

    def getoption(self, name: str) -> str | None:
        return self.option

    def getini(self, name: str) -> str:
        return self.ini


def test_the_plugin_follows_the_same_default() -> None:
    assert broker_kind(_Config(None, "auto")) == "auto"                 # the ini option's default
    assert broker_kind(_Config("tansu", "auto")) == "tansu"
    assert broker_kind(_Config(None, "kafka")) == "kafka"
    assert set(BROKER_KINDS) == {"auto", "kafka", "tansu", "noida", "apache"}
