"""Exceptions: one class per Kafka error code, plus the client's own.

Every broker error code maps to a class (``error_for_code``) so callers can
``except NotLeaderOrFollowerError`` and the resilience core can branch on
``retriable`` / ``invalid_metadata`` without string matching.  Codes and their
retriable flags follow Kafka's protocol error table (the Java client's
``Errors`` enum) as facts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:     # types imports nothing of errors, but errors loads first everywhere: names for the checker only
    from .types import ConsumerRecord, TopicPartition


class KafkaError(Exception):
    """Base of every akresil exception."""

    errno: ClassVar[int] = -1
    retriable: ClassVar[bool] = False
    #: the error means the client's view of leaders is stale: refresh metadata
    invalid_metadata: ClassVar[bool] = False
    description: ClassVar[str] = ""

    def __init__(self, *args: object) -> None:
        if not args and self.description:
            args = (self.description,)
        super().__init__(*args)


class BrokerResponseError(KafkaError):
    """An error code returned by a broker."""


# --------------------------------------------------------------------------- client-side errors
class ProtocolError(KafkaError):
    """Bytes on the wire do not follow the Kafka protocol (malformed, truncated, mismatched)."""


class KafkaConnectionError(KafkaError):
    """A connection failed or closed; the request may be retried on a new connection.

    ``reason`` is the cause alone, without the address the message names (the bootstrap error lists each
    address with its reason once)."""

    retriable = True
    invalid_metadata = True

    def __init__(self, *args: object, reason: str | None = None) -> None:
        super().__init__(*args)
        self.reason: str = reason if reason is not None else (str(args[0]) if args else "")


class RequestTimeoutError(KafkaError):
    """No response arrived within ``request_timeout_ms`` (client side)."""

    retriable = True


class KafkaTimeoutError(KafkaError, TimeoutError):  # type: ignore[misc]  # errno: the Kafka code (-1), not an OS one
    """A client-side wait (metadata, buffer space, flush) exceeded its bound, e.g. ``max_block_ms``."""


class ConfigError(KafkaError, ValueError):
    """A configuration key is unknown or has a bad value; the message names the key."""


class DeliveryTimeoutError(KafkaError):
    """A record was not acknowledged within ``delivery_timeout_ms`` (KIP-91)."""


class BufferFullError(KafkaError):
    """No buffer space became free within ``max_block_ms``."""


class ClientClosedError(KafkaError):
    """The client was closed before the operation could complete."""


class UnsupportedVersionError(KafkaError):
    """No API version is common to client and broker (or a field is not in the chosen version)."""

    errno = 35


class IllegalStateError(KafkaError):
    """An operation was called in a state where it is not allowed."""


class RecordDeserializationError(KafkaError):
    """A fetched record whose key or value the consumer's deserializer refused (the deserializer's exception is
    ``__cause__``). Raised from the poll that reaches it, after the records before it, and again on every poll
    until the application seeks: ``seek(topic_partition, next_offset)`` skips that one record (the Java
    consumer's ``RecordDeserializationException``)."""

    def __init__(self, message: str, *, topic_partition: TopicPartition | None = None, offset: int = -1,
                 origin: str = "value", records: list[ConsumerRecord[Any, Any]] | None = None,
                 raw: ConsumerRecord[bytes, bytes] | None = None) -> None:
        super().__init__(message)
        #: the record as fetched (a ``ConsumerRecord`` with the key and value bytes not deserialized): what a
        #: dead-letter topic or a log keeps of it
        self.raw = raw
        #: the record's ``TopicPartition`` and offset
        self.topic_partition = topic_partition
        self.offset = offset
        #: where to seek to skip the record
        self.next_offset = offset + 1
        #: ``"key"`` or ``"value"``: which of the two its deserializer refused
        self.origin = origin
        #: the records of its batch before it (handed out first; emptied once taken)
        self.records: list[ConsumerRecord[Any, Any]] = records or []


class TransactionAbortedError(KafkaError):
    """A record was not written because its transaction was aborted (``abort_transaction``)."""


class CommitFailedError(KafkaError):
    """An offset commit failed because the group rebalanced; the records will be redelivered."""


class NoBrokersAvailableError(KafkaError):
    """No bootstrap server could be reached."""

    retriable = True


class NoOffsetForPartitionError(KafkaError):
    """A partition has no committed offset (or its offset is out of range) and ``auto_offset_reset='none'``."""


class AcquisitionLockExpiredError(KafkaError):
    """A share-group record's acquisition lock ran out before it was acknowledged (KIP-932).

    The broker has already made the record available again (perhaps to another consumer), so this
    consumer's acknowledgement would not count; it is refused locally instead of being sent as if held.
    """


class TaskTimeoutError(KafkaError):
    """A runner task kept timing out for longer than ``task_timeout_ms`` (KIP-572)."""


# --------------------------------------------------------------------------- broker error codes


class UnknownServerError(BrokerResponseError):
    """The server experienced an unexpected error when processing the request."""

    errno = -1
    description = 'The server experienced an unexpected error when processing the request.'


class OffsetOutOfRangeError(BrokerResponseError):
    """The requested offset is not within the range of offsets maintained by the server."""

    errno = 1
    description = 'The requested offset is not within the range of offsets maintained by the server.'


class CorruptRecordError(BrokerResponseError):
    """The record failed its CRC check or is otherwise corrupt."""

    errno = 2
    retriable = True
    description = 'The record failed its CRC check or is otherwise corrupt.'


class UnknownTopicOrPartitionError(BrokerResponseError):
    """The broker does not host this topic-partition."""

    errno = 3
    retriable = True
    invalid_metadata = True
    description = 'The broker does not host this topic-partition.'


class InvalidFetchSizeError(BrokerResponseError):
    """The requested fetch size is invalid."""

    errno = 4
    description = 'The requested fetch size is invalid.'


class LeaderNotAvailableError(BrokerResponseError):
    """There is no leader for this topic-partition (leader election in progress)."""

    errno = 5
    retriable = True
    invalid_metadata = True
    description = 'There is no leader for this topic-partition (leader election in progress).'


class NotLeaderOrFollowerError(BrokerResponseError):
    """The broker is not the leader or a follower of this partition."""

    errno = 6
    retriable = True
    invalid_metadata = True
    description = 'The broker is not the leader or a follower of this partition.'


class RequestTimedOutError(BrokerResponseError):
    """The request timed out on the broker."""

    errno = 7
    retriable = True
    description = 'The request timed out on the broker.'


class BrokerNotAvailableError(BrokerResponseError):
    """The broker is not available."""

    errno = 8
    description = 'The broker is not available.'


class ReplicaNotAvailableError(BrokerResponseError):
    """The replica is not available for the requested topic-partition."""

    errno = 9
    retriable = True
    invalid_metadata = True
    description = 'The replica is not available for the requested topic-partition.'


class MessageSizeTooLargeError(BrokerResponseError):
    """The request included a message larger than the max message size the server will accept."""

    errno = 10
    description = 'The request included a message larger than the max message size the server will accept.'


class StaleControllerEpochError(BrokerResponseError):
    """The controller moved to another broker."""

    errno = 11
    description = 'The controller moved to another broker.'


class OffsetMetadataTooLargeError(BrokerResponseError):
    """The metadata field of the offset request was too large."""

    errno = 12
    description = 'The metadata field of the offset request was too large.'


class NetworkExceptionError(BrokerResponseError):
    """The server disconnected before a response was received."""

    errno = 13
    retriable = True
    invalid_metadata = True
    description = 'The server disconnected before a response was received.'


class CoordinatorLoadInProgressError(BrokerResponseError):
    """The coordinator is loading and hence can't process requests."""

    errno = 14
    retriable = True
    description = "The coordinator is loading and hence can't process requests."


class CoordinatorNotAvailableError(BrokerResponseError):
    """The coordinator is not available."""

    errno = 15
    retriable = True
    description = 'The coordinator is not available.'


class NotCoordinatorError(BrokerResponseError):
    """This is not the correct coordinator."""

    errno = 16
    retriable = True
    description = 'This is not the correct coordinator.'


class InvalidTopicError(BrokerResponseError):
    """The request attempted to perform an operation on an invalid topic."""

    errno = 17
    description = 'The request attempted to perform an operation on an invalid topic.'


class RecordListTooLargeError(BrokerResponseError):
    """The request included message batch larger than the configured segment size on the server."""

    errno = 18
    description = 'The request included message batch larger than the configured segment size on the server.'


class NotEnoughReplicasError(BrokerResponseError):
    """Messages are rejected since there are fewer in-sync replicas than required."""

    errno = 19
    retriable = True
    description = 'Messages are rejected since there are fewer in-sync replicas than required.'


class NotEnoughReplicasAfterAppendError(BrokerResponseError):
    """Messages are written to the log, but to fewer in-sync replicas than required."""

    errno = 20
    retriable = True
    description = 'Messages are written to the log, but to fewer in-sync replicas than required.'


class InvalidRequiredAcksError(BrokerResponseError):
    """Produce request specified an invalid value for required acks."""

    errno = 21
    description = 'Produce request specified an invalid value for required acks.'


class IllegalGenerationError(BrokerResponseError):
    """Specified group generation id is not valid."""

    errno = 22
    description = 'Specified group generation id is not valid.'


class InconsistentGroupProtocolError(BrokerResponseError):
    """The group member's supported protocols are incompatible with those of existing members."""

    errno = 23
    description = "The group member's supported protocols are incompatible with those of existing members."


class InvalidGroupIdError(BrokerResponseError):
    """The configured groupId is invalid."""

    errno = 24
    description = 'The configured groupId is invalid.'


class UnknownMemberIdError(BrokerResponseError):
    """The coordinator is not aware of this member."""

    errno = 25
    description = 'The coordinator is not aware of this member.'


class InvalidSessionTimeoutError(BrokerResponseError):
    """The session timeout is not within the range allowed by the broker."""

    errno = 26
    description = 'The session timeout is not within the range allowed by the broker.'


class RebalanceInProgressError(BrokerResponseError):
    """The group is rebalancing, so a rejoin is needed."""

    errno = 27
    description = 'The group is rebalancing, so a rejoin is needed.'


class InvalidCommitOffsetSizeError(BrokerResponseError):
    """The committing offset data size is not valid."""

    errno = 28
    description = 'The committing offset data size is not valid.'


class TopicAuthorizationFailedError(BrokerResponseError):
    """Topic authorization failed."""

    errno = 29
    description = 'Topic authorization failed.'


class GroupAuthorizationFailedError(BrokerResponseError):
    """Group authorization failed."""

    errno = 30
    description = 'Group authorization failed.'


class ClusterAuthorizationFailedError(BrokerResponseError):
    """Cluster authorization failed."""

    errno = 31
    description = 'Cluster authorization failed.'


class InvalidTimestampError(BrokerResponseError):
    """The timestamp of the message is out of acceptable range."""

    errno = 32
    description = 'The timestamp of the message is out of acceptable range.'


class UnsupportedSaslMechanismError(BrokerResponseError):
    """The broker does not support the requested SASL mechanism."""

    errno = 33
    description = 'The broker does not support the requested SASL mechanism.'


class IllegalSaslStateError(BrokerResponseError):
    """Request is not valid given the current SASL state."""

    errno = 34
    description = 'Request is not valid given the current SASL state.'


class TopicAlreadyExistsError(BrokerResponseError):
    """Topic with this name already exists."""

    errno = 36
    description = 'Topic with this name already exists.'


class InvalidPartitionsError(BrokerResponseError):
    """Number of partitions is below 1."""

    errno = 37
    description = 'Number of partitions is below 1.'


class InvalidReplicationFactorError(BrokerResponseError):
    """Replication factor is below 1 or larger than the number of available brokers."""

    errno = 38
    description = 'Replication factor is below 1 or larger than the number of available brokers.'


class InvalidReplicaAssignmentError(BrokerResponseError):
    """Replica assignment is invalid."""

    errno = 39
    description = 'Replica assignment is invalid.'


class InvalidConfigError(BrokerResponseError):
    """Configuration is invalid."""

    errno = 40
    description = 'Configuration is invalid.'


class NotControllerError(BrokerResponseError):
    """This is not the correct controller for this cluster."""

    errno = 41
    retriable = True
    description = 'This is not the correct controller for this cluster.'


class InvalidRequestError(BrokerResponseError):
    """The broker considered the request invalid."""

    errno = 42
    description = 'The broker considered the request invalid.'


class UnsupportedForMessageFormatError(BrokerResponseError):
    """The message format version on the broker does not support the request."""

    errno = 43
    description = 'The message format version on the broker does not support the request.'


class PolicyViolationError(BrokerResponseError):
    """Request parameters do not satisfy the configured policy."""

    errno = 44
    description = 'Request parameters do not satisfy the configured policy.'


class OutOfOrderSequenceNumberError(BrokerResponseError):
    """The broker received an out of order sequence number."""

    errno = 45
    description = 'The broker received an out of order sequence number.'


class DuplicateSequenceNumberError(BrokerResponseError):
    """The broker received a duplicate sequence number."""

    errno = 46
    description = 'The broker received a duplicate sequence number.'


class InvalidProducerEpochError(BrokerResponseError):
    """Producer attempted to produce with an old epoch."""

    errno = 47
    description = 'Producer attempted to produce with an old epoch.'


class InvalidTxnStateError(BrokerResponseError):
    """The producer attempted a transactional operation in an invalid state."""

    errno = 48
    description = 'The producer attempted a transactional operation in an invalid state.'


class InvalidProducerIdMappingError(BrokerResponseError):
    """The producer attempted to use a producer id which is not currently assigned to its transactional id."""

    errno = 49
    description = 'The producer attempted to use a producer id which is not currently assigned to its transactional id.'


class InvalidTransactionTimeoutError(BrokerResponseError):
    """The transaction timeout is larger than the maximum value allowed by the broker."""

    errno = 50
    description = 'The transaction timeout is larger than the maximum value allowed by the broker.'


class ConcurrentTransactionsError(BrokerResponseError):
    """The producer attempted to update a transaction while another concurrent operation on the same transaction was ongoing."""

    errno = 51
    retriable = True
    description = 'The producer attempted to update a transaction while another concurrent operation on the same transaction was ongoing.'


class TransactionCoordinatorFencedError(BrokerResponseError):
    """The transaction coordinator sending a WriteTxnMarker is no longer the current coordinator."""

    errno = 52
    description = 'The transaction coordinator sending a WriteTxnMarker is no longer the current coordinator.'


class TransactionalIdAuthorizationFailedError(BrokerResponseError):
    """Transactional Id authorization failed."""

    errno = 53
    description = 'Transactional Id authorization failed.'


class SecurityDisabledError(BrokerResponseError):
    """Security features are disabled."""

    errno = 54
    description = 'Security features are disabled.'


class OperationNotAttemptedError(BrokerResponseError):
    """The broker did not attempt to execute this operation."""

    errno = 55
    description = 'The broker did not attempt to execute this operation.'


class KafkaStorageError(BrokerResponseError):
    """Disk error when trying to access log file on the disk."""

    errno = 56
    retriable = True
    invalid_metadata = True
    description = 'Disk error when trying to access log file on the disk.'


class LogDirNotFoundError(BrokerResponseError):
    """The user-specified log directory is not found in the broker config."""

    errno = 57
    description = 'The user-specified log directory is not found in the broker config.'


class SaslAuthenticationFailedError(BrokerResponseError):
    """SASL Authentication failed."""

    errno = 58
    description = 'SASL Authentication failed.'


class UnknownProducerIdError(BrokerResponseError):
    """The broker could not locate the producer metadata associated with the producer id."""

    errno = 59
    description = 'The broker could not locate the producer metadata associated with the producer id.'


class ReassignmentInProgressError(BrokerResponseError):
    """A partition reassignment is in progress."""

    errno = 60
    description = 'A partition reassignment is in progress.'


class DelegationTokenAuthDisabledError(BrokerResponseError):
    """Delegation Token feature is not enabled."""

    errno = 61
    description = 'Delegation Token feature is not enabled.'


class DelegationTokenNotFoundError(BrokerResponseError):
    """Delegation Token is not found on server."""

    errno = 62
    description = 'Delegation Token is not found on server.'


class DelegationTokenOwnerMismatchError(BrokerResponseError):
    """Specified Principal is not valid Owner/Renewer."""

    errno = 63
    description = 'Specified Principal is not valid Owner/Renewer.'


class DelegationTokenRequestNotAllowedError(BrokerResponseError):
    """Delegation Token requests are not allowed on this connection."""

    errno = 64
    description = 'Delegation Token requests are not allowed on this connection.'


class DelegationTokenAuthorizationFailedError(BrokerResponseError):
    """Delegation Token authorization failed."""

    errno = 65
    description = 'Delegation Token authorization failed.'


class DelegationTokenExpiredError(BrokerResponseError):
    """Delegation Token is expired."""

    errno = 66
    description = 'Delegation Token is expired.'


class InvalidPrincipalTypeError(BrokerResponseError):
    """Supplied principalType is not supported."""

    errno = 67
    description = 'Supplied principalType is not supported.'


class NonEmptyGroupError(BrokerResponseError):
    """The group is not empty."""

    errno = 68
    description = 'The group is not empty.'


class GroupIdNotFoundError(BrokerResponseError):
    """The group id does not exist."""

    errno = 69
    description = 'The group id does not exist.'


class FetchSessionIdNotFoundError(BrokerResponseError):
    """The fetch session ID was not found."""

    errno = 70
    retriable = True
    description = 'The fetch session ID was not found.'


class InvalidFetchSessionEpochError(BrokerResponseError):
    """The fetch session epoch is invalid."""

    errno = 71
    retriable = True
    description = 'The fetch session epoch is invalid.'


class ListenerNotFoundError(BrokerResponseError):
    """There is no listener on the leader broker that matches the listener on which metadata request was processed."""

    errno = 72
    retriable = True
    invalid_metadata = True
    description = 'There is no listener on the leader broker that matches the listener on which metadata request was processed.'


class TopicDeletionDisabledError(BrokerResponseError):
    """Topic deletion is disabled."""

    errno = 73
    description = 'Topic deletion is disabled.'


class FencedLeaderEpochError(BrokerResponseError):
    """The leader epoch in the request is older than the epoch on the broker."""

    errno = 74
    retriable = True
    invalid_metadata = True
    description = 'The leader epoch in the request is older than the epoch on the broker.'


class UnknownLeaderEpochError(BrokerResponseError):
    """The leader epoch in the request is newer than the epoch on the broker."""

    errno = 75
    retriable = True
    description = 'The leader epoch in the request is newer than the epoch on the broker.'


class UnsupportedCompressionTypeError(BrokerResponseError):
    """The requesting client does not support the compression type of given partition."""

    errno = 76
    description = 'The requesting client does not support the compression type of given partition.'


class StaleBrokerEpochError(BrokerResponseError):
    """Broker epoch has changed."""

    errno = 77
    description = 'Broker epoch has changed.'


class OffsetNotAvailableError(BrokerResponseError):
    """The leader high watermark has not caught up from a recent leader election."""

    errno = 78
    retriable = True
    description = 'The leader high watermark has not caught up from a recent leader election.'


class MemberIdRequiredError(BrokerResponseError):
    """The group member needs to have a valid member id before actually entering a consumer group."""

    errno = 79
    description = 'The group member needs to have a valid member id before actually entering a consumer group.'


class PreferredLeaderNotAvailableError(BrokerResponseError):
    """The preferred leader was not available."""

    errno = 80
    retriable = True
    invalid_metadata = True
    description = 'The preferred leader was not available.'


class GroupMaxSizeReachedError(BrokerResponseError):
    """The consumer group has reached its max size."""

    errno = 81
    description = 'The consumer group has reached its max size.'


class FencedInstanceIdError(BrokerResponseError):
    """The broker rejected this static consumer since another consumer with the same group.instance.id has registered."""

    errno = 82
    description = 'The broker rejected this static consumer since another consumer with the same group.instance.id has registered.'


class EligibleLeadersNotAvailableError(BrokerResponseError):
    """Eligible topic partition leaders are not available."""

    errno = 83
    retriable = True
    invalid_metadata = True
    description = 'Eligible topic partition leaders are not available.'


class ElectionNotNeededError(BrokerResponseError):
    """Leader election not needed for topic partition."""

    errno = 84
    retriable = True
    invalid_metadata = True
    description = 'Leader election not needed for topic partition.'


class NoReassignmentInProgressError(BrokerResponseError):
    """No partition reassignment is in progress."""

    errno = 85
    description = 'No partition reassignment is in progress.'


class GroupSubscribedToTopicError(BrokerResponseError):
    """Deleting offsets of a topic is forbidden while the consumer group is actively subscribed to it."""

    errno = 86
    description = 'Deleting offsets of a topic is forbidden while the consumer group is actively subscribed to it.'


class InvalidRecordError(BrokerResponseError):
    """This record has failed the validation on broker and hence will be rejected."""

    errno = 87
    description = 'This record has failed the validation on broker and hence will be rejected.'


class UnstableOffsetCommitError(BrokerResponseError):
    """There are unstable offsets that need to be cleared."""

    errno = 88
    retriable = True
    description = 'There are unstable offsets that need to be cleared.'


class ThrottlingQuotaExceededError(BrokerResponseError):
    """The throttling quota has been exceeded."""

    errno = 89
    retriable = True
    description = 'The throttling quota has been exceeded.'


class ProducerFencedError(BrokerResponseError):
    """There is a newer producer with the same transactionalId which fences the current one."""

    errno = 90
    description = 'There is a newer producer with the same transactionalId which fences the current one.'


class ResourceNotFoundError(BrokerResponseError):
    """A request illegally referred to a resource that does not exist."""

    errno = 91
    description = 'A request illegally referred to a resource that does not exist.'


class DuplicateResourceError(BrokerResponseError):
    """A request illegally referred to the same resource twice."""

    errno = 92
    description = 'A request illegally referred to the same resource twice.'


class UnacceptableCredentialError(BrokerResponseError):
    """Requested credential would not meet criteria for acceptability."""

    errno = 93
    description = 'Requested credential would not meet criteria for acceptability.'


class InconsistentVoterSetError(BrokerResponseError):
    """The voter set is not consistent between the leader and the follower."""

    errno = 94
    description = 'The voter set is not consistent between the leader and the follower.'


class InvalidUpdateVersionError(BrokerResponseError):
    """The given update version was invalid."""

    errno = 95
    description = 'The given update version was invalid.'


class FeatureUpdateFailedError(BrokerResponseError):
    """Unable to update finalized features due to an unexpected server error."""

    errno = 96
    description = 'Unable to update finalized features due to an unexpected server error.'


class PrincipalDeserializationFailureError(BrokerResponseError):
    """Request principal deserialization failed during forwarding."""

    errno = 97
    description = 'Request principal deserialization failed during forwarding.'


class SnapshotNotFoundError(BrokerResponseError):
    """Requested snapshot was not found."""

    errno = 98
    description = 'Requested snapshot was not found.'


class PositionOutOfRangeError(BrokerResponseError):
    """Requested position is not greater than or equal to zero, and less than the size of the snapshot."""

    errno = 99
    description = 'Requested position is not greater than or equal to zero, and less than the size of the snapshot.'


class UnknownTopicIdError(BrokerResponseError):
    """This server does not host this topic ID."""

    errno = 100
    retriable = True
    invalid_metadata = True
    description = 'This server does not host this topic ID.'


class DuplicateBrokerRegistrationError(BrokerResponseError):
    """This broker ID is already in use."""

    errno = 101
    description = 'This broker ID is already in use.'


class BrokerIdNotRegisteredError(BrokerResponseError):
    """The given broker ID was not registered."""

    errno = 102
    description = 'The given broker ID was not registered.'


class InconsistentTopicIdError(BrokerResponseError):
    """The log's topic ID did not match the topic ID in the request."""

    errno = 103
    retriable = True
    invalid_metadata = True
    description = "The log's topic ID did not match the topic ID in the request."


class InconsistentClusterIdError(BrokerResponseError):
    """The clusterId in the request does not match that found on the server."""

    errno = 104
    description = 'The clusterId in the request does not match that found on the server.'


class TransactionalIdNotFoundError(BrokerResponseError):
    """The transactionalId could not be found."""

    errno = 105
    description = 'The transactionalId could not be found.'


class FetchSessionTopicIdError(BrokerResponseError):
    """The fetch session encountered inconsistent topic ID usage."""

    errno = 106
    retriable = True
    description = 'The fetch session encountered inconsistent topic ID usage.'


class IneligibleReplicaError(BrokerResponseError):
    """The new ISR contains at least one ineligible replica."""

    errno = 107
    description = 'The new ISR contains at least one ineligible replica.'


class NewLeaderElectedError(BrokerResponseError):
    """The AlterPartition request successfully updated the partition state but the leader has changed."""

    errno = 108
    description = 'The AlterPartition request successfully updated the partition state but the leader has changed.'


class OffsetMovedToTieredStorageError(BrokerResponseError):
    """The requested offset is moved to tiered storage."""

    errno = 109
    description = 'The requested offset is moved to tiered storage.'


class FencedMemberEpochError(BrokerResponseError):
    """The member epoch is fenced by the group coordinator."""

    errno = 110
    description = 'The member epoch is fenced by the group coordinator.'


class UnreleasedInstanceIdError(BrokerResponseError):
    """The instance ID is still used by another member in the consumer group."""

    errno = 111
    description = 'The instance ID is still used by another member in the consumer group.'


class UnsupportedAssignorError(BrokerResponseError):
    """The assignor or its version range is not supported by the consumer group."""

    errno = 112
    description = 'The assignor or its version range is not supported by the consumer group.'


class StaleMemberEpochError(BrokerResponseError):
    """The member epoch is stale."""

    errno = 113
    description = 'The member epoch is stale.'


class MismatchedEndpointTypeError(BrokerResponseError):
    """The request was sent to an endpoint of the wrong type."""

    errno = 114
    description = 'The request was sent to an endpoint of the wrong type.'


class UnsupportedEndpointTypeError(BrokerResponseError):
    """This endpoint type is not supported yet."""

    errno = 115
    description = 'This endpoint type is not supported yet.'


class UnknownControllerIdError(BrokerResponseError):
    """This controller ID is not known."""

    errno = 116
    description = 'This controller ID is not known.'


class UnknownSubscriptionIdError(BrokerResponseError):
    """Client sent a push telemetry request with an invalid or outdated subscription ID."""

    errno = 117
    description = 'Client sent a push telemetry request with an invalid or outdated subscription ID.'


class TelemetryTooLargeError(BrokerResponseError):
    """Client sent a push telemetry request larger than the maximum size the broker will accept."""

    errno = 118
    description = 'Client sent a push telemetry request larger than the maximum size the broker will accept.'


class InvalidRegistrationError(BrokerResponseError):
    """The controller has considered the broker registration to be invalid."""

    errno = 119
    description = 'The controller has considered the broker registration to be invalid.'


class TransactionAbortableError(BrokerResponseError):
    """The server encountered an error with the transaction."""

    errno = 120
    description = 'The server encountered an error with the transaction.'


class InvalidRecordStateError(BrokerResponseError):
    """The record state is invalid: the acknowledgement of delivery could not be completed."""

    errno = 121
    description = 'The record state is invalid. The acknowledgement of delivery could not be completed.'


class ShareSessionNotFoundError(BrokerResponseError):
    """The share session was not found."""

    errno = 122
    retriable = True
    description = 'The share session was not found.'


class InvalidShareSessionEpochError(BrokerResponseError):
    """The share session epoch is invalid."""

    errno = 123
    retriable = True
    description = 'The share session epoch is invalid.'


class FencedStateEpochError(BrokerResponseError):
    """The share coordinator rejected the request because the share-group state epoch did not match."""

    errno = 124
    description = 'The share coordinator rejected the request because the share-group state epoch did not match.'


class InvalidRegularExpressionError(BrokerResponseError):
    """The regular expression is not valid."""

    errno = 128
    description = 'The regular expression is not valid.'


class RebootstrapRequiredError(BrokerResponseError):
    """Client metadata is stale. The client should rebootstrap to obtain new metadata."""

    errno = 129
    description = 'Client metadata is stale. The client should rebootstrap to obtain new metadata.'


#: Client-facing names for broker conditions the client also raises itself.
AuthenticationError = SaslAuthenticationFailedError
RecordTooLargeError = MessageSizeTooLargeError


class UnknownKafkaError(BrokerResponseError):
    """A broker error code this client does not know."""


def _all_codes() -> dict[int, type[KafkaError]]:
    found: dict[int, type[KafkaError]] = {UnsupportedVersionError.errno: UnsupportedVersionError}
    for obj in list(globals().values()):
        if isinstance(obj, type) and issubclass(obj, BrokerResponseError) and obj not in (UnknownKafkaError, BrokerResponseError):
            found.setdefault(obj.errno, obj)
    return found


_BY_CODE: dict[int, type[KafkaError]] = _all_codes()


def error_for_code(code: int) -> type[KafkaError]:
    """The exception class for a broker error code (an ``UnknownKafkaError`` subclass for unknown codes)."""
    try:
        return _BY_CODE[code]
    except KeyError:
        cls = type(f"UnknownKafkaError{code}", (UnknownKafkaError,), {"errno": code, "__module__": __name__})
        _BY_CODE[code] = cls
        return cls


def raise_for_code(code: int, message: str | None = None) -> None:
    """Raise the exception for ``code`` unless it is 0 (NONE)."""
    if code:
        cls = error_for_code(code)
        raise cls(message) if message else cls()
