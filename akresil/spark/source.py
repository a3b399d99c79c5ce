"""The ``akresil`` Python data source and its registration on a SparkSession."""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from pyspark.errors import PySparkNotImplementedError
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource, DataSourceReader, DataSourceStreamReader, DataSourceStreamWriter, DataSourceWriter,
    SimpleDataSourceStreamReader,
)
from pyspark.sql.types import StructType

from .. import errors
from .options import parse_read_options, parse_write_options
from .schema import kafka_schema
from .writer import WriteSummary, read_summary, store_summary

__all__ = ["AkresilDataSource", "register", "last_write_summary", "stream_write_summaries", "summary_dir"]


class AkresilDataSource(DataSource):
    """Spark data source ``akresil``: batch and streaming reads and writes of Kafka topics.

    Options are validated when Spark instantiates the source (at ``load()`` / ``save()``), so a bad option
    fails the query on the driver with a message naming it, before any task runs.
    """

    #: where driver-side commits leave write summaries; set per driver program by ``register``
    summary_dir: str = str(Path(tempfile.gettempdir()) / "akresil-spark" / "default")

    @classmethod
    def name(cls) -> str:
        return "akresil"

    def schema(self) -> StructType:
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return kafka_schema(include)

    def reader(self, schema: StructType) -> DataSourceReader:
        from .reader import AkresilBatchReader
        self._check_schema(schema)
        return AkresilBatchReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """Tasks read each micro-batch; with ``microBatchRead=driver`` this declines (Spark's signal to ask
        ``simpleStreamReader`` instead)."""
        from .stream import AkresilStreamReader
        self._check_schema(schema)
        options = parse_read_options(self.options, streaming=True)
        if options.read_on_driver:
            raise PySparkNotImplementedError(errorClass="NOT_IMPLEMENTED",
                                             messageParameters={"feature": "streamReader"})
        return AkresilStreamReader(options)

    def simpleStreamReader(self, schema: StructType) -> SimpleDataSourceStreamReader:
        """``microBatchRead=driver``: the source's runner process reads each micro-batch (``stream``)."""
        from .stream import AkresilDriverStreamReader
        self._check_schema(schema)
        options = parse_read_options(self.options, streaming=True)
        if not options.read_on_driver:
            raise errors.ConfigError("simpleStreamReader: only with microBatchRead=driver")
        return AkresilDriverStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .writer import AkresilWriter, check_input_schema
        with self._rejected_summary():
            if overwrite:
                raise errors.ConfigError("save mode: Kafka topics are append-only; use mode('append')")
            options = parse_write_options(self.options)
            columns = check_input_schema(schema, options.topic)
        return AkresilWriter(options, columns, self.summary_dir)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """``writeStream.format("akresil")``; ``overwrite`` (complete output mode) appends the whole result each
        micro-batch, as Spark's Kafka sink does: a topic cannot be truncated."""
        from .stream_writer import AkresilStreamWriter
        from .writer import check_input_schema
        with self._rejected_summary():
            options = parse_write_options(self.options, streaming=True)
            columns = check_input_schema(schema, options.topic)
        return AkresilStreamWriter(options, columns, self.summary_dir)

    @contextmanager
    def _rejected_summary(self) -> Iterator[None]:
        """A write refused when Spark plans it stores a ``rejected`` summary (nothing landed, ``error`` says
        why) before the error goes on, so ``last_write_summary()`` does not answer with an earlier write's."""
        try:
            yield
        except errors.ConfigError as exc:
            summary = WriteSummary(write_id=f"{time.time_ns()}-rejected-{uuid.uuid4().hex[:12]}", status="rejected",
                                   tasks_delivered=0, tasks_failed=0, records=0, bytes=0, retries=0,
                                   throttle_ms=0.0, partitions={}, finished_at=time.time(), error=str(exc))
            store_summary(self.summary_dir, summary.write_id, summary)
            raise

    def _check_schema(self, schema: StructType) -> None:
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        if schema != kafka_schema(include):
            raise errors.ConfigError("the akresil source has a fixed schema (Spark's Kafka source schema); "
                                     f"do not pass .schema(...): got {schema.simpleString()}")


_registered_dir: str | None = None


def summary_dir() -> str:
    """This driver program's summary directory (one per process, so concurrent programs do not mix)."""
    global _registered_dir
    if _registered_dir is None:
        base = Path(tempfile.gettempdir()) / "akresil-spark"
        _registered_dir = str(base / f"{os.getpid()}-{uuid.uuid4().hex[:8]}")
    return _registered_dir


def register(spark: SparkSession) -> None:
    """Register the ``akresil`` format on ``spark`` (``spark.read/readStream/write.format("akresil")``).

    The registered class carries this driver program's summary directory, so ``last_write_summary()``
    finds the summaries of this program's writes and not another's.
    """
    cls = type("AkresilDataSource", (AkresilDataSource,), {"summary_dir": summary_dir(),
                                                           "__module__": __name__,
                                                           "__qualname__": "AkresilDataSource._registered"})
    spark.dataSource.register(cls)


def last_write_summary() -> WriteSummary | None:
    """Summary of the most recent ``akresil`` write of this driver program — a batch write or a streaming
    micro-batch — (None before the first one).

    Written by Spark's driver-side commit (or abort) step, which runs in its own Python process; this
    reads it back from the program's summary directory.
    """
    files = _summary_files("*.json")
    return read_summary(files[-1]) if files else None


def stream_write_summaries(query_id: str | None = None) -> list[WriteSummary]:
    """Summaries of the streaming micro-batches this driver program wrote, oldest first: those of the query
    ``query_id`` (``query.id``), or of every query. The newest 200 per query are kept."""
    pattern = f"*-stream-{query_id}-*.json" if query_id is not None else "*-stream-*.json"
    return [read_summary(f) for f in _summary_files(pattern)]


def _summary_files(pattern: str) -> list[Path]:
    directory = Path(summary_dir())
    if not directory.is_dir():
        return []
    return sorted(directory.glob(pattern))
