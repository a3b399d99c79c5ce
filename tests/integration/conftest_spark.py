"""Fixtures for the Spark data source tests: one noida-db broker per session, and the SparkSession.

Import the fixtures into a test module (``from tests.integration.conftest_spark import ...``).
The broker is noida-db, not Tansu: Tansu answers ListOffsets LATEST with a wrong offset (docs/brokers.md),
and the source resolves every range end through ListOffsets, as Spark's Kafka source does.
A missing pyspark or Java fails the tests (CI must run them) unless AKRESIL_SPARK_OPTIONAL=1, then skips.

A Python process holds one SparkContext at a time, and the suite runs in one process: ``spark_on(master)``
keeps the session of the last master asked for and stops it when another one is asked for, so the local[2]
tests and the standalone-cluster tests (tests/apache/test_spark_cluster.py) each get theirs, with one switch per
run in the usual order (tests/apache first).
"""

from __future__ import annotations

import atexit
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


def require_spark() -> None:
    """Fail (or skip, with AKRESIL_SPARK_OPTIONAL=1) naming what is missing: pyspark or Java."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        _unavailable("pyspark: pip install 'akresil[spark]'")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        _unavailable("Java 17+ (java on PATH or JAVA_HOME)")


#: (master, session) of the process's one live SparkSession
_live: list[tuple[str, Any]] = []
_stop_registered: list[bool] = []


def spark_on(master: str, **conf: str) -> Any:
    """The process's SparkSession on ``master`` (``local[2]`` or ``spark://host:port``), created on first use;
    one on another master is stopped first. ``conf`` applies when the session is created."""
    if _live and _live[0][0] == master:
        return _live[0][1]
    require_spark()
    from pyspark.sql import SparkSession

    stop_spark()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    builder = (SparkSession.builder.master(master).appName("akresil-tests")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
               .config("spark.sql.streaming.stopTimeout", "20s"))
    for key, value in conf.items():
        builder = builder.config(key, value)
    if not _stop_registered:
        atexit.register(stop_spark)
        _stop_registered.append(True)
    session = builder.getOrCreate()
    if session.sparkContext.master != master:
        raise RuntimeError(f"a SparkSession on {session.sparkContext.master} is active outside spark_on()")
    session.sparkContext.setLogLevel("ERROR")
    import akresil.spark
    akresil.spark.register(session)
    _live.append((master, session))
    return session


def stop_spark(master: str | None = None) -> None:
    """Stop the process's SparkSession (only if it runs on ``master``, when given)."""
    while _live and (master is None or _live[-1][0] == master):
        _, session = _live.pop()
        session.stop()


@pytest.fixture
def spark() -> Any:
    """The local[2] SparkSession (one per run, unless a cluster test took the process's SparkContext since)."""
    return spark_on("local[2]")


@pytest.fixture(scope="session")
def spark_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(kind="noida") as running:
        yield running


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, name: str, partitions: int, configs: dict[str, str] | None = None) -> None:
    async def main() -> None:
        async with Admin(bootstrap_servers=bootstrap) as admin:
            await admin.create_topics([NewTopic(name, partitions, configs=configs)])
    anyio.run(main)


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes]],
            partition: int | None = None) -> list[tuple[int, int]]:
    """Send records with the plain client; returns their (partition, offset)."""
    async def main() -> list[tuple[int, int]]:
        async with Producer(bootstrap_servers=bootstrap) as producer:
            mds = await producer.send_many(topic, records, partition=partition)
        return [(md.partition, md.offset) for md in mds]
    return anyio.run(main)
