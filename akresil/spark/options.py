"""Parse and validate the Spark options of the ``akresil`` data source (pure: no pyspark, no I/O).

Spark hands a data source its options as strings in a case-insensitive map (keys arrive lower-cased), so
every value is parsed here, once, on the driver, and every mistake is reported with the option's name
before a task starts. Option names follow Spark's built-in Kafka source so that a pipeline switches by
changing the format name; ``kafka.<dotted.name>`` options become akresil client configs
(``kafka.linger.ms`` -> ``linger_ms``) and go through ``akresil.config.resolve``, which checks them again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

import orjson

from ..checks import EARLIEST, LATEST, check_topic_name
from ..config import OPTIONS_BY_NAME, resolve
from ..errors import ConfigError
from ..types import TopicPartition

__all__ = [
    "EARLIEST", "LATEST", "AT_LEAST_ONCE", "EXACTLY_ONCE", "OffsetSpec", "Subscription", "ReadOptions", "WriteOptions",
    "parse_read_options", "parse_write_options", "client_config",
]

#: Spark's Kafka source spells these as -2 / -1 inside offset JSON, as Kafka's ListOffsets does

#: Kafka consumer settings Spark's Kafka source refuses too: offsets are tracked by Spark, not a group
_FORBIDDEN_KAFKA = {
    "group.id": "offsets are tracked by Spark (checkpoint or the offset options), not by a consumer group",
    "auto.offset.reset": "use startingOffsets instead",
    "enable.auto.commit": "offsets are tracked by Spark, nothing is committed to Kafka",
    "key.serializer": "keys are written as bytes (binary or string column)",
    "value.serializer": "values are written as bytes (binary or string column)",
    "key.deserializer": "keys are read as binary; cast in Spark SQL",
    "value.deserializer": "values are read as binary; cast in Spark SQL",
    "interceptor.classes": "Java interceptors do not apply; attach akresil hooks instead",
}
#: Java client settings with no akresil equivalent, and what to set instead (named in the error)
_JAVA_ONLY = {
    "retries": "akresil bounds retries by time, as Java does by default: set kafka.delivery.timeout.ms",
    "partitioner.class": "Java classes do not apply; give a 'partition' column or rely on the key hash",
    "send.buffer.bytes": "akresil leaves socket buffers to the operating system",
    "receive.buffer.bytes": "akresil leaves socket buffers to the operating system",
    "sasl.jaas.config": "use kafka.sasl.mechanism with kafka.sasl.plain.username / kafka.sasl.plain.password",
    "ssl.truststore.location": "JKS stores do not apply; TLS uses the system trust store (kafka.security.protocol)",
    "ssl.keystore.location": "JKS stores do not apply",
    "transactional.id": "the sink names its transactions itself: writeStream with deliveryGuarantee=exactly-once "
                        "(ids start with transactionalIdPrefix)",
}
#: akresil configs a string option cannot express (Python objects)
_OBJECT_CONFIGS = {"ssl_context", "metrics_registry", "partitioner"}

#: Spark Kafka source options akresil knows but does not implement (named in the error)
_NOT_SUPPORTED = {"fetchoffset.numretries", "fetchoffset.retryintervalms", "kafkaconsumer.cachecapacity"}

#: Spark's spelling of every option (keys arrive lower-cased), used in error messages
_CANONICAL = {name.lower(): name for name in (
    "subscribe", "subscribePattern", "assign", "startingOffsets", "endingOffsets", "failOnDataLoss",
    "kafkaConsumer.pollTimeoutMs", "maxOffsetsPerTrigger", "minPartitions", "maxRecordsPerPartition",
    "minRecordsPerPartition", "includeHeaders", "topic", "startingOffsetsByTimestamp", "endingOffsetsByTimestamp",
    "startingTimestamp",
    "endingTimestamp", "startingOffsetsByTimestampStrategy", "minOffsetsPerTrigger", "maxTriggerDelay",
    "groupIdPrefix", "fetchOffset.numRetries", "fetchOffset.retryIntervalMs", "kafkaConsumer.cacheCapacity",
    "deliveryGuarantee", "transactionalIdPrefix", "microBatchRead")}

_COMMON = {"kafka.bootstrap.servers"}
_READ_KEYS = {
    "subscribe", "subscribepattern", "assign", "startingoffsets", "endingoffsets", "failondataloss",
    "kafkaconsumer.polltimeoutms", "maxoffsetspertrigger", "minpartitions", "maxrecordsperpartition",
    "minrecordsperpartition", "includeheaders", "startingoffsetsbytimestamp", "endingoffsetsbytimestamp",
    "startingtimestamp",
    "endingtimestamp", "startingoffsetsbytimestampstrategy", "minoffsetspertrigger", "maxtriggerdelay",
    "groupidprefix", "microbatchread",
}
#: Spark's default maxTriggerDelay (15 minutes)
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000
#: streaming reads: offsets per task below which a micro-batch's ranges share tasks. A Python data source task
#: costs ~0.1 s of fixed work (worker hand-over, Arrow set-up, producer flush), about what 100 000 rows take to
#: read and write, so smaller tasks mostly pay that cost (docs/spark.md, "Where the time goes")
DEFAULT_MIN_RECORDS_PER_PARTITION = 100_000
_WRITE_KEYS = {"topic", "deliveryguarantee", "transactionalidprefix"}
#: deliveryGuarantee values (streaming writes)
AT_LEAST_ONCE, EXACTLY_ONCE = "at-least-once", "exactly-once"
#: the default transactionalIdPrefix: transactional ids and marker groups are ``<prefix>-<query id>-<partition>``
DEFAULT_TRANSACTIONAL_ID_PREFIX = "akresil-spark"


@dataclass(frozen=True)
class OffsetSpec:
    """``earliest`` / ``latest`` for every partition, explicit per-partition offsets (-2/-1 allowed), or
    timestamps: ``timestamp`` for every partition (``startingTimestamp``) or per partition
    (``startingOffsetsByTimestamp``), resolved to offsets with ListOffsets by timestamp."""

    default: int | None                       # EARLIEST / LATEST, or None when offsets/timestamps are explicit
    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    timestamp: int | None = None
    timestamps: Mapping[TopicPartition, int] = field(default_factory=dict)
    #: the option this spec came from, for error messages
    name: str = ""

    @property
    def by_time(self) -> bool:
        return self.timestamp is not None or bool(self.timestamps)

    def for_partition(self, tp: TopicPartition) -> int | None:
        """The offset (or EARLIEST/LATEST) asked for ``tp``; None when explicit JSON does not name it."""
        if self.default is not None:
            return self.default
        return self.offsets.get(tp)


@dataclass(frozen=True)
class Subscription:
    """Exactly one of Spark's ``subscribe`` / ``subscribePattern`` / ``assign``."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    partitions: tuple[TopicPartition, ...] = ()

    def describe(self) -> str:
        if self.pattern is not None:
            return f"subscribePattern={self.pattern!r}"
        if self.partitions:
            return "assign=" + ",".join(f"{tp.topic}-{tp.partition}" for tp in self.partitions)
        return "subscribe=" + ",".join(self.topics)


