"""The soak itself: idempotent producers (``send`` / ``enqueue`` / ``send_many`` mixed, explicit partitions, payloads
carrying producer id and per-partition send sequence) and a consumer group run through a fault proxy (or straight to
an Apache Kafka cluster) while a seeded fault script plays; then a fresh ``assign()``-ed consumer reads the whole
log and ``judge`` compares it with what the application was told and what the group delivered (``SoakReport``)."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Literal, Mapping

import anyio
import anyio.abc

from ... import errors
from ...types import NewTopic, TopicPartition
from ..fixtures import FaultProxyControl
from .controls import KafkaClusterControl, unsupported_faults
from .ledger import ACKED_NO_OFFSET, FAILED, PENDING, Consumption, Ledger, LogImage, judge
from .payload import MAX_PRODUCERS, encode_payload
from .resources import ResourceSnapshot, leaked_fds, tcp_sockets
from .runner import FaultRunner
from .schedule import DEFAULT_WEIGHTS, LEAVE_GROUP, Fault, ScheduleSpec, generate_schedule

__all__ = ["SoakConfig", "SoakReport", "run_soak"]


@dataclass(frozen=True)
class SoakConfig:
    """One soak run. ``duration_s``: how long producers send while faults play; ``drain_timeout_s``: how long
    the group may then take to consume everything. ``auto_commit=None``: chosen from the seed."""

    seed: int = 1
    duration_s: float = 20.0
    producers: int = 3
    partitions: int = 6
    nodes: int = 3
    consumers: int = 2
    records_per_s: float = 400.0     # per producer
    value_bytes: int = 100
    auto_commit: bool | None = None
    drain_timeout_s: float = 40.0
    delivery_timeout_ms: int = 30_000
    request_timeout_ms: int = 5_000
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 1_000
    mean_fault_interval_ms: float = 800.0
    #: least time between two killed group members (each costs a session timeout before the group rebalances)
    kill_gap_ms: float = 5_000.0
    #: no member is killed before this (ms into the script): Tansu takes 6-8 s to form a 2-member group, and
    #: a member killed before it owns partitions leaves nothing to redeliver
    kill_after_ms: float = 8_000.0
    quiet_start_ms: float = 0.0
    weights: Mapping[Fault, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    #: the group's protocol: "classic" (JoinGroup/SyncGroup) or "consumer" (KIP-848: the broker owns the
    #: session timeout and the heartbeat interval, so the two settings above are not sent)
    group_protocol: Literal["classic", "consumer"] = "classic"

    def validate(self) -> None:
        if self.group_protocol not in ("classic", "consumer"):
            raise ValueError(f"group_protocol: 'classic' or 'consumer', got {self.group_protocol!r}")
        for name in ("producers", "partitions", "nodes", "consumers", "value_bytes"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name}: must be an int >= 1, got {v!r}")
        if self.producers >= MAX_PRODUCERS:
            raise ValueError(f"producers: at most {MAX_PRODUCERS - 1}, got {self.producers}")
        for name in ("duration_s", "records_per_s", "drain_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)!r}")


@dataclass
class SoakReport:
    seed: int
    topic: str
    auto_commit: bool
    duration_s: float
    elapsed_s: float = 0.0
    drain_s: float = 0.0
    faults: dict[str, int] = field(default_factory=dict)
    fault_errors: list[str] = field(default_factory=list)
    sent: int = 0
    acked: int = 0
    acked_without_offset: int = 0
    failed: int = 0
    failed_by_error: dict[str, int] = field(default_factory=dict)
    pending_at_close: int = 0
    consumed: int = 0
    deliveries: int = 0
    redelivered: int = 0
    unconsumed: int = 0
    duplicates: int = 0
    reordered: int = 0
    reordered_unacked: int = 0
    lost: int = 0
    misplaced: int = 0
    phantom: int = 0
    foreign: int = 0
    failed_but_written: int = 0
    consumer_mismatch: int = 0
    log_records: int = 0
    committed_behind: dict[str, str] = field(default_factory=dict)
    rebalances: int = 0
    #: client ids of the group members killed without leaving, and how many LeaveGroup requests they sent
    #: anyway (a kill that left would be a graceful close, not the crash it stands for)
    killed_members: list[str] = field(default_factory=list)
    killed_members_left: int = 0
    commit_failures: dict[str, int] = field(default_factory=dict)
    consumer_errors: dict[str, int] = field(default_factory=dict)
    leaked_tasks: list[str] = field(default_factory=list)
    leaked_fds: list[str] = field(default_factory=list)
    #: a few instances per broken count (producer.partition.seq and offsets), for diagnosis
    examples: dict[str, list[str]] = field(default_factory=dict)

    def violations(self) -> list[str]:
        """Broken invariants, each as a sentence; empty when the soak passed."""
        found = []
        for name in ("lost", "duplicates", "reordered", "misplaced", "phantom", "unconsumed",
                     "consumer_mismatch", "pending_at_close"):
            if getattr(self, name):
                found.append(f"{name}: {getattr(self, name)}")
        if self.committed_behind:
            found.append(f"committed offsets behind the log end: {self.committed_behind}")
        if self.leaked_tasks:
            found.append(f"leaked tasks: {self.leaked_tasks}")
        if self.leaked_fds:
            found.append(f"leaked fds: {self.leaked_fds}")
        if self.fault_errors:
            found.append(f"fault steps failed: {self.fault_errors}")
        if self.killed_members_left:
            found.append(f"killed members sent {self.killed_members_left} LeaveGroup request(s): not a crash")
        if self.acked + self.failed + self.pending_at_close != self.sent:
            found.append(f"sent {self.sent} != acked {self.acked} + failed {self.failed} + pending "
                         f"{self.pending_at_close}")
        return found

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Shared:
    """State the soak's tasks share (one event loop: no locks)."""

    def __init__(self, cfg: SoakConfig, topic: str) -> None:
        self.cfg = cfg
        self.topic = topic
        self.ledger = Ledger()
        self.consumption = Consumption()
        self.producers_done = anyio.Event()
        self.stop_consuming = anyio.Event()
        self.caught_up: dict[int, bool] = {}
        self.assignments: dict[int, frozenset[TopicPartition]] = {}
        self.committed_members = 0
        self.all_committed = anyio.Event()
        #: per partition, the highest acknowledged offset, known once producers are done
        self.floor: dict[int, int] = {}
        self.rebalances = 0
        self.commit_failures: Counter[str] = Counter()
        self.consumer_errors: Counter[str] = Counter()


