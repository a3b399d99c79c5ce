"""ShareFetcher, the share consumer's I/O shell, over a scripted cluster: the order in which an answer's
consequences reach the broker and the application (no broker, no sleeps)."""

from __future__ import annotations

import asyncio
import random
from typing import Any, cast

import anyio

from akresil.core.backoff import ExponentialBackoff
from akresil.core.share_state import AckType, ShareFetchState
from akresil.net.share_fetcher import ShareFetcher
from akresil.protocol.api import ApiKey
from akresil.types import TopicPartition

from .conftest import BackendLookups
from .test_share_state import TID, TP0, TP1, ack_answer, batch, fetch_answer


class _Snapshot:
    topic_ids = {"t": TID}

    def leader_of(self, tp: TopicPartition) -> tuple[int, int] | None:
        return ({TP0: 1, TP1: 2}[tp], 0)

    def partitions_for(self, topic: str) -> tuple[int, ...]:
        return (0, 1) if topic == "t" else ()


class _Metadata:
    snapshot = _Snapshot()


class ScriptedCluster:
    """Answers each request when the test says so; ``log`` records sends, connections and what the test observes."""

    def __init__(self, log: list[str], up: set[int] | None = None) -> None:
        #: nodes connected (all by default); ``connection`` connects the others, refusing those in ``refuse``
        self.up = {1, 2} if up is None else up
        self.refuse: set[int] = set()
        self.metadata = _Metadata()
        self.fatal_error: BaseException | None = None
        self.log = log
        #: asyncio's own primitives, not anyio's: a test may count anyio's back-end look-ups (``backend_lookups``)
        self.waiting: dict[tuple[str, int], tuple[asyncio.Event, list[dict[str, Any]]]] = {}

    def clock(self) -> float:
        return 0.0

    def on_metadata_change(self, callback: Any) -> None:
        pass

    def connected(self, node: int) -> object:
        return object() if node in self.up else None

    async def connection(self, node: int) -> object:
        self.log.append(f"connect {node}")
        await anyio.sleep(0)
        if node in self.refuse:
            raise ConnectionRefusedError(f"node {node}")
        self.up.add(node)
        return object()

    def request_metadata_refresh(self, reason: str) -> None:
        pass

    async def request(self, node: int, api: ApiKey, body: dict[str, Any], *, timeout_ms: float) -> tuple[int, Any]:
        kind = "fetch" if api is ApiKey.SHARE_FETCH else "ack"
        self.log.append(f"sent {kind} {node}")
        event, answer = asyncio.Event(), cast("list[dict[str, Any]]", [])
        self.waiting[(kind, node)] = (event, answer)
        await event.wait()
        return 1, answer[0]

    async def answer(self, kind: str, node: int, body: dict[str, Any]) -> None:
        while (kind, node) not in self.waiting:
            await asyncio.sleep(0)
        event, slot = self.waiting.pop((kind, node))
        slot.append(body)
        event.set()


def member_fetcher(cluster: ScriptedCluster, *, joined: bool = True) -> tuple[ShareFetchState, ShareFetcher]:
    """A share state (no jitter in its backoff) and its fetcher over ``cluster``; ``joined``: member "m",
    assigned ``TP0`` and ``TP1``."""
    state = ShareFetchState("g", backoff=ExponentialBackoff(100, 1000, rng=random.Random(0), jitter=0.0))
    if joined:
        state.member_id = "m"
        state.set_assignment([TP0, TP1])
    return state, ShareFetcher(cluster, state, request_timeout_ms=1000)  # type: ignore[arg-type]


