"""ctypes binding to librdkafka's mock cluster, the second real broker for fault tests and benchmarks.

librdkafka ships a multi-broker Kafka mock (``rdkafka_mock.h``) inside the librdkafka that the
``confluent-kafka`` wheel bundles. It speaks the real protocol on loopback TCP listeners, so any
client can use it, and it can move leaders (bumping the leader epoch), script Metadata answers,
inject per-request errors and latency, stop brokers and record every request it receives. That is
exactly what the KIP-580/951/91 end-to-end tests and ``akresil bench --harness mock`` need and what
Tansu cannot do.

Importing this module needs nothing beyond the standard library: librdkafka (and so confluent-kafka)
is looked up only when the first ``MockCluster`` is created. ``akresil.testing`` does not import it,
so users without confluent-kafka never pay for it.

Lifetime: a mock cluster is owned by an ``rd_kafka_t`` handle. We create a producer handle with no
``bootstrap.servers``, so the handle itself never connects anywhere (the mock's listeners are
served by the handle's internal threads, not by a client connection). ``close()`` destroys the
cluster first, then the handle; it is idempotent and also runs from a ``weakref.finalize`` at
interpreter exit, so a forgotten cluster neither leaks threads nor keeps the process alive.

The mock API is documented upstream as experimental and outside librdkafka's ABI guarantees, so
every symbol is declared here with its exact C signature and optional ones are checked before use.
"""

from __future__ import annotations

import ctypes
import glob
import os
import threading
import uuid
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

from akresil.protocol.api import ApiKey   # re-exported: fault scripts name APIs with it

from .control import MOCK, Capability, ControlDefaults, leaders_through

__all__ = [
    "ApiKey",
    "GROUP_VERSION_CAP",
    "MockCluster",
    "MockClusterError",
    "MockControl",
    "MockRequest",
    "TRANSPORT_ERROR",
    "find_librdkafka",
    "librdkafka_version",
]

_T = TypeVar("_T")

#: ``RD_KAFKA_RESP_ERR__TRANSPORT``: pushed as a request error it makes the mock broker drop the
#: client's connection instead of answering.
TRANSPORT_ERROR = -195

#: Highest classic-group versions librdkafka 2.16's mock decodes correctly; ``MockCluster`` caps its
#: advertised versions to these unless told not to (``cap_group_versions=False``). The mock advertises
#: JoinGroup 0-6, SyncGroup 0-4 and LeaveGroup 0-4, but its handlers (``rdkafka_mock_handlers.c``)
#: read the JoinGroup protocols and SyncGroup assignments counts as int32 even in the flexible versions
#: (JoinGroup v6, SyncGroup v4: a compact uvarint count there), so it misreads a correct request and
#: drops the connection; and it parses every LeaveGroup as v0-v2 (``member_id``) and answers without
#: the ``members`` array v3+ requires. librdkafka's own client never sends these versions (it stops at
#: JoinGroup v5, SyncGroup v3, Heartbeat v3, LeaveGroup v1), so nothing upstream exercises them.
#: Heartbeat v4 is decoded and answered correctly and stays uncapped. docs/brokers.md has the bytes.
GROUP_VERSION_CAP: dict[ApiKey, int] = {
    ApiKey.JOIN_GROUP: 5,
    ApiKey.SYNC_GROUP: 3,
    ApiKey.LEAVE_GROUP: 2,
}

_RD_KAFKA_PRODUCER = 0
_ERRSTR_SIZE = 512
_INT16_MAX = 0x7FFF
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


class MockRequest(NamedTuple):
    """One request the mock cluster received while tracking was on.

    ``timestamp_us`` is librdkafka's ``rd_clock()``: CLOCK_MONOTONIC in microseconds, the same
    clock as ``time.monotonic_ns() // 1000`` on Linux, so tests can compare it with their own
    timestamps.
    """

    broker_id: int
    api_key: int
    timestamp_us: int


class MockClusterError(RuntimeError):
    """librdkafka refused a mock-cluster operation; carries its error code and name."""

    def __init__(self, operation: str, code: int, name: str) -> None:
        super().__init__(f"{operation} failed: {name} ({code})")
        self.operation = operation
        self.code = code
        self.name = name


