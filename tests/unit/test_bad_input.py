"""Bad input fails at the call site with an exception that names the problem (no broker needed).

Configuration (unknown keys with a suggestion, wrong types, out-of-range values, cross-key rules), topic names,
``NewTopic`` fields and admin arguments, and the consumer's ``assign``.  The producer's per-record checks need a
started producer and live in ``tests/integration/test_bad_input_broker.py``.
"""

from __future__ import annotations

import ssl
from typing import Any

import pytest

from akresil import Admin, Consumer, NewTopic, Producer, TopicPartition
from akresil import errors
from akresil.checks import check_new_topic, check_topic_name
from akresil.config import resolve

BOOT = "127.0.0.1:1"  # never contacted: every case fails before any I/O


# --------------------------------------------------------------------------- configuration
@pytest.mark.parametrize(("kind", "kwargs", "words"), [
    # unknown keys, with the closest known key suggested
    ("producer", {"linger": 5}, r"linger: unknown producer configuration key; did you mean 'linger_ms'\?"),
    ("consumer", {"auto_offset_rest": "earliest"}, r"did you mean 'auto_offset_reset'\?"),
    ("producer", {"session_timeout_ms": 10_000}, r"session_timeout_ms: .*it is a consumer setting"),
    ("admin", {"zzz_totally_unknown": 1}, r"zzz_totally_unknown: unknown admin configuration key$"),
    # wrong types
    ("producer", {"linger_ms": 5.5}, r"linger_ms: expected int, got float 5.5"),
    ("producer", {"batch_size": "16384"}, r"batch_size: expected int, got str"),
    ("producer", {"enable_idempotence": "yes"}, r"enable_idempotence: expected bool, got str"),
    ("consumer", {"enable_auto_commit": 1, "group_id": "g"}, r"enable_auto_commit: expected bool, got int"),
    ("admin", {"client_id": None}, r"client_id: must not be None"),
    ("admin", {"bootstrap_servers": [("h", 1)]}, r"bootstrap_servers: \('h', 1\) is not a host:port string"),
    ("producer", {"partitioner": "murmur2"}, r"partitioner: must be callable, got str"),
    ("admin", {"metrics_registry": {}}, r"metrics_registry: expected a prometheus_client CollectorRegistry"),
    ("admin", {"ssl_context": "cert.pem", "security_protocol": "SSL"}, r"ssl_context: expected SSLContext"),
    # out of range
    ("producer", {"request_timeout_ms": 0}, r"request_timeout_ms: 0 is below the minimum 1"),
    ("producer", {"request_timeout_ms": 2**31}, r"request_timeout_ms: .* is above the maximum"),
    ("producer", {"buffer_memory": 0}, r"buffer_memory: 0 is below the minimum 1"),
    ("consumer", {"max_poll_records": 0}, r"max_poll_records: 0 is below the minimum 1"),
    ("admin", {"bootstrap_servers": "localhost:0"}, r"bootstrap_servers: 'localhost:0' is not host:port"),
    ("admin", {"bootstrap_servers": ""}, r"bootstrap_servers:"),
    ("admin", {"bootstrap_servers": []}, r"bootstrap_servers: needs at least one host:port"),
    ("admin", {"client_id": "x" * 40_000}, r"client_id: is 40000 UTF-8 bytes; the protocol allows at most 32767"),
    ("admin", {"client_id": "bad\udc80"}, r"client_id: is not encodable as UTF-8"),
    # choices
    ("producer", {"acks": 2, "enable_idempotence": False}, r"acks: 2 is not one of"),
    ("admin", {"security_protocol": "ssl"}, r"security_protocol: 'ssl' is not one of"),
    ("consumer", {"partition_assignment_strategy": "round-robin"},
     r"partition_assignment_strategy: unknown assignor 'round-robin'.*did you mean 'roundrobin'"),
    ("consumer", {"partition_assignment_strategy": ("sticky",)}, r"unknown assignor 'sticky'; known: range"),
    ("consumer", {"partition_assignment_strategy": []}, r"partition_assignment_strategy: needs at least one"),
    ("consumer", {"partition_assignment_strategy": ["range", 3]}, r"partition_assignment_strategy: 3 is not"),
    # rules across keys
    ("admin", {"ssl_context": ssl.create_default_context()}, r"ssl_context: given, but security_protocol='PLAINTEXT'"),
    # SASL settings on a listener without SASL would be ignored: refused, naming both keys
    ("producer", {"sasl_mechanism": "SCRAM-SHA-512"},
     r"sasl_mechanism: given, but security_protocol='PLAINTEXT' does not use SASL; set security_protocol="),
    ("consumer", {"security_protocol": "SSL", "sasl_plain_username": "u", "sasl_plain_password": "p"},
     r"sasl_plain_username: given, but security_protocol='SSL' does not use SASL"),
    ("admin", {"sasl_plain_password": "secret"}, r"sasl_plain_password: given, but security_protocol='PLAINTEXT'"),
    ("admin", {"sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": lambda: "jwt"},
     r"sasl_mechanism: given, but security_protocol='PLAINTEXT' does not use SASL"),
    ("consumer", {"group_instance_id": "box-1"}, r"group_instance_id: static membership needs a group_id"),
    ("consumer", {"enable_auto_commit": True}, r"enable_auto_commit: cannot be True without a group_id"),
])
def test_bad_configuration_names_the_key(kind: str, kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(errors.ConfigError, match=words):
        resolve(kind, kwargs)


@pytest.mark.parametrize("client", [Producer, Consumer, Admin])
def test_clients_refuse_bad_configuration_at_construction(client: Any) -> None:
    with pytest.raises(errors.ConfigError, match="did you mean 'request_timeout_ms'"):
        client(bootstrap_servers=BOOT, request_timeout=5)
    with pytest.raises(ValueError):  # ConfigError is a ValueError too: plain `except ValueError` catches it
        client(bootstrap_servers=BOOT, retry_backoff_ms=-1)


def test_java_style_comma_separated_assignors_are_accepted() -> None:
    cfg = resolve("consumer", {"partition_assignment_strategy": "range, cooperative-sticky"})
    assert cfg.partition_assignment_strategy == ("range", "cooperative-sticky")


def test_sasl_keys_set_to_none_or_with_a_sasl_protocol_are_accepted() -> None:
    resolve("producer", {"sasl_plain_username": None, "sasl_plain_password": None})   # None: not set
    for protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        resolve("producer", {"security_protocol": protocol, "sasl_mechanism": "PLAIN", "sasl_plain_username": "u",
                             "sasl_plain_password": "p"})


def test_defaulted_keys_do_not_count_as_choices() -> None:
    """enable_auto_commit defaults to True: only an explicit True without a group is an error, also on replace()."""
    cfg = resolve("consumer", {"fetch_min_bytes": 2})
    assert cfg.enable_auto_commit is True and cfg.replace(fetch_min_bytes=3).fetch_min_bytes == 3
    assert resolve("consumer", {"enable_auto_commit": False}).enable_auto_commit is False


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"key_serializer": "utf-8"}, r"key_serializer: must be callable, got str"),
    ({"value_serializer": 5}, r"value_serializer: must be callable, got int"),
])
def test_producer_serializers_must_be_callable(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(errors.ConfigError, match=words):
        Producer(bootstrap_servers=BOOT, **kwargs)


# --------------------------------------------------------------------------- topic names
ILLEGAL_TOPICS = [
    ("", "non-empty string"),
    (".", "cannot be '.'"),
    ("..", "cannot be '..'"),
    ("t" * 250, "is 250 characters; the maximum is 249"),
    ("has space", "illegal characters ' '"),
    ("slash/colon:", "illegal characters '/:'"),
    ("caf\u00e9", "illegal characters '\u00e9'"),
    (None, "non-empty string, got None"),
    (b"bytes", "non-empty string, got b'bytes'"),
]


@pytest.mark.parametrize(("name", "words"), ILLEGAL_TOPICS, ids=[repr(n)[:20] for n, _ in ILLEGAL_TOPICS])
def test_illegal_topic_names(name: Any, words: str) -> None:
    with pytest.raises(errors.InvalidTopicError, match=words.replace("(", r"\(").replace(".", r"\.")):
        check_topic_name(name)


def test_longest_legal_topic_name_and_all_legal_characters() -> None:
    check_topic_name("t" * 249)
    check_topic_name("Az09._-")


@pytest.mark.parametrize(("name", "words"), ILLEGAL_TOPICS[:5], ids=[repr(n)[:20] for n, _ in ILLEGAL_TOPICS[:5]])
def test_consumer_refuses_illegal_topics_to_subscribe_and_assign(name: str, words: str) -> None:
    with pytest.raises(errors.InvalidTopicError):
        Consumer(name, bootstrap_servers=BOOT)
    consumer = Consumer(bootstrap_servers=BOOT)
    consumer.assign([TopicPartition("fine", 0)])
    with pytest.raises(errors.InvalidTopicError):
        consumer.assign([TopicPartition("fine", 1), TopicPartition(name, 0)])
    assert consumer.assignment() == {TopicPartition("fine", 0)}  # the bad call changed nothing


@pytest.mark.parametrize(("arg", "error", "words"), [
    (TopicPartition("t", 0), TypeError, "got a single TopicPartition"),
    ("t", TypeError, "got a single 't'"),
    ([("t", "0")], TypeError, r"expected TopicPartition\(topic, partition\), got \('t', '0'\)"),
    ([("t", True)], TypeError, "expected TopicPartition"),
    (["t"], TypeError, "expected TopicPartition"),
    ([TopicPartition("t", -1)], ValueError, "t--1: partition must be >= 0"),
    (5, TypeError, "not iterable"),
    # a name checked once is not checked again, but every other one is, whatever its type
    ([TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition(["t"], 2)], errors.InvalidTopicError,
     "non-empty string"),
    ([TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t!", 2)], errors.InvalidTopicError,
     "illegal characters"),
])
def test_consumer_assign_checks_its_argument(arg: Any, error: type[Exception], words: str) -> None:
    consumer = Consumer(bootstrap_servers=BOOT)
    with pytest.raises(error, match=words):
        consumer.assign(arg)
    assert consumer.assignment() == frozenset()


def test_consumer_assign_accepts_plain_pairs() -> None:
    consumer = Consumer(bootstrap_servers=BOOT)
    consumer.assign([("t", 0), TopicPartition("t", 1), TopicPartition("t", _Two(2))])
    assert consumer.assignment() == {TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)}
    assert all(type(tp) is TopicPartition and type(tp.partition) is int for tp in consumer.assignment())


class _Two(int):
    """An int subclass as a partition number (a numpy-like scalar): kept as a plain int."""


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"pattern": "("}, r"pattern: '\(' is not a valid regex"),
    ({"pattern": 5}, r"pattern: expected a str or compiled regex"),
    ({"max_buffered_bytes": 0}, r"max_buffered_bytes: must be an int >= 1"),
    ({"key_deserializer": "json"}, r"key_deserializer: must be callable"),
])
def test_consumer_constructor_arguments(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(errors.ConfigError, match=words):
        Consumer(bootstrap_servers=BOOT, **kwargs)


# --------------------------------------------------------------------------- admin arguments
@pytest.mark.parametrize(("topic", "error", "words"), [
    (NewTopic("ok", num_partitions=0), errors.InvalidPartitionsError, r"NewTopic\('ok'\)\.num_partitions: must be >= 1"),
    (NewTopic("ok", num_partitions=-2), errors.InvalidPartitionsError, "num_partitions"),
    (NewTopic("ok", num_partitions="3"), TypeError, r"num_partitions: expected an int, got str '3'"),  # type: ignore[arg-type]
    (NewTopic("ok", num_partitions=True), TypeError, "num_partitions: expected an int, got bool"),
    (NewTopic("ok", replication_factor=0), errors.InvalidReplicationFactorError, "replication_factor: must be in"),
    (NewTopic("ok", replication_factor=40_000), errors.InvalidReplicationFactorError, "replication_factor"),
    (NewTopic("ok", configs={"retention.ms": 1000}), TypeError, r"configs: 'retention.ms': 1000 is not a str"),  # type: ignore[dict-item]
    (NewTopic("ok", configs=[("a", "b")]), TypeError, "configs: expected a dict"),  # type: ignore[arg-type]
    (NewTopic("ok", replica_assignment={1: [1]}), errors.InvalidReplicaAssignmentError, r"partitions must be 0\.\.0"),
    (NewTopic("ok", replica_assignment={0: [1, 1]}), errors.InvalidReplicaAssignmentError, "distinct broker ids"),
    (NewTopic("ok", replica_assignment={0: []}), errors.InvalidReplicaAssignmentError, "distinct broker ids"),
    (NewTopic("ok", replica_assignment={0: [1], 1: [1, 2]}), errors.InvalidReplicaAssignmentError,
     "same number of replicas"),
    (NewTopic("bad name"), errors.InvalidTopicError, "illegal characters ' '"),
    ("ok", TypeError, "expected a NewTopic, got str"),
])
def test_new_topic_fields_are_checked(topic: Any, error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=words):
        check_new_topic(topic)


def test_valid_new_topics_pass() -> None:
    check_new_topic(NewTopic("t", 3, 1, {"cleanup.policy": "compact", "x": None}))
    check_new_topic(NewTopic("t", -1, -1))
    check_new_topic(NewTopic("t", replica_assignment={0: [1, 2], 1: [2, 3]}))


@pytest.mark.parametrize(("call", "arg", "error", "words"), [
    ("create_topics", NewTopic("t"), TypeError, "got a single NewTopic"),
    ("create_topics", [NewTopic("t"), NewTopic("t")], errors.InvalidRequestError, "topic 't' is listed twice"),
    ("create_topics", [NewTopic("t"), NewTopic("..")], errors.InvalidTopicError, "cannot be '..'"),
    ("delete_topics", "orders", TypeError, "got a single str 'orders'; wrap it in a list"),
    ("delete_topics", ["ok", "no/slash"], errors.InvalidTopicError, "illegal characters '/'"),
    ("describe_topics", "orders", TypeError, "got a single str"),
    ("describe_topics", [""], errors.InvalidTopicError, "non-empty"),
    ("list_offsets", [TopicPartition("t", 0)], TypeError, "expected a mapping"),
    ("list_offsets", {TopicPartition("t", 0): "latest"}, ValueError, "timestamp for t-0 must be an int"),
    ("list_offsets", {TopicPartition("t", 0): -3}, ValueError, "EARLIEST"),
    ("list_offsets", {("t", "0"): -1}, TypeError, "expected TopicPartition"),
    ("list_offsets", {TopicPartition("a b", 0): -1}, errors.InvalidTopicError, "illegal"),
])
async def test_admin_arguments_are_checked_before_any_request(call: str, arg: Any, error: type[Exception],
                                                            words: str) -> None:
    admin = Admin(bootstrap_servers=BOOT)  # not started: a check that let the call through would hit the network
    with pytest.raises(error, match=words):
        await getattr(admin, call)(arg)


async def test_admin_timeouts_are_checked() -> None:
    admin = Admin(bootstrap_servers=BOOT)
    with pytest.raises(ValueError, match="timeout_ms: must be an int"):
        await admin.create_topics([NewTopic("t")], timeout_ms=-1)
    with pytest.raises(ValueError, match="timeout_ms: must be an int"):
        await admin.delete_topics(["t"], timeout_ms=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="isolation_level"):
        await admin.list_offsets({TopicPartition("t", 0): -1}, isolation_level="committed")
