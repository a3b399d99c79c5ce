"""The librdkafka mock-cluster binding now ships as ``akresil.testing.rdkafka_mock`` (``akresil bench
--harness mock`` drives it too); re-exported here so the tests' imports keep working."""

from __future__ import annotations

from akresil.testing.rdkafka_mock import (
    TRANSPORT_ERROR,
    ApiKey,
    MockCluster,
    MockClusterError,
    MockRequest,
    find_librdkafka,
    librdkafka_version,
)

__all__ = ["ApiKey", "MockCluster", "MockClusterError", "MockRequest", "TRANSPORT_ERROR", "find_librdkafka",
           "librdkafka_version"]
