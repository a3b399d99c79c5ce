"""The chaos soak's pure parts: seeded fault scripts, the runner on a fake clock, payload ids, and the judge
that classifies lost / duplicated / reordered / redelivered records."""

from __future__ import annotations

from typing import Any

import pytest

from akresil.testing.chaos import (
    DEFAULT_WEIGHTS, Consumption, Fault, FaultEvent, FaultProxyControl, FaultRunner, Ledger, LogImage,
    ScheduleSpec, Step, decode_payload, encode_payload, generate_schedule, judge, leaked_fds, timeline,
)
from akresil.errors import error_for_code
from akresil.testing.proxy import FaultProxy
from akresil.errors import DeliveryTimeoutError, NotLeaderOrFollowerError
from akresil.types import TopicPartition

NODES = (1, 2, 3)
PARTS = [TopicPartition("t", p) for p in range(6)]


def spec(**kw: Any) -> ScheduleSpec:
    base: dict[str, Any] = dict(duration_ms=60_000.0, nodes=NODES, partitions=PARTS, mean_interval_ms=300.0,
                                members=2)
    base.update(kw)
    return ScheduleSpec(**base)


# ------------------------------------------------------------------------------------------ generator
def test_same_seed_same_script_other_seed_other_script() -> None:
    assert generate_schedule(spec(), 7) == generate_schedule(spec(), 7)
    assert generate_schedule(spec(), 7) != generate_schedule(spec(), 8)


@pytest.mark.parametrize("seed", range(20))
def test_script_is_sorted_within_duration_and_every_kind_appears(seed: int) -> None:
    events = generate_schedule(spec(quiet_start_ms=2_000.0), seed)
    assert events == sorted(events, key=lambda e: e.at_ms)
    assert all(2_000.0 <= e.at_ms < 60_000.0 for e in events)
    assert all(e.duration_ms >= 0 and e.at_ms + e.duration_ms <= 60_000.0 + 1e-6 for e in events)
    assert {e.fault for e in events} == set(Fault)
    # roughly one fault per mean interval (failover moves come on top, kills too close together drop out)
    assert 60_000 / 300 * 0.5 < len(events) < 60_000 / 300 * 2.5


@pytest.mark.parametrize("seed", range(20))
def test_leadership_and_downtime_rules_hold_along_the_timeline(seed: int) -> None:
    """Replaying the steps: a move changes the leader and never targets a down node, at most
    max_nodes_down nodes are down at once, and every stopped node is started again by the end."""
    events = generate_schedule(spec(max_nodes_down=1), seed)
    leaders = {tp: NODES[tp.partition % 3] for tp in PARTS}
    down: set[int] = set()
    for step in timeline(events):
        a = step.args
        if step.action == "move_leader":
            tp = TopicPartition(a["topic"], a["partition"])
            assert a["to_node"] != leaders[tp], step
            assert a["to_node"] not in down, step
            leaders[tp] = a["to_node"]
        elif step.action == "stop_node":
            assert a["node"] not in down
            down.add(a["node"])
            assert len(down) <= 1
        elif step.action == "start_node":
            down.remove(a["node"])
        elif step.action in ("throttle", "drop_connections", "fail_requests"):
            assert a["node"] not in down, step
    assert not down


def test_failover_moves_every_partition_off_a_stopped_node() -> None:
    only_stops = spec(weights={Fault.STOP_NODE: 1.0}, stop_ms=(2_000.0, 2_000.0), failover_ms=(500.0, 500.0),
                      mean_interval_ms=5_000.0)
    events = generate_schedule(only_stops, 3)
    stops = [e for e in events if e.fault is Fault.STOP_NODE]
    assert stops
    leaders = {tp: NODES[tp.partition % 3] for tp in PARTS}
    for stop in stops:
        node = stop.args["node"]
        led = {tp for tp, n in leaders.items() if n == node}
        moves = [e for e in events if e.fault is Fault.MOVE_LEADER and e.args.get("failover_from") == node
                 and e.at_ms == pytest.approx(stop.at_ms + 500.0)]
        if stop.at_ms + 500.0 < stop.at_ms + stop.duration_ms:
            assert {TopicPartition(m.args["topic"], m.args["partition"]) for m in moves} == led
            for m in moves:
                assert m.args["to_node"] != node
                leaders[TopicPartition(m.args["topic"], m.args["partition"])] = m.args["to_node"]


