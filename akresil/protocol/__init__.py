"""Kafka wire codec: primitives, declarative schemas compiled to fast dict codecs, frames and negotiation.

Record batches (the bytes inside ``records`` fields) are handled by ``akresil.protocol.records``.
"""

from __future__ import annotations

from akresil.protocol.api import (
    CLIENT_VERSIONS,
    SCHEMA_VERSIONS,
    UNSUPPORTED_VERSION,
    ApiKey,
    api_versions_error_code,
    api_versions_retry_version,
    broker_versions,
    decode_api_versions_response,
    decode_message,
    decode_request,
    decode_response,
    decode_versioned,
    encode_message,
    encode_request,
    encode_response,
    encode_versioned,
    negotiate,
    request_header_version,
    response_correlation_id,
    response_header_version,
)

__all__ = [
    "CLIENT_VERSIONS",
    "SCHEMA_VERSIONS",
    "UNSUPPORTED_VERSION",
    "ApiKey",
    "api_versions_error_code",
    "api_versions_retry_version",
    "broker_versions",
    "decode_api_versions_response",
    "decode_message",
    "decode_request",
    "decode_response",
    "decode_versioned",
    "encode_message",
    "encode_request",
    "encode_response",
    "encode_versioned",
    "negotiate",
    "request_header_version",
    "response_correlation_id",
    "response_header_version",
]
