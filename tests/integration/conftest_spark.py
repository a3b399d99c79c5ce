"""Fixtures for the Spark data source tests: one local[2] SparkSession and one noida-db broker per session.

Import the fixtures into a test module (``from tests.integration.conftest_spark import ...``).
The broker is noida-db, not Tansu: Tansu answers ListOffsets LATEST with a wrong offset (docs/brokers.md),
and the source resolves every range end through ListOffsets, as Spark's Kafka source does.
A missing pyspark or Java fails the tests (CI must run them) unless AKRESIL_SPARK_OPTIONAL=1, then skips.
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from typing import Any, Iterator

import anyio
import pytest

from akresil import Admin, NewTopic, Producer
from akresil.testing import EmbeddedBroker


def _unavailable(reason: str) -> None:
    if os.environ.get("AKRESIL_SPARK_OPTIONAL") == "1":
        pytest.skip(f"Spark tests skipped (AKRESIL_SPARK_OPTIONAL=1): {reason}")
    pytest.fail(f"Spark tests need {reason}; set AKRESIL_SPARK_OPTIONAL=1 to skip them instead", pytrace=False)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        _unavailable("pyspark: pip install 'akresil[spark]'")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        _unavailable("Java 17+ (java on PATH or JAVA_HOME)")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (SparkSession.builder.master("local[2]").appName("akresil-tests")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
               .config("spark.sql.streaming.stopTimeout", "20s")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    import akresil.spark
    akresil.spark.register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def spark_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(kind="noida") as running:
        yield running


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    async def main() -> None:
        async with Admin(bootstrap_servers=bootstrap) as admin:
            await admin.create_topics([NewTopic(name, partitions)])
    anyio.run(main)


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes]],
            partition: int | None = None) -> list[tuple[int, int]]:
    """Send records with the plain client; returns their (partition, offset)."""
    async def main() -> list[tuple[int, int]]:
        async with Producer(bootstrap_servers=bootstrap) as producer:
            mds = await producer.send_many(topic, records, partition=partition)
        return [(md.partition, md.offset) for md in mds]
    return anyio.run(main)
