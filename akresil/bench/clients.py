"""One adapter per client (akresil, aiokafka, confluent-kafka) behind one small interface.

Each adapter runs its client with that client's own defaults plus only what the workload fixes for everyone:
``linger_ms`` and, where a scenario needs it, a delivery timeout (``Settings``).  Failure scenarios hand
records over one at a time, each to an explicit partition (round robin), so every client carries the same load
per partition and per node whatever its partitioner does with unkeyed records.  Each adapter offers the two
idioms services write (``LOADS``): a task per record awaiting the client's send-and-wait (``send``), and
hand-over plus the client's own delivery callback (``enqueue``); the runner logs each record's outcome.
``steady`` uses each client's fastest documented bulk path instead.  confluent-kafka serves its callbacks from
a poll thread, as its docs advise.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, ClassVar, Optional

from .stats import OTHER, TIMEOUT

CLIENT_NAMES = ("akresil", "aiokafka", "confluent", "java")
#: the clients a run compares when ``--clients`` is not given: the Java client needs a JVM, so it joins by default
#: only on Apache Kafka (``--harness apache``), where it is the reference
DEFAULT_CLIENTS = ("akresil", "aiokafka", "confluent")
#: librdkafka's log lines (connection refused during a bounce, ...) go here instead of stderr
LIBRDKAFKA_LOG = logging.getLogger("akresil.bench.librdkafka")
#: how long a confluent-kafka poll call blocks waiting for callbacks (bounds callback latency only when idle)
POLL_S = 0.02


def now_s() -> float:
    """The benchmark clock: ``time.monotonic()``, the clock the fault proxy records on."""
    return time.monotonic()


@dataclass(frozen=True)
class Settings:
    """What the scenario fixes for every client; everything else stays at each client's default."""

    linger_ms: int = 5
    #: bound from hand-over to success or failure (None: each client's default)
    delivery_timeout_ms: int | None = None
    #: per-request timeout (None: each client's default)
    request_timeout_ms: int | None = None
    #: acknowledgements asked of the broker (None: each client's default; aiokafka's is 1, the others' "all")
    acks: str | None = None


#: the load idioms of the failure scenarios (``--load``): ``tasks``, one task per record awaiting the client's
#: send-and-wait; ``callbacks``, hand the record over and learn its outcome from the client's delivery callback
LOADS = ("tasks", "callbacks")
DEFAULT_LOAD = "tasks"
#: ``done(partition, None)`` on success, ``done(None, error kind)`` on failure (``TIMEOUT`` or ``OTHER``)
Done = Callable[[Optional[int], Optional[str]], None]


def check_load(load: str) -> str:
    if load not in LOADS:
        raise ValueError(f"load: unknown {load!r} (known: {', '.join(LOADS)})")
    return load


class ProducerAdapter(ABC):
    """A producer of one client library driven by the benchmark, in each client's own idioms."""

    name: ClassVar[str]

    def __init__(self, bootstrap: str, client_id: str, settings: Settings) -> None:
        self.bootstrap = bootstrap
        self.client_id = client_id
        self.settings = settings

    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def send(self, topic: str, value: bytes, partition: int) -> int:
        """``tasks``: hand one record for ``partition`` over and wait for its delivery the way the client's docs
        show; returns the acknowledged partition, raises the client's error (see ``error_kind``)."""

    def send_awaitable(self, topic: str, value: bytes, partition: int) -> Awaitable[Any]:
        """What a ``tasks`` record's task awaits: the client's own call where its result names the partition
        (``acked_partition`` reads it), so no coroutine of the benchmark's sits between the task and the
        client's: every object a pending record keeps is walked by each of Python's full collections, and the
        application's task would await the client directly.  Default: ``send``."""
        return self.send(topic, value, partition)

    def acked_partition(self, result: Any) -> int:
        """The acknowledged partition from what ``send_awaitable``'s awaitable returned."""
        return int(result)

    @abstractmethod
    async def enqueue(self, topic: str, value: bytes, partition: int, done: Done) -> None:
        """``callbacks``: hand one record for ``partition`` over (waiting only as the client itself blocks); its
        outcome reaches ``done`` through the client's own delivery callback (from the client's thread, for
        confluent-kafka)."""

    @abstractmethod
    def error_kind(self, exc: BaseException) -> str:
        """``TIMEOUT`` or ``OTHER`` for an error ``send`` raised."""

    @abstractmethod
    async def produce_bulk(self, topic: str, value: bytes, count: int) -> None:
        """Produce ``count`` records by the client's fastest documented path and wait until all are acked."""

    async def prepare(self, topic: str, value: bytes) -> None:
        """Untimed work before a timed bulk produce: nothing for the Python clients (the bench's warm-up phase
        warms the interpreter); the Java client warms its JIT in the JVM that will be timed."""

    @abstractmethod
    async def close(self) -> None: ...


