from __future__ import annotations

import pytest

from akresil import errors


def test_every_broker_class_has_a_unique_code() -> None:
    classes = {c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.BrokerResponseError)
               and c not in (errors.BrokerResponseError, errors.UnknownKafkaError)}
    codes = [c.errno for c in classes]
    assert len(codes) == len(set(codes)) >= 120
    for cls in classes:
        assert errors.error_for_code(cls.errno) is cls
        assert cls.__doc__ and cls.description


@pytest.mark.parametrize(("code", "cls"), [
    (6, errors.NotLeaderOrFollowerError), (74, errors.FencedLeaderEpochError), (35, errors.UnsupportedVersionError),
    (58, errors.AuthenticationError), (10, errors.RecordTooLargeError), (-1, errors.UnknownServerError),
])
def test_codes_used_by_the_resilience_core(code: int, cls: type) -> None:
    assert errors.error_for_code(code) is cls


def test_leader_errors_are_retriable_metadata_errors() -> None:
    for cls in (errors.NotLeaderOrFollowerError, errors.FencedLeaderEpochError, errors.LeaderNotAvailableError):
        assert cls.retriable and cls.invalid_metadata
    assert not errors.OutOfOrderSequenceNumberError.retriable


def test_unknown_code_gets_a_stable_class() -> None:
    cls = errors.error_for_code(4242)
    assert cls is errors.error_for_code(4242)
    assert cls.errno == 4242 and issubclass(cls, errors.UnknownKafkaError)


def test_raise_for_code() -> None:
    errors.raise_for_code(0)
    with pytest.raises(errors.NotLeaderOrFollowerError, match="not the leader"):
        errors.raise_for_code(6)
    with pytest.raises(errors.InvalidTopicError, match="bad name"):
        errors.raise_for_code(17, "bad name")


def test_config_error_is_a_value_error() -> None:
    assert issubclass(errors.ConfigError, ValueError)
