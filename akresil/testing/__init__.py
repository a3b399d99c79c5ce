"""Test support shipped with akresil: a real broker in a subprocess and a fault-injecting proxy in front of it.

``BrokerControl`` (``control``) is what a test does to any of them -- topics, leader moves, node stops, throttles --
and ``capabilities`` says what each has, so one test body runs on every broker with the feature it tests.

``EmbeddedBroker`` starts a broker on a free loopback port: Apache Kafka where Java 17+ is (``kind="auto"``, the
default), else Tansu, or the one named (``"kafka"``, ``"tansu"``, ``"noida"``); ``FaultProxy`` fronts it with virtual
broker ids and scripts failures (leader moves with KIP-951 hints, throttles, latency, errors, node stops).
``KafkaCluster`` runs Apache Kafka itself (KRaft, 1-9 brokers, SASL/SSL/ACLs; Java 17+ and Maven Central for
its jars), the reference the imitations are checked against.  ``rdkafka_mock`` (imported on its own, it needs
confluent-kafka's bundled librdkafka) binds librdkafka's multi-broker mock cluster.  ``KafkaFaults`` / ``TopicFactory`` are what the pytest plugin's fixtures
(``akresil.pytest_plugin``) hand to tests.  See docs/testing.md.
"""

from __future__ import annotations

from .broker import BrokerStartError, EmbeddedBroker, free_port, probe_api_versions
from .control import BrokerControl, Capability, Unsupported
from .faults import FaultState
from .fixtures import FaultProxyControl, KafkaFaults, TopicFactory
from .kafka_cluster import SASL_USERS, KafkaCluster, KafkaNode
from .kafka_jars import DEFAULT_KAFKA_VERSION, KafkaUnavailable, resolve_kafka_jars
from .proxy import FaultProxy
from .recorder import ConnectionEvent, LeaderHint, RecordedRequest, RecordedResponse, Recorder

__all__ = ["DEFAULT_KAFKA_VERSION", "SASL_USERS", "BrokerControl", "BrokerStartError", "Capability",
           "ConnectionEvent", "EmbeddedBroker", "FaultProxy", "FaultProxyControl", "FaultState", "KafkaCluster",
           "KafkaFaults", "KafkaNode", "KafkaUnavailable", "LeaderHint", "RecordedRequest", "RecordedResponse",
           "Recorder", "TopicFactory", "Unsupported", "free_port", "probe_api_versions", "resolve_kafka_jars"]