async def _produce(shared: _Shared, index: int, bootstrap: str, deadline: float) -> None:
    """One idempotent producer: a single task issuing send / enqueue / send_many, so append order is send order."""
    cfg, ledger, topic = shared.cfg, shared.ledger, shared.topic
    rng = random.Random(cfg.seed * 7919 + index)
    outstanding: list[tuple[int, int, Any]] = []   # (partition, seq, DeliveryFuture)

    def settle(partition: int, seq: int, result: Any) -> None:
        if isinstance(result, BaseException):
            ledger.fail(index, partition, seq, result)
        else:
            ledger.ack(index, partition, seq, result.offset)

    async def await_outstanding() -> None:
        for partition, seq, fut in outstanding:
            try:
                settle(partition, seq, await fut)
            except errors.KafkaError as exc:
                settle(partition, seq, exc)
        outstanding.clear()

    from ...producer import Producer
    async with Producer(bootstrap_servers=bootstrap, client_id=f"chaos-p{index}", enable_idempotence=True,
                        linger_ms=rng.choice((0, 2, 5, 10)), retry_backoff_ms=50, retry_backoff_max_ms=500,
                        request_timeout_ms=cfg.request_timeout_ms, delivery_timeout_ms=cfg.delivery_timeout_ms,
                        max_block_ms=cfg.delivery_timeout_ms, reconnect_backoff_ms=50,
                        reconnect_backoff_max_ms=500) as producer:
        while time.monotonic() < deadline:
            op = rng.random()
            partition = rng.randrange(cfg.partitions)
            if op < 0.3:
                n = 1
                seq = ledger.next(index, partition)
                try:
                    md = await producer.send(topic, encode_payload(index, partition, seq, cfg.value_bytes),
                                             partition=partition)
                    settle(partition, seq, md)
                except errors.KafkaError as exc:
                    settle(partition, seq, exc)
            elif op < 0.65:
                n = rng.randint(1, 20)
                for _ in range(n):
                    p = rng.randrange(cfg.partitions)
                    seq = ledger.next(index, p)
                    try:
                        fut = await producer.enqueue(topic, encode_payload(index, p, seq, cfg.value_bytes),
                                                     partition=p)
                    except errors.KafkaError as exc:
                        settle(p, seq, exc)
                    else:
                        outstanding.append((p, seq, fut))
                if rng.random() < 0.3:
                    await await_outstanding()
            else:
                n = rng.randint(1, 50)
                seqs = [ledger.next(index, partition) for _ in range(n)]
                try:
                    results = await producer.send_many(
                        topic, [(None, encode_payload(index, partition, s, cfg.value_bytes)) for s in seqs],
                        partition=partition, raise_on_error=False)
                except errors.KafkaError as exc:   # the call failed as a whole: no record is acknowledged
                    for s in seqs:
                        settle(partition, s, exc)
                else:
                    for s, result in zip(seqs, results):
                        settle(partition, s, result)
            await anyio.sleep(n / cfg.records_per_s)
    # after close every record must have an outcome: whatever is still not done counts as pending
    for partition, seq, fut in outstanding:
        if fut.done():
            error = fut.exception()
            settle(partition, seq, error if error is not None else fut.result())