def settings_for(client: str, settings: Settings) -> dict[str, Any]:
    """The client's own configuration for the scenario's ``Settings`` (pure, so tests can check the mapping)."""
    if client == "akresil":
        out: dict[str, Any] = {"linger_ms": settings.linger_ms}
        if settings.delivery_timeout_ms is not None:
            out["delivery_timeout_ms"] = settings.delivery_timeout_ms
        if settings.request_timeout_ms is not None:
            out["request_timeout_ms"] = settings.request_timeout_ms
        if settings.acks is not None:
            out["acks"] = settings.acks
        return out
    if client == "aiokafka":
        # aiokafka has no delivery timeout: a batch expires request_timeout_ms after it was created, so that
        # knob is its delivery timeout
        out = {"linger_ms": settings.linger_ms}
        timeout = settings.delivery_timeout_ms or settings.request_timeout_ms
        if timeout is not None:
            out["request_timeout_ms"] = timeout
        if settings.acks is not None:
            out["acks"] = settings.acks if settings.acks == "all" else int(settings.acks)
        return out
    if client == "java":
        from .java_client import java_settings
        return dict(item.split("=", 1) for item in java_settings(settings))
    if client == "confluent":
        out = {"linger.ms": settings.linger_ms}
        if settings.delivery_timeout_ms is not None:
            out["message.timeout.ms"] = settings.delivery_timeout_ms
        if settings.request_timeout_ms is not None:
            out["request.timeout.ms"] = settings.request_timeout_ms
        if settings.acks is not None:
            out["acks"] = settings.acks
        return out
    raise ValueError(f"client: unknown {client!r} (known: {', '.join(CLIENT_NAMES)})")


# ---------------------------------------------------------------------------------------------- akresil
class AkresilProducer(ProducerAdapter):
    name = "akresil"

    def __init__(self, bootstrap: str, client_id: str, settings: Settings) -> None:
        super().__init__(bootstrap, client_id, settings)
        from .. import Producer
        self._producer = Producer(bootstrap_servers=bootstrap, client_id=client_id,
                                  **settings_for("akresil", settings))

    async def start(self) -> None:
        await self._producer.start()

    async def send(self, topic: str, value: bytes, partition: int) -> int:
        md = await self._producer.send(topic, value, partition=partition)
        return md.partition

    def send_awaitable(self, topic: str, value: bytes, partition: int) -> Awaitable[Any]:
        return self._producer.send(topic, value, partition=partition)

    def acked_partition(self, result: Any) -> int:
        return int(result.partition)

    async def enqueue(self, topic: str, value: bytes, partition: int, done: Done) -> None:
        from .. import errors

        def on_delivery(md: Any, err: BaseException | None) -> None:
            if err is None:
                done(md.partition, None)
            else:
                done(None, _akresil_kind(err))
        try:
            await self._producer.enqueue(topic, value, partition=partition, on_delivery=on_delivery)
        except errors.KafkaError as exc:
            done(None, _akresil_kind(exc))

    def error_kind(self, exc: BaseException) -> str:
        return _akresil_kind(exc)

    async def produce_bulk(self, topic: str, value: bytes, count: int) -> None:
        # send_many_counted, not send_many: confluent-kafka's path builds no per-record report either, and a
        # RecordMetadata per record costs ~0.6 us of a 1 KiB record's ~1.7 (mock, CPU per record)
        chunk = 10_000
        for start in range(0, count, chunk):
            counts = await self._producer.send_many_counted(topic, [(None, value)] * min(chunk, count - start))
            if counts.first_error is not None:
                raise counts.first_error

    async def close(self) -> None:
        await self._producer.close(timeout=1.0)


def _akresil_kind(exc: BaseException) -> str:
    from .. import errors
    timeouts = (errors.DeliveryTimeoutError, errors.RequestTimeoutError, errors.KafkaTimeoutError,
                errors.RequestTimedOutError)
    return TIMEOUT if isinstance(exc, timeouts) else OTHER


