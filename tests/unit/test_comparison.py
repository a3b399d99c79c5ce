"""docs/comparison.md's cells hold: every akresil test it cites exists, and the peers' cells are re-checked against
the installed packages (source files, the librdkafka bundled with confluent-kafka) whenever the installed version
is the one the page names; another version skips its checks, since the page must then be refreshed by hand."""

from __future__ import annotations

import ctypes
import glob
import importlib.metadata
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "comparison.md"
CITED = {"aiokafka": "0.14.0", "confluent-kafka": "2.16.1", "kafka-python": "3.0.12"}


def package_dir(distribution: str, module: str) -> Path:
    try:
        installed = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{distribution} is not installed")
    if installed != CITED[distribution]:
        pytest.skip(f"{distribution} {installed} installed; docs/comparison.md describes {CITED[distribution]}")
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent


def source(root: Path, *parts: str) -> str:
    return root.joinpath(*parts).read_text(encoding="utf-8")


def grep(root: Path, pattern: str, exclude: str | None = None) -> list[str]:
    """Files under ``root`` (relative, posix) whose text matches ``pattern``, minus those under ``exclude``."""
    rx = re.compile(pattern)
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py")
                  if (exclude is None or not p.relative_to(root).as_posix().startswith(exclude))
                  and rx.search(p.read_text(encoding="utf-8", errors="replace")))


def test_the_page_names_the_versions_it_checks() -> None:
    page = PAGE.read_text(encoding="utf-8")
    for distribution, version in CITED.items():
        assert f"**{distribution} {version}**" in page


def test_every_cited_akresil_test_exists() -> None:
    page = PAGE.read_text(encoding="utf-8")
    cited = set(re.findall(r"`(tests/[\w/]+\.py)`", page))
    assert len(cited) >= 11
    missing = [path for path in cited if not (ROOT / path).is_file()]
    assert missing == []


def test_the_readme_links_the_comparison_and_drops_the_old_claim() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## What it does differently", 1)[1].split("\n## ", 1)[0]
    assert "docs/comparison.md" in section
    assert "no other Python client" not in readme
    for kip in ("KIP-580", "KIP-219", "KIP-951", "KIP-91 ", "KIP-572"):
        assert f"| {kip}" in section


def test_aiokafka_cells() -> None:
    root = package_dir("aiokafka", "aiokafka")
    client = source(root, "client.py")
    assert "self._retry_backoff = retry_backoff_ms / 1000" in client                          # p1
    assert "await asyncio.sleep(self._retry_backoff)" in client                               # p1, p11
    assert grep(root, r"retry_backoff_max|jitter") == []                                      # p1
    assert grep(root, r"throttle_time", exclude="protocol/") == []                            # p4
    assert grep(root, r"current_leader(?!_epoch)|node_endpoints", exclude="protocol/") == []  # p6
    assert "enable_idempotence=False" in source(root, "producer", "producer.py")              # p13
    assert grep(root / "producer", r"delivery_timeout") == []                                 # p9
    accumulator = source(root, "producer", "message_accumulator.py")
    assert "return (time.monotonic() - self._ctime) > self._ttl" in accumulator               # p9
    assert not (root / "py.typed").exists()                                                   # p16
    assert grep(root, r"GetTelemetrySubscriptions|PushTelemetry") == []                       # p19
    fetcher = source(root, "consumer", "fetcher.py")
    assert "def _select_read_replica" in fetcher and "def _invalidate_preferred_read_replica_for_node" in fetcher  # p21
    assert "self._preferred_replica_ttl = client._metadata_max_age_ms / 1000" in fetcher       # p21
    assert "rack_id=self._client_rack" in fetcher                                              # p21
    assert "We only keep bootstrap connection to update metadata" in client                    # p24
    assert grep(root, r"(?i)rebootstrap") == []                                               # p24
    transactions = source(root, "protocol", "transaction.py")
    assert "class EndTxnRequest_v0(" in transactions and "EndTxnRequest_v1" not in transactions   # p25
    produce = source(root, "protocol", "produce.py")
    assert "class ProduceRequest_v8(" in produce and "ProduceRequest_v9" not in produce           # p25


