"""What a fault script acts through: ``FaultControl`` (the runner's protocol), ``FaultProxyControl`` (the fault
proxy's ``BrokerControl``, in akresil.testing.fixtures) and ``KafkaClusterControl``, which plays the script on a real
Apache Kafka cluster with the faults a real broker can take."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Protocol, Sequence

import anyio
import anyio.abc

from ... import errors
from ...types import NewTopic
from ..control import Capability
from ..fixtures import FaultProxyControl, MemberControl
from .schedule import FAULT_NEEDS, Fault

if TYPE_CHECKING:
    from ..kafka_cluster import KafkaCluster

__all__ = ["FaultControl", "FaultProxyControl", "GroupMembers", "KafkaClusterControl", "MemberControl",
           "ProxyControl", "unsupported_faults"]

log = logging.getLogger("akresil.testing.chaos")


class FaultControl(Protocol):
    """The operations a fault runner needs: a ``BrokerControl``'s leader moves, node stops and throttles, and the
    faults only a proxy can play (``FaultProxyControl`` has them all; ``KafkaClusterControl`` refuses those a real
    broker cannot take; tests fake it)."""

    async def move_leader(self, topic: str, partition: int, to_node: int) -> object: ...
    async def throttle(self, node: int, ms: int, *, count: int = 1) -> None: ...
    async def drop_connections(self, node: int) -> object: ...
    async def stop_node(self, node: int) -> None: ...
    async def start_node(self, node: int) -> None: ...
    async def add_latency(self, node: int, ms: float) -> None: ...
    async def remove_latency(self, node: int, ms: float) -> None: ...
    async def fail_requests(self, api_key: int, error_code: int, count: int, node: int) -> None: ...
    async def kill_consumer(self, member: int) -> None: ...


class GroupMembers(MemberControl, Protocol):
    """``MemberControl`` that also names its members' client ids (what a client quota or DescribeGroups sees)."""

    def client_id(self, member: int) -> str: ...
    def client_ids(self) -> list[str]: ...


