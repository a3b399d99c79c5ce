"""A broker that lies: garbage, truncated frames, strangers' correlation ids, another API's body, a 2 GiB size
prefix, one byte per second.

Against ``tests.harness.hostile_broker.HostileBroker`` (which answers the ApiVersions handshake correctly):

* a ``Connection`` fails *every* pending request with a clear error naming the node and the problem, closes
  itself promptly (not after the request timeout, except for slowloris which *is* a timeout), and allocates
  nothing like the 2 GiB a fake size prefix claims;
* an Admin, a Producer and a Consumer whose ``bootstrap_servers`` list the hostile broker *first* fall over to
  the real broker (Tansu) behind it and do their work: topics created, records delivered and read back.
"""

from __future__ import annotations

import time
import tracemalloc
import uuid

import anyio
import pytest

from akresil import Admin, Consumer, NewTopic, Producer, TopicPartition
from akresil import errors
from akresil.net.cluster import metadata_request_body
from akresil.net.connection import Connection
from akresil.protocol.api import ApiKey
from akresil.testing import EmbeddedBroker

from ..harness.hostile_broker import MODES, HostileBroker

#: what each mode must make a pending request fail with: (error class, words the message must contain)
EXPECTED: dict[str, tuple[type[errors.KafkaError], str]] = {
    "garbage": (errors.ProtocolError, "frame size 1213486160 is outside"),
    "garbage_body": (errors.ProtocolError, "malformed METADATA"),
    "truncated": (errors.ProtocolError, "ended inside a frame"),
    "unknown_cid": (errors.ProtocolError, "received correlation id 1001"),
    "wrong_api": (errors.ProtocolError, "malformed METADATA"),
    "oversized": (errors.ProtocolError, "frame size 2147483647 is outside"),
    "slowloris": (errors.RequestTimeoutError, "got no response within 1000 ms"),
}
#: far above how long any mode but slowloris may take to fail: a client that waited would blow it
REQUEST_TIMEOUT_MS = 60_000


async def _wait_until(predicate: object, timeout_s: float = 10.0) -> None:
    with anyio.fail_after(timeout_s):
        while not predicate():  # type: ignore[operator]
            await anyio.sleep(0.01)


@pytest.mark.parametrize("mode", MODES)
async def test_connection_fails_every_pending_request_and_closes(mode: str) -> None:
    slow = mode == "slowloris"
    async with HostileBroker(mode, interval_s=0.5) as hb:
        conn = await Connection.connect(hb.host, hb.port, node_id=1,
                                        request_timeout_ms=1_000 if slow else REQUEST_TIMEOUT_MS)
        assert conn.versions[ApiKey.METADATA] >= 12  # the handshake was honest
        outcomes: list[BaseException | None] = [None] * 3

        async def call(i: int) -> None:
            try:
                await conn.request(ApiKey.METADATA, metadata_request_body([f"t{i}"], allow_auto_topic_creation=False))
            except errors.KafkaError as exc:
                outcomes[i] = exc

        tracemalloc.start()
        started = time.monotonic()
        try:
            async with anyio.create_task_group() as tg:   # three pipelined requests on the one connection
                for i in range(3):
                    tg.start_soon(call, i)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        elapsed = time.monotonic() - started

        assert conn.closed
        assert all(isinstance(o, errors.KafkaError) for o in outcomes), outcomes
        cls, words = EXPECTED[mode]
        first = outcomes[0]
        assert isinstance(first, cls) and words in str(first), repr(first)
        where = f"node 1 at 127.0.0.1:{hb.port}"
        for o in outcomes:  # the others fail with the same cause (or, after a timeout, "connection closed")
            assert where in str(o), repr(o)
            assert isinstance(o, (cls, errors.KafkaConnectionError)), repr(o)
        assert elapsed < 10.0, f"{mode}: took {elapsed:.1f} s to give up"
        assert peak < 16 * 1024 * 1024, f"{mode}: {peak} bytes allocated while failing"
        if mode != "truncated":   # the hostile side stays open: the client must be the one to hang up
            await _wait_until(lambda: hb.closed_by_client >= 1)
        assert [r.api_key for r in hb.non_handshake_requests()][:1] == [ApiKey.METADATA]


async def test_frame_cap_is_configurable_and_named() -> None:
    """A legitimate but big response above ``max_frame_bytes`` is refused with the limit in the message."""
    async with HostileBroker("oversized") as hb:
        conn = await Connection.connect(hb.host, hb.port, node_id=1, max_frame_bytes=4096)
        with pytest.raises(errors.ProtocolError, match=r"frame size 2147483647 is outside 0\.\.4096"):
            await conn.request(ApiKey.METADATA, metadata_request_body([], allow_auto_topic_creation=False))
        assert conn.closed


# --------------------------------------------------------------------------- clients recover
def _client_config(mode: str, hb: HostileBroker, broker: EmbeddedBroker) -> dict[str, object]:
    config: dict[str, object] = {"bootstrap_servers": f"{hb.bootstrap_servers},{broker.bootstrap_servers}"}
    if mode == "slowloris":   # bootstrap gives up on a node after the request timeout
        config["request_timeout_ms"] = 1_500
    return config


@pytest.mark.broker
@pytest.mark.parametrize("mode", MODES)
async def test_clients_bootstrapping_through_a_hostile_broker_recover(broker: EmbeddedBroker, mode: str) -> None:
    topic = f"hostile-{mode}-{uuid.uuid4().hex[:8]}"
    values = [f"v{i}".encode() for i in range(20)]
    async with HostileBroker(mode, interval_s=0.5) as hb:
        config = _client_config(mode, hb, broker)
        with anyio.fail_after(60):
            async with Admin(**config) as admin:
                await admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
                assert topic in await admin.list_topics()
            async with Producer(linger_ms=5, **config) as producer:  # type: ignore[arg-type]
                first = await producer.send(topic, b"first", partition=0)
                mds = await producer.send_many(topic, [(None, v) for v in values], partition=0)
            assert [md.offset for md in mds] == list(range(first.offset + 1, first.offset + 21))
            async with Consumer(auto_offset_reset="earliest", **config) as consumer:  # type: ignore[arg-type]
                tp = TopicPartition(topic, 0)
                consumer.assign([tp])
                got: list[bytes | None] = []
                while len(got) < 21:
                    batches = await consumer.getmany(timeout_ms=1_000)
                    got.extend(r.value for r in batches.get(tp, []))
            assert got == [b"first", *values]
        # each client met the hostile broker first and left it
        assert hb.connections >= 3
        assert len(hb.non_handshake_requests()) >= 3


@pytest.mark.parametrize(("host", "port", "words"), [
    ("127.0.0.1", 16_777_216, "port 16777216 is not in 1..65535"),
    ("127.0.0.1", -1, "port -1 is not in 1..65535"),
    ("", 9092, "host '' is not a host name"),
])
async def test_impossible_advertised_address_is_a_connection_error(host: str, port: int, words: str) -> None:
    """Metadata from a broken broker can name any int32 port; connecting must fail as a Kafka error, not escape
    as the socket layer's OverflowError (inside an exception group) and take the client's task group down."""
    with pytest.raises(errors.KafkaConnectionError, match=words):
        await Connection.connect(host, port, node_id=9, connect_timeout_ms=2_000)