# ---------------------------------------------------------------------------------------------- aiokafka
class AiokafkaProducer(ProducerAdapter):
    name = "aiokafka"

    def __init__(self, bootstrap: str, client_id: str, settings: Settings) -> None:
        super().__init__(bootstrap, client_id, settings)
        from aiokafka import AIOKafkaProducer
        self._producer = AIOKafkaProducer(bootstrap_servers=bootstrap, client_id=client_id,
                                          **settings_for("aiokafka", settings))

    async def start(self) -> None:
        await self._producer.start()

    async def send(self, topic: str, value: bytes, partition: int) -> int:
        md = await self._producer.send_and_wait(topic, value, partition=partition)
        return int(md.partition)

    def send_awaitable(self, topic: str, value: bytes, partition: int) -> Awaitable[Any]:
        return self._producer.send_and_wait(topic, value, partition=partition)  # type: ignore[no-any-return]

    def acked_partition(self, result: Any) -> int:
        return int(result.partition)

    async def enqueue(self, topic: str, value: bytes, partition: int, done: Done) -> None:
        from aiokafka.errors import KafkaError
        try:
            fut = await self._producer.send(topic, value, partition=partition)
        except KafkaError as exc:
            done(None, _aiokafka_kind(exc))
            return
        fut.add_done_callback(functools.partial(_aiokafka_done, done))

    def error_kind(self, exc: BaseException) -> str:
        return _aiokafka_kind(exc)

    async def produce_bulk(self, topic: str, value: bytes, count: int) -> None:
        futs = [await self._producer.send(topic, value) for _ in range(count)]
        await asyncio.gather(*futs)

    async def close(self) -> None:
        try:
            await asyncio.wait_for(self._producer.stop(), timeout=10)
        except asyncio.TimeoutError:
            pass


def _aiokafka_done(done: Done, fut: asyncio.Future[Any]) -> None:
    if fut.cancelled():
        done(None, OTHER)
    elif fut.exception() is not None:
        done(None, _aiokafka_kind(fut.exception()))
    else:
        done(fut.result().partition, None)


def _aiokafka_kind(exc: BaseException | None) -> str:
    from aiokafka.errors import KafkaTimeoutError, RequestTimedOutError
    return TIMEOUT if isinstance(exc, (KafkaTimeoutError, RequestTimedOutError)) else OTHER


# ---------------------------------------------------------------------------------------------- confluent
class ConfluentDeliveryError(Exception):
    """A failed delivery reported by confluent-kafka's callback, raised into the task awaiting the record."""

    def __init__(self, err: Any) -> None:
        super().__init__(str(err))
        self.err = err


class ConfluentProducer(ProducerAdapter):
    """confluent-kafka from asyncio as its docs show: a poll thread serves delivery callbacks, which (``tasks``)
    resolve a loop future through ``call_soon_threadsafe``."""

    name = "confluent"

    def __init__(self, bootstrap: str, client_id: str, settings: Settings) -> None:
        super().__init__(bootstrap, client_id, settings)
        import confluent_kafka
        self._producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "client.id": client_id,
                                                   "logger": LIBRDKAFKA_LOG,
                                                   **settings_for("confluent", settings)})
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll_loop, name=f"bench-poll-{client_id}", daemon=True)

    def _poll_loop(self) -> None:
        while not self._stop.is_set():
            self._producer.poll(POLL_S)

    async def start(self) -> None:
        self._poller.start()

    async def _produce(self, topic: str, value: bytes, partition: int, callback: Callable[[Any, Any], None]
                       ) -> None:
        while True:
            try:
                self._producer.produce(topic, value, partition=partition, on_delivery=callback)
                return
            except BufferError:     # its queue is full: wait as a blocking producer would
                await asyncio.sleep(0.005)

    async def send(self, topic: str, value: bytes, partition: int) -> int:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[int] = loop.create_future()

        def on_delivery(err: Any, msg: Any) -> None:      # the poll thread
            if err is None:
                loop.call_soon_threadsafe(_set_result, fut, msg.partition())
            else:
                loop.call_soon_threadsafe(_set_exception, fut, ConfluentDeliveryError(err))
        await self._produce(topic, value, partition, on_delivery)
        return await fut

    async def enqueue(self, topic: str, value: bytes, partition: int, done: Done) -> None:
        def on_delivery(err: Any, msg: Any) -> None:      # the poll thread: the log's slots are thread-safe
            if err is None:
                done(msg.partition(), None)
            else:
                done(None, _confluent_kind(err))
        await self._produce(topic, value, partition, on_delivery)

    def error_kind(self, exc: BaseException) -> str:
        return _confluent_kind(exc.err) if isinstance(exc, ConfluentDeliveryError) else OTHER

    async def produce_bulk(self, topic: str, value: bytes, count: int) -> None:
        producer = self._producer

        def run() -> None:
            for _ in range(count):
                while True:
                    try:
                        producer.produce(topic, value)
                        break
                    except BufferError:
                        time.sleep(0.001)
            if producer.flush(60):
                raise RuntimeError("confluent-kafka left records undelivered after 60 s")
        await asyncio.to_thread(run)

    async def close(self) -> None:
        self._stop.set()
        if self._poller.is_alive():
            await asyncio.to_thread(self._poller.join)
        self._producer.purge()
        await asyncio.to_thread(self._producer.flush, 1.0)


