"""TaskOwner (net/tasks.py): a client's task group, opened and closed from any task, under asyncio and trio."""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import anyio
import pytest

from akresil import errors
from akresil.net.tasks import TaskOwner

pytestmark = pytest.mark.parametrize("backend", ["asyncio", "trio"])


def run(backend: str, scenario: Callable[[], Awaitable[None]]) -> None:
    async def main() -> None:
        before = {task.id for task in anyio.get_running_tasks()}
        with anyio.fail_after(30):
            await scenario()
        leftover = [task.name for task in anyio.get_running_tasks() if task.id not in before]
        assert leftover == [], f"tasks still running after close: {leftover}"

    anyio.run(main, backend=backend)


async def in_child_task(fn: Callable[[], Awaitable[Any]]) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(fn)


def test_opened_in_one_task_closed_in_another_and_nothing_outlives_close(backend: str) -> None:
    ended: list[str] = []

    async def background(name: str, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            await anyio.sleep_forever()
        finally:
            ended.append(name)

    closed_after: list[list[str]] = []

    async def scenario() -> None:
        owner = TaskOwner("t", on_closed=lambda: closed_after.append(sorted(ended)))

        async def start() -> None:
            tg = await owner.open()
            await tg.start(background, "started")
            tg.start_soon(background, "soon")

        await in_child_task(start)            # the task that opened it has ended
        await anyio.sleep(0)
        assert ended == []                    # its tasks did not end with it
        await in_child_task(owner.close)      # closed from yet another task
        assert sorted(ended) == ["soon", "started"]
        assert closed_after == [["soon", "started"]]     # once, after every task ended
        await owner.close()
        assert len(closed_after) == 1

    run(backend, scenario)


def test_a_failing_background_task_is_handed_to_on_failure_and_raised_by_close(backend: str) -> None:
    failures: list[errors.ClientClosedError] = []

    async def scenario() -> None:
        owner = TaskOwner("akresil-test", on_failure=failures.append)
        tg = await owner.open()
        ended = anyio.Event()

        async def survivor() -> None:
            try:
                await anyio.sleep_forever()
            finally:
                ended.set()

        async def crash() -> None:
            raise ZeroDivisionError("boom")

        tg.start_soon(survivor)
        tg.start_soon(crash)
        await ended.wait()                    # the failure cancelled the other tasks of the group
        while not failures:                   # and then ended the group
            await anyio.sleep(0.01)
        assert len(failures) == 1
        assert "akresil-test: a background task failed (ZeroDivisionError: boom)" in str(failures[0])
        assert isinstance(failures[0].__cause__, ZeroDivisionError)
        with pytest.raises(ZeroDivisionError, match="boom"):
            await owner.close()

    run(backend, scenario)


def test_a_cancelled_close_still_waits_for_the_tasks(backend: str) -> None:
    async def scenario() -> None:
        owner = TaskOwner("t")
        tg = await owner.open()
        ended = anyio.Event()

        async def slow_to_end() -> None:
            try:
                await anyio.sleep_forever()
            finally:
                with anyio.CancelScope(shield=True):
                    await anyio.sleep(0.05)
                ended.set()

        tg.start_soon(slow_to_end)
        await anyio.sleep(0)
        with anyio.CancelScope() as scope:
            scope.cancel()
            await owner.close()
        assert ended.is_set()

    run(backend, scenario)


def test_open_twice_is_refused(backend: str) -> None:
    async def scenario() -> None:
        owner = TaskOwner("akresil-producer p1")
        await owner.open()
        with pytest.raises(errors.IllegalStateError, match="akresil-producer p1: background tasks already started"):
            await owner.open()
        await owner.close()

    run(backend, scenario)
