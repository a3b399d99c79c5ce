"""Every client closes from a task other than the one that started it, under asyncio and trio.

A pytest-asyncio fixture (``async with Producer(...) as p: yield p``) runs its teardown in another task than its
set-up, and ``await asyncio.create_task(p.start())`` starts a client in a task that is gone when ``close()``
runs; aiokafka allows both. Each client owns its background tasks in a task of its own (net/tasks.py), so
neither start nor close is tied to its caller's task. Each scenario runs on librdkafka's mock, checks that the
client works after its start, and that closing left none of its tasks running.
"""

from __future__ import annotations

import asyncio
import textwrap
from typing import Any, Awaitable, Callable

import anyio
import pytest

from akresil import Admin, Consumer, Producer, ShareConsumer, TopicPartition, errors
from akresil.runner import HandlerContext, Runner
from akresil.testing.rdkafka_mock import MockCluster
from akresil.types import ConsumerRecord

from ..harness.e2e import unique_topic

pytestmark = [pytest.mark.broker, pytest.mark.kafka_too]
pytest_plugins = ["pytester"]
FAST = dict(fetch_max_wait_ms=100, request_timeout_ms=10_000, retry_backoff_ms=50)


@pytest.fixture(scope="module")
def mock() -> Any:
    with MockCluster(1) as cluster:
        cluster.share_set_auto_offset_reset(True)
        cluster.share_set_heartbeat_interval(300)
        yield cluster


def run(backend: str, scenario: Callable[[], Awaitable[None]]) -> None:
    """Run ``scenario`` on ``backend`` and check that it left none of its tasks behind."""
    async def main() -> None:
        before = {task.id for task in anyio.get_running_tasks()}
        with anyio.fail_after(60):
            await scenario()
        leftover = [task.name for task in anyio.get_running_tasks() if task.id not in before]
        assert leftover == [], f"tasks still running after close: {leftover}"

    anyio.run(main, backend=backend)