# --------------------------------------------------------------------------- library loading
def find_librdkafka() -> str:
    """Path of the librdkafka bundled in the confluent-kafka wheel (or ``AKRESIL_LIBRDKAFKA``)."""
    override = os.environ.get("AKRESIL_LIBRDKAFKA")
    if override:
        if not os.path.isfile(override):
            raise FileNotFoundError(f"AKRESIL_LIBRDKAFKA points to a missing file: {override!r}")
        return override
    try:
        import confluent_kafka
    except ImportError as exc:  # pragma: no cover - confluent-kafka is a dev dependency
        raise FileNotFoundError(
            "librdkafka mock cluster needs confluent-kafka (pip install confluent-kafka)"
        ) from exc
    package_dir = os.path.dirname(os.path.abspath(confluent_kafka.__file__))
    libs_dir = os.path.join(os.path.dirname(package_dir), "confluent_kafka.libs")
    candidates = sorted(glob.glob(os.path.join(libs_dir, "librdkafka*.so*")))
    if not candidates:
        raise FileNotFoundError(
            f"no bundled librdkafka in {libs_dir!r}; set AKRESIL_LIBRDKAFKA to a librdkafka.so"
        )
    return candidates[0]


_c_void_p = ctypes.c_void_p
_c_char_p = ctypes.c_char_p
_c_int = ctypes.c_int
_c_int16 = ctypes.c_int16
_c_int32 = ctypes.c_int32
_c_int64 = ctypes.c_int64
_c_size_t = ctypes.c_size_t
_c_err = ctypes.c_int  # rd_kafka_resp_err_t is a C enum