class KafkaClusterControl:
    """A ``FaultControl`` acting on a real Apache Kafka ``KafkaCluster``: clients talk to the brokers directly.

    Each fault is what an operator or a failure does to a real cluster:

    * ``move_leader``: ``KafkaCluster.move_leader`` (replica reorder + preferred leader election; the epoch
      rises and the old leader answers NOT_LEADER_OR_FOLLOWER with Kafka's own KIP-951 hints);
    * ``stop_node`` / ``start_node``: the broker's JVM is killed (SIGKILL, no controlled shutdown) and started
      again with its data.  Kafka's controller moves the dead broker's leaderships once it fences it, so the
      script's own failover moves are off.  A broker takes 10-35 s to serve again on a loaded 2-core machine
      (JVM start, log recovery after the kill), far longer than a scripted downtime, so ``start_node`` starts
      it in the background and the script goes on; a move to that broker or the next kill waits for it, so
      one broker at most is down and every move finds its target in sync;
    * ``throttle``: a real client quota (KIP-219) of ``throttle_byte_rate`` bytes/s, produce and fetch, on every
      soak client for the fault's ``ms * count``, then lifted.  Quotas are per client id and each broker
      enforces them, so ``node`` is not used, and the broker decides how long each throttle lasts;
    * ``kill_consumer``: a group member crashes as with the proxy; describing the group right after the kill
      (DescribeGroups, or ConsumerGroupDescribe for a KIP-848 group) must still list it (a member that sent
      LeaveGroup is gone at once; counted in ``killed_left``). A group the coordinator cannot describe yet is
      not checked (``killed_unchecked``).

    A broker cannot be told to drop its connections, delay responses or answer a request with an error, so
    ``drop_connections``, ``add_latency`` / ``remove_latency`` and ``fail_requests`` (``UNSUPPORTED``) get
    zero weight in a soak with this control and raise if a script asks for them anyway.

    Use it as ``async with``: restarts and quota lifts run in its task group; leaving waits for the restarts
    and lifts what is still set.  A restart that fails is in ``errors`` (a soak reports it as a violation).
    """

    #: what a cluster's capabilities with the quota throttle lack (``unsupported_faults``)
    UNSUPPORTED: frozenset[Fault] = frozenset({Fault.DROP_CONNECTIONS, Fault.LATENCY, Fault.FAIL_REQUESTS})

    def __init__(self, cluster: KafkaCluster, *, throttle_byte_rate: float = 1024.0,
                 sleep: Callable[[float], Awaitable[None]] = anyio.sleep) -> None:
        if not throttle_byte_rate > 0:
            raise ValueError(f"throttle_byte_rate: must be > 0 bytes/s, got {throttle_byte_rate!r}")
        self.cluster = cluster
        self.throttle_byte_rate = throttle_byte_rate
        self._sleep = sleep   # how a throttle window passes (tests inject one)
        self.members: GroupMembers | None = None
        self.group: str | None = None
        self.producer_ids: tuple[str, ...] = ()
        #: killed members DescribeGroups no longer listed right after the kill (they left instead of crashing),
        #: and kills it could not check (the group was not described)
        self.killed_left = 0
        self.killed_unchecked = 0
        #: background restarts that failed
        self.errors: list[str] = []
        self._throttled: dict[str, int] = {}   # client id -> windows in force
        self._lifts: set[anyio.CancelScope] = set()
        self._starting: dict[int, anyio.Event] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self._tg_cm: Any = None

    @property
    def nodes(self) -> list[int]:
        return list(self.cluster.broker_ids)

    @property
    def capabilities(self) -> frozenset[Capability]:
        """The cluster's, and ``throttle`` (a client quota for the fault's time, where the cluster has quotas)."""
        caps = self.cluster.capabilities
        return caps | {Capability.THROTTLE} if Capability.QUOTAS in caps else caps

    @property
    def bootstrap_servers(self) -> str:
        return self.cluster.bootstrap_servers

    def attach(self, members: GroupMembers, group: str, producer_ids: Iterable[str]) -> None:
        """The soak's group and its members (for ``kill_consumer``, and with the producers' client ids, the
        clients a throttle applies to)."""
        self.members, self.group, self.producer_ids = members, group, tuple(producer_ids)

    def harness_fds(self) -> set[int]:
        """Fds this process holds for the cluster (each broker's watchdog pipe): a restarted broker's is new."""
        fds = set()
        for node in self.cluster.nodes.values():
            if node.proc is not None and node.proc.stdin is not None and not node.proc.stdin.closed:
                fds.add(node.proc.stdin.fileno())
        return fds

    async def create_topic(self, topic: str, partitions: int) -> None:
        """RF 3 (or every broker, if fewer), partition p led by ``nodes[p % N]``: where ``generate_schedule``
        assumes leadership starts, and a move or a dead broker keeps every partition available."""
        nodes = self.nodes
        rf = min(3, len(nodes))
        assignment = {p: [nodes[(p + i) % len(nodes)] for i in range(rf)] for p in range(partitions)}
        async with self.cluster.admin() as admin:
            await admin.create_topics([NewTopic(topic, replica_assignment=assignment)])

    async def __aenter__(self) -> KafkaClusterControl:
        self._tg_cm = anyio.create_task_group()
        self._tg = await self._tg_cm.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        assert self._tg is not None
        for scope in self._lifts:   # pending lifts: done below at once instead; restarts run to their end
            scope.cancel()
        try:
            return bool(await self._tg_cm.__aexit__(*exc_info))
        finally:
            self._tg = None
            with anyio.CancelScope(shield=True):
                await self._set_quota(sorted(self._throttled), None)
                self._throttled.clear()

    async def _restarted(self, nodes: Iterable[int]) -> None:
        for node in nodes:
            event = self._starting.get(node)
            if event is not None:
                await event.wait()

    async def move_leader(self, topic: str, partition: int, to_node: int) -> int:
        await self._restarted([to_node])
        # a restarted broker rejoins the ISR only once caught up, which a loaded machine can take a while over
        return await self.cluster.move_leader(topic, partition, to_node, timeout_s=60.0)

    async def stop_node(self, node: int) -> None:
        await self._restarted(list(self._starting))
        await self.cluster.kill_node(node)

    async def start_node(self, node: int) -> None:
        if self._tg is None:
            raise RuntimeError("KafkaClusterControl.start_node: use the control as `async with` (it waits for "
                               "the restarts it began)")
        if node in self._starting:
            return
        self._starting[node] = anyio.Event()
        self._tg.start_soon(self._start_in_background, node, name=f"chaos-start-broker-{node}")

    async def _start_in_background(self, node: int) -> None:
        try:
            await self.cluster.start_node(node)
        except Exception as exc:
            self.errors.append(f"start_node {{'node': {node}}}: {type(exc).__name__}: {exc}")
            log.warning("chaos: restarting broker %d failed: %r", node, exc)
        finally:
            self._starting.pop(node).set()

    async def throttle(self, node: int, ms: int, *, count: int = 1) -> None:
        if self._tg is None:
            raise RuntimeError("KafkaClusterControl.throttle: use the control as `async with` (it lifts quotas)")
        ids = sorted({*self.producer_ids, *(self.members.client_ids() if self.members is not None else ())})
        if not ids:
            return
        await self._set_quota([i for i in ids if not self._throttled.get(i)], self.throttle_byte_rate)
        for i in ids:
            self._throttled[i] = self._throttled.get(i, 0) + 1
        scope = anyio.CancelScope()
        self._lifts.add(scope)
        self._tg.start_soon(self._lift_later, ids, ms * count / 1000.0, scope, name="chaos-quota-lift")

    async def _lift_later(self, ids: list[str], after_s: float, scope: anyio.CancelScope) -> None:
        try:
            with scope:
                await self._sleep(after_s)
        finally:
            self._lifts.discard(scope)
        if scope.cancel_called:
            return   # leaving the control lifts every quota still set
        for i in ids:
            self._throttled[i] -= 1
        done = [i for i in ids if not self._throttled[i]]
        for i in done:
            del self._throttled[i]
        await self._set_quota(done, None)

    async def _set_quota(self, client_ids: Sequence[str], rate: float | None) -> None:
        """One AlterClientQuotas for every id: set produce and fetch byte rates, or remove them (``None``)."""
        if not client_ids:
            return
        from ...admin_types import ClientQuotaEntity
        values = {"producer_byte_rate": rate, "consumer_byte_rate": rate}
        async with self.cluster.admin() as admin:
            (await admin.alter_client_quotas({ClientQuotaEntity(client_id=i): dict(values)
                                              for i in client_ids})).raise_on_error()

    async def kill_consumer(self, member: int) -> None:
        if self.members is None or self.group is None:
            raise RuntimeError("kill_consumer: this control was given no group members to kill (attach)")
        victim = self.members.client_id(member)
        await self.members.kill(member)
        async with self.cluster.admin() as admin:
            try:
                desc = (await admin.describe_consumer_groups([self.group]))[self.group]
            except errors.GroupIdNotFoundError:
                # a coordinator that just took over knows a group only once a generation of it completed
                self.killed_unchecked += 1
                return
        if victim not in {m.client_id for m in desc.members}:
            self.killed_left += 1

    async def _unsupported(self, fault: Fault) -> None:
        raise RuntimeError(f"{fault.value}: a real Kafka broker cannot be made to do this; a soak on "
                           "KafkaClusterControl gives the fault zero weight")

    async def drop_connections(self, node: int) -> None:
        await self._unsupported(Fault.DROP_CONNECTIONS)

    async def add_latency(self, node: int, ms: float) -> None:
        await self._unsupported(Fault.LATENCY)

    async def remove_latency(self, node: int, ms: float) -> None:
        await self._unsupported(Fault.LATENCY)

    async def fail_requests(self, api_key: int, error_code: int, count: int, node: int) -> None:
        await self._unsupported(Fault.FAIL_REQUESTS)


#: the runner's protocol under its first name
ProxyControl = FaultControl


def unsupported_faults(capabilities: frozenset[Capability]) -> frozenset[Fault]:
    """The faults a control with these capabilities cannot play (a soak gives them zero weight)."""
    return frozenset(f for f, needs in FAULT_NEEDS.items() if needs is not None and needs not in capabilities)