class _Listener:
    def __init__(self, shared: _Shared) -> None:
        self.shared = shared

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.shared.rebalances += 1

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        return None

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        return None


async def _commit(shared: _Shared, consumer: Any, *, attempts: int = 1) -> bool:
    for i in range(attempts):
        try:
            with anyio.fail_after(shared.cfg.request_timeout_ms / 1000.0 * 2):
                await consumer.commit()
            return True
        except (errors.KafkaError, TimeoutError) as exc:
            shared.commit_failures[type(exc).__name__] += 1
            if i + 1 < attempts:
                await anyio.sleep(0.2)
    return False


async def _consume(shared: _Shared, index: int, bootstrap: str, group: str, auto_commit: bool,
                   client_id: str) -> None:
    """One group member: deliver, commit (manual mode: after every batch), report whether it caught up."""
    from ...consumer import Consumer
    cfg = shared.cfg
    timing: dict[str, Any] = {} if cfg.group_protocol == "consumer" else dict(
        session_timeout_ms=cfg.session_timeout_ms, heartbeat_interval_ms=cfg.heartbeat_interval_ms)
    async with Consumer(shared.topic, bootstrap_servers=bootstrap, group_id=group, client_id=client_id,
                        auto_offset_reset="earliest", enable_auto_commit=auto_commit, auto_commit_interval_ms=500,
                        group_protocol=cfg.group_protocol, **timing,
                        request_timeout_ms=max(cfg.request_timeout_ms, cfg.session_timeout_ms + 2_000),
                        retry_backoff_ms=50, retry_backoff_max_ms=500, reconnect_backoff_ms=50,
                        reconnect_backoff_max_ms=500, fetch_max_wait_ms=200,
                        listener=_Listener(shared)) as consumer:
        while not shared.stop_consuming.is_set():
            try:
                batches = await consumer.getmany(timeout_ms=200)
            except errors.KafkaError as exc:
                shared.consumer_errors[type(exc).__name__] += 1
                await anyio.sleep(0.1)
                continue
            for tp, records in batches.items():
                for r in records:
                    shared.consumption.record(tp.partition, r.offset, r.value)
            if batches and not auto_commit:
                await _commit(shared, consumer)
            shared.assignments[index] = consumer.assignment()
            if shared.producers_done.is_set():
                shared.caught_up[index] = await _caught_up(consumer, shared.floor)
        await _commit(shared, consumer, attempts=5)
        shared.committed_members += 1
        if shared.committed_members == cfg.consumers:
            shared.all_committed.set()
        with anyio.move_on_after(10):   # leave only after every member committed: no rebalance under a commit
            await shared.all_committed.wait()


