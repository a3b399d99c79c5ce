"""Client configuration: one declarative table of every key, its default, its bounds and its KIP.

Keys are Kafka's config names in snake_case with the Java client's defaults.  ``resolve`` checks a
client's keyword arguments against the table: an unknown key, a wrong type or an out-of-range value
raises ``ConfigError`` naming the key, so mistakes surface at construction, not on the first send.
The same table feeds docs/configuration.md.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from difflib import get_close_matches
from typing import Any, Callable, Iterable, Mapping

from .errors import ConfigError

_PRODUCER, _CONSUMER, _ADMIN = "producer", "consumer", "admin"
_ALL = frozenset({_PRODUCER, _CONSUMER, _ADMIN})


@dataclass(frozen=True)
class Option:
    """One configuration key."""

    name: str
    types: tuple[type, ...]
    default: Any
    doc: str
    clients: frozenset[str] = _ALL
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[Any, ...] | None = None
    nullable: bool = False
    kip: str | None = None
    #: extra check returning an error message or None
    check: Callable[[Any], str | None] | None = field(default=None, compare=False)

    def _show(self, value: Any) -> str:
        """The value for an error message; secrets (passwords) are never quoted."""
        return "<redacted>" if "password" in self.name else repr(value)

    def validate(self, value: Any) -> Any:
        if value is None:
            if self.nullable:
                return None
            raise ConfigError(f"{self.name}: must not be None")
        if isinstance(value, bool) and bool not in self.types:
            raise ConfigError(f"{self.name}: expected {self._type_names()}, got bool {self._show(value)}")
        if not isinstance(value, self.types):
            if float in self.types and isinstance(value, int):
                value = float(value)
            else:
                raise ConfigError(
                    f"{self.name}: expected {self._type_names()}, got {type(value).__name__} {self._show(value)}")
        if self.choices is not None and value not in self.choices:
            raise ConfigError(f"{self.name}: {self._show(value)} is not one of {', '.join(map(repr, self.choices))}")
        if self.minimum is not None and value < self.minimum:
            raise ConfigError(f"{self.name}: {self._show(value)} is below the minimum {self.minimum:g}")
        if self.maximum is not None and value > self.maximum:
            raise ConfigError(f"{self.name}: {self._show(value)} is above the maximum {self.maximum:g}")
        if self.check is not None:
            problem = self.check(value)
            if problem:
                raise ConfigError(f"{self.name}: {problem}")
        return value

    def _type_names(self) -> str:
        return " or ".join(t.__name__ for t in self.types)


def _bootstrap_check(value: Any) -> str | None:
    servers = [value] if isinstance(value, str) else list(value)
    if not servers:
        return "needs at least one host:port"
    for s in servers:
        if not isinstance(s, str):
            return f"{s!r} is not a host:port string"
        host, sep, port = s.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            return f"{s!r} is not host:port"
    return None


def _callable_check(value: Any) -> str | None:
    return None if callable(value) else f"must be callable, got {type(value).__name__}"


def _client_id_check(value: str) -> str | None:
    # sent as an int16-length string in every request header
    try:
        n = len(value.encode())
    except UnicodeEncodeError as exc:
        return f"is not encodable as UTF-8 ({exc.reason})"
    return None if n <= 0x7FFF else f"is {n} UTF-8 bytes; the protocol allows at most 32767"


def _rack_check(value: str) -> str | None:
    # sent as a string in every Fetch (int16 length prefix before the flexible versions)
    try:
        n = len(value.encode())
    except UnicodeEncodeError as exc:
        return f"is not encodable as UTF-8 ({exc.reason})"
    return None if n <= 0x7FFF else f"is {n} UTF-8 bytes; the protocol allows a rack id of at most 32767"


def _registry_check(value: Any) -> str | None:
    if callable(getattr(value, "register", None)) and callable(getattr(value, "unregister", None)):
        return None
    return f"expected a prometheus_client CollectorRegistry, got {type(value).__name__}"


def _assignors_check(value: Any) -> str | None:
    from .core.assignors import ASSIGNORS  # here: the assignors module is heavier than the config table

    names = _assignor_names(value)
    if not names:
        return "needs at least one assignor"
    for name in names:
        if not isinstance(name, str):
            return f"{name!r} is not an assignor name (str)"
        if name not in ASSIGNORS:
            hint = get_close_matches(name, list(ASSIGNORS), n=1)
            return (f"unknown assignor {name!r}; known: {', '.join(ASSIGNORS)}"
                    + (f" (did you mean {hint[0]!r}?)" if hint else ""))
    return None


def _assignor_names(value: Any) -> tuple[Any, ...]:
    """``"range, cooperative-sticky"`` (Java's comma-separated form) or a list/tuple of names."""
    if isinstance(value, str):
        return tuple(n.strip() for n in value.split(",") if n.strip())
    return tuple(value)


_INT = (int,)
_P, _C = frozenset({_PRODUCER}), frozenset({_CONSUMER})
_MAX_INT = 2**31 - 1

OPTIONS: tuple[Option, ...] = (
    # ---- common
    Option("bootstrap_servers", (str, list, tuple), "127.0.0.1:9092", "host:port list to discover the cluster from",
           check=_bootstrap_check),
    Option("client_id", (str,), "akresil", "sent with every request; a label in metrics and broker logs",
           check=_client_id_check),
    Option("request_timeout_ms", _INT, 30_000, "how long to wait for a response once a request is written",
           minimum=1, maximum=_MAX_INT, kip="KIP-91"),
    Option("retry_backoff_ms", _INT, 100, "first retry backoff (exponential, ±20% jitter)", minimum=0,
           maximum=_MAX_INT, kip="KIP-580"),
    Option("retry_backoff_max_ms", _INT, 1_000, "cap of the exponential retry backoff", minimum=0,
           maximum=_MAX_INT, kip="KIP-580"),
    Option("reconnect_backoff_ms", _INT, 50, "first reconnect backoff (exponential, ±20% jitter)", minimum=0,
           maximum=_MAX_INT, kip="KIP-144"),
    Option("reconnect_backoff_max_ms", _INT, 250, "cap of the reconnect backoff (how soon a returning broker is "
           "noticed; a refused connect is cheap)", minimum=0, maximum=_MAX_INT, kip="KIP-144"),
    Option("socket_connection_setup_timeout_ms", _INT, 10_000, "time allowed to connect (TCP+TLS+SASL)",
           minimum=1, maximum=_MAX_INT),
    Option("bootstrap_timeout_ms", _INT, 60_000,
           "how long `start()` keeps trying the bootstrap servers before `NoBrokersAvailableError` (Java's "
           "`max.block.ms` idea, for every client). 60 s, Java's `max.block.ms` and `default.api.timeout.ms`: an "
           "application started together with its cluster waits out a broker start instead of crash-looping; "
           "each failed round logs a WARNING with its causes and the next attempt", minimum=1, maximum=_MAX_INT),
    Option("default_api_timeout_ms", _INT, 60_000,
           "bound of one admin call (all its retries) and of the consumer's offset lookups "
           "(beginning_offsets, end_offsets, offsets_for_times)", clients=frozenset({_CONSUMER, _ADMIN}),
           minimum=1, maximum=_MAX_INT, kip="KIP-266"),
    Option("metadata_max_age_ms", _INT, 300_000, "refresh metadata at least this often", minimum=0,
           maximum=_MAX_INT),
    Option("metadata_recovery_strategy", (str,), "rebootstrap",
           "what to do when no known broker answers, or the cluster answers REBOOTSTRAP_REQUIRED: 'rebootstrap' "
           "forgets the brokers and asks `bootstrap_servers` again (Java 4.x's default; a cluster whose brokers "
           "all moved is found again); 'none' keeps trying the known brokers", choices=("none", "rebootstrap"),
           kip="KIP-899"),
    Option("metadata_recovery_rebootstrap_trigger_ms", _INT, 300_000,
           "with `metadata_recovery_strategy='rebootstrap'`: rebootstrap when no metadata arrived for this long "
           "although it was wanted (every known broker refused, timed out or kept failing)", minimum=0,
           maximum=_MAX_INT, kip="KIP-1102"),
    Option("connections_max_idle_ms", _INT, 540_000, "close connections idle this long", minimum=0,
           maximum=_MAX_INT),
    Option("max_in_flight_requests_per_connection", _INT, 5, "pipelined requests per connection", minimum=1,
           maximum=1_000),
    Option("receive_message_max_bytes", _INT, 104_857_600,
           "largest response frame accepted (librdkafka's `receive.message.max.bytes`; Java has no such "
           "key); a bigger size prefix closes the connection as corrupt. Keep it above `fetch_max_bytes`",
           minimum=1_000, maximum=_MAX_INT),
    Option("security_protocol", (str,), "PLAINTEXT", "transport security",
           choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),
    Option("ssl_context", (ssl.SSLContext,), None, "TLS context for SSL / SASL_SSL", nullable=True),
    Option("sasl_mechanism", (str,), "PLAIN", "SASL mechanism",
           choices=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")),
    Option("sasl_plain_username", (str,), None, "SASL user name", nullable=True),
    Option("sasl_plain_password", (str,), None, "SASL password (never logged)", nullable=True),
    Option("sasl_oauth_token_provider", (object,), None,
           "OAUTHBEARER token provider: a callable (sync or async) returning an `OAuthToken` or a JWT string, "
           "e.g. `OidcClientCredentials(url, client_id, secret)`; refreshed at 80% of the token lifetime",
           nullable=True, check=_callable_check, kip="KIP-255"),
    Option("metrics_registry", (object,), None, "prometheus_client CollectorRegistry; None disables metrics",
           nullable=True, check=_registry_check),
    Option("enable_metrics_push", (bool,), True,
           "push the client's metrics to the cluster when an operator subscribed it (a client-metrics "
           "subscription on brokers with a telemetry plugin): GetTelemetrySubscriptions, then PushTelemetry "
           "with the subscribed series as OTLP at the subscription's interval, and a terminating push on close. "
           "On a cluster without the plugin it costs one version check every 5 minutes", kip="KIP-714"),
    # ---- producer
    Option("acks", (int, str), "all", "acknowledgements the leader waits for", clients=_P,
           choices=(0, 1, -1, "all", "0", "1", "-1")),
    Option("enable_idempotence", (bool,), True, "exactly-once per partition: producer id + sequence numbers",
           clients=_P),
    Option("linger_ms", _INT, 5, "wait up to this long for a batch to fill", clients=_P, minimum=0,
           maximum=_MAX_INT),
    Option("batch_size", _INT, 262_144,
           "largest batch per partition in bytes (uncompressed); a batch goes out when full or when linger_ms "
           "ends, so a large value does not delay a lone record", clients=_P, minimum=0, maximum=_MAX_INT),
    Option("buffer_memory", _INT, 33_554_432, "bytes of records buffered before enqueue blocks", clients=_P,
           minimum=1, maximum=2**62),
    Option("max_block_ms", _INT, 60_000, "how long enqueue/send wait for buffer space or metadata", clients=_P,
           minimum=0, maximum=_MAX_INT),
    Option("delivery_timeout_ms", _INT, 120_000, "upper bound from send() return to success or failure",
           clients=_P, minimum=1, maximum=_MAX_INT, kip="KIP-91"),
    Option("max_request_size", _INT, 1_048_576, "largest request (and record) the producer sends", clients=_P,
           minimum=1, maximum=_MAX_INT),
    Option("compression_type", (str,), "none", "batch compression codec", clients=_P,
           choices=("none", "gzip", "snappy", "lz4", "zstd")),
    Option("partitioner", (object,), None, "callable(topic, key, num_partitions, available_partitions) -> partition", clients=_P,
           nullable=True, check=_callable_check),
    Option("partitioner_ignore_keys", (bool,), False, "sticky-partition keyed records too", clients=_P),
    Option("transactional_id", (str,), None, "makes the producer transactional (init_transactions, "
           "begin/commit/abort_transaction); implies enable_idempotence", clients=_P, nullable=True,
           check=lambda v: "must not be empty" if v == "" else None),
    Option("transaction_timeout_ms", _INT, 60_000, "the coordinator aborts a transaction open longer than this; "
           "also bounds the client's retries of commit/abort", clients=_P, minimum=1, maximum=_MAX_INT),
    # ---- consumer
    Option("group_id", (str,), None, "consumer group; None for manual assignment only", clients=_C,
           nullable=True),
    Option("group_instance_id", (str,), None, "static membership id (KIP-345)", clients=_C, nullable=True),
    Option("group_protocol", (str,), "classic", "group membership protocol: 'classic' (JoinGroup/SyncGroup) "
           "or 'consumer' (KIP-848 ConsumerGroupHeartbeat, broker-side assignment; Kafka 4.0+)", clients=_C,
           choices=("classic", "consumer"), kip="KIP-848"),
    Option("group_remote_assignor", (str,), None, "server-side assignor for group_protocol='consumer' "
           "('uniform' or 'range' on Kafka); None lets the broker choose", clients=_C, nullable=True,
           kip="KIP-848"),
    Option("session_timeout_ms", _INT, 45_000, "group session timeout", clients=_C, minimum=1, maximum=_MAX_INT),
    Option("heartbeat_interval_ms", _INT, 3_000, "heartbeat period", clients=_C, minimum=1, maximum=_MAX_INT),
    Option("max_poll_interval_ms", _INT, 300_000, "max time between polls before leaving the group",
           clients=_C, minimum=1, maximum=_MAX_INT),
    Option("rebalance_timeout_ms", _INT, None, "defaults to max_poll_interval_ms", clients=_C, nullable=True,
           minimum=1, maximum=_MAX_INT),
    Option("partition_assignment_strategy", (str, list, tuple), ("range", "cooperative-sticky"),
           "assignors in preference order", clients=_C, check=_assignors_check),
    Option("fetch_min_bytes", _INT, 1, "broker waits for this many bytes", clients=_C, minimum=0,
           maximum=_MAX_INT),
    Option("fetch_max_bytes", _INT, 52_428_800, "max bytes per fetch response", clients=_C, minimum=0,
           maximum=_MAX_INT),
    Option("fetch_max_wait_ms", _INT, 500, "broker waits at most this long for fetch_min_bytes", clients=_C,
           minimum=0, maximum=_MAX_INT),
    Option("max_partition_fetch_bytes", _INT, 1_048_576, "max bytes per partition per fetch", clients=_C,
           minimum=0, maximum=_MAX_INT),
    Option("max_poll_records", _INT, 500, "records per __anext__ refill / default getmany cap", clients=_C,
           minimum=1, maximum=_MAX_INT),
    Option("isolation_level", (str,), "read_uncommitted", "skip aborted transactional records?", clients=_C,
           choices=("read_uncommitted", "read_committed")),
    Option("auto_offset_reset", (str,), "latest", "where to start without a committed offset", clients=_C,
           choices=("earliest", "latest", "none")),
    Option("enable_auto_commit", (bool,), True, "commit positions periodically", clients=_C),
    Option("auto_commit_interval_ms", _INT, 5_000, "auto-commit period", clients=_C, minimum=1,
           maximum=_MAX_INT),
    Option("check_crcs", (bool,), True, "verify record batch CRCs", clients=_C),
    Option("client_rack", (str,), "", "the rack (availability zone) this consumer runs in; sent with every Fetch "
           "so a broker with `replica.selector.class` (e.g. Kafka's RackAwareReplicaSelector) can point it to "
           "a replica in the same rack, which it then fetches from until `metadata_max_age_ms` passes or that "
           "replica fails; also sent to the group coordinator (JoinGroup subscription, ConsumerGroupHeartbeat, "
           "ShareGroupHeartbeat) for rack-aware assignment (KIP-881), as the Java client does. '' (default): "
           "always the leader", clients=_C, check=_rack_check, kip="KIP-392"),
)

OPTIONS_BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}


class Config:
    """Resolved, validated configuration of one client (attribute access, immutable)."""

    __slots__ = ("_values", "kind", "_set_keys")

    def __init__(self, kind: str, values: Mapping[str, Any], set_keys: Iterable[str] | None = None) -> None:
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "_values", dict(values))
        # the keys the caller gave (the rest are defaults): replace() must not turn defaults into choices
        object.__setattr__(self, "_set_keys", frozenset(values if set_keys is None else set_keys))

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Config is immutable")

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def replace(self, **changes: Any) -> "Config":
        return resolve(self.kind, {**self._explicit(), **changes})

    def _explicit(self) -> dict[str, Any]:
        return {k: v for k, v in self._values.items() if k in OPTIONS_BY_NAME and k in self._set_keys}

    def __repr__(self) -> str:
        shown = {k: ("***" if "password" in k and v is not None else v) for k, v in self._values.items()}
        return f"Config({self.kind}, {shown})"