# name -> (restype, fixed argtypes); declared exactly as in rdkafka.h / rdkafka_mock.h (2.16).
_SIGNATURES: dict[str, tuple[object, list[object]]] = {
    "rd_kafka_version_str": (_c_char_p, []),
    "rd_kafka_err2name": (_c_char_p, [_c_err]),
    "rd_kafka_conf_new": (_c_void_p, []),
    "rd_kafka_conf_destroy": (None, [_c_void_p]),
    "rd_kafka_conf_set": (_c_int, [_c_void_p, _c_char_p, _c_char_p, _c_char_p, _c_size_t]),
    "rd_kafka_new": (_c_void_p, [_c_int, _c_void_p, _c_char_p, _c_size_t]),
    "rd_kafka_destroy": (None, [_c_void_p]),
    "rd_kafka_mock_cluster_new": (_c_void_p, [_c_void_p, _c_int]),
    "rd_kafka_mock_cluster_destroy": (None, [_c_void_p]),
    "rd_kafka_mock_cluster_bootstraps": (_c_char_p, [_c_void_p]),
    "rd_kafka_mock_topic_create": (_c_err, [_c_void_p, _c_char_p, _c_int, _c_int]),
    "rd_kafka_mock_partition_set_leader": (_c_err, [_c_void_p, _c_char_p, _c_int32, _c_int32]),
    "rd_kafka_mock_partition_set_follower": (_c_err, [_c_void_p, _c_char_p, _c_int32, _c_int32]),
    "rd_kafka_mock_partition_push_leader_response": (
        _c_err,
        [_c_void_p, _c_char_p, _c_int, _c_int32, _c_int32],
    ),
    "rd_kafka_mock_push_request_errors_array": (
        None,
        [_c_void_p, _c_int16, _c_size_t, ctypes.POINTER(_c_err)],
    ),
    "rd_kafka_mock_clear_request_errors": (None, [_c_void_p, _c_int16]),
    # variadic: (err, rtt_ms) int pairs follow the fixed arguments
    "rd_kafka_mock_broker_push_request_error_rtts": (
        _c_err,
        [_c_void_p, _c_int32, _c_int16, _c_size_t],
    ),
    "rd_kafka_mock_broker_error_stack_cnt": (
        _c_err,
        [_c_void_p, _c_int32, _c_int16, ctypes.POINTER(_c_size_t)],
    ),
    "rd_kafka_mock_broker_set_down": (_c_err, [_c_void_p, _c_int32]),
    "rd_kafka_mock_broker_set_up": (_c_err, [_c_void_p, _c_int32]),
    "rd_kafka_mock_broker_set_rtt": (_c_err, [_c_void_p, _c_int32, _c_int]),
    "rd_kafka_mock_broker_decommission": (_c_err, [_c_void_p, _c_int32]),
    "rd_kafka_mock_set_apiversion": (_c_err, [_c_void_p, _c_int16, _c_int16, _c_int16]),
    "rd_kafka_mock_start_request_tracking": (None, [_c_void_p]),
    "rd_kafka_mock_stop_request_tracking": (None, [_c_void_p]),
    "rd_kafka_mock_get_requests": (ctypes.POINTER(_c_void_p), [_c_void_p, ctypes.POINTER(_c_size_t)]),
    "rd_kafka_mock_request_id": (_c_int32, [_c_void_p]),
    "rd_kafka_mock_request_api_key": (_c_int16, [_c_void_p]),
    "rd_kafka_mock_request_timestamp": (_c_int64, [_c_void_p]),
    "rd_kafka_mock_request_destroy": (None, [_c_void_p]),
    "rd_kafka_mock_request_destroy_array": (None, [ctypes.POINTER(_c_void_p), _c_size_t]),
    "rd_kafka_mock_clear_requests": (None, [_c_void_p]),
    # share groups (KIP-932) and the consumer group protocol (KIP-848): (cluster, int) setters
    "rd_kafka_mock_sharegroup_set_auto_offset_reset": (None, [_c_void_p, _c_int]),
    "rd_kafka_mock_sharegroup_set_record_lock_duration": (None, [_c_void_p, _c_int]),
    "rd_kafka_mock_sharegroup_set_session_timeout": (None, [_c_void_p, _c_int]),
    "rd_kafka_mock_sharegroup_set_heartbeat_interval": (None, [_c_void_p, _c_int]),
    "rd_kafka_mock_sharegroup_set_max_delivery_attempts": (None, [_c_void_p, _c_int]),
    "rd_kafka_mock_set_group_consumer_session_timeout_ms": (None, [_c_void_p, _c_int]),
    "rd_kafka_mock_set_group_consumer_heartbeat_interval_ms": (None, [_c_void_p, _c_int]),
}
# Without these the harness is useless; the rest fail only when called.
_REQUIRED = (
    "rd_kafka_conf_new",
    "rd_kafka_conf_set",
    "rd_kafka_new",
    "rd_kafka_destroy",
    "rd_kafka_err2name",
    "rd_kafka_mock_cluster_new",
    "rd_kafka_mock_cluster_destroy",
    "rd_kafka_mock_cluster_bootstraps",
)

_lib_lock = threading.Lock()
_lib: ctypes.CDLL | None = None


def _load() -> ctypes.CDLL:
    """Load librdkafka once and declare every signature (wrong ones corrupt the stack silently)."""
    global _lib
    with _lib_lock:
        if _lib is None:
            path = find_librdkafka()
            lib = ctypes.CDLL(path)
            missing = [name for name in _REQUIRED if not hasattr(lib, name)]
            if missing:
                raise OSError(f"{path} lacks the mock cluster API: missing {', '.join(missing)}")
            for name, (restype, argtypes) in _SIGNATURES.items():
                if hasattr(lib, name):
                    fn = getattr(lib, name)
                    fn.restype = restype
                    fn.argtypes = argtypes
            _lib = lib
        return _lib


def librdkafka_version() -> str:
    """Version string of the librdkafka the harness drives (e.g. ``"2.16.0"``)."""
    lib = _load()
    raw = lib.rd_kafka_version_str()
    return raw.decode() if raw else "unknown"


def _destroy(lib: ctypes.CDLL, cluster: int, handle: int) -> None:
    """Destroy the cluster before its owning handle, as librdkafka requires."""
    lib.rd_kafka_mock_cluster_destroy(cluster)
    lib.rd_kafka_destroy(handle)