class _Members:
    """The group's members by slot, each in its own cancel scope.  ``kill`` ends one as a crash would: its task
    is cancelled, so it neither commits nor sends LeaveGroup (the broker learns of it only when its session
    times out), and a replacement with a new client id takes the slot at once."""

    def __init__(self, shared: _Shared, bootstrap: str, group: str, auto_commit: bool) -> None:
        self.shared, self.bootstrap, self.group, self.auto_commit = shared, bootstrap, group, auto_commit
        self._tg: anyio.abc.TaskGroup | None = None
        self._running: dict[int, tuple[anyio.CancelScope, anyio.Event, str]] = {}
        self._generation: Counter[int] = Counter()
        #: client ids of the members killed so far, and how many partitions each owned then
        self.killed: list[str] = []
        self.owned_at_kill: list[int] = []

    def client_id(self, member: int) -> str:
        if member not in self._running:
            raise ValueError(f"no member in slot {member!r} (slots 0..{len(self._running) - 1})")
        return self._running[member][2]

    def client_ids(self) -> list[str]:
        return [client_id for _, _, client_id in self._running.values()]

    def start_all(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg
        for slot in range(self.shared.cfg.consumers):
            self._start(slot)

    def _start(self, slot: int) -> None:
        assert self._tg is not None
        generation = self._generation[slot]
        client_id = f"chaos-c{slot}" if generation == 0 else f"chaos-c{slot}-r{generation}"
        scope, done = anyio.CancelScope(), anyio.Event()
        self._running[slot] = (scope, done, client_id)
        self._tg.start_soon(self._run, slot, client_id, scope, done, name=f"chaos-consumer-{slot}-{generation}")

    async def _run(self, slot: int, client_id: str, scope: anyio.CancelScope, done: anyio.Event) -> None:
        try:
            with scope:
                await _consume(self.shared, slot, self.bootstrap, self.group, self.auto_commit, client_id)
        finally:
            done.set()

    async def kill(self, member: int) -> None:
        if member not in self._running:
            raise ValueError(f"kill_consumer: no member in slot {member!r} (slots 0..{len(self._running) - 1})")
        if self.shared.stop_consuming.is_set():
            raise RuntimeError("kill_consumer: the group is already draining; a kill now would only lose the "
                               "final commit")
        scope, done, client_id = self._running[member]
        scope.cancel()
        await done.wait()
        owned = self.shared.assignments.pop(member, frozenset())
        self.shared.caught_up.pop(member, None)
        self.killed.append(client_id)
        self.owned_at_kill.append(len(owned))
        self._generation[member] += 1
        self._start(member)


async def _caught_up(consumer: Any, floor: Mapping[int, int]) -> bool:
    for tp in consumer.assignment():
        hw = consumer.highwater(tp)
        if hw is None:
            return False
        with anyio.move_on_after(1.0):
            pos = await consumer.position(tp)
            if pos >= max(hw, floor.get(tp.partition, -1) + 1):
                continue
        return False
    return True


async def _read_log(bootstrap: str, topic: str, partitions: int, group: str, floor: Mapping[int, int],
                    timeout_s: float) -> tuple[LogImage, dict[int, int | None]]:
    """A fresh assign()-ed consumer: the group's committed offsets, then every partition from offset 0."""
    from ...consumer import Consumer
    image = LogImage()
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    async with Consumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                        client_id="chaos-verify", auto_offset_reset="earliest") as reader:
        reader.assign(tps)
        committed = {tp.partition: await reader.committed(tp) for tp in tps}
        for tp in tps:
            reader.seek(tp, 0)
        next_offset = {tp: 0 for tp in tps}
        with anyio.move_on_after(timeout_s):
            while True:
                done = True
                for tp in tps:
                    hw = reader.highwater(tp)
                    if hw is None or next_offset[tp] < max(hw, floor.get(tp.partition, -1) + 1):
                        done = False
                if done:
                    break
                for tp, records in (await reader.getmany(timeout_ms=500, max_records=50_000)).items():
                    for r in records:
                        image.add(tp.partition, r.offset, r.value)
                        next_offset[tp] = r.offset + 1
    return image, committed