def options_for(kind: str) -> list[Option]:
    return [o for o in OPTIONS if kind in o.clients]


def resolve(kind: str, kwargs: Mapping[str, Any], extra: Iterable[str] = ()) -> Config:
    """Validate ``kwargs`` for a client ``kind`` and fill in defaults.

    ``extra`` names keys a caller handles itself (e.g. ``key_serializer``); they pass through unchecked.
    """
    allowed = {o.name: o for o in options_for(kind)}
    extra = set(extra)
    values: dict[str, Any] = {}
    for key, value in kwargs.items():
        if key in extra:
            values[key] = value
            continue
        opt = allowed.get(key)
        if opt is None:
            where = "" if key not in OPTIONS_BY_NAME else f" (it is a {'/'.join(sorted(OPTIONS_BY_NAME[key].clients))} setting)"
            hint = get_close_matches(key, list(allowed) + list(extra), n=1)
            raise ConfigError(f"{key}: unknown {kind} configuration key{where}"
                              + (f"; did you mean {hint[0]!r}?" if hint else ""))
        values[key] = opt.validate(value)
    explicit = frozenset(values)
    for name, opt in allowed.items():
        values.setdefault(name, opt.default)
    _cross_check(kind, values, explicit)
    return Config(kind, values, explicit)


#: settings that only mean something on a SASL listener
_SASL_KEYS = ("sasl_mechanism", "sasl_plain_username", "sasl_plain_password", "sasl_oauth_token_provider")