def test_no_failover_leaves_leadership_alone() -> None:
    events = generate_schedule(spec(weights={Fault.STOP_NODE: 1.0}, failover_ms=None), 1)
    assert events and all(e.fault is Fault.STOP_NODE for e in events)


def test_zero_weight_excludes_a_fault_and_max_nodes_down_zero_never_stops() -> None:
    weights = dict(DEFAULT_WEIGHTS)
    weights[Fault.LATENCY] = 0
    events = generate_schedule(spec(weights=weights, max_nodes_down=0), 5)
    assert Fault.LATENCY not in {e.fault for e in events}
    assert Fault.STOP_NODE not in {e.fault for e in events}


def test_throttle_duration_is_total_mute() -> None:
    events = generate_schedule(spec(weights={Fault.THROTTLE: 1.0}), 2)
    for e in events:
        assert e.duration_ms == e.args["ms"] * e.args["count"]
        assert 1 <= e.args["ms"] <= 800 and 1 <= e.args["count"] <= 3


@pytest.mark.parametrize("seed", range(10))
def test_failed_requests_are_a_few_retriable_produce_or_fetch_errors(seed: int) -> None:
    events = [e for e in generate_schedule(spec(weights={Fault.FAIL_REQUESTS: 1.0}), seed)]
    assert events and all(e.fault is Fault.FAIL_REQUESTS and e.duration_ms == 0 for e in events)
    for e in events:
        a = e.args
        assert a["api_key"] in (0, 1) and 1 <= a["count"] <= 5 and a["node"] in NODES
        assert a["error_code"] in ((6, 19) if a["api_key"] == 0 else (6, 56))
        cls = error_for_code(a["error_code"])
        assert cls.retriable or cls.invalid_metadata
    assert {e.args["api_key"] for e in events} == {0, 1}


def test_kills_name_a_member_slot_and_keep_their_distance() -> None:
    events = generate_schedule(spec(weights={Fault.KILL_CONSUMER: 1.0}, members=3, kill_gap_ms=4_000.0), 4)
    assert len(events) >= 10
    assert all(e.fault is Fault.KILL_CONSUMER and e.args["member"] in (0, 1, 2) for e in events)
    assert {e.args["member"] for e in events} == {0, 1, 2}
    assert min(b.at_ms - a.at_ms for a, b in zip(events, events[1:])) >= 4_000.0
    late = generate_schedule(spec(weights={Fault.KILL_CONSUMER: 1.0}, members=3, kill_after_ms=30_000.0), 4)
    assert late and min(e.at_ms for e in late) >= 30_000.0
    # without members there is nobody to kill: the fault never comes, or the spec is refused when it is
    # the only one weighted
    assert Fault.KILL_CONSUMER not in {e.fault for e in generate_schedule(spec(members=0), 4)}
    with pytest.raises(ValueError, match="kill_consumer is the only fault"):
        generate_schedule(spec(weights={Fault.KILL_CONSUMER: 1.0}, members=0), 4)


