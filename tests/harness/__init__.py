"""Test-only harnesses around real, independent Kafka-protocol implementations.

They live under ``tests/`` (not ``akresil.testing``) because they depend on test-only packages
such as ``confluent-kafka``; users get ``akresil.testing`` instead.
"""

from __future__ import annotations