async def run_soak(cfg: SoakConfig, bootstrap_servers: str | None = None, *,
                   control: KafkaClusterControl | FaultProxyControl | None = None) -> SoakReport:
    """Run one chaos soak: against the broker at ``bootstrap_servers`` with a FaultProxy put in front of it; given
    a ``FaultProxyControl``, through that proxy (already running on its own thread, in front of any broker); given a
    ``KafkaClusterControl``, straight against that Apache Kafka cluster (no proxy).  The faults the control cannot
    play (``unsupported_faults`` of its capabilities) get zero weight; on Kafka its controller does the failover
    the proxy's script otherwise emulates."""
    cfg.validate()
    if (bootstrap_servers is None) == (control is None):
        raise ValueError("run_soak: give bootstrap_servers (a FaultProxy is put in front of that broker) or "
                         "control (a FaultProxyControl, or a KafkaClusterControl: no proxy), exactly one of them")
    if isinstance(control, KafkaClusterControl):
        return await _run_soak_direct(cfg, control)
    if control is not None:
        return await _run_soak_through_proxy(cfg, control)
    assert bootstrap_servers is not None
    from ..proxy import FaultProxy
    proxy = FaultProxy(bootstrap_servers, nodes=cfg.nodes, inspect_responses=False)
    proxy.start()   # its own thread: its tasks stay out of this loop's count
    try:
        return await _run_soak_through_proxy(cfg, FaultProxyControl(proxy))
    finally:
        proxy.stop()


async def _run_soak_through_proxy(cfg: SoakConfig, control: FaultProxyControl) -> SoakReport:
    """``run_soak`` through a running fault proxy: the clients connect to it, the script plays on it."""
    from ...admin import Admin
    proxy = control.proxy
    try:
        on_this_loop = proxy.loop is asyncio.get_running_loop()
    except RuntimeError:
        on_this_loop = False
    if proxy.loop is None or on_this_loop:
        raise ValueError("run_soak: the FaultProxyControl's proxy must run on its own thread (FaultProxy.start()), "
                         "so that its tasks stay out of the soak's count of leaked tasks")
    auto_commit = cfg.auto_commit if cfg.auto_commit is not None else random.Random(cfg.seed).random() < 0.5
    topic = f"chaos-{cfg.seed}-{uuid.uuid4().hex[:8]}"
    group = f"{topic}-g"
    report = SoakReport(seed=cfg.seed, topic=topic, auto_commit=auto_commit, duration_s=cfg.duration_s)
    shared = _Shared(cfg, topic)
    upstream_port = proxy.upstream_port
    harness_ports = [proxy.port(n) for n in proxy.node_ids]
    started = time.monotonic()
    before = ResourceSnapshot.take()
    bootstrap = proxy.bootstrap_servers
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, cfg.partitions)])
    weights = {k: (0.0 if k in unsupported_faults(control.capabilities) else w) for k, w in cfg.weights.items()}
    spec = ScheduleSpec(duration_ms=cfg.duration_s * 1000.0, nodes=proxy.node_ids,
                        partitions=[TopicPartition(topic, p) for p in range(cfg.partitions)],
                        mean_interval_ms=cfg.mean_fault_interval_ms, weights=weights,
                        members=cfg.consumers, kill_gap_ms=cfg.kill_gap_ms, kill_after_ms=cfg.kill_after_ms,
                        quiet_start_ms=cfg.quiet_start_ms)
    members = _Members(shared, bootstrap, group, auto_commit)
    control.members = members
    try:
        runner = FaultRunner(control, generate_schedule(spec, cfg.seed))
        await _play(shared, members, runner, bootstrap, report)
    finally:
        control.members = None
    image, committed = await _read_log(bootstrap, topic, cfg.partitions, group, shared.floor, timeout_s=60.0)
    report.leaked_fds = await _leaks(before, harness_ports=harness_ports, upstream_port=upstream_port)
    report.leaked_tasks = sorted(name for tid, name in ResourceSnapshot.take().tasks.items()
                                 if tid not in before.tasks)
    report.killed_members = [f"{cid} (owned {n} partitions)" for cid, n in zip(members.killed,
                                                                            members.owned_at_kill)]
    report.killed_members_left = sum(len(proxy.requests(LEAVE_GROUP, client_id=cid)) for cid in members.killed)
    _finish(report, shared, runner, image, committed, started)
    return report


