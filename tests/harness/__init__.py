"""Test-only harnesses around real, independent Kafka-protocol implementations.

They live under ``tests/`` (not ``akresil.testing``) because they are shaped for the test suite; the
librdkafka mock-cluster binding they build on ships as ``akresil.testing.rdkafka_mock``.
"""

from __future__ import annotations
