"""Credentials stay out of reprs, strings and errors of every object that holds or handles them.

The broker-backed half (log records of whole authenticated and failed sessions, metric labels) is in
tests/integration/test_security.py.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from akresil import Admin, Consumer, Producer
from akresil.config import resolve
from akresil.errors import ConfigError
from akresil.net.sasl import PlainClient, SaslConfig, ScramClient
from akresil.testing.sasl_server import PlainServer, SaslUserTable, ScramCredential, ScramServer
from akresil.testing import FaultProxy
from akresil.testing.faults import SaslGate

SECRET = "pa55-Zq9-unique-secret"
SASL = dict(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice",
            sasl_plain_password=SECRET)


def shown(obj: Any) -> str:
    return repr(obj) + "\n" + str(obj)


@pytest.mark.parametrize("kind", ["producer", "consumer", "admin"])
def test_config_repr_masks_the_password(kind: str) -> None:
    config = resolve(kind, SASL)
    assert SECRET not in shown(config)
    assert "sasl_plain_password': '***'" in repr(config)
    assert "'sasl_plain_username': 'alice'" in repr(config)   # the user name is not a secret: it helps debugging
    assert config.sasl_plain_password == SECRET               # still usable by the client itself
    assert SECRET not in repr(config.replace(linger_ms=1) if kind == "producer" else config.replace())


async def test_client_objects_do_not_show_the_password() -> None:
    for client in (Producer(**SASL), Consumer("t", **SASL), Admin(**SASL)):
        assert SECRET not in shown(client)
        assert SECRET not in shown(client.config)
        sasl = client._cluster._sasl
        assert sasl is not None and SECRET not in shown(sasl)


def test_sasl_objects_do_not_show_the_password() -> None:
    config = SaslConfig("SCRAM-SHA-256", "alice", SECRET)
    assert SECRET not in shown(config)
    assert SECRET not in shown(config.new_client())
    assert SECRET not in shown(PlainClient("alice", SECRET))
    scram = ScramClient("SCRAM-SHA-512", "alice", SECRET)
    scram.step(b"r=" + scram.first().split(b"r=")[1] + b"xyz,s=c2FsdA==,i=4096")   # state now holds keys
    assert SECRET not in shown(scram)
    table = SaslUserTable({"alice": SECRET})
    assert SECRET not in shown(table) and SECRET.encode() not in pickle.dumps(
        [table.credential(m, "alice") for m in table.mechanisms])
    assert SECRET not in shown(ScramCredential.derive("SCRAM-SHA-256", SECRET))
    assert SECRET not in shown(PlainServer(lambda user: None))
    assert SECRET not in shown(ScramServer("SCRAM-SHA-256", lambda user: None))
    assert SECRET not in shown(SaslGate(table))


def test_sasl_config_errors_name_the_key_not_the_value() -> None:
    with pytest.raises(ConfigError) as info:
        resolve("producer", dict(SASL, sasl_plain_username=None))
    assert "sasl_plain_username" in str(info.value) and SECRET not in str(info.value)
    with pytest.raises(ConfigError) as info:
        resolve("producer", dict(SASL, sasl_mechanism="GSSAPI"))
    assert SECRET not in str(info.value)
    with pytest.raises(ConfigError) as info:
        PlainClient("alice", SECRET + "\0")
    assert SECRET not in str(info.value)


def test_a_mistyped_password_is_not_quoted_in_the_error() -> None:
    with pytest.raises(ConfigError) as info:
        resolve("producer", dict(SASL, sasl_plain_password=SECRET.encode()))
    assert "sasl_plain_password" in str(info.value)
    assert SECRET not in str(info.value)


def test_fault_proxy_keeps_no_user_password() -> None:
    proxy = FaultProxy("127.0.0.1:9", nodes=1, sasl_users={"alice": SECRET})
    assert SECRET not in shown(proxy) and SECRET.encode() not in pickle.dumps(proxy.sasl)
    assert all(SECRET not in shown(v) for v in vars(proxy).values())