async def _run_soak_direct(cfg: SoakConfig, control: KafkaClusterControl) -> SoakReport:
    """``run_soak`` on a real cluster: the same clients and judge, the faults played by ``control``."""
    auto_commit = cfg.auto_commit if cfg.auto_commit is not None else random.Random(cfg.seed).random() < 0.5
    topic = f"chaos-{cfg.seed}-{uuid.uuid4().hex[:8]}"
    group = f"{topic}-g"
    report = SoakReport(seed=cfg.seed, topic=topic, auto_commit=auto_commit, duration_s=cfg.duration_s)
    shared = _Shared(cfg, topic)
    started = time.monotonic()
    bootstrap = control.bootstrap_servers
    await control.create_topic(topic, cfg.partitions)
    unsupported = unsupported_faults(control.capabilities)
    weights = {k: (0.0 if k in unsupported else w) for k, w in cfg.weights.items()}
    spec = ScheduleSpec(duration_ms=cfg.duration_s * 1000.0, nodes=control.nodes,
                        partitions=[TopicPartition(topic, p) for p in range(cfg.partitions)],
                        mean_interval_ms=cfg.mean_fault_interval_ms, weights=weights, failover_ms=None,
                        members=cfg.consumers, kill_gap_ms=cfg.kill_gap_ms, kill_after_ms=cfg.kill_after_ms,
                        quiet_start_ms=cfg.quiet_start_ms)
    events = generate_schedule(spec, cfg.seed)
    before = ResourceSnapshot.take()
    members = _Members(shared, bootstrap, group, auto_commit)
    control.attach(members, group, [f"chaos-p{i}" for i in range(cfg.producers)])
    runner = FaultRunner(control, events)
    async with control:
        await _play(shared, members, runner, bootstrap, report)
    image, committed = await _read_log(bootstrap, topic, cfg.partitions, group, shared.floor, timeout_s=60.0)
    report.leaked_fds = await _leaks(before, ignore_fds=control.harness_fds)
    report.leaked_tasks = sorted(name for tid, name in ResourceSnapshot.take().tasks.items()
                                 if tid not in before.tasks)
    report.killed_members = [f"{cid} (owned {n} partitions)" for cid, n in zip(members.killed,
                                                                            members.owned_at_kill)]
    report.killed_members_left = control.killed_left
    _finish(report, shared, runner, image, committed, started)
    report.fault_errors += control.errors
    return report


