"""The transactional producer's I/O: requests to the transaction coordinator (and the group coordinator for
``TxnOffsetCommit``), each retried as ``core.transaction`` decides.

``TransactionIO.turn`` is called by the sender's scheduling pass: partitions that got records and are not in
the transaction yet go into one AddPartitionsToTxn request per pass (the accumulator's ``drain_gate`` keeps
their batches back until the coordinator confirms them). On transactions v2 (``core.v2``) they join at once:
their first Produce (v12) adds them, the offsets' TxnOffsetCommit (v5) adds the group, and EndTxn (v5) answers
with the producer id and the epoch it bumped, which the next transaction uses.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping

import anyio

from .. import errors
from ..core import events
from ..core.accumulator import RecordAccumulator
from ..core.transaction import Action, Operation, TransactionManager, TxnState, classify, error_from_code
from ..protocol.api import ApiKey
from ..types import ConsumerGroupMetadata, TopicPartition
from .cluster import Cluster, unchecked
from .coordinator import GROUP, TRANSACTION

log = logging.getLogger(__name__)

_TRANSPORT = (errors.KafkaConnectionError, errors.RequestTimeoutError, OSError)
#: InitProducerId can carry the current producer id and epoch (KIP-360 epoch bump) from v3
_BUMP_VERSION = 3
#: the feature that selects the transaction protocol, and the versions of transactions v2 (KIP-890 part 2):
#: the versions below them are v1's
TRANSACTION_VERSION = "transaction.version"
_V2_END_TXN = 5
_V2_TXN_OFFSET_COMMIT = 5
V2_PRODUCE = 12


class TransactionIO:
    """Coordinator requests of one transactional producer; the state lives in ``core`` (a TransactionManager)."""

    def __init__(self, cluster: Cluster, acc: RecordAccumulator, core: TransactionManager,
                 wake: Callable[[], None], fail_records: Callable[[BaseException], None]) -> None:
        self.cluster = cluster
        self.acc = acc
        self.core = core
        self._wake = wake
        self._fail_records = fail_records
        acc.drain_gate = core.added
        #: the transaction coordinator last found (passed as stale to the lookup after the core dropped it)
        self._txn_node: int | None = None

    # ------------------------------------------------------------------ the sender's pass
    def turn(self, now: float, tg: anyio.abc.TaskGroup) -> float | None:
        """Start an AddPartitionsToTxn for partitions with records not in the transaction yet; returns the time
        the next one may go when a backoff holds them back."""
        core = self.core
        if core.v2:
            core.join_implicitly([tp for tp in self.acc.partitions_with_data() if tp not in core.added])
            return None
        if core.pending:
            return None
        new = core.partitions_to_add(
            (tp for tp in self.acc.partitions_with_data() if tp not in core.added), now)
        if new:
            tg.start_soon(self._add_partitions, new)
            return None
        if now < core.add_at and core.in_transaction and any(
                tp not in core.added for tp in self.acc.partitions_with_data()):
            return core.add_at
        return None

    async def _add_partitions(self, tps: list[TopicPartition]) -> None:
        core, cluster = self.core, self.cluster
        acc = self.acc
        topics: dict[str, list[int]] = {}
        for tp in tps:
            topics.setdefault(tp.topic, []).append(tp.partition)
        try:
            node = await self._coordinator(None)
            if node is None:
                core.add_failed(cluster.clock(), refind=True)
                return
            _, response = await cluster.request(node, ApiKey.ADD_PARTITIONS_TO_TXN, {
                "v3_and_below_transactional_id": core.transactional_id,
                "v3_and_below_producer_id": acc.producer_id, "v3_and_below_producer_epoch": acc.producer_epoch,
                "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
            results: dict[TopicPartition, int] = {}
            for topic in response.get("results_by_topic_v3_and_below") or ():
                for part in topic["results_by_partition"]:
                    results[TopicPartition(topic["name"], part["partition_index"])] = part["partition_error_code"]
            for tp in tps:
                results.setdefault(tp, errors.UnknownServerError.errno)
            action = core.partitions_added(results, cluster.clock())
            if action is Action.REFIND:
                log.info("transaction %s: coordinator moved; finding it again", core.transactional_id)
            elif action in (Action.ABORTABLE, Action.FATAL):
                log.warning("transaction %s: AddPartitionsToTxn failed: %r", core.transactional_id, core.error)
                if action is Action.FATAL:
                    assert core.error is not None
                    self._fail_records(core.error)
        except _TRANSPORT as exc:
            log.debug("transaction %s: AddPartitionsToTxn failed: %s", core.transactional_id, exc)
            core.add_failed(cluster.clock(), refind=True)
        except errors.KafkaError as exc:
            core.fatal(exc)
            self._fail_records(exc)
        finally:
            self._wake()

    # ------------------------------------------------------------------ coordinator lookup
    async def _coordinator(self, op: Operation | None) -> int | None:
        """The transaction coordinator's node id, looked up if unknown; None when the lookup must be retried.
        ``core.coordinator`` is None only at first or after the coordinator failed (the core drops it on
        REFIND): then the node last used is stale and the client's locator must not hand it back."""
        if self.core.coordinator is None:
            self.core.coordinator = await self._find(self.core.transactional_id, TRANSACTION, self._txn_node)
            if self.core.coordinator is not None:
                self._txn_node = self.core.coordinator
        return self.core.coordinator

    async def _find(self, key: str, key_type: int, stale: int | None) -> int | None:
        """The coordinator of ``key`` (from the client's ``CoordinatorLocator``); None on a retriable failure;
        raises a fatal one (authorization)."""
        try:
            return await self.cluster.coordinators.find(key, key_type, stale=stale)
        except (*_TRANSPORT, errors.ProtocolError, errors.CoordinatorNotAvailableError) as exc:
            log.debug("FindCoordinator(%s) failed: %s", key, exc)
            return None
        except errors.KafkaError as exc:
            if classify(exc.errno) in (Action.FATAL, Action.ABORTABLE):
                raise error_from_code(exc.errno, f"FindCoordinator for {key!r}") from None
            return None

    # ------------------------------------------------------------------ one coordinator call, retried
    async def _call(self, op: Operation, api: ApiKey, body: dict[str, Any] | Callable[[int], dict[str, Any]],
                    code_of: Callable[[dict[str, Any]], int], *, group: str | None = None,
                    min_version: int = 0, max_version: int | None = None) -> tuple[int, dict[str, Any]]:
        """Send until the answer is OK; RETRY / REFIND / transport errors back off (KIP-580) until the
        operation's deadline; ABORTABLE / FATAL raise (after updating the state machine)."""
        core, cluster = self.core, self.cluster
        group_node: int | None = None
        group_stale: int | None = None
        while True:
            now = cluster.clock()
            cause: BaseException
            try:
                if group is None:
                    node = await self._coordinator(op)
                else:
                    if group_node is None:
                        group_node = await self._find(group, GROUP, group_stale)
                    node = group_node
            except errors.KafkaError as exc:
                # FindCoordinator refused: the transactional id's (fatal) or the group's (abortable) authorization
                if group is None:
                    core.fatal(exc)
                    self._fail_records(exc)
                else:
                    core.abortable(exc)
                raise
            if node is None:
                cause = errors.CoordinatorNotAvailableError(f"{op.name}: coordinator not found")
            else:
                try:
                    version, response = await unchecked(cluster)(node, api, body, min_version=min_version,
                                                              max_version=max_version)
                except _TRANSPORT as exc:
                    cause = exc
                    if group is None:
                        core.coordinator = None
                    else:
                        group_node, group_stale = None, node
                else:
                    code = code_of(response)
                    action = classify(code)
                    if action is Action.OK:
                        return version, response
                    cause = error_from_code(code, f"{op.name}: {api.name} to node {node}")
                    if action is Action.FATAL:
                        core.fatal(cause)
                        self._fail_records(cause)
                        raise cause
                    if action is Action.ABORTABLE:
                        core.abortable(cause)
                        raise cause
                    if action is Action.REFIND:
                        if group is None:
                            core.coordinator = None
                        else:
                            group_node, group_stale = None, node
            now = cluster.clock()
            at = op.retry_at(now, cause)        # raises KafkaTimeoutError past the deadline
            log.debug("%s: %s; retrying in %.0f ms", op.name, cause, at - now)
            await anyio.sleep((at - now) / 1000.0)

    # ------------------------------------------------------------------ operations
    async def init(self, timeout_ms: float, *, take_over: bool = False) -> None:
        """InitProducerId with the transactional id: a new epoch that fences every older producer of the id.
        With a known identity (v3+) the current id and epoch are passed, as after an abort that needs a bump;
        ``take_over`` passes none, as a new producer does (``Producer.init_transactions``)."""
        core, acc = self.core, self.acc
        op = core.start_init(self.cluster.clock(), timeout_ms)
        pid, epoch = (-1, -1) if take_over else (acc.producer_id, acc.producer_epoch)

        def body(version: int) -> dict[str, Any]:
            known = version >= _BUMP_VERSION and pid >= 0
            return {"transactional_id": core.transactional_id,
                    "transaction_timeout_ms": core.transaction_timeout_ms,
                    "producer_id": pid if known else -1, "producer_epoch": epoch if known else -1}

        try:
            _, response = await self._call(op, ApiKey.INIT_PRODUCER_ID, body, lambda r: r.get("error_code", 0))
        except errors.KafkaTimeoutError:
            core.state = TxnState.UNINITIALIZED if acc.producer_id < 0 else TxnState.READY
            raise
        except errors.KafkaError as exc:
            core.fatal(exc)     # no transaction to abort here: any refusal leaves the producer unusable
            self._fail_records(exc)
            raise
        self._adopt(response["producer_id"], response["producer_epoch"])
        core.initialized()

    async def end(self, commit: bool) -> None:
        """EndTxn (commit or abort) once the transaction holds partitions or offsets; retried within
        ``transaction_timeout_ms`` (CONCURRENT_TRANSACTIONS, coordinator moves, lost connections). On v2 the answer
        (v5) carries the epoch the coordinator bumped (or a new producer id when the epoch ran out); sequences
        restart under it. Then the protocol of the next transaction follows the cluster (``use_v2``)."""
        core, acc = self.core, self.acc
        op = core.start_end(commit, self.cluster.clock())
        if core.needs_end_request():
            _, response = await self._call(op, ApiKey.END_TXN, {
                "transactional_id": core.transactional_id, "producer_id": acc.producer_id,
                "producer_epoch": acc.producer_epoch, "committed": commit}, lambda r: r.get("error_code", 0),
                max_version=_V2_END_TXN if core.v2 else _V2_END_TXN - 1)
            producer_id = response.get("producer_id", -1)
            if producer_id >= 0:     # v5 (the epoch of a transaction started on v1 is not bumped: -1)
                self._adopt(producer_id, response["producer_epoch"])
        core.use_v2(self.cluster.feature_level(TRANSACTION_VERSION) >= 2, initializing=False)
        core.ended()

    def _adopt(self, producer_id: int, producer_epoch: int) -> None:
        """Take a producer id and epoch the coordinator gave (InitProducerId, EndTxn v5); sequences restart at 0."""
        self.acc.set_producer_identity(producer_id, producer_epoch)
        self.cluster.hooks.emit(events.PRODUCER_ID, producer_id=producer_id, producer_epoch=producer_epoch)

    def follow_cluster(self) -> None:
        """After ``init_transactions``: take the cluster's transaction protocol (Java reads it at that point)."""
        self.core.use_v2(self.cluster.feature_level(TRANSACTION_VERSION) >= 2, initializing=True)

    async def send_offsets(self, offsets: Mapping[TopicPartition, int], group: ConsumerGroupMetadata) -> None:
        """AddOffsetsToTxn to the transaction coordinator (v1 only: on v2 TxnOffsetCommit v5 adds the group), then
        TxnOffsetCommit to the group coordinator with the consumer's generation, member id and instance id
        (KIP-447: a zombie's offsets are refused)."""
        core, acc = self.core, self.acc
        core.check_send("send_offsets_to_transaction()")
        now = self.cluster.clock()
        op = Operation("send_offsets_to_transaction()", now, core.transaction_timeout_ms, core.backoff)
        v2 = core.v2
        if not v2:
            await self._call(op, ApiKey.ADD_OFFSETS_TO_TXN, {
                "transactional_id": core.transactional_id, "producer_id": acc.producer_id,
                "producer_epoch": acc.producer_epoch, "group_id": group.group_id}, lambda r: r.get("error_code", 0))
        core.offsets_added = True       # (v2: before the request, which may have reached the coordinator if it fails)
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp, offset in offsets.items():
            topics.setdefault(tp.topic, []).append(
                {"partition_index": tp.partition, "committed_offset": int(offset), "committed_leader_epoch": -1,
                 "committed_metadata": ""})
        body = {"transactional_id": core.transactional_id, "group_id": group.group_id,
                "producer_id": acc.producer_id, "producer_epoch": acc.producer_epoch,
                "generation_id": group.generation_id, "member_id": group.member_id,
                "group_instance_id": group.group_instance_id,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}

        def worst_code(response: dict[str, Any]) -> int:
            codes = [int(p["error_code"]) for t in response.get("topics") or () for p in t["partitions"]]
            bad = [c for c in codes if c]
            if not bad:
                return 0
            return max(bad, key=lambda c: _severity(classify(c)))

        await self._call(op, ApiKey.TXN_OFFSET_COMMIT, body, worst_code, group=group.group_id,
                         max_version=_V2_TXN_OFFSET_COMMIT if v2 else _V2_TXN_OFFSET_COMMIT - 1)


def _severity(action: Action) -> int:
    return (Action.OK, Action.RETRY, Action.REFIND, Action.ABORTABLE, Action.FATAL).index(action)
