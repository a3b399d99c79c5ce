"""The ``akresil`` command: an embedded broker, topic admin, stdin/stdout produce and consume, and the demo;
the operator commands (groups, configs, topics add-partitions, partitions, quotas, cluster) live in ``cli_admin``.

Exit codes: 0 success, 1 a runtime failure (broker unreachable, delivery failed, demo check failed),
2 bad input (unknown option, malformed JSON line, invalid config value or topic name), 130 interrupted.

JSON lines (``produce --json`` input, ``consume`` output) use one shape both ways, so ``consume | produce
--json`` copies records: ``{"key": str|null, "value": str|null, "headers": [[name, str|null], ...],
"partition": int}``; bytes that are not UTF-8 appear as ``{"base64": "..."}``, and a JSON object or array given
as a value is stored as its compact JSON text and comes back from ``consume`` as that object or array.  ``consume`` adds topic, offset
and timestamp_ms, which ``produce`` ignores.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import os
import signal
import sys
import time
from typing import Any, Awaitable, Callable, Sequence

import anyio
import orjson

from . import __version__, errors
from .cli_admin import AdminUsageError

BOOTSTRAP_ENV = "AKRESIL_BOOTSTRAP_SERVERS"
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
#: stdin is read in chunks of about this many bytes (one thread hop per chunk, not per line)
READ_CHUNK = 1 << 16
#: produce awaits its pending deliveries every this many records, bounding memory on endless input
AWAIT_EVERY = 10_000


class UsageError(Exception):
    """Bad input from the user: reported as ``akresil: error: ...`` with exit code 2."""


# ---------------------------------------------------------------------------------------------- encoding
def encode_bytes(data: bytes | None) -> Any:
    """Bytes for a JSON line: a JSON object or array when they are one in compact form (what ``produce --json``
    stores for such a value), else text when UTF-8, else ``{"base64": ...}``; each round-trips through produce
    to the same bytes."""
    if data is None:
        return None
    if data[:1] in (b"{", b"["):
        try:
            value = orjson.loads(data)
        except orjson.JSONDecodeError:
            value = None
        # only the compact form (re-encoding gives these very bytes), and never a {"base64": ...} look-alike
        if (isinstance(value, (dict, list)) and orjson.dumps(value) == data
                and not (isinstance(value, dict) and set(value) == {"base64"})):
            return value
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def decode_bytes(value: Any, what: str) -> bytes | None:
    """The inverse of ``encode_bytes``; other JSON values (numbers, objects) become their JSON text."""
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, dict) and set(value) == {"base64"}:
        try:
            return base64.b64decode(value["base64"], validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise UsageError(f"{what}: 'base64' is not valid base64") from None
    return orjson.dumps(value)


def parse_headers(value: Any, where: str) -> list[tuple[str, bytes | None]]:
    """``[[name, value], ...]`` (order and repeats kept) or ``{name: value}``."""
    if value is None:
        return []
    if isinstance(value, dict):
        pairs = list(value.items())
    elif isinstance(value, list):
        pairs = []
        for i, item in enumerate(value):
            if not isinstance(item, list) or len(item) != 2:
                raise UsageError(f"{where}: headers[{i}] must be a [name, value] pair, got {item!r}")
            pairs.append((item[0], item[1]))
    else:
        raise UsageError(f"{where}: headers must be a list of [name, value] pairs or an object, "
                         f"got {type(value).__name__}")
    out: list[tuple[str, bytes | None]] = []
    for name, hv in pairs:
        if not isinstance(name, str):
            raise UsageError(f"{where}: header name must be a string, got {name!r}")
        out.append((name, decode_bytes(hv, f"{where}: header {name!r}")))
    return out


class ProduceLine:
    """One record parsed from an input line."""

    __slots__ = ("key", "value", "headers", "partition")

    def __init__(self, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]],
                 partition: int | None) -> None:
        self.key, self.value, self.headers, self.partition = key, value, headers, partition


def parse_json_line(line: bytes, lineno: int) -> ProduceLine:
    where = f"stdin line {lineno}"
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise UsageError(f"{where}: expected a JSON object with key/value/headers/partition, "
                         f"got {type(obj).__name__}")
    unknown = set(obj) - {"key", "value", "headers", "partition", "topic", "offset", "timestamp_ms"}
    if unknown:
        raise UsageError(f"{where}: unknown field(s) {', '.join(sorted(unknown))} "
                         f"(allowed: key, value, headers, partition)")
    partition = obj.get("partition")
    if partition is not None and (isinstance(partition, bool) or not isinstance(partition, int) or partition < 0):
        raise UsageError(f"{where}: partition must be a non-negative integer, got {partition!r}")
    return ProduceLine(decode_bytes(obj.get("key"), f"{where}: key"), decode_bytes(obj.get("value"),
                       f"{where}: value"), parse_headers(obj.get("headers"), where), partition)


def record_json(rec: Any) -> bytes:
    return orjson.dumps({
        "topic": rec.topic, "partition": rec.partition, "offset": rec.offset, "timestamp_ms": rec.timestamp_ms,
        "key": encode_bytes(rec.key), "value": encode_bytes(rec.value),
        "headers": [[name, encode_bytes(hv)] for name, hv in rec.headers or ()],
    }) + b"\n"


def parse_properties(items: Sequence[str]) -> dict[str, Any]:
    """``-X key=value`` client settings; values that look like ints/bools become them."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise UsageError(f"-X {item!r}: expected key=value (for example -X linger_ms=10)")
        value: Any = raw
        if raw.lower() in ("true", "false"):
            value = raw.lower() == "true"
        else:
            try:
                value = int(raw)
            except ValueError:
                pass
        out[key.replace(".", "_").replace("-", "_")] = value
    return out