def _set_result(fut: asyncio.Future[Any], value: Any) -> None:
    if not fut.done():
        fut.set_result(value)


def _set_exception(fut: asyncio.Future[Any], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)


def _confluent_kind(err: Any) -> str:
    from confluent_kafka import KafkaError
    return TIMEOUT if err.code() in (KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT,
                                     KafkaError.REQUEST_TIMED_OUT) else OTHER


PRODUCERS: dict[str, type[ProducerAdapter]] = {
    "akresil": AkresilProducer, "aiokafka": AiokafkaProducer, "confluent": ConfluentProducer}


def make_producer(client: str, bootstrap: str, client_id: str, settings: Settings) -> ProducerAdapter:
    if client == "java":
        from .java_client import JavaProducer
        return JavaProducer(bootstrap, client_id, settings)
    try:
        cls = PRODUCERS[client]
    except KeyError:
        raise ValueError(f"client: unknown {client!r} (known: {', '.join(CLIENT_NAMES)})") from None
    return cls(bootstrap, client_id, settings)


# ---------------------------------------------------------------------------------------------- consumers
async def consume_timed(client: str, bootstrap: str, client_id: str, topic: str, partitions: int, expected: int,
                        timeout_s: float) -> tuple[int, float]:
    """``consume_all`` and the seconds it took; the Java client times itself, so its JVM start is left out."""
    if client == "java":
        from .java_client import consume_java
        return await consume_java(bootstrap, client_id, topic, partitions, expected, timeout_s)
    t0 = time.perf_counter()
    got = await consume_all(client, bootstrap, client_id, topic, partitions, expected, timeout_s)
    return got, time.perf_counter() - t0


async def consume_all(client: str, bootstrap: str, client_id: str, topic: str, partitions: int, expected: int,
                      timeout_s: float) -> int:
    """Read ``topic`` from the beginning with manual assignment until ``expected`` records arrived (or the
    timeout); returns how many were read."""
    if client == "akresil":
        return await _consume_akresil(bootstrap, client_id, topic, partitions, expected, timeout_s)
    if client == "aiokafka":
        return await _consume_aiokafka(bootstrap, client_id, topic, partitions, expected, timeout_s)
    if client == "confluent":
        return await asyncio.to_thread(_consume_confluent, bootstrap, client_id, topic, partitions, expected,
                                       timeout_s)
    if client == "java":
        from .java_client import consume_java
        return (await consume_java(bootstrap, client_id, topic, partitions, expected, timeout_s))[0]
    raise ValueError(f"client: unknown {client!r} (known: {', '.join(CLIENT_NAMES)})")


async def _consume_akresil(bootstrap: str, client_id: str, topic: str, partitions: int, expected: int,
                           timeout_s: float) -> int:
    from .. import Consumer, TopicPartition
    got = 0
    deadline = now_s() + timeout_s
    consumer = Consumer(bootstrap_servers=bootstrap, client_id=client_id, group_id=None,
                        enable_auto_commit=False, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    async with consumer:
        while got < expected and now_s() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            got += sum(len(v) for v in batches.values())
    return got


async def _consume_aiokafka(bootstrap: str, client_id: str, topic: str, partitions: int, expected: int,
                            timeout_s: float) -> int:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition
    got = 0
    deadline = now_s() + timeout_s
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, client_id=client_id, enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        while got < expected and now_s() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            got += sum(len(v) for v in batches.values())
    finally:
        await consumer.stop()
    return got


def _consume_confluent(bootstrap: str, client_id: str, topic: str, partitions: int, expected: int,
                       timeout_s: float) -> int:
    import confluent_kafka
    got = 0
    deadline = now_s() + timeout_s
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "client.id": client_id,
                                         "logger": LIBRDKAFKA_LOG,
                                         "group.id": f"{client_id}-group", "enable.auto.commit": False,
                                         "auto.offset.reset": "earliest"})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in range(partitions)])
        while got < expected and now_s() < deadline:
            for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                if msg.error() is None:
                    got += 1
    finally:
        consumer.close()
    return got