@pytest.mark.parametrize("bad, message", [
    (dict(duration_ms=0), "duration_ms"),
    (dict(nodes=(1, 1)), "nodes"),
    (dict(partitions=[]), "partitions"),
    (dict(partitions=[("t", -1)]), "partitions"),
    (dict(mean_interval_ms=0), "mean_interval_ms"),
    (dict(weights={"move": 1.0}), "weights"),
    (dict(weights={Fault.THROTTLE: -1.0}), "weights"),
    (dict(weights={Fault.THROTTLE: 0.0}), "weights"),
    (dict(stop_ms=(500.0, 100.0)), "stop_ms"),
    (dict(latency_ms=(1.0,)), "latency_ms"),
    (dict(throttle_count=(0, 2)), "throttle_count"),
    (dict(max_nodes_down=3), "max_nodes_down"),
    (dict(fail_count=(0, 3)), "fail_count"),
    (dict(produce_errors=()), "produce_errors"),
    (dict(produce_errors=(10,)), "produce_errors: 10 is not a retriable"),   # MESSAGE_TOO_LARGE
    (dict(fetch_errors=(True,)), "fetch_errors"),
    (dict(members=-1), "members"),
    (dict(kill_gap_ms=-1.0), "kill_gap_ms"),
    (dict(kill_after_ms=float("nan")), "kill_after_ms"),
    (dict(quiet_start_ms=60_000.0), "quiet_start_ms"),
])
def test_bad_spec_is_named(bad: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        generate_schedule(spec(**bad), 1)


def test_timeline_undoes_stops_and_latency_undo_first_at_equal_times() -> None:
    events = [FaultEvent(100.0, Fault.STOP_NODE, {"node": 2}, 400.0),
              FaultEvent(200.0, Fault.LATENCY, {"node": 1, "ms": 50.0}, 300.0),
              FaultEvent(500.0, Fault.STOP_NODE, {"node": 2}, 100.0)]
    steps = timeline(events)
    assert [(s.at_ms, s.action) for s in steps] == [
        (100.0, "stop_node"), (200.0, "latency"), (500.0, "start_node"), (500.0, "remove_latency"),
        (500.0, "stop_node"), (600.0, "start_node")]
    with pytest.raises(ValueError, match="unknown fault"):
        timeline([FaultEvent(0.0, "explode", {}, 0.0)])  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------ runner
class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds * 1000.0


class FakeControl:
    def __init__(self, clock: FakeClock, fail: str | None = None) -> None:
        self.clock, self.fail = clock, fail
        self.calls: list[tuple[float, str, tuple[Any, ...]]] = []

    def _call(self, name: str, *args: Any) -> None:
        if name == self.fail:
            raise RuntimeError("boom")
        self.calls.append((self.clock.now - 1_000.0, name, args))

    async def move_leader(self, topic: str, partition: int, to_node: int) -> None:
        self._call("move_leader", topic, partition, to_node)

    async def throttle(self, node: int, ms: int, count: int) -> None:
        self._call("throttle", node, ms, count)

    async def drop_connections(self, node: int) -> None:
        self._call("drop_connections", node)

    async def stop_node(self, node: int) -> None:
        self._call("stop_node", node)

    async def start_node(self, node: int) -> None:
        self._call("start_node", node)

    async def add_latency(self, node: int, ms: float) -> None:
        self._call("add_latency", node, ms)

    async def remove_latency(self, node: int, ms: float) -> None:
        self._call("remove_latency", node, ms)

    async def fail_requests(self, api_key: int, error_code: int, count: int, node: int) -> None:
        self._call("fail_requests", api_key, error_code, count, node)

    async def kill_consumer(self, member: int) -> None:
        self._call("kill_consumer", member)


async def test_runner_applies_each_step_at_its_time() -> None:
    clock = FakeClock()
    control = FakeControl(clock)
    events = [FaultEvent(100.0, Fault.MOVE_LEADER, {"topic": "t", "partition": 0, "to_node": 2}, 0.0),
              FaultEvent(250.0, Fault.STOP_NODE, {"node": 3}, 1_000.0),
              FaultEvent(300.0, Fault.THROTTLE, {"node": 1, "ms": 200, "count": 2}, 400.0),
              FaultEvent(400.0, Fault.LATENCY, {"node": 2, "ms": 30.0}, 100.0),
              FaultEvent(450.0, Fault.DROP_CONNECTIONS, {"node": 1}, 0.0),
              FaultEvent(460.0, Fault.FAIL_REQUESTS, {"api_key": 1, "error_code": 6, "count": 3, "node": 2}, 0.0),
              FaultEvent(470.0, Fault.KILL_CONSUMER, {"member": 1}, 0.0)]
    runner = FaultRunner(control, events, clock=clock, sleep=clock.sleep)
    await runner.run()
    assert control.calls == [(100.0, "move_leader", ("t", 0, 2)), (250.0, "stop_node", (3,)),
                             (300.0, "throttle", (1, 200, 2)), (400.0, "add_latency", (2, 30.0)),
                             (450.0, "drop_connections", (1,)), (460.0, "fail_requests", (1, 6, 3, 2)),
                             (470.0, "kill_consumer", (1,)), (500.0, "remove_latency", (2, 30.0)),
                             (1_250.0, "start_node", (3,))]
    assert runner.errors == [] and runner.faults["stop_node"] == 1 and len(runner.applied) == 9
    assert runner.faults["kill_consumer"] == 1 and runner.faults["fail_requests"] == 1


async def test_runner_heals_when_cancelled_mid_script() -> None:
    import anyio
    clock = FakeClock()
    control = FakeControl(clock)
    events = [FaultEvent(10.0, Fault.STOP_NODE, {"node": 2}, 5_000.0),
              FaultEvent(20.0, Fault.LATENCY, {"node": 1, "ms": 80.0}, 5_000.0),
              FaultEvent(3_000.0, Fault.DROP_CONNECTIONS, {"node": 1}, 0.0)]

    async def sleep(seconds: float) -> None:
        if clock.now - 1_000.0 >= 20.0:
            await anyio.sleep_forever()     # cancelled below, with node 2 down and latency in force
        await clock.sleep(seconds)

    runner = FaultRunner(control, events, clock=clock, sleep=sleep)
    with anyio.move_on_after(0.05):
        await runner.run()
    assert [c[1:] for c in control.calls] == [("stop_node", (2,)), ("add_latency", (1, 80.0)),
                                              ("start_node", (2,)), ("remove_latency", (1, 80.0))]


async def test_runner_records_a_failing_step_and_goes_on() -> None:
    clock = FakeClock()
    control = FakeControl(clock, fail="drop_connections")
    events = [FaultEvent(1.0, Fault.DROP_CONNECTIONS, {"node": 1}, 0.0),
              FaultEvent(2.0, Fault.MOVE_LEADER, {"topic": "t", "partition": 1, "to_node": 3}, 0.0)]
    runner = FaultRunner(control, events, clock=clock, sleep=clock.sleep)
    await runner.run()
    assert len(runner.errors) == 1 and "drop_connections" in runner.errors[0] and "boom" in runner.errors[0]
    assert [c[1] for c in control.calls] == ["move_leader"]


async def test_runner_rejects_unknown_step() -> None:
    clock = FakeClock()
    runner = FaultRunner(FakeControl(clock), [], clock=clock, sleep=clock.sleep)
    runner.steps = [Step(0.0, "meteor", {})]
    await runner.run()
    assert runner.errors and "unknown step action 'meteor'" in runner.errors[0]


class FakeMembers:
    def __init__(self) -> None:
        self.killed: list[int] = []

    async def kill(self, member: int) -> None:
        self.killed.append(member)


async def test_proxy_control_uses_the_public_script_api() -> None:
    """FaultProxyControl works on a proxy's script state (no sockets needed for these faults): latency is
    removed rule by rule, failures are counted per request, kills go to the members."""
    proxy = FaultProxy("127.0.0.1:9", nodes=3)
    members = FakeMembers()
    control = FaultProxyControl(proxy, members)
    await control.add_latency(2, 40.0)
    await control.add_latency(2, 40.0)
    await control.remove_latency(2, 40.0)
    assert proxy.state.latency_ms(2, 0) == 40.0
    with pytest.raises(ValueError, match="no 55.0 ms rule"):
        await control.remove_latency(2, 55.0)
    await control.fail_requests(0, 19, 2, 3)
    plan_codes = []
    for _ in range(3):
        plan = proxy.state.plan_partitions(0, 9, 3, {"topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": b"x"}]}]})
        plan_codes.append([a.error_code for a in plan.answers])
    assert plan_codes == [[19], [19], []]
    await control.kill_consumer(1)
    assert members.killed == [1]
    with pytest.raises(RuntimeError, match="no group members"):
        await FaultProxyControl(proxy).kill_consumer(0)