@dataclass(frozen=True)
class ReadOptions:
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    fail_on_data_loss: bool
    poll_timeout_ms: int
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    max_records_per_partition: int | None
    include_headers: bool
    #: akresil consumer configuration (snake_case keys), already validated
    consumer: Mapping[str, Any]
    #: startingOffsetsByTimestampStrategy: what a start timestamp past the last record means
    #: ("error", or "latest": start at the end)
    timestamp_strategy: str = "error"
    #: streaming: skip triggers with fewer new offsets than this, until max_trigger_delay_ms passed
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    #: groupIdPrefix (Spark's default prefixes when not given); the source's client ids start with it
    group_id_prefix: str | None = None
    #: streaming: a micro-batch's ranges are packed into tasks of at least this many offsets (``pack_ranges``);
    #: not with minPartitions / maxRecordsPerPartition, which ask for a layout of their own
    min_records_per_partition: int = DEFAULT_MIN_RECORDS_PER_PARTITION
    #: streaming: microBatchRead=driver, the source's runner process on the driver reads each micro-batch
    #: (Spark's simple stream reader) instead of a task's Python worker
    read_on_driver: bool = False


@dataclass(frozen=True)
class WriteOptions:
    topic: str | None
    #: akresil producer configuration (snake_case keys), already validated
    producer: Mapping[str, Any]
    #: deliveryGuarantee (streaming writes): AT_LEAST_ONCE, or EXACTLY_ONCE (a transaction per task and
    #: micro-batch, a replayed micro-batch recognised by its marker)
    guarantee: str = AT_LEAST_ONCE
    transactional_id_prefix: str = DEFAULT_TRANSACTIONAL_ID_PREFIX

    @property
    def exactly_once(self) -> bool:
        return self.guarantee == EXACTLY_ONCE