async def _leaks(before: ResourceSnapshot, *, harness_ports: Iterable[int] = (), upstream_port: int = -1,
                 ignore_fds: Callable[[], set[int]] = set) -> list[str]:
    """Fds opened since ``before`` and still open, less the harness's own; a transport closes its socket one
    loop turn after close(), so a short grace before anything counts as leaked."""
    def now() -> list[str]:
        after = ResourceSnapshot.take()
        ignored = ignore_fds()
        return leaked_fds(before.fds, {fd: t for fd, t in after.fds.items() if fd not in ignored},
                          sockets=tcp_sockets(), harness_ports=harness_ports, upstream_port=upstream_port)
    leaked = now()
    for _ in range(20):
        if not leaked:
            break
        await anyio.sleep(0.05)
        leaked = now()
    return leaked


async def _play(shared: _Shared, members: _Members, runner: FaultRunner, bootstrap: str,
                report: SoakReport) -> None:
    """Producers, the group and the fault script at once; returns when the group consumed everything acked
    (or the drain timed out) and every member committed and left."""
    cfg, topic = shared.cfg, shared.topic
    drain_started = 0.0

    async def producers() -> None:
        deadline = time.monotonic() + cfg.duration_s
        async with anyio.create_task_group() as tg:
            for i in range(cfg.producers):
                tg.start_soon(_produce, shared, i, bootstrap, deadline, name=f"chaos-producer-{i}")
        shared.floor = shared.ledger.max_acked_offset()
        shared.producers_done.set()

    async def monitor() -> None:
        nonlocal drain_started
        await shared.producers_done.wait()
        drain_started = time.monotonic()
        everything = frozenset(TopicPartition(topic, p) for p in range(cfg.partitions))
        stable_since: float | None = None
        with anyio.move_on_after(cfg.drain_timeout_s):
            while True:
                assigned = frozenset().union(*shared.assignments.values()) if shared.assignments else frozenset()
                ok = (assigned == everything and len(shared.caught_up) == cfg.consumers
                      and all(shared.caught_up.values()))
                now = time.monotonic()
                if not ok:
                    stable_since = None
                elif stable_since is None:
                    stable_since = now
                elif now - stable_since >= 1.0:   # caught up on two fresh fetch rounds, not one stale one
                    break
                await anyio.sleep(0.2)
        shared.stop_consuming.set()

    async with anyio.create_task_group() as tg:
        members.start_all(tg)
        tg.start_soon(runner.run, name="chaos-faults")
        tg.start_soon(producers, name="chaos-producers")
        tg.start_soon(monitor, name="chaos-monitor")
    report.drain_s = round(time.monotonic() - drain_started, 2) if drain_started else 0.0


def _finish(report: SoakReport, shared: _Shared, runner: FaultRunner, image: LogImage,
            committed: Mapping[int, int | None], started: float) -> None:
    ledger = shared.ledger
    report.elapsed_s = round(time.monotonic() - started, 2)
    report.faults = dict(runner.faults)
    report.fault_errors = list(runner.errors)
    report.sent = ledger.sent
    report.acked = ledger.acked
    report.acked_without_offset = ledger.count(ACKED_NO_OFFSET)
    report.failed = ledger.count(FAILED)
    report.failed_by_error = dict(ledger.errors)
    report.pending_at_close = ledger.count(PENDING)
    report.deliveries = shared.consumption.deliveries
    report.rebalances = shared.rebalances
    report.commit_failures = dict(shared.commit_failures)
    report.consumer_errors = dict(shared.consumer_errors)
    report.log_records = sum(len(ids) for ids in image.ids.values())
    for name, value in judge(ledger, image, shared.consumption, report.examples).items():
        setattr(report, name, value)
    for p in range(shared.cfg.partitions):
        end = image.end_offset(p)
        if committed.get(p) is None and end > 0 or (committed.get(p) or 0) < end:
            report.committed_behind[str(p)] = f"committed {committed.get(p)} < log end {end}"
