"""Import cost of the Python processes Spark starts for an ``akresil`` query, step by step.

Spark runs a Python data source's planning and commits in fresh Python processes (per query, and a commit
runner per streaming query), and every new executor worker imports the client a task needs. Each scenario
below is one such process, run ``--rounds`` times in a fresh interpreter: it imports the Spark worker module
that process runs (not counted), then does exactly that process's akresil step: unpickle the data source (or
writer) Spark pickled, call the method, unpickle the task messages and commit. Reported per scenario: the
step's time (median and worst round, ms; the akresil part of the process start), and the modules it loaded.

    python benchmarks/bench_spark_imports.py [--rounds 9] [--tree PATH] [--out F]

``--tree`` runs the children against another checkout, for a before/after comparison. The children import a
copy of that checkout's ``akresil`` compiled to bytecode, as an installed package is (``--no-compile``: from
source, as a checkout under ``PYTHONDONTWRITEBYTECODE=1`` is). Prints one JSON document.
"""

from __future__ import annotations

import argparse
import compileall
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import orjson

#: module families reported as "heavy" (what a planning or commit step should not need)
HEAVY = ("pyarrow", "numpy", "pandas", "aiokafka", "akresil.producer", "akresil.consumer", "akresil.admin",
         "akresil.protocol", "akresil.net")

_CHILD = """
import pickle, sys, time
import {runner}
before = set(sys.modules)
payload = pickle.loads(sys.stdin.buffer.read())
from pyspark import cloudpickle
from pyspark.sql.types import _parse_datatype_json_string
t0 = time.perf_counter()
{body}
elapsed = time.perf_counter() - t0
new = sorted(set(sys.modules) - before)
sys.stdout.write(repr((elapsed, new)))
"""

SCENARIOS: dict[str, tuple[str, str]] = {
    # Spark's streaming commit runner: unpickle the source, streamWriter(), unpickle messages, commit
    "streaming_commit": ("pyspark.sql.worker.python_streaming_sink_runner", """
source = cloudpickle.loads(payload["source_w"])
writer = source.streamWriter(schema=_parse_datatype_json_string(payload["schema"]), overwrite=False)
writer.commit([cloudpickle.loads(m) for m in payload["messages"]], 7)
"""),
    # the write planner: unpickle the source, writer(), pickle the writer for the tasks and the commit
    "batch_write_plan": ("pyspark.sql.worker.write_into_data_source", """
source = cloudpickle.loads(payload["source_w"])
cloudpickle.dumps(source.writer(schema=_parse_datatype_json_string(payload["schema"]), overwrite=False))
"""),
    # the batch commit: unpickle the writer and the messages, commit
    "batch_commit": ("pyspark.sql.worker.commit_data_source_write", """
writer = cloudpickle.loads(payload["writer"])
writer.commit([cloudpickle.loads(m) for m in payload["messages"]])
"""),
    # the source created for a read: schema()
    "create_source": ("pyspark.sql.worker.create_data_source", """
cloudpickle.loads(payload["source_r"]).schema()
"""),
    # the streaming source runner: streamReader(), then the Admin its first latestOffset loads
    "streaming_source_runner": ("pyspark.sql.streaming.python_streaming_source_runner", """
source = cloudpickle.loads(payload["source_r"])
source.streamReader(source.schema())
import akresil.admin
"""),
    # an executor worker's first read task / write task: the client it loads
    "read_task_client": ("pyspark.worker", "import akresil.spark.kafka_io, akresil.spark.schema, akresil.consumer"),
    "write_task_client": ("pyspark.worker", "import akresil.spark.writer, akresil.producer"),
}


def _payload(summary_dir: str) -> dict[str, Any]:
    from pyspark import cloudpickle
    from pyspark.sql.datasource import CaseInsensitiveDict
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    import akresil.spark.source as source
    from akresil.spark.options import parse_write_options
    from akresil.spark.writer import AkresilWriter, TaskDelivery

    cls = type("AkresilDataSource", (source.AkresilDataSource,),
               {"summary_dir": summary_dir, "__module__": source.__name__,
                "__qualname__": "AkresilDataSource._registered"})
    bs = {"kafka.bootstrap.servers": "127.0.0.1:9"}
    done = TaskDelivery(0, 0, 1000, 100_000, 0, 0.0, {"out-0": 1000}, 0.05)
    done.query_id = "q"
    return {
        "source_w": cloudpickle.dumps(cls(options=CaseInsensitiveDict({**bs, "topic": "out"}))),
        "source_r": cloudpickle.dumps(cls(options=CaseInsensitiveDict({**bs, "subscribe": "t"}))),
        "schema": StructType([StructField("key", StringType()), StructField("value", BinaryType())]).json(),
        "writer": cloudpickle.dumps(AkresilWriter(parse_write_options({**bs, "topic": "out"}), ("key", "value"),
                                                  summary_dir)),
        "messages": [cloudpickle.dumps(done), cloudpickle.dumps(None)],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--tree", help="checkout the children import akresil from (default: this one)")
    ap.add_argument("--no-compile", action="store_true", help="children compile akresil from source")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.rounds < 3:
        ap.error("--rounds: at least 3 (the report gives the median and the worst round)")
    tree = args.tree or str(Path(__file__).resolve().parent.parent)
    report: dict[str, Any] = {"rounds": args.rounds, "tree": tree, "bytecode": not args.no_compile,
                              "load_average": os.getloadavg(), "scenarios": {}}
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, PYTHONPATH=tree)
        if not args.no_compile:
            copy = Path(tmp) / "tree"
            shutil.copytree(Path(tree) / "akresil", copy / "akresil")
            if not compileall.compile_dir(str(copy / "akresil"), quiet=1):
                raise SystemExit(f"compiling {copy} failed")
            env["PYTHONPATH"] = str(copy)
        data = pickle.dumps(_payload(tmp))
        for name, (runner, body) in SCENARIOS.items():
            times, modules = [], []
            for _ in range(args.rounds):
                code = _CHILD.format(runner=runner, body=textwrap.indent(body.strip(), ""))
                done = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True, env=env, cwd=tmp,
                                      timeout=300)
                if done.returncode:
                    raise SystemExit(f"{name}: {done.stderr.decode()}")
                elapsed, modules = eval(done.stdout.decode())   # noqa: S307 (our own child's repr)
                times.append(elapsed * 1000)
            heavy = sorted({m.split(".")[0] if not m.startswith("akresil") else ".".join(m.split(".")[:2])
                            for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)})
            report["scenarios"][name] = {"median_ms": round(statistics.median(times), 1),
                                         "worst_ms": round(max(times), 1), "modules_loaded": len(modules),
                                         "heavy": heavy}
    report["load_average_end"] = os.getloadavg()
    text = orjson.dumps(report, option=orjson.OPT_INDENT_2)
    if args.out:
        with open(args.out, "wb") as fh:
            fh.write(text)
    sys.stdout.write(text.decode() + "\n")


if __name__ == "__main__":
    main()