def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Validate a read's options; ``streaming`` selects Spark's defaults and rules for readStream."""
    opts = _lower(options)
    _check_known(opts, _COMMON | _READ_KEYS, "read" if not streaming else "streaming read",
                 other=_WRITE_KEYS)
    subscription = _subscription(opts)
    starting = _offsets(opts, "startingoffsets", "latest" if streaming else "earliest", subscription)
    for key in ("endingoffsets", "endingoffsetsbytimestamp", "endingtimestamp"):
        if streaming and key in opts:
            raise ConfigError(f"{_CANONICAL[key]}: only for batch reads (spark.read); a stream reads until stopped")
    ending = _offsets(opts, "endingoffsets", "latest", subscription)
    # Spark's precedence: <x>Timestamp over <x>OffsetsByTimestamp over <x>Offsets
    starting = _timestamps(opts, "starting", subscription) or starting
    ending = _timestamps(opts, "ending", subscription) or ending
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise ConfigError(f"startingOffsetsByTimestampStrategy: expected 'error' or 'latest', got "
                          f"{opts['startingoffsetsbytimestampstrategy']!r}")
    min_offsets = _positive_int(opts, "minoffsetspertrigger", "minOffsetsPerTrigger")
    delay = _duration_ms(opts, "maxtriggerdelay", "maxTriggerDelay")
    min_records = _positive_int(opts, "minrecordsperpartition", "minRecordsPerPartition")
    for key, given in (("minoffsetspertrigger", min_offsets), ("maxtriggerdelay", delay),
                       ("minrecordsperpartition", min_records)):
        if given is not None and not streaming:
            raise ConfigError(f"{_CANONICAL[key]}: only for streaming reads (spark.readStream)")
    if delay is not None and min_offsets is None:
        raise ConfigError("maxTriggerDelay: only meaningful with minOffsetsPerTrigger (it bounds how long a "
                          "trigger may wait for that many offsets)")
    prefix = opts.get("groupidprefix")
    if prefix is not None and (not prefix.strip() or not re.fullmatch(r"[A-Za-z0-9._-]+", prefix.strip())):
        raise ConfigError(f"groupIdPrefix: expected letters, digits, '.', '_' or '-', got {prefix!r}")
    if not streaming:
        if starting.default == LATEST or any(v == LATEST for v in starting.offsets.values()):
            raise ConfigError("startingOffsets: 'latest' is not allowed for a batch read (it would read nothing)")
        if ending.default == EARLIEST or any(v == EARLIEST for v in ending.offsets.values()):
            raise ConfigError("endingOffsets: 'earliest' is not allowed for a batch read (it would read nothing)")
    max_offsets = _positive_int(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger")
    if max_offsets is not None and not streaming:
        raise ConfigError("maxOffsetsPerTrigger: only for streaming reads (spark.readStream)")
    if max_offsets is not None and min_offsets is not None and min_offsets > max_offsets:
        raise ConfigError(f"minOffsetsPerTrigger: {min_offsets} is more than maxOffsetsPerTrigger {max_offsets}")
    read_on_driver = _micro_batch_read(opts, streaming)
    return ReadOptions(
        subscription=subscription, starting=starting, ending=ending,
        fail_on_data_loss=_bool(opts, "failondataloss", "failOnDataLoss", True),
        poll_timeout_ms=_positive_int(opts, "kafkaconsumer.polltimeoutms", "kafkaConsumer.pollTimeoutMs") or 120_000,
        max_offsets_per_trigger=max_offsets,
        min_partitions=_positive_int(opts, "minpartitions", "minPartitions"),
        max_records_per_partition=_positive_int(opts, "maxrecordsperpartition", "maxRecordsPerPartition"),
        include_headers=_bool(opts, "includeheaders", "includeHeaders", False),
        consumer=client_config(opts, "consumer"),
        timestamp_strategy=strategy,
        min_offsets_per_trigger=min_offsets,
        max_trigger_delay_ms=delay if delay is not None else DEFAULT_MAX_TRIGGER_DELAY_MS,
        group_id_prefix=prefix.strip() if prefix is not None else None,
        min_records_per_partition=min_records if min_records is not None else DEFAULT_MIN_RECORDS_PER_PARTITION,
        read_on_driver=read_on_driver,
    )


def _micro_batch_read(opts: Mapping[str, str], streaming: bool) -> bool:
    """``microBatchRead``: ``tasks`` (the default: executor tasks read the planned ranges) or ``driver`` (the
    source's runner process reads the micro-batch and Spark hands it to one task). The task layout options ask
    for tasks, which the driver read has not."""
    mode = opts.get("microbatchread")
    if mode is None:
        return False
    if not streaming:
        raise ConfigError("microBatchRead: only for streaming reads (spark.readStream)")
    mode = mode.strip().lower()
    if mode not in ("tasks", "driver"):
        raise ConfigError(f"microBatchRead: expected 'tasks' or 'driver', got {opts['microbatchread']!r}")
    if mode == "driver":
        for key in ("minpartitions", "maxrecordsperpartition", "minrecordsperpartition"):
            if key in opts:
                raise ConfigError(f"{_CANONICAL[key]}: sets the read tasks of a micro-batch; microBatchRead=driver "
                                  "reads it on the driver and hands it to one task")
    return mode == "driver"


def parse_write_options(options: Mapping[str, str], *, streaming: bool = False) -> WriteOptions:
    """Validate a write's options; ``streaming`` for writeStream (deliveryGuarantee is only there)."""
    opts = _lower(options)
    # Spark hands a streaming sink the query's own checkpointLocation option along with the user's
    allowed = _COMMON | _WRITE_KEYS | ({"checkpointlocation"} if streaming else set())
    _check_known(opts, allowed, "streaming write" if streaming else "write", other=_READ_KEYS)
    topic = opts.get("topic")
    if topic is not None:
        try:
            check_topic_name(topic)
        except Exception as exc:
            raise ConfigError(f"topic: {exc}") from None
    guarantee = opts.get("deliveryguarantee", AT_LEAST_ONCE).strip().lower()
    if guarantee not in (AT_LEAST_ONCE, EXACTLY_ONCE):
        raise ConfigError(f"deliveryGuarantee: expected '{AT_LEAST_ONCE}' or '{EXACTLY_ONCE}', "
                          f"got {opts['deliveryguarantee']!r}")
    if "deliveryguarantee" in opts and not streaming:
        raise ConfigError("deliveryGuarantee: only for streaming writes (writeStream); a batch write is "
                          "at-least-once")
    prefix = opts.get("transactionalidprefix", DEFAULT_TRANSACTIONAL_ID_PREFIX).strip()
    if "transactionalidprefix" in opts and guarantee != EXACTLY_ONCE:
        raise ConfigError(f"transactionalIdPrefix: only with deliveryGuarantee={EXACTLY_ONCE}")
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,150}", prefix):
        raise ConfigError("transactionalIdPrefix: expected 1-150 letters, digits, '.', '_' or '-', "
                          f"got {opts['transactionalidprefix']!r}")
    producer = client_config(opts, "producer")
    if guarantee == EXACTLY_ONCE:
        try:
            resolve("producer", {**producer, "transactional_id": f"{prefix}-check"})
        except ConfigError as exc:
            raise ConfigError(f"deliveryGuarantee={EXACTLY_ONCE} needs a transactional producer: {exc}") from None
    return WriteOptions(topic=topic, producer=producer, guarantee=guarantee, transactional_id_prefix=prefix)


