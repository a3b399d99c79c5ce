"""The Java client (kafka-clients, the reference implementation of every KIP akresil follows) as a benchmark peer.

``BenchClient.java`` (beside this module) runs in a JVM of its own through the JDK's source launcher, on the jars
``akresil.testing.kafka_jars`` resolves, and takes one command per line on stdin: a record to send (its outcome
comes back as a line written by the producer's callback), a bulk produce, a consume.  The adapter logs each
outcome when its line arrives, so the Java client's latency includes one pipe hop (tens of µs, far below the
figures compared).  Record values are zero bytes of the scenario's size (the bench never compresses).
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any, Callable

from .clients import Done, ProducerAdapter, Settings
from .stats import OTHER, TIMEOUT

SOURCE = Path(__file__).resolve().parent / "java" / "BenchClient.java"
#: records sent untimed before a timed bulk produce, so the JVM's JIT has compiled the hot path
WARMUP_RECORDS = 20_000
#: compiling the source and starting the JVM (a loaded 2-core machine takes several seconds)
START_TIMEOUT_S = 90.0


class JavaDeliveryError(Exception):
    """A record the Java producer reported failed (``kind``: ``timeout`` or ``other``)."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"the Java producer failed the record ({kind})")
        self.kind = kind


def java_settings(settings: Settings) -> list[str]:
    """The Java producer's ``key=value`` configs for the scenario's ``Settings`` (everything else: its defaults)."""
    out = [f"linger.ms={settings.linger_ms}"]
    if settings.request_timeout_ms is not None:
        out.append(f"request.timeout.ms={settings.request_timeout_ms}")
    if settings.delivery_timeout_ms is not None:
        out.append(f"delivery.timeout.ms={settings.delivery_timeout_ms}")
    if settings.acks is not None:
        out.append(f"acks={settings.acks}")
    return out


class JavaProducer(ProducerAdapter):
    name = "java"

    def __init__(self, bootstrap: str, client_id: str, settings: Settings) -> None:
        super().__init__(bootstrap, client_id, settings)
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._ids = itertools.count()
        self._pending: dict[int, Callable[[int | None, str | None], None]] = {}
        self._replies: asyncio.Queue[str] = asyncio.Queue()

    async def start(self) -> None:
        from ..testing.kafka_jars import java_command, resolve_kafka_jars
        java = java_command()
        libs = await asyncio.to_thread(resolve_kafka_jars)
        self._proc = await asyncio.create_subprocess_exec(
            java, "-XX:+UseSerialGC", "-cp", str(libs / "*"), str(SOURCE), self.bootstrap, self.client_id,
            *java_settings(self.settings), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL)
        self._reader = asyncio.create_task(self._read())
        ready = await asyncio.wait_for(self._replies.get(), START_TIMEOUT_S)
        if ready != "R":
            raise RuntimeError(f"the Java bench client did not start: {ready}")

    async def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        while True:
            line = (await self._proc.stdout.readline()).decode()
            if not line:
                await self._replies.put("X the Java bench client exited")
                for cb in self._pending.values():
                    cb(None, OTHER)
                self._pending.clear()
                return
            kind, _, rest = line.rstrip("\n").partition(" ")
            if kind == "A":
                idx, partition = rest.split(" ")
                self._pending.pop(int(idx))(int(partition), None)
            elif kind == "E":
                idx, error = rest.split(" ")
                self._pending.pop(int(idx))(None, TIMEOUT if error == "timeout" else OTHER)
            else:
                await self._replies.put(line.rstrip("\n"))

    def _write(self, line: str) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(line.encode())

    async def _command(self, line: str, timeout_s: float) -> str:
        self._write(line)
        assert self._proc is not None and self._proc.stdin is not None
        await self._proc.stdin.drain()
        reply = await asyncio.wait_for(self._replies.get(), timeout_s)
        if not reply.startswith("D "):
            raise RuntimeError(f"the Java bench client: {reply}")
        return reply[2:]

    async def send(self, topic: str, value: bytes, partition: int) -> int:
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def outcome(acked: int | None, kind: str | None) -> None:
            if fut.done():
                return
            if kind is None:
                assert acked is not None
                fut.set_result(acked)
            else:
                fut.set_exception(JavaDeliveryError(kind))
        idx = next(self._ids)
        self._pending[idx] = outcome
        self._write(f"S {idx} {topic} {partition} {len(value)}\n")
        return await fut

    async def enqueue(self, topic: str, value: bytes, partition: int, done: Done) -> None:
        idx = next(self._ids)
        self._pending[idx] = done
        self._write(f"S {idx} {topic} {partition} {len(value)}\n")

    def error_kind(self, exc: BaseException) -> str:
        return exc.kind if isinstance(exc, JavaDeliveryError) else OTHER

    async def prepare(self, topic: str, value: bytes) -> None:
        """JIT warm-up in this JVM: a fresh JVM is timed otherwise, and its first seconds run interpreted (the
        records go to a side topic the broker creates, ``<topic>-warmup``)."""
        await self._command(f"B {topic}-warmup {WARMUP_RECORDS} {len(value)}\n", 180.0)

    async def produce_bulk(self, topic: str, value: bytes, count: int) -> None:
        await self._command(f"B {topic} {count} {len(value)}\n", 180.0)

    async def consume(self, topic: str, partitions: int, expected: int, timeout_s: float) -> tuple[int, float]:
        """(records read, seconds from creating the KafkaConsumer to the last one: the JVM's start is not
        counted, as no Python client's interpreter start is)."""
        got, seconds = (await self._command(f"C {topic} {partitions} {expected} {int(timeout_s * 1000)}\n",
                                            timeout_s + 30.0)).split(" ")
        return int(got), float(seconds)

    async def close(self) -> None:
        proc = self._proc
        if proc is None:
            return
        self._proc = None
        try:
            if proc.returncode is None and proc.stdin is not None:
                proc.stdin.write(b"Q\n")
                await proc.stdin.drain()
                proc.stdin.close()
            await asyncio.wait_for(proc.wait(), 15.0)
        except (asyncio.TimeoutError, ConnectionError, OSError):
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)


async def consume_java(bootstrap: str, client_id: str, topic: str, partitions: int, expected: int,
                       timeout_s: float) -> tuple[int, float]:
    """``consume_all`` for the Java client: its KafkaConsumer reads the topic from the beginning; returns the
    count and the seconds the Java side measured."""
    client = JavaProducer(bootstrap, client_id, Settings())
    await client.start()
    try:
        return await client.consume(topic, partitions, expected, timeout_s)
    finally:
        await client.close()


__all__: list[Any] = ["JavaDeliveryError", "JavaProducer", "consume_java", "java_settings"]