# ------------------------------------------------------------------------------------------ payloads
def test_payload_round_trip_and_foreign_values() -> None:
    v = encode_payload(3, 5, 12345, 100)
    assert len(v) == 100 and decode_payload(v) == (3, 5, 12345)
    assert decode_payload(encode_payload(1, 0, 7)) == (1, 0, 7)
    for foreign in (None, b"", b"hello", b"1.2|", b"a.b.c|", b"1.2.3"):
        assert decode_payload(foreign) is None


# ------------------------------------------------------------------------------------------ judge
def _send(ledger: Ledger, producer: int, partition: int, n: int) -> list[int]:
    return [ledger.next(producer, partition) for _ in range(n)]


def _log(entries: dict[int, list[bytes | None]]) -> LogImage:
    image = LogImage()
    for partition, values in entries.items():
        for offset, value in enumerate(values):
            image.add(partition, offset, value)
    return image


def _consume_all(image_entries: dict[int, list[bytes | None]], times: int = 1) -> Consumption:
    c = Consumption()
    for partition, values in image_entries.items():
        for offset, value in enumerate(values):
            for _ in range(times):
                c.record(partition, offset, value)
    return c


def test_clean_run_has_nothing_to_report() -> None:
    ledger = Ledger()
    for seq in _send(ledger, 0, 0, 3):
        ledger.ack(0, 0, seq, seq)
    entries = {0: [encode_payload(0, 0, s) for s in range(3)]}
    counts = judge(ledger, _log(entries), _consume_all(entries))
    assert counts["consumed"] == 3
    assert {k: v for k, v in counts.items() if v and k != "consumed"} == {}