def _cross_check(kind: str, v: dict[str, Any], explicit: frozenset[str] = frozenset()) -> None:
    """Rules that involve several keys; ``explicit`` holds the keys the caller set (not defaulted)."""
    if isinstance(v["bootstrap_servers"], str):
        v["bootstrap_servers"] = [s.strip() for s in v["bootstrap_servers"].split(",") if s.strip()]
    else:
        v["bootstrap_servers"] = list(v["bootstrap_servers"])
    if not v["security_protocol"].startswith("SASL_"):
        # the Java client only logs such keys as unused; a SASL setting that is silently ignored hides a
        # misconfiguration (credentials meant for a SASL listener), so it is refused, naming both keys
        for key in _SASL_KEYS:
            if key in explicit and v[key] is not None:
                raise ConfigError(f"{key}: given, but security_protocol={v['security_protocol']!r} does not use "
                                  f"SASL; set security_protocol='SASL_PLAINTEXT' or 'SASL_SSL', or drop {key}")
    if v["sasl_oauth_token_provider"] is not None and v["sasl_mechanism"] != "OAUTHBEARER":
        raise ConfigError("sasl_oauth_token_provider: only used with sasl_mechanism='OAUTHBEARER'")
    if v["security_protocol"].startswith("SASL_") and v["sasl_mechanism"] == "OAUTHBEARER":
        if v["sasl_oauth_token_provider"] is None:
            raise ConfigError(f"sasl_oauth_token_provider: required with sasl_mechanism='OAUTHBEARER' "
                              f"(security_protocol={v['security_protocol']})")
    elif v["security_protocol"].startswith("SASL_"):
        if v["sasl_plain_username"] is None or v["sasl_plain_password"] is None:
            raise ConfigError(f"sasl_plain_username/sasl_plain_password: required with "
                              f"security_protocol={v['security_protocol']}")
    if kind == _PRODUCER:
        acks = v["acks"]
        v["acks"] = -1 if acks in ("all", "-1", -1) else int(acks)
        if v["delivery_timeout_ms"] < v["linger_ms"] + v["request_timeout_ms"]:
            raise ConfigError(
                f"delivery_timeout_ms: must be >= linger_ms + request_timeout_ms "
                f"({v['delivery_timeout_ms']} < {v['linger_ms']} + {v['request_timeout_ms']})")
        if v["transactional_id"] is not None and not v["enable_idempotence"]:
            raise ConfigError("enable_idempotence: a transactional producer (transactional_id) needs it True")
        if v["enable_idempotence"]:
            if v["acks"] != -1:
                raise ConfigError("enable_idempotence: requires acks='all' (got acks="
                                  f"{v['acks']}); set enable_idempotence=False to use weaker acks")
            if v["max_in_flight_requests_per_connection"] > 5:
                raise ConfigError("max_in_flight_requests_per_connection: must be <= 5 with enable_idempotence")
    if v["ssl_context"] is not None and v["security_protocol"] not in ("SSL", "SASL_SSL"):
        raise ConfigError(f"ssl_context: given, but security_protocol={v['security_protocol']!r} does not use "
                          f"TLS; set security_protocol='SSL' or 'SASL_SSL'")
    if kind == _CONSUMER:
        if v["heartbeat_interval_ms"] >= v["session_timeout_ms"]:
            raise ConfigError("heartbeat_interval_ms: must be lower than session_timeout_ms")
        if v["rebalance_timeout_ms"] is None:
            v["rebalance_timeout_ms"] = v["max_poll_interval_ms"]
        v["partition_assignment_strategy"] = _assignor_names(v["partition_assignment_strategy"])
        if v["group_protocol"] == "consumer":
            # KIP-848: the broker owns these; Java refuses them too rather than ignoring them
            for key in ("partition_assignment_strategy", "session_timeout_ms", "heartbeat_interval_ms"):
                if key in explicit:
                    raise ConfigError(f"{key}: not used with group_protocol='consumer' (the broker decides it)")
        elif "group_remote_assignor" in explicit and v["group_remote_assignor"] is not None:
            raise ConfigError("group_remote_assignor: only meaningful with group_protocol='consumer'")
        if v["group_id"] is None:
            # as the Java consumer: these only mean something inside a group
            if v["group_instance_id"] is not None:
                raise ConfigError("group_instance_id: static membership needs a group_id")
            if "enable_auto_commit" in explicit and v["enable_auto_commit"]:
                raise ConfigError("enable_auto_commit: cannot be True without a group_id (offsets are "
                                  "committed to the group coordinator)")
