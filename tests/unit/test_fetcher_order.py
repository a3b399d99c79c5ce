"""Fetcher, the consumer's I/O shell, over a scripted cluster: an answer's next Fetch reaches the broker before the
application goes on with the records (no broker, no sleeps)."""

from __future__ import annotations

from typing import Any, Callable

import anyio

from akresil.config import resolve
from akresil.net.fetcher import Fetcher
from akresil.protocol.api import ApiKey

from .test_fetch_state import TP0, batch, fetch_state, metadata, response


class _Node:
    def next_send_at(self, now: float) -> float | None:
        return None


class ScriptedCluster:
    """Answers each Fetch when the test says so; ``log`` records sends and what the test observes."""

    def __init__(self, log: list[str]) -> None:
        self.metadata = metadata({0: (1, 0)})
        self.fatal_error: BaseException | None = None
        self.log = log
        self.waiting: list[tuple[anyio.Event, list[Any]]] = []

    def clock(self) -> float:
        return 0.0

    def node(self, node_id: int) -> _Node:
        return _Node()

    def on_metadata_change(self, callback: Any) -> None:
        pass

    def request_metadata_refresh(self, reason: str, *, missing: bool = False) -> None:
        pass

    async def request(self, node: int, api: ApiKey, body: Callable[[int], Any], **_: Any) -> tuple[int, Any]:
        body(16)
        self.log.append(f"sent fetch {node}")
        event, answer = anyio.Event(), []
        self.waiting.append((event, answer))
        await event.wait()
        return 16, answer[0]

    async def answer(self, body: Any) -> None:
        while not self.waiting:
            await anyio.sleep(0)
        event, slot = self.waiting.pop(0)
        slot.append(body)
        event.set()


async def test_the_next_fetch_is_sent_before_the_application_resumes() -> None:
    """An answer with records for the application and more on the broker: the Fetch for the rest must be written
    before the application's continuation runs (it works through the records it was handed, often for
    milliseconds), so the broker serves it meanwhile. Planning it on the fetcher's next turn wrote it after."""
    log: list[str] = []
    cluster = ScriptedCluster(log)
    state = fetch_state()
    state.assign([TP0])
    state.seek(TP0, 0)
    config = resolve("consumer", {"group_id": None})
    fetcher = Fetcher(cluster, state, config)  # type: ignore[arg-type]
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            await tg.start(fetcher.run)
            while not cluster.waiting:
                await anyio.sleep(0)

            async def application() -> None:
                event = fetcher.data_event()
                while not state.drain(10):
                    await event.wait()
                    event = fetcher.data_event()
                log.append("application resumed")

            tg.start_soon(application)
            await cluster.answer(response({TP0: {"records": batch(0, [b"a", b"b"]), "high_watermark": 100}}))
            while "application resumed" not in log:
                await anyio.sleep(0)
            assert log == ["sent fetch 1", "sent fetch 1", "application resumed"], log
            fetcher.stop()
            tg.cancel_scope.cancel()