async def in_child_task(fn: Callable[[], Awaitable[Any]]) -> None:
    """Await ``fn()`` in a task of its own that ends before this returns."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(fn)


async def produce(bootstrap: str, topic: str, count: int) -> None:
    async with Producer(bootstrap_servers=bootstrap, linger_ms=0) as producer:
        await producer.send_many(topic, [(None, b"v%d" % i) for i in range(count)], partition=0)


async def read(consumer: Any, count: int) -> list[Any]:
    got: list[Any] = []
    while len(got) < count:
        for records in (await consumer.getmany(timeout_ms=100)).values():
            got.extend(records)
    return got


BACKENDS = pytest.mark.parametrize("backend", ["asyncio", "trio"])
#: start in a child task and close in the parent, or start in the parent and close in a child task
DIRECTIONS = pytest.mark.parametrize("close_in_child", [False, True], ids=["start-in-child", "close-in-child"])


async def start_then_close(start: Callable[[], Awaitable[Any]], use: Callable[[], Awaitable[Any]],
                           close: Callable[[], Awaitable[Any]], close_in_child: bool) -> None:
    if close_in_child:
        await start()
        await use()
        await in_child_task(close)
    else:
        await in_child_task(start)
        await use()
        await close()


@BACKENDS
@DIRECTIONS
def test_producer(mock: MockCluster, backend: str, close_in_child: bool) -> None:
    topic = unique_topic("any-task-p")
    mock.create_topic(topic, 1)

    async def scenario() -> None:
        producer = Producer(bootstrap_servers=mock.bootstrap_servers, linger_ms=0)

        async def use() -> None:
            assert (await producer.send(topic, b"x", partition=0)).offset >= 0

        await start_then_close(producer.start, use, producer.close, close_in_child)
        with pytest.raises(errors.ClientClosedError):
            await producer.send(topic, b"y", partition=0)

    run(backend, scenario)


@BACKENDS
@DIRECTIONS
def test_consumer_in_a_group(mock: MockCluster, backend: str, close_in_child: bool) -> None:
    topic = unique_topic("any-task-c")
    mock.create_topic(topic, 1)

    async def scenario() -> None:
        await produce(mock.bootstrap_servers, topic, 5)
        consumer: Consumer[bytes, bytes] = Consumer(topic, bootstrap_servers=mock.bootstrap_servers,
                                                    group_id=unique_topic("g"), auto_offset_reset="earliest",
                                                    **FAST)

        async def use() -> None:
            assert [r.value for r in await read(consumer, 5)] == [b"v%d" % i for i in range(5)]

        await start_then_close(consumer.start, use, consumer.close, close_in_child)

    run(backend, scenario)


@BACKENDS
@DIRECTIONS
def test_share_consumer(mock: MockCluster, backend: str, close_in_child: bool) -> None:
    topic = unique_topic("any-task-s")
    mock.create_topic(topic, 1)

    async def scenario() -> None:
        await produce(mock.bootstrap_servers, topic, 5)
        consumer = ShareConsumer(topic, bootstrap_servers=mock.bootstrap_servers, group_id=unique_topic("g"),
                                 **FAST)

        async def use() -> None:
            assert sorted(r.offset for r in await read(consumer, 5)) == list(range(5))

        await start_then_close(consumer.start, use, consumer.close, close_in_child)
        assert consumer.closed

    run(backend, scenario)


@BACKENDS
@DIRECTIONS
def test_admin(mock: MockCluster, backend: str, close_in_child: bool) -> None:
    async def scenario() -> None:
        admin = Admin(bootstrap_servers=mock.bootstrap_servers)

        async def use() -> None:
            assert await admin.describe_cluster()

        await start_then_close(admin.__aenter__, use, admin.close, close_in_child)

    run(backend, scenario)


@BACKENDS
@DIRECTIONS
def test_runner(mock: MockCluster, backend: str, close_in_child: bool) -> None:
    topic = unique_topic("any-task-r")
    mock.create_topic(topic, 1)

    async def scenario() -> None:
        await produce(mock.bootstrap_servers, topic, 5)
        seen: list[bytes | None] = []

        async def handler(record: ConsumerRecord, ctx: HandlerContext) -> None:
            seen.append(record.value)

        async with Consumer(bootstrap_servers=mock.bootstrap_servers, group_id=unique_topic("g"),
                            enable_auto_commit=False, auto_offset_reset="earliest", **FAST) as consumer:
            consumer.assign([TopicPartition(topic, 0)])
            runner = Runner(consumer, handler, commit_interval_ms=50)

            async def use() -> None:
                while len(seen) < 5:
                    await anyio.sleep(0.01)

            await start_then_close(runner.__aenter__, use, lambda: runner.__aexit__(None, None, None),
                                   close_in_child)
            assert seen == [b"v%d" % i for i in range(5)]
            assert await consumer.committed(TopicPartition(topic, 0)) == 5

    run(backend, scenario)


def test_asyncio_create_task_start_then_close(mock: MockCluster) -> None:
    """The aiokafka idiom: ``await asyncio.create_task(p.start())`` and later ``await p.close()``."""
    topic = unique_topic("any-task-ct")
    mock.create_topic(topic, 1)

    async def scenario() -> None:
        producer = Producer(bootstrap_servers=mock.bootstrap_servers, linger_ms=0)
        await asyncio.create_task(producer.start())
        await producer.send(topic, b"x", partition=0)
        await producer.close()
        consumer = ShareConsumer(topic, bootstrap_servers=mock.bootstrap_servers, group_id=unique_topic("g"),
                                 **FAST)
        await asyncio.create_task(consumer.start())
        assert len(await read(consumer, 1)) == 1
        await asyncio.create_task(consumer.close())

    run("asyncio", scenario)


def test_pytest_asyncio_fixture_that_yields_a_client(mock: MockCluster, pytester: pytest.Pytester,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The usual fixture: pytest-asyncio runs its set-up and its teardown in two different tasks."""
    pytester.makepyfile(test_inner=textwrap.dedent(f'''
        import pytest, pytest_asyncio
        from akresil import Admin, Consumer, Producer

        BOOTSTRAP = {mock.bootstrap_servers!r}

        @pytest_asyncio.fixture
        async def producer():
            async with Producer(bootstrap_servers=BOOTSTRAP, linger_ms=0) as p:
                yield p

        @pytest_asyncio.fixture
        async def consumer():
            async with Consumer(bootstrap_servers=BOOTSTRAP, fetch_max_wait_ms=100) as c:
                yield c

        @pytest_asyncio.fixture
        async def admin():
            async with Admin(bootstrap_servers=BOOTSTRAP) as a:
                yield a

        @pytest.mark.asyncio
        async def test_uses_them(producer, consumer, admin):
            await admin.describe_cluster()
            await producer.flush()
    '''))
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    result = pytester.runpytest("-p", "pytest_asyncio.plugin", "-p", "no:cacheprovider",
                                "-o", "asyncio_default_fixture_loop_scope=function", "-q")
    result.assert_outcomes(passed=1)


@BACKENDS
def test_a_background_tasks_failure_surfaces_in_the_next_call_and_in_close(mock: MockCluster, backend: str) -> None:
    """No caller's task hosts the background tasks any more, so a failure there cannot cancel the caller: the
    client's next call raises ``ClientClosedError`` from it, and ``close()`` re-raises it."""
    topic = unique_topic("any-task-crash")
    mock.create_topic(topic, 1)

    async def crash() -> None:
        raise ZeroDivisionError("bug in a background task")

    async def scenario() -> None:
        producer = Producer(bootstrap_servers=mock.bootstrap_servers, linger_ms=0)
        consumer: Consumer[bytes, bytes] = Consumer(bootstrap_servers=mock.bootstrap_servers, **FAST)
        for client in (producer, consumer):
            await client.start()
            tasks = client._runtime._tasks
            assert tasks is not None and tasks._tg is not None
            tasks._tg.start_soon(crash)
        consumer.assign([TopicPartition(topic, 0)])
        calls = (lambda: producer.send(topic, b"x", partition=0), lambda: consumer.getmany(timeout_ms=50))
        for call in calls:
            with anyio.fail_after(30):
                while True:
                    try:
                        await call()
                    except errors.ClientClosedError as exc:
                        assert isinstance(exc.__cause__, ZeroDivisionError)
                        break
        for client in (producer, consumer):
            with pytest.raises(ZeroDivisionError, match="bug in a background task"):
                await client.close()

    run(backend, scenario)