# --------------------------------------------------------------------------- argument checks
def _check_int(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")
    return value


def _check_topic(topic: object) -> bytes:
    if not isinstance(topic, str):
        raise TypeError(f"topic must be a str, got {type(topic).__name__}")
    if not topic:
        raise ValueError("topic must not be empty")
    return topic.encode()


def _check_api_key(api_key: object) -> int:
    return _check_int("api_key", api_key, 0, _INT16_MAX)


# --------------------------------------------------------------------------- the cluster
class MockCluster:
    """A librdkafka mock cluster with ``num_brokers`` brokers (ids 1..num_brokers) on loopback.

    Use as a context manager or call :meth:`close`. Broker-addressing methods take a broker id;
    ``-1`` means every broker where librdkafka allows it (down/up/rtt).

    ``cap_group_versions`` (default on) limits the classic-group APIs to :data:`GROUP_VERSION_CAP`, the
    versions the mock decodes correctly, so any client can join a consumer group on it; turn it off only
    to observe the mock's own flexible-version handling.
    """

    def __init__(self, num_brokers: int = 3, *, log_level: int = 3, cap_group_versions: bool = True) -> None:
        _check_int("num_brokers", num_brokers, 1, 1000)
        _check_int("log_level", log_level, 0, 7)
        self._lib = lib = _load()
        errstr = ctypes.create_string_buffer(_ERRSTR_SIZE)
        conf = lib.rd_kafka_conf_new()
        # No bootstrap.servers: the owning handle only hosts the mock, it never opens a client
        # connection. log_level 3 keeps librdkafka's "no bootstrap servers" notice off stderr.
        settings = {"client.id": "akresil-mock-owner", "log_level": str(log_level)}
        for key, value in settings.items():
            if lib.rd_kafka_conf_set(conf, key.encode(), value.encode(), errstr, _ERRSTR_SIZE) != 0:
                lib.rd_kafka_conf_destroy(conf)
                raise MockClusterError(f"conf {key}={value}", -1, errstr.value.decode())
        handle = lib.rd_kafka_new(_RD_KAFKA_PRODUCER, conf, errstr, _ERRSTR_SIZE)
        if not handle:  # rd_kafka_new destroys conf only on success
            lib.rd_kafka_conf_destroy(conf)
            raise MockClusterError("rd_kafka_new", -1, errstr.value.decode())
        cluster = lib.rd_kafka_mock_cluster_new(handle, num_brokers)
        if not cluster:
            lib.rd_kafka_destroy(handle)
            raise MockClusterError("rd_kafka_mock_cluster_new", -1, "returned NULL")
        self._handle: int = handle
        self._cluster: int = cluster
        self._broker_ids: list[int] = list(range(1, num_brokers + 1))
        self.bootstrap_servers: str = lib.rd_kafka_mock_cluster_bootstraps(cluster).decode()
        self._addresses = dict(zip(self._broker_ids, self.bootstrap_servers.split(","), strict=True))
        self._finalizer = weakref.finalize(self, _destroy, lib, cluster, handle)
        if cap_group_versions:
            for api_key, max_version in GROUP_VERSION_CAP.items():
                self.set_api_version(api_key, 0, max_version)

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Destroy the cluster, then its handle. Safe to call more than once."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def __enter__(self) -> MockCluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else self.bootstrap_servers
        return f"MockCluster(brokers={self._broker_ids}, {state})"

    # ------------------------------------------------------------------ helpers
    @property
    def broker_ids(self) -> tuple[int, ...]:
        """Ids of brokers still in the cluster (decommissioned ones are removed)."""
        return tuple(self._broker_ids)

    def broker_address(self, broker_id: int) -> tuple[str, int]:
        """(host, port) of a broker's listener, e.g. to assert a refused connection."""
        self._check_broker(broker_id, allow_all=False)
        host, _, port = self._addresses[broker_id].rpartition(":")
        return host, int(port)

    def _ptr(self) -> int:
        if self.closed:
            raise RuntimeError("MockCluster is closed")
        return self._cluster

    def _fn(self, name: str) -> Callable[..., Any]:
        fn: Callable[..., Any] | None = getattr(self._lib, name, None)
        if fn is None:
            raise NotImplementedError(f"this librdkafka ({librdkafka_version()}) has no {name}")
        return fn

    def _check_broker(self, broker_id: object, *, allow_all: bool) -> int:
        _check_int("broker_id", broker_id, -1 if allow_all else 0, _INT32_MAX)
        assert isinstance(broker_id, int)
        if broker_id != -1 and broker_id not in self._broker_ids:
            raise ValueError(f"unknown broker_id {broker_id}; brokers are {self._broker_ids}")
        return broker_id

    def _call(self, name: str, *args: object) -> None:
        """Call a mock function returning rd_kafka_resp_err_t and raise on failure."""
        code = self._fn(name)(self._ptr(), *args)
        if code:
            raw = self._lib.rd_kafka_err2name(code)
            raise MockClusterError(name, code, raw.decode() if raw else "unknown")

    # ------------------------------------------------------------------ topics and leaders
    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1) -> None:
        """Create a topic (the mock has no CreateTopics API; clients cannot do it themselves)."""
        topic = _check_topic(name)
        _check_int("partitions", partitions, 1, 1_000_000)
        _check_int("replication_factor", replication_factor, 1, len(self._broker_ids))
        self._call("rd_kafka_mock_topic_create", topic, partitions, replication_factor)

    def set_leader(self, topic: str, partition: int, broker_id: int) -> None:
        """Move a partition's leadership (``-1``: leaderless); bumps its leader epoch by one.

        Afterwards the old leader answers Produce/Fetch for it with NOT_LEADER_OR_FOLLOWER (with
        the KIP-951 CurrentLeader hint on new enough versions); Metadata shows the new leader.
        """
        raw = _check_topic(topic)
        _check_int("partition", partition, 0, _INT32_MAX)
        self._check_broker(broker_id, allow_all=True)
        self._call("rd_kafka_mock_partition_set_leader", raw, partition, broker_id)

    def set_follower(self, topic: str, partition: int, broker_id: int) -> None:
        """Set the preferred replica a consumer is told to fetch from (KIP-392)."""
        raw = _check_topic(topic)
        _check_int("partition", partition, 0, _INT32_MAX)
        _check_int("broker_id", broker_id, 0, _INT32_MAX)
        self._call("rd_kafka_mock_partition_set_follower", raw, partition, broker_id)

    def push_leader_response(
        self, topic: str, partition: int, leader_id: int, leader_epoch: int
    ) -> None:
        """Make the next Metadata answer for this partition report ``leader_id``/``leader_epoch``.

        Each call queues one answer; push several to keep metadata stale for several refreshes.
        """
        raw = _check_topic(topic)
        _check_int("partition", partition, 0, _INT32_MAX)
        _check_int("leader_id", leader_id, -1, _INT32_MAX)
        _check_int("leader_epoch", leader_epoch, -1, _INT32_MAX)
        self._call(
            "rd_kafka_mock_partition_push_leader_response", raw, partition, leader_id, leader_epoch
        )

    # ------------------------------------------------------------------ request errors
    def push_request_errors(self, api_key: int, errors: Sequence[int]) -> None:
        """The next ``len(errors)`` requests with ``api_key`` (to any broker) fail in this order.

        ``0`` lets one request through; ``TRANSPORT_ERROR`` drops the connection instead.
        """
        key = _check_api_key(api_key)
        codes = self._check_errors(errors)
        array = (_c_err * len(codes))(*codes)
        self._fn("rd_kafka_mock_push_request_errors_array")(self._ptr(), key, len(codes), array)

    def push_request_errors_with_rtt(
        self, broker_id: int, api_key: int, errors: Iterable[tuple[int, int]]
    ) -> None:
        """Per-broker variant: each entry is ``(error_code, rtt_ms)``; the response is delayed by
        ``rtt_ms`` (0 answers at once) and carries ``error_code`` (0 for success).

        Broker-level errors take precedence over cluster-level ones.
        """
        self._check_broker(broker_id, allow_all=False)
        key = _check_api_key(api_key)
        pairs = list(errors)
        if not pairs:
            raise ValueError("errors must not be empty")
        varargs: list[ctypes.c_int] = []
        for i, pair in enumerate(pairs):
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise TypeError(f"errors[{i}] must be an (error_code, rtt_ms) tuple, got {pair!r}")
            code, rtt_ms = pair
            _check_int(f"errors[{i}] error_code", code, _INT32_MIN, _INT32_MAX)
            _check_int(f"errors[{i}] rtt_ms", rtt_ms, 0, _INT32_MAX)
            varargs += [_c_err(code), _c_int(rtt_ms)]
        # Variadic ints are passed exactly like fixed ones on the SysV x86-64 and AArch64 ABIs
        # (libffi also zeroes %al, the SSE-register count varargs callees read).
        self._call(
            "rd_kafka_mock_broker_push_request_error_rtts", broker_id, key, len(pairs), *varargs
        )

    def broker_error_stack_count(self, broker_id: int, api_key: int) -> int:
        """How many pushed per-broker errors for ``api_key`` are still waiting to be used."""
        self._check_broker(broker_id, allow_all=False)
        key = _check_api_key(api_key)
        count = _c_size_t(0)
        self._call("rd_kafka_mock_broker_error_stack_cnt", broker_id, key, ctypes.byref(count))
        return count.value

    def clear_request_errors(self, api_key: int) -> None:
        """Drop the cluster-level errors still queued for ``api_key``."""
        key = _check_api_key(api_key)
        self._fn("rd_kafka_mock_clear_request_errors")(self._ptr(), key)

    @staticmethod
    def _check_errors(errors: Sequence[int]) -> list[int]:
        if isinstance(errors, (str, bytes)) or not isinstance(errors, Sequence):
            raise TypeError(f"errors must be a sequence of ints, got {type(errors).__name__}")
        if not errors:
            raise ValueError("errors must not be empty")
        return [_check_int(f"errors[{i}]", e, _INT32_MIN, _INT32_MAX) for i, e in enumerate(errors)]

    def set_api_version(self, api_key: int, min_version: int, max_version: int) -> None:
        """Limit the versions the mock advertises for ``api_key`` (-1, -1 disables the API)."""
        key = _check_api_key(api_key)
        _check_int("min_version", min_version, -1, _INT16_MAX)
        _check_int("max_version", max_version, -1, _INT16_MAX)
        if min_version > max_version:
            raise ValueError(f"min_version {min_version} > max_version {max_version}")
        self._call("rd_kafka_mock_set_apiversion", key, min_version, max_version)

    def let_followers_sync_first(self, delay_ms: int = 300) -> None:
        """Order the next rebalance's SyncGroups the way the mock's group coordinator needs them.

        The mock completes a rebalance the moment the leader's SyncGroup brings every member's assignment
        and answers only the members already waiting; a follower whose SyncGroup arrives later is answered
        INVALID_REQUEST (with a null assignment, which the field does not allow), so it rejoins and the
        group never settles when the leader is quick. Kafka instead hands the late follower its assignment.
        This delays the first JoinGroup answer of each broker by ``delay_ms``: for a new group that is the
        elected leader's (the mock elects the first member that joined), so the followers sync first.
        It covers one rebalance: call it again before a membership change a test wants to settle.
        """
        _check_int("delay_ms", delay_ms, 1, _INT32_MAX)
        for broker_id in self._broker_ids:
            self.push_request_errors_with_rtt(broker_id, ApiKey.JOIN_GROUP, [(0, delay_ms)])

    # ------------------------------------------------------------------ groups (KIP-848, KIP-932)
    def _set_int(self, name: str, what: str, value: int, low: int = 0) -> None:
        self._fn(name)(self._ptr(), _check_int(what, value, low, _INT32_MAX))

    def share_set_auto_offset_reset(self, earliest: bool) -> None:
        """Where new share groups start: the earliest offset (True) or the log end (False, Kafka's default).

        Applies to share groups the mock has not seen yet; set it before the first consumer joins.
        """
        self._set_int("rd_kafka_mock_sharegroup_set_auto_offset_reset", "earliest", int(bool(earliest)))

    def share_set_record_lock_duration(self, ms: int) -> None:
        """Acquisition lock duration of share-group records (Kafka's ``group.share.record.lock.duration.ms``)."""
        self._set_int("rd_kafka_mock_sharegroup_set_record_lock_duration", "ms", ms)

    def share_set_session_timeout(self, ms: int) -> None:
        """Share-group member session timeout (default 45 s); also expires idle share-fetch sessions."""
        self._set_int("rd_kafka_mock_sharegroup_set_session_timeout", "ms", ms, 1)

    def share_set_heartbeat_interval(self, ms: int) -> None:
        """Heartbeat interval the mock gives share-group members (default 5 s)."""
        self._set_int("rd_kafka_mock_sharegroup_set_heartbeat_interval", "ms", ms, 1)

    def share_set_max_delivery_attempts(self, attempts: int) -> None:
        """Deliveries after which a released record is archived instead of made available (default 5)."""
        self._set_int("rd_kafka_mock_sharegroup_set_max_delivery_attempts", "attempts", attempts)

    def consumer_group_set_session_timeout(self, ms: int) -> None:
        """KIP-848 member session timeout."""
        self._set_int("rd_kafka_mock_set_group_consumer_session_timeout_ms", "ms", ms, 1)

    def consumer_group_set_heartbeat_interval(self, ms: int) -> None:
        """KIP-848 heartbeat interval given to members."""
        self._set_int("rd_kafka_mock_set_group_consumer_heartbeat_interval_ms", "ms", ms, 1)

    # ------------------------------------------------------------------ brokers
    def broker_set_down(self, broker_id: int) -> None:
        """Close the broker's connections and refuse new ones; leadership does not move."""
        self._call("rd_kafka_mock_broker_set_down", self._check_broker(broker_id, allow_all=True))

    def broker_set_up(self, broker_id: int) -> None:
        """Accept connections again after :meth:`broker_set_down`."""
        self._call("rd_kafka_mock_broker_set_up", self._check_broker(broker_id, allow_all=True))

    def broker_set_rtt(self, broker_id: int, rtt_ms: int) -> None:
        """Delay every response from the broker by ``rtt_ms`` (0 removes the delay)."""
        bid = self._check_broker(broker_id, allow_all=True)
        _check_int("rtt_ms", rtt_ms, 0, _INT32_MAX)
        self._call("rd_kafka_mock_broker_set_rtt", bid, rtt_ms)

    def broker_decommission(self, broker_id: int) -> None:
        """Remove the broker; its partitions are reassigned to the remaining brokers."""
        bid = self._check_broker(broker_id, allow_all=False)
        if len(self._broker_ids) == 1:
            raise ValueError("cannot decommission the last broker")
        self._call("rd_kafka_mock_broker_decommission", bid)
        self._broker_ids.remove(bid)

    # ------------------------------------------------------------------ request tracking
    def start_request_tracking(self) -> None:
        """Record every request from now on (broker id, API key, arrival time)."""
        self._fn("rd_kafka_mock_start_request_tracking")(self._ptr())

    def stop_request_tracking(self) -> list[MockRequest]:
        """Stop recording and return what was recorded.

        The header says stopping keeps the recorded requests, but librdkafka 2.16 discards them
        (observed), so they are read out first; afterwards :meth:`get_requests` is empty.
        """
        recorded = self.get_requests()
        self._fn("rd_kafka_mock_stop_request_tracking")(self._ptr())
        return recorded

    def get_requests(self) -> list[MockRequest]:
        """Copy of the requests recorded so far, in arrival order."""
        lib = self._lib
        count = _c_size_t(0)
        array = self._fn("rd_kafka_mock_get_requests")(self._ptr(), ctypes.byref(count))
        n = count.value
        if not array:
            return []
        try:
            return [
                MockRequest(
                    lib.rd_kafka_mock_request_id(array[i]),
                    lib.rd_kafka_mock_request_api_key(array[i]),
                    lib.rd_kafka_mock_request_timestamp(array[i]),
                )
                for i in range(n)
            ]
        finally:
            # The array and every element are ours: destroy_array frees both.
            if hasattr(lib, "rd_kafka_mock_request_destroy_array"):
                lib.rd_kafka_mock_request_destroy_array(array, n)
            else:  # pragma: no cover - librdkafka < 2.4 lacks destroy_array
                for i in range(n):
                    lib.rd_kafka_mock_request_destroy(array[i])
                _libc_free(array)

    def clear_requests(self) -> None:
        """Forget the requests recorded so far (tracking stays on or off as it was)."""
        self._fn("rd_kafka_mock_clear_requests")(self._ptr())


