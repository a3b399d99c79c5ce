"""A Spark daemon worker's long-lived heap is frozen once where akresil's work in it ends (``daemon_gc``): no Spark
session, no broker; the daemon check is faked, every test unfreezes what it froze."""

from __future__ import annotations

import gc
import importlib.machinery
import sys
from pathlib import Path
from types import ModuleType
from typing import Iterator

import pytest

from akresil.spark import daemon_gc
from akresil.spark.daemon_gc import forked_by_spark_daemon, freeze_long_lived


@pytest.fixture
def unfrozen() -> Iterator[None]:
    if gc.get_freeze_count():
        pytest.skip("this process froze its heap before the test")
    try:
        yield
    finally:
        gc.unfreeze()


@pytest.fixture
def in_daemon(monkeypatch: pytest.MonkeyPatch, unfrozen: None) -> None:
    monkeypatch.setattr(daemon_gc, "forked_by_spark_daemon", lambda main=None: True)


def _main(name: str | None) -> ModuleType:
    module = ModuleType("__main__")
    module.__spec__ = importlib.machinery.ModuleSpec(name, None) if name is not None else None
    return module


def test_only_spark_daemon_processes_count_as_daemon_workers() -> None:
    assert forked_by_spark_daemon(_main("pyspark.daemon"))
    assert not forked_by_spark_daemon(_main("pyspark.worker"))      # run directly, not forked by the daemon
    assert not forked_by_spark_daemon(_main(None))                  # `python script.py`
    assert not forked_by_spark_daemon(sys.modules["__main__"])       # this test run


def test_freezes_once_and_only_in_a_daemon_worker(unfrozen: None) -> None:
    assert not freeze_long_lived()                       # pytest is no daemon worker: its heap stays as it is
    assert not freeze_long_lived(in_daemon_worker=False) and gc.get_freeze_count() == 0
    assert freeze_long_lived(in_daemon_worker=True)
    frozen = gc.get_freeze_count()
    assert frozen > 0
    later = [[] for _ in range(100)]                     # allocated after the freeze: left to the collector
    assert not freeze_long_lived(in_daemon_worker=True)
    # a second freeze would have added ``later``'s 101 lists; frozen objects that reference counting frees meanwhile
    # (other threads of the test process) make the count drop a little, so it is not compared for equality
    assert gc.get_freeze_count() < frozen + len(later) and later


def test_a_read_task_freezes_when_it_has_read_everything(in_daemon: None) -> None:
    from akresil.spark.reader import then_freeze

    batches = then_freeze(iter(["b0", "b1"]))
    assert next(batches) == "b0" and next(batches) == "b1"
    assert gc.get_freeze_count() == 0                   # not while the task still reads
    assert list(batches) == [] and gc.get_freeze_count() > 0


def test_the_streaming_sinks_commit_freezes_its_runner(in_daemon: None, tmp_path: Path) -> None:
    from akresil.spark.options import parse_write_options
    from akresil.spark.stream_writer import AkresilStreamWriter
    from akresil.spark.writer import TaskDelivery

    writer = AkresilStreamWriter(parse_write_options({"kafka.bootstrap.servers": "h:1", "topic": "out"},
                                                     streaming=True), ("key", "value"), str(tmp_path))
    writer.commit([TaskDelivery(0, 0, 7, 70, 0, 0.0, {"out-0": 7}, 0.1)], 3)
    assert gc.get_freeze_count() > 0
    assert len(list(tmp_path.glob("*-stream-*-3.json"))) == 1    # the summary is stored as before


def test_the_batch_sinks_commit_freezes_its_runner(in_daemon: None, tmp_path: Path) -> None:
    from akresil.spark.options import parse_write_options
    from akresil.spark.writer import AkresilWriter, TaskDelivery

    writer = AkresilWriter(parse_write_options({"kafka.bootstrap.servers": "h:1", "topic": "out"}),
                           ("key", "value"), str(tmp_path))
    writer.commit([TaskDelivery(0, 0, 7, 70, 0, 0.0, {"out-0": 7}, 0.1)])
    assert gc.get_freeze_count() > 0
