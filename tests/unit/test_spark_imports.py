"""What the Python processes Spark starts for a query import: only what their step needs.

Spark starts a fresh Python process to plan a write, to commit a batch write and to commit each streaming
micro-batch; each unpickles the data source (or writer) and the task messages and calls one method. Arrow and
the Kafka clients cost ~0.5 s to import and none of those steps uses them, so they must load only in tasks.
Each case runs in a fresh interpreter (the pytest process has everything loaded) and checks ``sys.modules``,
never a time.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

#: modules none of the planning / commit steps may load
HEAVY = ("pyarrow", "numpy", "pandas", "aiokafka", "akresil.producer", "akresil.consumer", "akresil.admin",
         "akresil.protocol", "akresil.net")

_PRELUDE = textwrap.dedent("""
    import pickle, sys
    from pyspark import cloudpickle
    from pyspark.sql.types import _parse_datatype_json_string
    HEAVY = {heavy!r}

    def loaded():
        return sorted(m for m in sys.modules if any(m == h or m.startswith(h + ".") for h in HEAVY))

    payload = pickle.loads(sys.stdin.buffer.read())
""")


def _run(runner: str, body: str, payload: object) -> list[str]:
    """Run ``body`` after importing Spark's worker module ``runner``; returns the heavy modules it loaded."""
    code = (f"import pyspark.sql.worker.{runner}\n" + _PRELUDE.format(heavy=HEAVY) + textwrap.dedent(body)
            + "\nprint('\\n'.join(loaded()))\n")
    done = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(payload), capture_output=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode().split()


def _source(tmp_path: Path, options: dict[str, str]) -> bytes:
    """The data source instance as Spark pickles it: ``register``'s per-program subclass, built with options."""
    from pyspark import cloudpickle
    from pyspark.sql.datasource import CaseInsensitiveDict

    import akresil.spark.source as source

    cls = type("AkresilDataSource", (source.AkresilDataSource,),
               {"summary_dir": str(tmp_path), "__module__": source.__name__,
                "__qualname__": "AkresilDataSource._registered"})
    return cloudpickle.dumps(cls(options=CaseInsensitiveDict(options)))


def _messages(query_id: str | None) -> list[bytes]:
    from pyspark import cloudpickle

    from akresil.spark.writer import TaskDelivery

    done = TaskDelivery(0, 0, 10, 1000, 0, 0.0, {"out-0": 10}, 0.05)
    done.query_id = query_id
    return [cloudpickle.dumps(done), cloudpickle.dumps(None)]


def _input_schema() -> str:
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    return StructType([StructField("key", StringType()), StructField("value", BinaryType())]).json()


OPTIONS = {"kafka.bootstrap.servers": "127.0.0.1:9", "topic": "out"}


def test_streaming_commit_process_loads_neither_arrow_nor_the_clients(tmp_path: Path) -> None:
    """``python_streaming_sink_runner``: unpickle the source, ``streamWriter``, unpickle messages, commit."""
    loaded = _run("python_streaming_sink_runner", """
        source_bytes, schema_json, messages = payload
        source = cloudpickle.loads(source_bytes)
        writer = source.streamWriter(schema=_parse_datatype_json_string(schema_json), overwrite=False)
        writer.commit([cloudpickle.loads(m) for m in messages], 7)
    """, (_source(tmp_path, OPTIONS), _input_schema(), _messages("q-1")))
    assert loaded == []
    from akresil.spark.writer import read_summary

    [stored] = [read_summary(p) for p in tmp_path.glob("*-stream-q-1-7.json")]
    assert stored.status == "committed" and stored.records == 10 and stored.batch_id == 7


def test_batch_write_planning_and_commit_processes_load_neither_arrow_nor_the_clients(tmp_path: Path) -> None:
    """``write_into_data_source`` builds and pickles the writer; ``commit_data_source_write`` commits it."""
    loaded = _run("write_into_data_source", """
        source_bytes, schema_json = payload
        source = cloudpickle.loads(source_bytes)
        writer = source.writer(schema=_parse_datatype_json_string(schema_json), overwrite=False)
        cloudpickle.dumps(writer)
    """, (_source(tmp_path, OPTIONS), _input_schema()))
    assert loaded == []

    from pyspark import cloudpickle

    from akresil.spark.options import parse_write_options
    from akresil.spark.writer import AkresilWriter

    writer = AkresilWriter(parse_write_options(OPTIONS), ("key", "value"), str(tmp_path))
    loaded = _run("commit_data_source_write", """
        writer_bytes, messages = payload
        writer = cloudpickle.loads(writer_bytes)
        writer.commit([cloudpickle.loads(m) for m in messages])
    """, (cloudpickle.dumps(writer), _messages(None)))
    assert loaded == []
    assert (tmp_path / f"{writer.write_id}.json").is_file()


def test_source_planning_loads_neither_arrow_nor_the_clients(tmp_path: Path) -> None:
    """``create_data_source`` asks the new source its schema; the read planner builds the stream reader."""
    loaded = _run("create_data_source", """
        source = cloudpickle.loads(payload)
        schema = source.schema()
        source.streamReader(schema)
        source.reader(schema)
    """, _source(tmp_path, {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t"}))
    assert loaded == []
