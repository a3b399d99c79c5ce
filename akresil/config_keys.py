"""Static types of the clients' keyword arguments: ``Producer(**config: Unpack[ProducerConfig])`` and so on.

One signature per client, not overloads: a checker then reports a misspelt key or a wrong value under the
key's name ("Unexpected keyword argument "linger_msec" for "Producer"; did you mean "linger_ms"?").

Type checkers (mypy, pyright) then flag an unknown key or a wrong value type in users' code before it runs;
at run time ``config.resolve`` still checks every value against the table in ``akresil.config`` and raises
``ConfigError`` naming the key.  These TypedDicts mirror that table; tests/unit/test_typing.py checks that
every key, its nullability and its choices agree with it, so the two cannot drift apart.
"""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal, Required, Sequence, TypedDict

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from .core.partitioner import Partitioner

__all__ = ["CommonConfig", "ProducerConfig", "ConsumerConfig", "ShareConsumerConfig", "AdminConfig"]


class CommonConfig(TypedDict, total=False):
    """Keys every client takes."""

    bootstrap_servers: str | Sequence[str]
    client_id: str
    request_timeout_ms: int
    retry_backoff_ms: int
    retry_backoff_max_ms: int
    reconnect_backoff_ms: int
    reconnect_backoff_max_ms: int
    socket_connection_setup_timeout_ms: int
    bootstrap_timeout_ms: int
    metadata_max_age_ms: int
    metadata_recovery_strategy: Literal["none", "rebootstrap"]
    metadata_recovery_rebootstrap_trigger_ms: int
    connections_max_idle_ms: int
    max_in_flight_requests_per_connection: int
    receive_message_max_bytes: int
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
    ssl_context: ssl.SSLContext | None
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
    sasl_plain_username: str | None
    sasl_plain_password: str | None
    #: OAUTHBEARER: a callable (sync or async) returning an ``OAuthToken`` or a JWT string
    sasl_oauth_token_provider: Callable[[], Any] | None
    metrics_registry: CollectorRegistry | None
    #: KIP-714: push metrics to the cluster when an operator subscribed this client (default True, as Java)
    enable_metrics_push: bool


class ProducerConfig(CommonConfig, total=False):
    #: event hook objects (``akresil.core.events``): ``on_<event>`` methods or ``on_event``
    hooks: Iterable[object]
    acks: Literal[0, 1, -1, "all", "0", "1", "-1"]
    enable_idempotence: bool
    linger_ms: int
    batch_size: int
    buffer_memory: int
    max_block_ms: int
    delivery_timeout_ms: int
    max_request_size: int
    compression_type: Literal["none", "gzip", "snappy", "lz4", "zstd"]
    partitioner: Partitioner | None
    partitioner_ignore_keys: bool
    transactional_id: str | None
    transaction_timeout_ms: int


class ConsumerConfig(CommonConfig, total=False):
    hooks: Iterable[object]
    group_id: str | None
    group_instance_id: str | None
    group_protocol: Literal["classic", "consumer"]
    group_remote_assignor: str | None
    session_timeout_ms: int
    heartbeat_interval_ms: int
    max_poll_interval_ms: int
    rebalance_timeout_ms: int | None
    partition_assignment_strategy: str | Sequence[str]
    fetch_min_bytes: int
    fetch_max_bytes: int
    fetch_max_wait_ms: int
    max_partition_fetch_bytes: int
    max_poll_records: int
    isolation_level: Literal["read_uncommitted", "read_committed"]
    auto_offset_reset: Literal["earliest", "latest", "none"]
    enable_auto_commit: bool
    auto_commit_interval_ms: int
    check_crcs: bool
    client_rack: str
    #: bound on prefetched record bytes (default ``fetch_max_bytes``)
    max_buffered_bytes: int
    default_api_timeout_ms: int


class ShareConsumerConfig(CommonConfig, total=False):
    """The consumer keys a share group uses (the broker keeps positions, locks and assignment)."""

    hooks: Iterable[object]
    group_id: Required[str]
    max_poll_interval_ms: int
    fetch_min_bytes: int
    fetch_max_bytes: int
    fetch_max_wait_ms: int
    max_poll_records: int
    check_crcs: bool
    default_api_timeout_ms: int
    client_rack: str


class AdminConfig(CommonConfig, total=False):
    default_api_timeout_ms: int