class MockControl(ControlDefaults):
    """A ``BrokerControl`` over a ``MockCluster`` (``mock`` stays reachable for what only the mock does).

    The mock's calls block until its own thread served them, which now and then takes ~1 s, so they run in a
    worker thread and the event loop (the client under test) goes on meanwhile.  A topic is laid out as
    FaultProxy lays them out (partition p led by ``node_ids[p % N]``), and its leaders and epochs are tracked
    here rather than asked of Metadata, which would use up answers queued by ``stale_metadata_for_s``.
    """

    capabilities: frozenset[Capability] = MOCK

    def __init__(self, mock: MockCluster) -> None:
        self.mock = mock
        self._leaders: dict[tuple[str, int], tuple[int, int]] = {}

    def __repr__(self) -> str:
        return f"<MockControl {self.mock!r}>"

    @property
    def bootstrap_servers(self) -> str:
        return self.mock.bootstrap_servers

    @property
    def node_ids(self) -> tuple[int, ...]:
        return self.mock.broker_ids

    async def _call(self, fn: Callable[..., _T], *args: object) -> _T:
        import anyio.to_thread
        return await anyio.to_thread.run_sync(fn, *args)

    async def create_topic(self, name: str | None = None, *, partitions: int = 1, replication_factor: int = 1,
                           configs: Mapping[str, str] | None = None) -> str:
        if configs:
            raise ValueError(f"configs: librdkafka's mock has no topic configs, got {dict(configs)!r}")
        topic = name or f"t-{uuid.uuid4().hex[:12]}"
        await self._call(self.mock.create_topic, topic, partitions, replication_factor)
        nodes = self.node_ids
        leaders = await leaders_through(self.bootstrap_servers, topic)
        for p in range(partitions):
            leader, epoch = leaders[p]
            want = nodes[p % len(nodes)]
            if leader != want:
                await self._call(self.mock.set_leader, topic, p, want)
                leader, epoch = want, epoch + 1
            self._leaders[(topic, p)] = (leader, epoch)
        return topic

    async def leader(self, topic: str, partition: int) -> tuple[int, int]:
        known = self._leaders.get((topic, partition))
        return known if known is not None else (await leaders_through(self.bootstrap_servers, topic))[partition]

    async def move_leader(self, topic: str, partition: int, to_node: int, *,
                          stale_metadata_for_s: float = 0.0) -> int:
        """``set_leader`` (the epoch rises by one, as the mock does).  ``stale_metadata_for_s`` > 0: Metadata
        keeps naming the old leader and epoch; the mock queues answers rather than a duration, so 20 are
        queued (more refreshes than a test's few seconds ask for)."""
        if stale_metadata_for_s < 0:
            raise ValueError(f"stale_metadata_for_s: must be >= 0, got {stale_metadata_for_s!r}")
        old, epoch = await self.leader(topic, partition)
        await self._call(self.mock.set_leader, topic, partition, to_node)
        self._leaders[(topic, partition)] = (to_node, epoch + 1)
        for _ in range(20 if stale_metadata_for_s > 0 else 0):
            await self._call(self.mock.push_leader_response, topic, partition, old, epoch)
        return epoch + 1

    async def stop_node(self, node: int) -> None:
        """The mock has no controlled shutdown: a stopped broker closes its connections and refuses new ones,
        and its leaderships stay where they are (as ``kill_node``)."""
        await self._call(self.mock.broker_set_down, node)

    async def kill_node(self, node: int) -> None:
        await self._call(self.mock.broker_set_down, node)

    async def start_node(self, node: int) -> None:
        await self._call(self.mock.broker_set_up, node)


def _libc_free(pointer: ctypes.Array[ctypes.c_void_p] | ctypes.c_void_p | int) -> None:  # pragma: no cover - old-librdkafka fallback only
    libc = ctypes.CDLL(None)
    libc.free.argtypes = [_c_void_p]
    libc.free(ctypes.cast(pointer, _c_void_p))