async def both_leaders_answered(cluster: ScriptedCluster, state: ShareFetchState) -> dict[Any, list[Any]]:
    """Leaders 1 and 2 each answer the running fetcher's fetch with two records; the application then polls
    leader 1's two, and leader 2's stay buffered."""
    await cluster.answer("fetch", 1, fetch_answer(0, batch(0, 2), [(0, 1, 1)]))
    await cluster.answer("fetch", 2, fetch_answer(1, batch(0, 2), [(0, 1, 1)]))
    for _ in range(10):     # both answers applied by the fetcher's tasks
        await anyio.sleep(0)
    records = state.poll_by_partition(2, 0.0)
    assert list(records) == [TP0], records
    return records


async def accept_one_round(cluster: ScriptedCluster, state: ShareFetchState, offset: int) -> None:
    """Leaders 1 and 2 each answer with two records from ``offset``; the application polls all four, accepts
    them and asks for a commit (the fetcher still has to be woken for it)."""
    await cluster.answer("fetch", 1, fetch_answer(0, batch(offset, 2), [(offset, offset + 1, 1)]))
    await cluster.answer("fetch", 2, fetch_answer(1, batch(offset, 2), [(offset, offset + 1, 1)]))
    while state.buffered < 4:
        await asyncio.sleep(0)          # asyncio's own: the look-up tests count anyio's back-end look-ups
    for records in state.poll_by_partition(4, 0.0, whole=False).values():
        for rec in records:
            state.acknowledge_record(rec, AckType.ACCEPT, 0.0)
    state.request_commit()


async def test_the_fetch_an_acknowledgement_unblocks_is_sent_before_the_application_resumes() -> None:
    """With another leader's records still buffered, ``commit()`` sends a ShareAcknowledge; when it is answered,
    the fetch to that leader (held while its records were unsettled) must reach the broker before the
    application goes on through the buffered records, so the broker serves it meanwhile. Planning only on the
    fetcher's next turn wrote it after the application's whole run of work."""
    log: list[str] = []
    cluster = ScriptedCluster(log)
    state, fetcher = member_fetcher(cluster)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            await tg.start(fetcher.run)
            records = await both_leaders_answered(cluster, state)
            for rec in records[TP0]:
                state.acknowledge_record(rec, AckType.ACCEPT, 0.0)
            nodes = state.request_commit()

            async def application() -> None:
                fetcher.wake()
                while not state.settled(nodes):
                    await fetcher.changed().wait()
                log.append("application resumed")

            tg.start_soon(application)
            await cluster.answer("ack", 1, ack_answer(0))
            while "application resumed" not in log:
                await anyio.sleep(0)
            after_ack = log[log.index("sent ack 1") + 1:]
            assert after_ack[:2] == ["sent fetch 1", "application resumed"], log
            fetcher._stopping = True
            tg.cancel_scope.cancel()


async def test_the_leaders_of_the_subscribed_topics_are_connected_before_the_assignment_names_them() -> None:
    """A connection's set-up is round trips (ApiVersions) that librdkafka's mock, one thread for all brokers,
    served behind the first leader's fetches: the leaders connected on their first fetch started fetching tens of
    milliseconds after it. They are connected while the member joins; a refused one is left to the fetch."""
    log: list[str] = []
    cluster = ScriptedCluster(log, up={2})
    cluster.refuse = {1}
    state, fetcher = member_fetcher(cluster, joined=False)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            await tg.start(fetcher.run)
            fetcher.connect_leaders(["t", "other"])
            for _ in range(10):
                await anyio.sleep(0)
            assert log == ["connect 1"]             # node 2 is connected already; no assignment, no fetch
            assert fetcher.fatal_error is None
            state.member_id = "m"
            state.set_assignment([TP0])
            fetcher.wake()
            while "sent fetch 1" not in log:
                await anyio.sleep(0)
            assert log == ["connect 1", "sent fetch 1"]
            fetcher._stopping = True
            tg.cancel_scope.cancel()