def client_config(opts: Mapping[str, str], kind: str) -> dict[str, Any]:
    """``kafka.*`` options -> akresil config kwargs for ``kind`` (producer/consumer), validated by resolve().

    A setting that only the other client understands is skipped (Spark passes one option map to both
    sides); a name akresil does not know at all is an error that names it.
    """
    if "kafka.bootstrap.servers" not in opts:
        raise ConfigError("kafka.bootstrap.servers: required (host:port[,host:port...])")
    out: dict[str, Any] = {}
    for key, raw in opts.items():
        if not key.startswith("kafka."):
            continue
        dotted = key[len("kafka."):]
        if dotted in _FORBIDDEN_KAFKA:
            raise ConfigError(f"{key}: not supported: {_FORBIDDEN_KAFKA[dotted]}")
        if dotted in _JAVA_ONLY:
            raise ConfigError(f"{key}: Java client setting not supported by akresil: {_JAVA_ONLY[dotted]}")
        name = dotted.replace(".", "_").replace("-", "_")
        opt = OPTIONS_BY_NAME.get(name)
        if opt is None:
            raise ConfigError(f"{key}: unknown Kafka client setting (akresil has no {name!r} configuration)")
        if name in _OBJECT_CONFIGS:
            raise ConfigError(f"{key}: cannot be set from a string option (it takes a Python object)")
        if kind not in opt.clients:
            continue
        out[name] = _convert(key, raw, opt.types, opt.nullable)
    try:
        resolve(kind, out)
    except ConfigError as exc:
        raise ConfigError(f"kafka.* options: {exc}") from None
    return out


