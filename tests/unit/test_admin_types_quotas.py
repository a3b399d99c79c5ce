"""Client quota value types: entities with default parts, filter components, operations; each bad value is
refused with the field named, before anything is sent."""

from __future__ import annotations

import pickle

import pytest

from akresil.admin_types import (DEFAULT, ClientQuotaEntity, ClientQuotaFilter, ClientQuotaFilterComponent,
                                 ClientQuotaOp, DefaultEntity)


def test_entity_components_are_the_wire_form_and_read_back() -> None:
    e = ClientQuotaEntity(user="alice", client_id=DEFAULT)
    assert e.components() == {"user": "alice", "client-id": None}
    assert ClientQuotaEntity.from_components({"client-id": None, "user": "alice"}) == e
    assert ClientQuotaEntity.from_components({"ip": "10.0.0.1"}) == ClientQuotaEntity(ip="10.0.0.1")
    assert str(e) == "user='alice', client-id=DEFAULT"
    assert len({e, ClientQuotaEntity(user="alice", client_id=DEFAULT), ClientQuotaEntity(user="alice")}) == 2
    with pytest.raises(ValueError, match="quota entity type 'group' is not one of"):
        ClientQuotaEntity.from_components({"group": "g"})


def test_default_is_one_object_that_no_name_equals() -> None:
    assert DefaultEntity() is DEFAULT and repr(DEFAULT) == "DEFAULT"
    assert pickle.loads(pickle.dumps(DEFAULT)) is DEFAULT
    assert ClientQuotaEntity(user=DEFAULT) != ClientQuotaEntity(user="DEFAULT")
    assert ClientQuotaEntity(user="<default>").components() == {"user": "<default>"}


@pytest.mark.parametrize(("kwargs", "message"), [
    ({}, "name at least one of user, client_id, ip"),
    ({"user": ""}, "ClientQuotaEntity.user: expected a non-empty str or DEFAULT, got ''"),
    ({"client_id": 7}, "ClientQuotaEntity.client_id: expected a non-empty str or DEFAULT, got 7"),
])
def test_bad_entities_name_the_field(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ClientQuotaEntity(**kwargs)  # type: ignore[arg-type]


def test_filter_components_map_to_the_three_match_types() -> None:
    assert ClientQuotaFilterComponent("user", "alice").to_wire() == \
        {"entity_type": "user", "match_type": 0, "match": "alice"}
    assert ClientQuotaFilterComponent("client_id", DEFAULT).to_wire() == \
        {"entity_type": "client-id", "match_type": 1, "match": None}
    assert ClientQuotaFilterComponent("IP").to_wire() == {"entity_type": "ip", "match_type": 2, "match": None}
    assert ClientQuotaFilterComponent("Client-Id").entity_type == "client-id"
    with pytest.raises(ValueError, match="ClientQuotaFilterComponent.entity_type: 'group' is not one of"):
        ClientQuotaFilterComponent("group")
    with pytest.raises(ValueError, match="ClientQuotaFilterComponent.name: expected a non-empty str or DEFAULT"):
        ClientQuotaFilterComponent("user", "")


def test_filter_takes_any_sequence_of_components_and_refuses_repeats() -> None:
    f = ClientQuotaFilter([ClientQuotaFilterComponent("user")], strict=True)  # type: ignore[arg-type]
    assert f.components == (ClientQuotaFilterComponent("user"),) and hash(f)
    with pytest.raises(ValueError, match="an entity type is named twice"):
        ClientQuotaFilter((ClientQuotaFilterComponent("user", "a"), ClientQuotaFilterComponent("user", "b")))
    with pytest.raises(TypeError, match="ClientQuotaFilter.components: expected ClientQuotaFilterComponent"):
        ClientQuotaFilter(ClientQuotaFilterComponent("user"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ClientQuotaFilter.components"):
        ClientQuotaFilter(("user",))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ClientQuotaFilter.strict: expected a bool"):
        ClientQuotaFilter(strict="yes")  # type: ignore[arg-type]


def test_ops_take_finite_numbers_or_none() -> None:
    assert ClientQuotaOp("producer_byte_rate", 1024).value == 1024.0
    assert isinstance(ClientQuotaOp("producer_byte_rate", 1024).value, float)
    assert ClientQuotaOp("request_percentage").value is None
    for bad in (True, "1", float("nan"), float("inf")):
        with pytest.raises(ValueError, match="ClientQuotaOp.value: 'k' needs a finite number"):
            ClientQuotaOp("k", bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ClientQuotaOp.key: expected a non-empty str"):
        ClientQuotaOp("", 1.0)