# ---------------------------------------------------------------------------------------------- commands
def _client_config(args: argparse.Namespace) -> dict[str, Any]:
    config = parse_properties(args.property or ())
    config["bootstrap_servers"] = args.bootstrap_servers
    return config


def cmd_broker(args: argparse.Namespace) -> int:
    from .testing import BrokerStartError, EmbeddedBroker
    broker = EmbeddedBroker(kind=args.kind, port=args.port)
    if args.kind in ("auto", "kafka"):
        _say_what_kafka_needs(broker.kafka_version)
    try:
        broker.start()
    except BrokerStartError as exc:     # no Java, jars that cannot be fetched, a port in use: the fix is named
        print(f"akresil: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    stop = {"now": False}

    def on_signal(signum: int, frame: Any) -> None:
        stop["now"] = True

    # both handled explicitly: a shell starting us in the background sets SIGINT to "ignore"; installed
    # before the address is printed, so a caller that stops us as soon as it reads it gets a clean stop
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    what = f"Apache Kafka {broker.kafka_version}" if broker.kind == "kafka" else broker.kind
    print(f"{what} broker listening on {broker.bootstrap_servers} (pid {broker.pid}); Ctrl-C stops it",
          file=sys.stderr, flush=True)
    print(broker.bootstrap_servers, flush=True)
    try:
        while not stop["now"]:
            if not broker.running:
                print(f"akresil: broker exited unexpectedly\n{broker.log_tail()}", file=sys.stderr)
                return EXIT_FAILURE
            time.sleep(0.2)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        broker.stop()
        print("broker stopped", file=sys.stderr)
    return EXIT_OK


def _say_what_kafka_needs(version: str | None, *, starting: bool = True) -> None:
    """Before a start that may take a while: a first run fetches Kafka's jars, and a JVM takes seconds."""
    from .testing.broker import kafka_unavailable_reason
    from .testing.kafka_jars import kafka_cache_dir, kafka_jars_cached
    if kafka_unavailable_reason(version) is not None:
        return      # "auto" warns and runs Tansu; "kafka" raises with the reason
    if not kafka_jars_cached(version):
        print(f"fetching Apache Kafka {version}'s jars (about 55 MB, once) into {kafka_cache_dir()} ...",
              file=sys.stderr, flush=True)
    if starting:
        print(f"starting Apache Kafka {version} (a JVM: a few seconds) ...", file=sys.stderr, flush=True)


async def cmd_topics(args: argparse.Namespace) -> int:
    from .admin import Admin
    from .types import NewTopic
    if args.topics_command == "add-partitions":
        from .cli_admin import cmd_add_partitions
        return await cmd_add_partitions(args, _client_config(args))
    async with Admin(**_client_config(args)) as admin:
        if args.topics_command == "create":
            configs = dict(_split_kv(c, "--config") for c in args.config or ())
            await admin.create_topics([NewTopic(n, args.partitions, args.replication_factor, configs or None)
                                       for n in args.names], ignore_existing=args.if_not_exists)
            for name in args.names:
                print(f"created {name}", file=sys.stderr)
        elif args.topics_command == "list":
            for name in await admin.list_topics():
                print(name)
        elif args.topics_command == "describe":
            for name, desc in (await admin.describe_topics(args.names)).items():
                print(orjson.dumps({"name": name, "topic_id": desc.topic_id.hex(), "partitions": [
                    {"partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
                     "replicas": list(p.replicas), "isr": list(p.isr)} for p in desc.partitions]}).decode())
        elif args.topics_command == "delete":
            await admin.delete_topics(args.names)
            for name in args.names:
                print(f"deleted {name}", file=sys.stderr)
    return EXIT_OK


def _split_kv(item: str, option: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise UsageError(f"{option} {item!r}: expected name=value")
    return key, value


async def cmd_produce(args: argparse.Namespace) -> int:
    from .checks import check_topic_name as _check_topic_name
    from .producer import Producer
    _check_topic_name(args.topic)
    key = args.key.encode() if args.key is not None else None
    headers = [(k, v.encode()) for k, v in (_split_kv(h, "--header") for h in args.header or ())]
    stdin = sys.stdin.buffer
    sent = 0
    async with Producer(**_client_config(args)) as producer:
        pending: list[Any] = []
        lineno = 0
        try:
            while True:
                lines = await anyio.to_thread.run_sync(stdin.readlines, READ_CHUNK)
                if not lines:
                    break
                for raw in lines:
                    lineno += 1
                    line = raw.rstrip(b"\r\n")
                    try:
                        if args.json:
                            if not line.strip():
                                continue
                            rec = parse_json_line(line, lineno)
                            rec_key = rec.key if rec.key is not None else key
                            fut = await producer.enqueue(args.topic, rec.value, rec_key, partition=rec.partition,
                                                         headers=headers + rec.headers)
                        else:
                            fut = await producer.enqueue(args.topic, line, key, partition=args.partition,
                                                         headers=headers)
                    except (ValueError, TypeError, errors.RecordTooLargeError) as exc:
                        # the producer refused the record (a partition the topic lacks, a record too large)
                        raise UsageError(f"stdin line {lineno}: {exc}") from None
                    pending.append(fut)
                if len(pending) >= AWAIT_EVERY:
                    sent += await _await_all(pending)
                    pending = []
        except UsageError as exc:
            # the records of the lines before the bad one are on their way: deliver them and say so, so the
            # user knows what a re-run from the top would duplicate
            sent += await _await_all(pending)
            raise UsageError(f"{exc}; stopped there: the {sent} record(s) before it were produced to "
                             f"{args.topic}, the rest of stdin was not") from None
        sent += await _await_all(pending)
    print(f"produced {sent} record(s) to {args.topic}", file=sys.stderr)
    return EXIT_OK


async def _await_all(futures: list[Any]) -> int:
    for fut in futures:
        await fut          # raises the first delivery failure
    return len(futures)


async def cmd_consume(args: argparse.Namespace) -> int:
    from .admin import Admin
    from .consumer import Consumer
    from .checks import check_topic_name as _check_topic_name
    from .types import TopicPartition
    _check_topic_name(args.topic)
    config = _client_config(args)
    config["auto_offset_reset"] = "earliest" if args.from_beginning else "latest"
    out = sys.stdout.buffer
    count = 0
    limit = args.max_messages
    # --timeout-ms counts idle time from when the consumer has its partitions: a group's join may take
    # seconds (a rebalance delay) and is not idleness
    idle_since: float | None = None
    if args.group:
        class _Assigned:
            async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
                nonlocal idle_since
                idle_since = time.monotonic()     # every completed rebalance, also with no partitions

            async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
                pass

            async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
                pass

        consumer = Consumer(args.topic, group_id=args.group, listener=_Assigned(), **config)
    else:
        idle_since = time.monotonic()
        async with Admin(bootstrap_servers=config["bootstrap_servers"]) as admin:
            desc = (await admin.describe_topics([args.topic]))[args.topic]
        consumer = Consumer(group_id=None, enable_auto_commit=False, **config)
        consumer.assign([TopicPartition(args.topic, p.partition) for p in desc.partitions])
    async with consumer:
        while limit is None or count < limit:
            batches = await consumer.getmany(timeout_ms=200, max_records=None if limit is None else limit - count)
            got = False
            for records in batches.values():
                for rec in records:
                    if limit is not None and count >= limit:
                        break
                    out.write(record_json(rec))
                    count += 1
                    got = True
            if got:
                out.flush()
                idle_since = time.monotonic()
            elif (args.timeout_ms is not None and idle_since is not None
                  and (time.monotonic() - idle_since) * 1000 >= args.timeout_ms):
                break
    print(f"consumed {count} record(s) from {args.topic}", file=sys.stderr)
    return EXIT_OK


async def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo
    from .testing import BrokerStartError, EmbeddedBroker
    if args.kind in ("auto", "kafka"):
        _say_what_kafka_needs(EmbeddedBroker(kind=args.kind).kafka_version, starting=False)
    try:
        ok = await run_demo(duration_s=args.duration, partitions=args.partitions, metrics_port=args.metrics_port,
                            kind=args.kind, rate=args.rate, group=args.group, out=sys.stderr)
    except BrokerStartError as exc:
        print(f"akresil: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK if ok else EXIT_FAILURE


# ---------------------------------------------------------------------------------------------- parsing
def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def _port(text: str) -> int:
    value = _non_negative_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"expected a port in 0..65535, got {value}")
    return value


def _duration(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not 1.0 <= value <= 3600.0:
        raise argparse.ArgumentTypeError(f"expected between 1 and 3600 seconds, got {value:g}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="akresil", description="akresil: a resilient asyncio Kafka client.")
    parser.add_argument("--version", action="version", version=f"akresil {__version__}")
    client = argparse.ArgumentParser(add_help=False)
    client.add_argument("-b", "--bootstrap-servers", default=os.environ.get(BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP),
                        help=f"host:port[,host:port] (default: ${BOOTSTRAP_ENV} or {DEFAULT_BOOTSTRAP})")
    client.add_argument("-X", "--property", action="append", metavar="KEY=VALUE",
                        help="client setting, e.g. -X linger_ms=10 (repeatable)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("broker", help="run an embedded broker in the foreground until Ctrl-C")
    p.add_argument("--port", type=_port, default=None, help="listen port (default: a free one)")
    p.add_argument("--kind", choices=("auto", "kafka", "tansu", "noida"), default="auto",
                   help="auto (default): Apache Kafka where Java 17+ is, else Tansu with a warning; kafka: Apache "
                        "Kafka or an error naming what is missing; tansu: the quick imitation; noida: noida-db")

    topics = sub.add_parser("topics", help="create, list, describe or delete topics")
    tsub = topics.add_subparsers(dest="topics_command", metavar="ACTION", required=True)
    t = tsub.add_parser("create", parents=[client], help="create topics")
    t.add_argument("names", nargs="+", metavar="TOPIC")
    t.add_argument("-p", "--partitions", type=_positive_int, default=1)
    t.add_argument("-r", "--replication-factor", type=_positive_int, default=1)
    t.add_argument("--config", action="append", metavar="NAME=VALUE", help="topic config (repeatable)")
    t.add_argument("--if-not-exists", action="store_true", help="an existing topic is not an error")
    tsub.add_parser("list", parents=[client], help="list topic names")
    t = tsub.add_parser("describe", parents=[client], help="partitions, leaders and epochs as JSON lines")
    t.add_argument("names", nargs="+", metavar="TOPIC")
    t = tsub.add_parser("delete", parents=[client], help="delete topics")
    t.add_argument("names", nargs="+", metavar="TOPIC")
    from .cli_admin import add_parsers as _admin_parsers
    _admin_parsers(sub, tsub, client, _positive_int)

    p = sub.add_parser("produce", parents=[client], help="send stdin lines as records")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--json", action="store_true",
                   help='each line is {"key", "value", "headers", "partition"} (all optional)')
    p.add_argument("--key", help="key for every record (a JSON line's own key wins)")
    p.add_argument("--partition", type=_non_negative_int, help="partition for plain lines (default: partitioner)")
    p.add_argument("--header", action="append", metavar="NAME=VALUE", help="header on every record (repeatable)")

    p = sub.add_parser("consume", parents=[client], help="print records as JSON lines")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--from-beginning", action="store_true", help="start at the earliest offset when there is "
                   "no committed one (default: only new records)")
    p.add_argument("--max-messages", type=_positive_int, help="exit after this many records")
    p.add_argument("--group", help="consumer group (default: no group, every partition assigned)")
    p.add_argument("--timeout-ms", type=_positive_int, help="exit after this long without a record "
                   "(counted from when the consumer has its partitions: a group's join is not idle time)")

    p = sub.add_parser("demo", help="producer and consumer through leader moves and throttles, with metrics")
    p.add_argument("--duration", type=_duration, default=15.0, help="seconds of chaos (default 15)")
    p.add_argument("--partitions", type=_positive_int, default=6)
    p.add_argument("--metrics-port", type=_port, default=0, help="metrics HTTP port (default: a free one)")
    p.add_argument("--kind", choices=("auto", "kafka", "tansu", "noida"), default="auto",
                   help="embedded broker (default auto: Apache Kafka where Java 17+ is, else Tansu)")
    p.add_argument("--rate", type=_positive_int, default=10_000, help="records per second (default 10000)")
    p.add_argument("--group", action="store_true", help="consume in a consumer group (default: assign every "
                   "partition)")

    from .bench.command import add_arguments as _bench_arguments
    p = sub.add_parser("bench", help="throughput and latency under failure: akresil vs aiokafka vs "
                       "confluent-kafka",
                       description="Runs each scenario's fault script against every client through FaultProxy "
                       "in front of an embedded broker (or on librdkafka's mock cluster: --harness mock); writes "
                       "bench.json, table.txt and PNG plots. 'akresil bench service' measures the idioms services "
                       "write (gather, task per record, callbacks, consumers; see its --help).")
    _bench_arguments(p)
    return parser


async def cmd_bench(args: argparse.Namespace) -> int:
    from .bench.command import BenchArgumentError, run as run_bench
    from .bench.plots import PlotsUnavailable
    try:
        await run_bench(args)
    except (PlotsUnavailable, BenchArgumentError) as exc:
        raise UsageError(str(exc)) from None
    return EXIT_OK


async def cmd_groups(args: argparse.Namespace) -> int:
    from .cli_admin import cmd_groups as run
    return await run(args, _client_config(args))


async def cmd_configs(args: argparse.Namespace) -> int:
    from .cli_admin import cmd_configs as run
    return await run(args, _client_config(args))


async def cmd_partitions(args: argparse.Namespace) -> int:
    from .cli_admin import cmd_partitions as run
    return await run(args, _client_config(args))


async def cmd_quotas(args: argparse.Namespace) -> int:
    from .cli_admin import cmd_quotas as run
    return await run(args, _client_config(args))


async def cmd_cluster(args: argparse.Namespace) -> int:
    from .cli_admin import cmd_cluster as run
    return await run(args, _client_config(args))


_ASYNC: dict[str, Callable[[argparse.Namespace], Awaitable[int]]] = {
    "topics": cmd_topics, "produce": cmd_produce, "consume": cmd_consume, "demo": cmd_demo, "bench": cmd_bench,
    "groups": cmd_groups, "configs": cmd_configs, "partitions": cmd_partitions, "quotas": cmd_quotas,
    "cluster": cmd_cluster}


def _service_parser() -> argparse.ArgumentParser:
    from .bench.service import __doc__ as doc, add_arguments
    p = argparse.ArgumentParser(prog="akresil bench service", description=doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.set_defaults(command="bench-service")
    return p


async def cmd_bench_service(args: argparse.Namespace) -> int:
    from .bench.service import main as run_service
    try:
        doc = await run_service(args, progress=lambda line: print(line, file=sys.stderr))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    sys.stdout.buffer.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    return EXIT_OK


_ASYNC["bench-service"] = cmd_bench_service


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["bench", "service"]:
        # the service idioms take their own options (``akresil bench service --help``)
        args = _service_parser().parse_args(argv[2:])
    else:
        args = build_parser().parse_args(argv)     # exits 2 on bad usage
    try:
        if args.command == "broker":
            return cmd_broker(args)
        return anyio.run(_run_interruptible, _ASYNC[args.command], args)
    except (UsageError, AdminUsageError, errors.ConfigError, errors.InvalidTopicError) as exc:
        print(f"akresil: error: {exc}", file=sys.stderr)
        return EXIT_USAGE

    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_OK
    except (errors.KafkaError, OSError) as exc:
        print(f"akresil: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILURE


async def _run_interruptible(command: Callable[[argparse.Namespace], Awaitable[int]],
                             args: argparse.Namespace) -> int:
    """Run ``command``; SIGINT/SIGTERM cancel it so its clients close cleanly, then exit 130."""
    result: list[int] = []
    interrupted = False
    try:
        async with anyio.create_task_group() as tg:
            async def watch() -> None:
                nonlocal interrupted
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for _ in signals:
                        interrupted = True
                        tg.cancel_scope.cancel()
                        return

            async def run() -> None:
                result.append(await command(args))
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            tg.start_soon(run)
    except BaseExceptionGroup as group:
        raise _first_leaf(group) from None
    if interrupted or not result:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return result[0]


def _first_leaf(group: BaseExceptionGroup) -> BaseException:
    """The first real exception inside (nested) task-group exception groups: that is what the user needs."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


def _silence_stdout() -> None:
    """After EPIPE (``akresil consume | head``), point stdout at /dev/null so the interpreter exits quietly."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