# ---------------------------------------------------------------------- helpers
def _lower(options: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in options.items():
        if not isinstance(key, str):
            raise ConfigError(f"option names must be strings, got {key!r}")
        out[key.lower()] = value if isinstance(value, str) else str(value)
    return out


def _check_known(opts: Mapping[str, str], allowed: set[str], what: str, *, other: set[str]) -> None:
    for key in opts:
        if key in allowed or key.startswith("kafka."):
            continue
        name = _CANONICAL.get(key, key)
        if key in _NOT_SUPPORTED:
            raise ConfigError(f"{name}: Spark's Kafka source option is not supported by akresil")
        if key in other:
            raise ConfigError(f"{name}: not an option of a {what}")
        raise ConfigError(f"{name}: unknown option of the akresil data source ({what})")


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(given) != 1:
        raise ConfigError("exactly one of subscribe, subscribePattern, assign is required"
                          + (f" (got {', '.join(given)})" if given else ""))
    key = given[0]
    value = opts[key]
    if key == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise ConfigError("subscribe: needs at least one topic name (comma-separated)")
        for t in topics:
            try:
                check_topic_name(t)
            except Exception as exc:
                raise ConfigError(f"subscribe: {exc}") from None
        return Subscription(topics=tuple(dict.fromkeys(topics)))
    if key == "subscribepattern":
        try:
            re.compile(value)
        except re.error as exc:
            raise ConfigError(f"subscribePattern: {value!r} is not a valid regex: {exc}") from None
        if not value:
            raise ConfigError("subscribePattern: must not be empty")
        return Subscription(pattern=value)
    parsed = _json(value, "assign")
    if not isinstance(parsed, dict) or not parsed:
        raise ConfigError(f'assign: expected JSON like {{"topicA":[0,1]}}, got {value!r}')
    tps: list[TopicPartition] = []
    for topic, parts in parsed.items():
        try:
            check_topic_name(topic)
        except Exception as exc:
            raise ConfigError(f"assign: {exc}") from None
        if not isinstance(parts, list) or not parts:
            raise ConfigError(f"assign: partitions of {topic!r} must be a non-empty list of ints")
        for p in parts:
            if not isinstance(p, int) or isinstance(p, bool) or p < 0:
                raise ConfigError(f"assign: partition {p!r} of {topic!r} is not an int >= 0")
            tps.append(TopicPartition(topic, p))
    return Subscription(partitions=tuple(dict.fromkeys(tps)))


def _offsets(opts: Mapping[str, str], key: str, default: str, subscription: Subscription) -> OffsetSpec:
    name = {"startingoffsets": "startingOffsets", "endingoffsets": "endingOffsets"}[key]
    raw = opts.get(key, default).strip()
    if raw.lower() == "earliest":
        return OffsetSpec(EARLIEST)
    if raw.lower() == "latest":
        return OffsetSpec(LATEST)
    parsed = _json(raw, name)
    if not isinstance(parsed, dict):
        raise ConfigError(f'{name}: expected "earliest", "latest" or JSON like {{"t":{{"0":23}}}}, got {raw!r}')
    offsets = _per_partition(parsed, name, "offset", "offset", EARLIEST, "an int >= 0, -2 (earliest) or -1 (latest)")
    _check_named(offsets, subscription, name)
    return OffsetSpec(None, offsets)


def _timestamps(opts: Mapping[str, str], which: str, subscription: Subscription) -> OffsetSpec | None:
    """``<which>Timestamp`` (one timestamp, every partition) or ``<which>OffsetsByTimestamp`` (JSON
    ``{"t": {"0": ms}}``), in Spark's order of precedence; None when neither is given."""
    single_key, json_key = f"{which}timestamp", f"{which}offsetsbytimestamp"
    if single_key in opts:
        name = _CANONICAL[single_key]
        raw = opts[single_key].strip()
        try:
            ts = int(raw)
        except ValueError:
            raise ConfigError(f"{name}: expected a timestamp in milliseconds since the epoch, got {raw!r}") from None
        if ts < 0:
            raise ConfigError(f"{name}: must be >= 0 (milliseconds since the epoch), got {ts}")
        return OffsetSpec(None, timestamp=ts, name=name)
    if json_key not in opts:
        return None
    name = _CANONICAL[json_key]
    raw = opts[json_key].strip()
    parsed = _json(raw, name)
    if not isinstance(parsed, dict) or not parsed:
        raise ConfigError(f'{name}: expected JSON like {{"t":{{"0":1700000000000}}}}, got {raw!r}')
    times = _per_partition(parsed, name, "timestamp", "ms", 0, "an int >= 0 (ms)")
    _check_named(times, subscription, name)
    return OffsetSpec(None, timestamps=times, name=name)


def _per_partition(parsed: Mapping[str, Any], name: str, noun: str, unit: str, minimum: int, requirement: str
                   ) -> dict[TopicPartition, int]:
    """``{"topic": {"partition": value}}`` (Spark's JSON for per-partition offsets and timestamps), checked."""
    out: dict[TopicPartition, int] = {}
    for topic, parts in parsed.items():
        if not isinstance(parts, dict):
            raise ConfigError(f"{name}: {noun}s of topic {topic!r} must be an object {{partition: {unit}}}")
        for p, value in parts.items():
            try:
                partition = int(p)
            except ValueError:
                raise ConfigError(f"{name}: partition {p!r} of {topic!r} is not an int") from None
            if partition < 0:
                raise ConfigError(f"{name}: partition {partition} of {topic!r} is negative")
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise ConfigError(f"{name}: {noun} {value!r} of {topic}-{partition} must be {requirement}")
            out[TopicPartition(topic, partition)] = value
    return out


def _check_named(named: Mapping[TopicPartition, int], subscription: Subscription, name: str) -> None:
    if subscription.partitions:
        extra = sorted(set(named) - set(subscription.partitions))
        if extra:
            raise ConfigError(f"{name}: names partitions that assign does not: "
                              + ", ".join(f"{tp.topic}-{tp.partition}" for tp in extra))
    elif subscription.topics:
        extra_topics = sorted({tp.topic for tp in named} - set(subscription.topics))
        if extra_topics:
            raise ConfigError(f"{name}: names topics that are not subscribed: {', '.join(extra_topics)}")


_DURATION = re.compile(r"(\d+)\s*(ms|s|m|min|h|d)?")
_UNIT_MS = {None: 1, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def _duration_ms(opts: Mapping[str, str], key: str, name: str) -> int | None:
    """A Spark duration (``"15m"``, ``"30s"``, ``"500ms"``, plain digits = ms) in milliseconds."""
    raw = opts.get(key)
    if raw is None:
        return None
    m = _DURATION.fullmatch(raw.strip().lower())
    if m is None:
        raise ConfigError(f"{name}: expected a duration like '15m', '30s' or '500ms', got {raw!r}")
    return int(m.group(1)) * _UNIT_MS[m.group(2)]


def _json(raw: str, name: str) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{name}: not valid JSON ({exc}): {raw!r}") from None


def _positive_int(opts: Mapping[str, str], key: str, name: str) -> int | None:
    raw = opts.get(key)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"{name}: expected a positive integer, got {raw!r}") from None
    if value < 1:
        raise ConfigError(f"{name}: must be >= 1, got {value}")
    return value


def _bool(opts: Mapping[str, str], key: str, name: str, default: bool) -> bool:
    raw = opts.get(key)
    if raw is None:
        return default
    low = raw.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    raise ConfigError(f"{name}: expected true or false, got {raw!r}")


def _convert(key: str, raw: str, types: tuple[type, ...], nullable: bool) -> Any:
    text = raw.strip()
    if nullable and text.lower() in ("", "null", "none"):
        return None
    if bool in types:
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise ConfigError(f"{key}: expected true or false, got {raw!r}")
    if int in types:
        try:
            return int(text)
        except ValueError:
            if str not in types:
                raise ConfigError(f"{key}: expected an integer, got {raw!r}") from None
    return text