async def test_a_leaders_requests_are_sent_by_one_long_lived_task_not_a_task_each() -> None:
    """Spawning a task per ShareFetch / ShareAcknowledge (anyio's spawn, cancel scope and teardown) was about half
    of each fetcher turn's CPU; a leader has one request in flight at a time, so one task per leader sends them
    all, and it ends when the fetcher stops."""
    log: list[str] = []
    cluster = ScriptedCluster(log)
    senders: dict[int, set[object]] = {1: set(), 2: set()}
    request = cluster.request

    async def tracked(node: int, api: ApiKey, body: dict[str, Any], *, timeout_ms: float) -> tuple[int, Any]:
        senders[node].add(asyncio.current_task())
        return await request(node, api, body, timeout_ms=timeout_ms)

    cluster.request = tracked  # type: ignore[method-assign]
    state, fetcher = member_fetcher(cluster)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            await tg.start(fetcher.run)
            offset = 0
            for _ in range(3):      # fetch, poll, acknowledge, commit: three rounds per leader
                await accept_one_round(cluster, state, offset)
                fetcher.wake()
                offset += 2
            await cluster.answer("fetch", 1, fetch_answer(0, batch(offset, 2), [(offset, offset + 1, 1)]))
            assert log.count("sent fetch 1") >= 4 and log.count("sent fetch 2") >= 4, log
            assert [len(tasks) for tasks in senders.values()] == [1, 1], senders
            tg.start_soon(cluster.answer, "fetch", 2, fetch_answer(1, batch(offset, 2), [(offset, offset + 1, 1)]))
            await fetcher.stop(1000)
        # run() returned: the senders ended with the fetcher


async def test_a_poke_that_changes_nothing_takes_no_turn_and_a_commit_is_planned_in_the_caller() -> None:
    """Issue 35 item 5: ``poll()`` and ``commit()`` woke the fetcher's loop, whose turn then ran after the answers
    read meanwhile had planned (half the turns of a round planned nothing). ``poke()`` takes a turn only when
    the state says something changed, and takes it at once: the commit's ShareAcknowledge is queued before the
    caller awaits anything."""
    log: list[str] = []
    cluster = ScriptedCluster(log)
    state, fetcher = member_fetcher(cluster)
    plans: list[int] = []
    plan = state.plan

    def counted(now: float, **kw: Any) -> Any:
        got = plan(now, **kw)
        plans.append(len(got))
        return got

    state.plan = counted  # type: ignore[method-assign]
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            await tg.start(fetcher.run)
            records = await both_leaders_answered(cluster, state)
            turns = len(plans)
            fetcher.poke()                                # handing records out plans nothing: no turn
            for _ in range(10):
                await anyio.sleep(0)
            assert len(plans) == turns, plans
            for rec in records[TP0]:
                state.acknowledge_record(rec, AckType.ACCEPT, 0.0)
            state.request_commit()
            fetcher.poke()
            assert plans[turns:] == [1] and [p.kind.value for p in fetcher._queues[1]] == ["acknowledge"], plans
            fetcher._stopping = True
            tg.cancel_scope.cancel()


async def test_a_senders_idle_waits_resolve_the_back_end_once(backend_lookups: BackendLookups) -> None:
    """Issue 35 item 5: each leader's sender made an ``anyio.Event()`` for every idle wait (after each answer),
    a look-up of the running back-end each (sniffio, then asyncio's current task). It makes the back-end's own
    event, resolved once (``net.backend``)."""
    log: list[str] = []
    cluster = ScriptedCluster(log)
    state, fetcher = member_fetcher(cluster)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            await tg.start(fetcher.run)
            for offset in range(0, 8, 2):      # fetch, poll, acknowledge, commit (on the next fetch): four rounds
                if offset == 2:
                    backend_lookups.start()    # the senders started in the first round
                await accept_one_round(cluster, state, offset)
                fetcher.poke()
            while log.count("sent fetch 2") < 5:
                await asyncio.sleep(0)
            backend_lookups.stop()
            assert log.count("sent fetch 1") == 5, log
            assert backend_lookups.calls == 0
            fetcher._stopping = True
            tg.cancel_scope.cancel()
