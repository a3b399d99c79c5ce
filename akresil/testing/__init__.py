"""Test support shipped with akresil: a real broker in a subprocess and a fault-injecting proxy in front of it.

``EmbeddedBroker`` starts Tansu (or noida-db) on a free loopback port; ``FaultProxy`` fronts it with virtual
broker ids and scripts failures (leader moves with KIP-951 hints, throttles, latency, errors, node stops).
``rdkafka_mock`` (imported on its own, it needs confluent-kafka's bundled librdkafka) binds librdkafka's
multi-broker mock cluster.  ``KafkaFaults`` / ``TopicFactory`` are what the pytest plugin's fixtures
(``akresil.pytest_plugin``) hand to tests.  See docs/testing.md.
"""

from __future__ import annotations

from .broker import BrokerStartError, EmbeddedBroker, free_port, probe_api_versions
from .faults import FaultState
from .fixtures import KafkaFaults, TopicFactory
from .proxy import FaultProxy
from .recorder import ConnectionEvent, LeaderHint, RecordedRequest, RecordedResponse, Recorder

__all__ = ["BrokerStartError", "ConnectionEvent", "EmbeddedBroker", "FaultProxy", "FaultState", "KafkaFaults",
           "LeaderHint", "RecordedRequest", "RecordedResponse", "Recorder", "TopicFactory", "free_port",
           "probe_api_versions"]
