"""cli_admin: the reset-offsets plan (clamping as kafka-consumer-groups.sh), argument parsing, tables."""

from __future__ import annotations

import orjson
import pytest

from akresil.cli import build_parser, main
from akresil.admin_types import DEFAULT, GroupDescription, GroupOffset, MemberDescription
from akresil.cli_admin import (ANY_NAME, AdminUsageError, _describe_groups, parse_datetime_ms, parse_move,
                               parse_topic_spec, plan_reset, quota_parts, table)
from akresil.core.admin_call import ItemResults
from akresil.errors import GroupIdNotFoundError
from akresil.types import TopicPartition

A, B = TopicPartition("t", 0), TopicPartition("t", 1)
EARLIEST = {A: 5, B: 0}
LATEST = {A: 50, B: 10}
COMMITTED = {A: 20, B: None}


@pytest.mark.parametrize(("mode", "value", "expected"), [
    ("to_earliest", None, {A: 5, B: 0}),
    ("to_latest", None, {A: 50, B: 10}),
    ("to_offset", 30, {A: 30, B: 10}),            # B's log ends at 10: clamped
    ("to_offset", 0, {A: 5, B: 0}),               # below A's log start: clamped up
    ("shift_by", -100, {A: 5, B: 0}),             # B has no commit: shifts from its log end
    ("shift_by", 3, {A: 23, B: 10}),
    ("to_current", None, {A: 20, B: 10}),
])
def test_plan_reset(mode: str, value: int | None, expected: dict[TopicPartition, int]) -> None:
    assert plan_reset(mode, value, [A, B], COMMITTED, EARLIEST, LATEST) == expected


def test_plan_reset_to_datetime_uses_found_offsets_and_log_end_when_none() -> None:
    assert plan_reset("to_datetime", None, [A, B], COMMITTED, EARLIEST, LATEST, {A: 7, B: -1}) == {A: 7, B: 10}


def test_plan_reset_rejects_unknown_mode() -> None:
    with pytest.raises(AdminUsageError, match="to_nowhere"):
        plan_reset("to_nowhere", None, [A], COMMITTED, EARLIEST, LATEST)


def test_parse_helpers() -> None:
    assert parse_topic_spec("orders") == ("orders", None)
    assert parse_topic_spec("orders:0,2") == ("orders", [0, 2])
    for bad in ("orders:x", ":1", "orders:", "orders:-1"):
        with pytest.raises(AdminUsageError, match="--topic"):
            parse_topic_spec(bad)
    assert parse_datetime_ms("1700000000000") == 1_700_000_000_000
    assert parse_datetime_ms("2023-11-14T22:13:20Z") == 1_700_000_000_000
    assert parse_datetime_ms("2023-11-14T23:13:20+01:00") == 1_700_000_000_000
    with pytest.raises(AdminUsageError, match="--to-datetime"):
        parse_datetime_ms("yesterday")


def test_table_aligns_and_blanks_none() -> None:
    assert table(["A", "LONG-NAME"], [[1, None], ["wide-cell", 2]]).splitlines() == [
        "A          LONG-NAME", "1          -", "wide-cell  2"]


def test_reset_offsets_needs_exactly_one_mode(capsys: pytest.CaptureFixture[str]) -> None:
    # refused before any connection: the bootstrap address is never dialled
    assert main(["groups", "reset-offsets", "g", "--topic", "t", "-b", "127.0.0.1:1"]) == 2
    assert "exactly one of --to-earliest" in capsys.readouterr().err
    assert main(["groups", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--to-latest",
                 "-b", "127.0.0.1:1"]) == 2


def test_configs_needs_topic_or_broker(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["configs", "describe", "-b", "127.0.0.1:1"]) == 2
    assert "exactly one of --topic or --broker" in capsys.readouterr().err


def test_parser_knows_the_admin_commands() -> None:
    args = build_parser().parse_args(["topics", "add-partitions", "t", "--total", "4", "--json"])
    assert (args.topics_command, args.name, args.total, args.json) == ("add-partitions", "t", 4, True)
    args = build_parser().parse_args(["groups", "describe", "g1", "g2"])
    assert args.groups == ["g1", "g2"]


def test_parse_move() -> None:
    assert parse_move("orders:0=3,1,2") == (TopicPartition("orders", 0), [3, 1, 2])
    assert parse_move("a:b:7=1") == (TopicPartition("a:b", 7), [1])
    assert parse_move("orders:2=cancel") == (TopicPartition("orders", 2), None)
    for bad, message in (("orders=1", "expected TOPIC:PARTITION="), ("orders:x=1", "expected TOPIC:PARTITION="),
                         (":0=1", "expected TOPIC:PARTITION="), ("orders:0", "expected TOPIC:PARTITION="),
                         ("orders:0=1,b", "replicas must be broker ids"), ("orders:0=", "replicas must be broker ids"),
                         ("orders:0=1,1", "distinct broker ids"), ("orders:0=-1", "distinct broker ids >= 0")):
        with pytest.raises(AdminUsageError, match=message):
            parse_move(bad)