def test_kafka_python_cells() -> None:
    root = package_dir("kafka-python", "kafka")
    connection = source(root, "net", "connection.py")
    throttle = connection.split("def _maybe_throttle", 1)[1].split("\n    def ", 1)[0]
    assert "self.broker_version >= (2, 0)" in throttle and "self.pause('throttle')" in throttle  # p5
    accumulator = source(root, "producer", "record_accumulator.py")
    assert "retry_backoff = self.config['retry_backoff_ms'] / 1000" in accumulator             # p3
    assert "Exponential backoff - KIP-580" in source(root, "cluster.py")                       # p3
    producer = source(root, "producer", "kafka.py")
    assert "'enable_idempotence': True" in producer                                           # p14
    assert "delivery_timeout_ms (float): An upper bound on the time to report success" in producer  # p10
    assert "def metrics(self, raw=False)" in producer                                          # p15
    assert "update_partition_leader(" in source(root, "consumer", "fetcher.py")                # p8
    assert grep(root / "producer", r"current_leader(?!_epoch)|update_partition_leader") == []  # p8
    assert not (root / "py.typed").exists()                                                   # p16
    assert grep(root, r"GetTelemetrySubscriptions|PushTelemetry|metrics_push") == ["protocol/api_key.py"]  # p20
    fetcher = source(root, "consumer", "fetcher.py")
    assert "self.config['metadata_max_age_ms'] / 1000.0" in fetcher                           # p23
    assert "clear_preferred_read_replica()" in fetcher and "rack_id=self.config['client_rack']" in fetcher  # p23
    assert grep(root, r"(?i)rebootstrap") == []                                               # p24
    txn = source(root, "producer", "transaction_manager.py")
    end_txn = txn.split("class EndTxnHandler", 1)[1].split("\nclass ", 1)[0]
    assert "max_version=3" in end_txn and "(v4 is KIP-890)" in txn                         # p27
    sender = source(root, "producer", "sender.py")
    can_split = sender.split("def _can_split", 1)[1].split("\n    def ", 1)[0]
    assert "Errors.MessageSizeTooLargeError" in can_split and "Errors.RecordListTooLargeError" in can_split  # p28
    assert "splits\n        the batch into two sub-batches (by record count)" in source(
        root, "producer", "record_accumulator.py")                                              # p28


def test_confluent_kafka_cells() -> None:
    root = package_dir("confluent-kafka", "confluent_kafka")
    [library] = glob.glob(str(root.parent / "confluent_kafka.libs" / "librdkafka*.so*"))
    lib = ctypes.CDLL(library)
    lib.rd_kafka_version_str.restype = ctypes.c_char_p
    assert lib.rd_kafka_version_str() == b"2.16.0"
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    conf = ctypes.c_void_p(lib.rd_kafka_conf_new())

    def default(name: str) -> str:
        buf, size = ctypes.create_string_buffer(256), ctypes.c_size_t(256)
        assert lib.rd_kafka_conf_get(conf, name.encode(), buf, ctypes.byref(size)) == 0, name
        return buf.value.decode()

    try:                                                                                      # p2
        assert (default("retry.backoff.ms"), default("retry.backoff.max.ms")) == ("100", "1000")
        assert default("enable.idempotence") == "false"
        assert default("enable.metrics.push") == "true"
        assert default("client.rack") == ""                                                   # p22
        assert default("metadata.recovery.strategy") == "rebootstrap"                         # p22
        assert default("metadata.recovery.rebootstrap.trigger.ms") == "300000"                # p22
    finally:
        lib.rd_kafka_conf_destroy(conf)
    binary = Path(library).read_bytes()
    assert b"transaction.version" not in binary                                                # p26
    assert b"will be backed off exponentially" in binary and b"retry.backoff.max.ms" in binary  # p2
    assert b"delivery.timeout.ms" in binary and b"test.mock.num.brokers" in binary            # p2
    assert b"rd_kafka_buf_read_CurrentLeader" in binary                                       # p7
    assert b"rd_kafka_buf_read_NodeEndpoints" in binary                                       # p7
    assert b"REBOOTSTRAP_REQUIRED" in binary and b"preferred replica" in binary               # p22
    assert "ThreadPoolExecutor" in source(root, "aio", "producer", "_AIOProducer.py")          # p12
    assert (root / "py.typed").exists() and (root / "cimpl.pyi").exists()                    # p16