def test_lost_duplicate_reordered_phantom_and_misplaced_are_told_apart() -> None:
    ledger = Ledger()
    for seq in _send(ledger, 0, 0, 4):
        ledger.ack(0, 0, seq, seq)
    entries = {0: [encode_payload(0, 0, 0), encode_payload(0, 0, 2), encode_payload(0, 0, 1),
                   encode_payload(0, 0, 2), encode_payload(9, 0, 0), b"not ours"]}
    counts = judge(ledger, _log(entries), _consume_all(entries))
    assert counts["lost"] == 1            # seq 3 never reached the log
    assert counts["duplicates"] == 1      # seq 2 twice
    assert counts["reordered"] == 1       # seq 1 stored after seq 2 (the second 2 is a duplicate)
    assert counts["phantom"] == 1         # producer 9 never sent anything
    assert counts["foreign"] == 1
    assert counts["misplaced"] == 2       # seq 1 acked at offset 1 but stored at 2; seq 2 acked at 2, first at 1


def test_redelivery_at_the_same_offset_is_not_a_duplicate() -> None:
    ledger = Ledger()
    for seq in _send(ledger, 1, 2, 5):
        ledger.ack(1, 2, seq, seq)
    entries = {2: [encode_payload(1, 2, s) for s in range(5)]}
    counts = judge(ledger, _log(entries), _consume_all(entries, times=3))
    assert counts["redelivered"] == 10 and counts["duplicates"] == 0 and counts["consumed"] == 5


