"""The runner's ``processing_guarantee="exactly_once"``: one transaction per commit interval holding the
handlers' output records and the input offsets they cover (``send_offsets_to_transaction``, KIP-447).

A commit needs a consistent cut: no handler may be half-way through a unit when the offsets are taken, or its
outputs would commit without its input offset. So partition tasks enter a unit through ``enter``/``exit`` and
a commit (or abort) first closes the barrier and waits until no unit runs. A timed-out or failed task, or a
failed commit, aborts the whole transaction (every task's outputs since the last commit go with it) and
rewinds every partition to the offset the transaction started from: the records are handled again in the
next transaction, and read_committed readers never see the aborted outputs.
"""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Iterable, Mapping, Protocol, Sequence

import anyio

from .errors import ConfigError, KafkaError, ProducerFencedError
from .types import ConsumerGroupMetadata, TopicPartition

log = logging.getLogger(__name__)


class TransactionalProducer(Protocol):
    """What the exactly-once runner needs of its producer (``check_exactly_once`` checks it at run time)."""

    @property
    def transaction_state(self) -> str | None: ...

    def begin_transaction(self) -> Any: ...

    async def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, int],
                                          group_metadata: ConsumerGroupMetadata) -> None: ...

    async def commit_transaction(self) -> None: ...

    async def abort_transaction(self) -> None: ...


class GroupConsumer(Protocol):
    """What the exactly-once runner needs of its consumer: the group's generation (or KIP-848 member epoch) and
    member id for TxnOffsetCommit, and seek to rewind after an abort (either may be sync or async)."""

    def group_metadata(self) -> ConsumerGroupMetadata | Awaitable[ConsumerGroupMetadata]: ...

    def seek(self, partition: TopicPartition, offset: int) -> Any: ...


class TransactionTask(Protocol):
    """One partition's progress as a transaction sees it: what was handled (``processed``), what the last
    transaction committed, and where to rewind to (the first offset handled in the open transaction)."""

    tp: TopicPartition
    processed: int | None
    committed: int | None
    rewind_to: int | None

    def rewind(self, offset: int) -> None: ...


def pending_offsets(tasks: Iterable[TransactionTask]) -> dict[TopicPartition, int]:
    """The offsets handled since the last commit, per partition."""
    return {task.tp: task.processed for task in tasks
            if task.processed is not None and task.processed != task.committed}

#: errors after which the producer cannot go on (another instance took over the transactional id)
_FATAL = (ProducerFencedError,)


def check_exactly_once(consumer: Any, producer: Any) -> None:
    """ConfigError naming what an exactly-once runner lacks."""
    for name in ("begin_transaction", "commit_transaction", "abort_transaction", "send_offsets_to_transaction"):
        if producer is None or not callable(getattr(producer, name, None)):
            raise ConfigError("producer: processing_guarantee='exactly_once' needs a transactional producer "
                              "(Producer(transactional_id=...), init_transactions() called)")
    state = getattr(producer, "transaction_state", "ready")
    if state is None:
        raise ConfigError("producer: processing_guarantee='exactly_once' needs a transactional producer "
                          "(Producer(transactional_id=...)); this one has no transactional_id")
    if state != "ready":
        raise ConfigError("producer: processing_guarantee='exactly_once' needs init_transactions() called and no "
                          f"open transaction (state {getattr(producer, 'transaction_state', None)!r})")
    for name in ("group_metadata", "seek"):
        if not callable(getattr(consumer, name, None)):
            raise ConfigError(f"consumer: processing_guarantee='exactly_once' needs a {name}() method")
    config = getattr(consumer, "config", None)
    if config is not None and getattr(config, "isolation_level", "read_committed") != "read_committed":
        raise ConfigError("isolation_level: the exactly-once runner's consumer must use 'read_committed' "
                          "(it would otherwise read aborted outputs of upstream transactions)")


