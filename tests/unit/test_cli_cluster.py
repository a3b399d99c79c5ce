"""cli_admin's ``cluster log-dirs|features|quorum``: argument parsing and what each prints (tables, --json)."""

from __future__ import annotations

import orjson
import pytest

from akresil.admin_types import (FeatureMetadata, LogDirDescription, QuorumInfo, QuorumReplica, ReplicaInfo,
                                 VersionRange)
from akresil.cli import build_parser
from akresil.cli_admin import parse_topic_spec, show_features, show_log_dirs, show_quorum
from akresil.core.admin_call import ItemResults
from akresil.errors import KafkaStorageError, KafkaTimeoutError
from akresil.types import TopicPartition as TP

DIRS = {1: {"/d/b": LogDirDescription("/d/b", KafkaStorageError("log dir '/d/b' on node 1: offline"), {}),
            "/d/a": LogDirDescription("/d/a", None, {TP("t", 1): ReplicaInfo(30, 2, True),
                                                     TP("t", 0): ReplicaInfo(100, 0, False),
                                                     TP("u", 0): ReplicaInfo(5, 0, False)}, 900, 400)}}


def test_parser_knows_the_cluster_commands() -> None:
    args = build_parser().parse_args(["cluster", "log-dirs", "--broker", "1", "--broker", "3", "--topic", "t:0",
                                      "--json"])
    assert (args.cluster_command, args.broker, args.topic, args.json) == ("log-dirs", [1, 3], ["t:0"], True)
    assert build_parser().parse_args(["cluster", "features"]).cluster_command == "features"
    assert build_parser().parse_args(["cluster", "quorum", "--json"]).json
    with pytest.raises(SystemExit):
        build_parser().parse_args(["cluster", "log-dirs", "--broker", "one"])


def test_log_dirs_table_per_dir_and_per_replica(capsys: pytest.CaptureFixture[str]) -> None:
    results = ItemResults([1, 2], DIRS, {2: KafkaTimeoutError("DescribeLogDirs on node 2: not done")})
    args = build_parser().parse_args(["cluster", "log-dirs"])
    assert show_log_dirs(args, results, []) == 1                 # broker 2 did not answer
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "BROKER  LOG-DIR  REPLICAS  SIZE  USABLE-BYTES  TOTAL-BYTES  ERROR",
        "1       /d/a     3         135   400           900          -",
        "1       /d/b     0         0     -             -            KafkaStorageError"]
    assert err == "broker 2: KafkaTimeoutError: DescribeLogDirs on node 2: not done\n"

    assert show_log_dirs(args, ItemResults([1], DIRS, {}), [parse_topic_spec("t")]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "BROKER  LOG-DIR  TOPIC  PARTITION  SIZE  OFFSET-LAG  FUTURE",
        "1       /d/a     t      0          100   0           -",
        "1       /d/a     t      1          30    2           yes"]


def test_log_dirs_json_one_object_per_dir(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["cluster", "log-dirs", "--json"])
    assert show_log_dirs(args, ItemResults([1], DIRS, {}), [parse_topic_spec("t:1")]) == 0
    a, b = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert a == {"broker": 1, "log_dir": "/d/a", "error": None, "total_bytes": 900, "usable_bytes": 400,
                 "replicas": [{"topic": "t", "partition": 1, "size": 30, "offset_lag": 2, "is_future": True}]}
    assert b["error"] == "KafkaStorageError: log dir '/d/b' on node 1: offline" and b["replicas"] == []


def test_features_table_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    features = FeatureMetadata({"metadata.version": VersionRange(21, 21)},
                               {"metadata.version": VersionRange(7, 27), "group.version": VersionRange(0, 1)}, 9)
    assert show_features(build_parser().parse_args(["cluster", "features"]), features) == 0
    assert capsys.readouterr().out.splitlines() == [
        "FEATURE           FINALIZED  SUPPORTED-MIN  SUPPORTED-MAX",
        "group.version     -          0              1",
        "metadata.version  21         7              27"]
    show_features(build_parser().parse_args(["cluster", "features", "--json"]), features)
    rows = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows[1] == {"feature": "metadata.version", "finalized": 21, "supported_min": 7, "supported_max": 27}


def test_quorum_status_line_then_replicas(capsys: pytest.CaptureFixture[str]) -> None:
    quorum = QuorumInfo(3, 7, 500, (QuorumReplica(3, 500, None, 10_000), QuorumReplica(4, 490, 9_000, 8_500)),
                        (QuorumReplica(1, 520, 9_990, None),))
    assert show_quorum(build_parser().parse_args(["cluster", "quorum"]), quorum, now_ms=10_000) == 0
    assert capsys.readouterr().out.splitlines() == [
        "leader 3, epoch 7, high watermark 500",
        "NODE  ROLE      LOG-END-OFFSET  LAG  LAST-FETCH   LAST-CAUGHT-UP",
        "3     leader    500             0    -            0 ms ago",
        "4     voter     490             10   1000 ms ago  1500 ms ago",
        "1     observer  520             0    10 ms ago    -"]
    show_quorum(build_parser().parse_args(["cluster", "quorum", "--json"]), quorum, now_ms=0)
    (line,) = capsys.readouterr().out.splitlines()
    shown = orjson.loads(line)
    assert (shown["leader_id"], shown["leader_epoch"], shown["high_watermark"]) == (3, 7, 500)
    assert shown["replicas"][1] == {"node": 4, "role": "voter", "log_end_offset": 490, "lag": 10,
                                    "last_fetch_timestamp": 9_000, "last_caught_up_timestamp": 8_500}