def test_quota_entity_options() -> None:
    args = build_parser().parse_args(["quotas", "describe", "--user", "--client-id-default", "--strict"])
    assert quota_parts(args) == {"user": ANY_NAME, "client_id": DEFAULT} and args.strict
    args = build_parser().parse_args(["quotas", "alter", "--user", "alice", "--ip-default", "--set", "x=1"])
    assert quota_parts(args) == {"user": "alice", "ip": DEFAULT}
    with pytest.raises(AdminUsageError, match="--user or --user-default, not both"):
        quota_parts(build_parser().parse_args(["quotas", "describe", "--user", "a", "--user-default"]))
    with pytest.raises(AdminUsageError, match="--client-id needs a non-empty name"):
        quota_parts(build_parser().parse_args(["quotas", "alter", "--client-id", ""]))


@pytest.mark.parametrize(("argv", "message"), [
    (["quotas", "alter", "--set", "producer_byte_rate=1"], "name the entity with --user"),
    (["quotas", "alter", "--user", "a"], "nothing to change"),
    (["quotas", "alter", "--user", "a", "--set", "producer_byte_rate=fast"], "expected KEY=NUMBER"),
    (["quotas", "alter", "--user", "a", "--set", "producer_byte_rate"], "expected KEY=NUMBER"),
    (["quotas", "alter", "--user", "a", "--set", "producer_byte_rate=inf"], "expected KEY=NUMBER"),
    (["partitions", "reassign", "t=1"], "expected TOPIC:PARTITION="),
    (["partitions", "reassign", "t:0=1", "t:0=2"], "a partition is named twice"),
    (["partitions", "list-reassignments", "--topic", "t:x"], "--topic"),
])
def test_quota_and_reassignment_usage_errors_exit_2_before_connecting(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv + ["-b", "127.0.0.1:1"]) == 2          # nothing listens there: refused before dialling
    assert message in capsys.readouterr().err


class _GroupsAdmin:
    """The three calls ``groups describe`` makes, answering from fixed descriptions."""

    def __init__(self, consumer: dict[str, GroupDescription], share: dict[str, GroupDescription]) -> None:
        self.consumer, self.share = consumer, share
        self.share_asked: list[str] = []

    async def describe_consumer_groups(self, ids: list[str]) -> ItemResults[str, GroupDescription]:
        return ItemResults(ids, {g: self.consumer[g] for g in ids if g in self.consumer},
                           {g: GroupIdNotFoundError(f"group {g!r} does not exist or is not a consumer group")
                            for g in ids if g not in self.consumer})

    async def describe_share_groups(self, ids: list[str]) -> ItemResults[str, GroupDescription]:
        self.share_asked += ids
        return ItemResults(ids, {g: self.share[g] for g in ids if g in self.share},
                           {g: GroupIdNotFoundError(f"share group {g!r}: not found")
                            for g in ids if g not in self.share})

    async def list_consumer_group_offsets(self, gid: str) -> dict[TopicPartition, GroupOffset]:
        return {A: GroupOffset(7, "", None, 10, 3)}


def _member(mid: str, owned: set[TopicPartition], **kip848: object) -> MemberDescription:
    return MemberDescription(mid, None, "cid-" + mid, "/h", frozenset(owned), **kip848)  # type: ignore[arg-type]


async def test_groups_describe_shows_kip848_and_share_groups(capsys: pytest.CaptureFixture[str]) -> None:
    kip848 = GroupDescription("g848", "Stable", "consumer", "uniform",
                              (_member("m1", {A}, target_assignment=frozenset({A, B}), member_epoch=4),), 2,
                              group_type="consumer", group_epoch=5, assignment_epoch=4)
    classic = GroupDescription("gc", "Stable", "consumer", "range", (_member("c1", {B}),), 1)
    share = GroupDescription("gs", "Stable", "share", "simple", (_member("s1", {A, B}, member_epoch=2),), 3,
                             group_type="share", group_epoch=2, assignment_epoch=2)
    admin = _GroupsAdmin({"g848": kip848, "gc": classic}, {"gs": share})
    args = build_parser().parse_args(["groups", "describe", "g848", "gc", "gs", "none"])
    assert await _describe_groups(admin, args) == 1                 # "none" is missing
    out, err = capsys.readouterr()
    assert admin.share_asked == ["gs", "none"]                      # only groups describe_consumer_groups missed
    assert "group g848: state Stable, assignor uniform, coordinator 2, 1 member(s), type consumer, group epoch 5, " \
           "assignment epoch 4\n" in out
    assert "group gc: state Stable, assignor range, coordinator 1, 1 member(s)\n" in out
    assert "group gs: state Stable, assignor simple, coordinator 3, 1 member(s), type share, group epoch 2" in out
    share_row = next(line for line in out.splitlines() if line.startswith("gs "))
    assert share_row.split() == ["gs", "s1", "/h", "cid-s1", "2", "t:0,1"]
    assert "group none: GroupIdNotFoundError: group 'none' does not exist" in err

    args = build_parser().parse_args(["groups", "describe", "g848", "gs", "--json"])
    assert await _describe_groups(admin, args) == 0
    lines = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(x["group"], x["type"], x["group_epoch"]) for x in lines] == [("g848", "consumer", 5), ("gs", "share", 2)]
    assert lines[0]["members"][0]["target_assignment"] == [["t", 0], ["t", 1]]
    assert lines[0]["offsets"][0]["member_id"] == "m1" and "offsets" not in lines[1]