class ExactlyOnce:
    """The barrier and the transaction of one exactly-once runner; the runner passes its partition tasks to each
    commit point."""

    def __init__(self, producer: TransactionalProducer, consumer: GroupConsumer) -> None:
        self.producer = producer
        self.consumer = consumer
        self._active = 0
        self._closed = False
        self._opened = anyio.Event()
        self._opened.set()
        self._idle = anyio.Event()
        self._idle.set()
        #: one commit point at a time: the runner's loop and a rebalance callback (KIP-848 calls it from the
        #: heartbeat task) may both reach one, and a second must not send offsets into, commit, abort or rewind
        #: behind a transaction the first is still ending
        self._ending = anyio.Lock()
        #: a task failed inside the transaction: the next commit point aborts and rewinds instead
        self.abort_wanted = False
        self.in_transaction = False
        self.commits = 0
        self.aborts = 0

    # ------------------------------------------------------------------ the barrier
    @property
    def closing(self) -> bool:
        """A commit point waits: tasks stop their chunk at the next unit boundary."""
        return self._closed

    async def enter(self) -> None:
        while self._closed:
            await self._opened.wait()
        if not self.in_transaction:
            self.producer.begin_transaction()
            self.in_transaction = True
        self._active += 1
        self._idle = anyio.Event()

    def exit(self) -> None:
        self._active -= 1
        if self._active == 0:
            self._idle.set()

    def _close(self) -> None:
        if not self._closed:
            self._closed = True
            self._opened = anyio.Event()

    async def _quiesce(self) -> None:
        self._close()
        await self._idle.wait()

    def request_abort(self) -> None:
        """A task failed inside the transaction: the next commit point aborts and rewinds, and no unit starts
        before it (a task whose sends fail at once because the transaction is abortable would otherwise spin)."""
        self.abort_wanted = True
        self._close()

    def transaction_failed(self) -> bool:
        """The producer's transaction can only be aborted (a record of it failed, e.g. OUT_OF_ORDER_SEQUENCE
        under a leader move): an error a handler got from it is the transaction's, not the handler's."""
        return bool(self.in_transaction and self.producer.transaction_state == "abortable error")

    def _reopen(self) -> None:
        self._closed = False
        self._opened.set()

    # ------------------------------------------------------------------ commit points
    async def commit_point(self, tasks: Sequence[TransactionTask]) -> bool:
        """Commit the open transaction with the offsets ``tasks`` processed (or abort and rewind them after a
        failure). Returns False when the transaction was aborted. A commit point that finds another under way
        waits for it, then commits what was handled since."""
        async with self._ending:
            return await self._commit_point(tasks)

    async def _commit_point(self, tasks: Sequence[TransactionTask]) -> bool:
        await self._quiesce()
        try:
            if self.abort_wanted:
                await self._abort_and_rewind("a task failed in the transaction", tasks)
                return False
            if not self.in_transaction:
                return True
            offsets = pending_offsets(tasks)
            try:
                if offsets:
                    await self.producer.send_offsets_to_transaction(
                        offsets, await _maybe_await(self.consumer.group_metadata()))
                await self.producer.commit_transaction()
            except _FATAL:
                raise
            except KafkaError as exc:
                await self._abort_and_rewind(f"commit failed: {exc!r}", tasks)
                return False
            self.in_transaction = False
            self.commits += 1
            for task in tasks:
                if task.tp in offsets:
                    task.committed = offsets[task.tp]
                task.rewind_to = None
            return True
        finally:
            self._reopen()

    async def abort_only(self) -> None:
        """Abort without rewinding (fatal shutdown: the next owner starts from the committed offsets)."""
        async with self._ending:
            if self.in_transaction and self.producer.transaction_state in ("in transaction", "abortable error"):
                await self.producer.abort_transaction()
            self.in_transaction = False

    async def _abort_and_rewind(self, why: str, tasks: Sequence[TransactionTask]) -> None:
        self.abort_wanted = False
        if self.in_transaction and self.producer.transaction_state in ("in transaction", "abortable error"):
            await self.producer.abort_transaction()
        self.in_transaction = False
        self.aborts += 1
        rewound: dict[TopicPartition, int] = {}
        for task in tasks:
            if task.rewind_to is None:
                continue
            offset = task.rewind_to
            await _maybe_await(self.consumer.seek(task.tp, offset))
            task.rewind(offset)
            rewound[task.tp] = offset
        log.warning("exactly-once runner: transaction aborted (%s); rewound %s", why, rewound)


async def _maybe_await(value: Any) -> Any:
    if hasattr(value, "__await__"):
        return await value
    return value