def test_failed_records_may_be_in_the_log_pending_are_counted_and_unconsumed_found() -> None:
    ledger = Ledger()
    s0, s1, s2, s3 = _send(ledger, 0, 1, 4)
    ledger.ack(0, 1, s0, 0)
    ledger.fail(0, 1, s1, DeliveryTimeoutError("expired"))
    ledger.fail(0, 1, s2, NotLeaderOrFollowerError("moved"))
    ledger.ack(0, 1, s3, -1)                  # acknowledged without an offset (DUPLICATE_SEQUENCE_NUMBER)
    entries = {1: [encode_payload(0, 1, 0), encode_payload(0, 1, 1), encode_payload(0, 1, 3)]}
    consumption = Consumption()
    consumption.record(1, 0, entries[1][0])
    consumption.record(1, 1, encode_payload(0, 1, 2))     # the group saw something the log does not hold
    counts = judge(ledger, _log(entries), consumption)
    assert counts["failed_but_written"] == 1 and counts["lost"] == 0 and counts["misplaced"] == 0
    assert counts["unconsumed"] == 1 and counts["consumed"] == 1 and counts["consumer_mismatch"] == 1
    assert ledger.errors == {"DeliveryTimeoutError": 1, "NotLeaderOrFollowerError": 1}
    assert ledger.acked == 2 and ledger.count(-3) == 1 and ledger.sent == 4
    assert ledger.max_acked_offset() == {1: 0}


def test_ledger_refuses_a_second_outcome_and_bad_producers() -> None:
    ledger = Ledger()
    seq = ledger.next(0, 0)
    ledger.ack(0, 0, seq, 5)
    with pytest.raises(ValueError, match="completed twice"):
        ledger.fail(0, 0, seq, DeliveryTimeoutError("late"))
    with pytest.raises(ValueError, match="producer"):
        ledger.next(-1, 0)


def test_log_image_rejects_out_of_order_reads_and_counts_misrouted() -> None:
    image = LogImage()
    image.add(0, 0, encode_payload(0, 0, 0))
    image.add(0, 2, encode_payload(0, 3, 1))      # gap at 1; a payload for partition 3 found in partition 0
    assert image.misrouted == 1 and list(image.ids[0])[1:] == [-1, -2]
    with pytest.raises(ValueError, match="out of order"):
        image.add(0, 1, b"x")


# ------------------------------------------------------------------------------------------ fd accounting
def test_leaked_fds_ignore_the_proxys_sockets_and_unchanged_fds() -> None:
    before = {3: "socket:[100]", 4: "pipe:[7]"}
    after = {3: "socket:[100]", 4: "pipe:[7]", 5: "socket:[201]", 6: "socket:[202]", 7: "socket:[203]",
             8: "socket:[204]", 9: "anon_inode:[eventfd]"}
    sockets = {"201": (40001, 0, "0A"),          # a proxy listener
               "202": (40002, 55555, "01"),      # a connection the proxy accepted
               "203": (50000, 9092, "01"),       # the proxy's upstream connection to the broker
               "204": (50001, 40001, "01")}      # a client's connection to the proxy: leaked
    leaked = leaked_fds(before, after, sockets=sockets, harness_ports=[40001, 40002], upstream_port=9092)
    assert leaked == ["fd 8 -> socket:[204] local:50001 remote:40001 state:01",
                      "fd 9 -> anon_inode:[eventfd]"]


def test_examples_name_the_records_behind_each_count() -> None:
    ledger = Ledger()
    for seq in _send(ledger, 2, 0, 3):
        ledger.ack(2, 0, seq, seq)
    entries = {0: [encode_payload(2, 0, 1), encode_payload(2, 0, 0)]}
    examples: dict[str, list[str]] = {}
    judge(ledger, _log(entries), Consumption(), examples, max_examples=1)
    assert examples["lost"] == ["2.0.2 acknowledged at offset 2"]
    assert examples["misplaced"] == ["2.0.0 acknowledged at offset 0, stored at 1"]
    assert examples["reordered"] == ["2.0.0 at offset 1 after seq 1"]
    assert len(examples["unconsumed"]) == 1
