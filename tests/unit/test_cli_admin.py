"""cli_admin: the reset-offsets plan (clamping as kafka-consumer-groups.sh), argument parsing, tables."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from akresil.admin_types import DEFAULT, GroupDescription, GroupOffset, MemberDescription, ShareGroupOffset
from akresil.checks import EARLIEST as FIRST, LATEST as LAST
from akresil.cli import build_parser, main
from akresil.cli_admin import (ANY_NAME, AdminUsageError, _delete_groups, _describe_groups, _remove_members,
                               _reset_offsets, parse_datetime_ms,
                               parse_move, parse_topic_spec, plan_reset, quota_parts, table)
from akresil.core.admin_call import ItemResults
from akresil.errors import GroupAuthorizationFailedError, GroupIdNotFoundError, UnknownMemberIdError
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
    """The calls ``groups describe`` and ``groups reset-offsets`` make, answering from fixed descriptions."""

    def __init__(self, consumer: dict[str, GroupDescription], share: dict[str, GroupDescription]) -> None:
        self.consumer, self.share = consumer, share
        self.share_asked: list[str] = []
        self.altered: list[tuple[str, str, dict[TopicPartition, int]]] = []
        self.deleted: list[tuple[str, list[str]]] = []

    async def describe_consumer_groups(self, ids: list[str]) -> ItemResults[str, GroupDescription]:
        return ItemResults(ids, {g: self.consumer[g] for g in ids if g in self.consumer},
                           {g: GroupIdNotFoundError(f"group {g!r} does not exist or is not a consumer group")
                            for g in ids if g not in self.consumer})

    async def describe_share_groups(self, ids: list[str]) -> ItemResults[str, GroupDescription]:
        self.share_asked += ids
        return ItemResults(ids, {g: self.share[g] for g in ids if g in self.share},
                           {g: GroupIdNotFoundError(f"share group {g!r}: not found")
                            for g in ids if g not in self.share})

    async def list_consumer_group_offsets(self, gid: str, **_: object) -> dict[TopicPartition, GroupOffset]:
        return {A: GroupOffset(7, "", None, 10, 3)}

    async def list_share_group_offsets(self, ids: list[str]) -> ItemResults[str, dict[TopicPartition, Any]]:
        assert all(g in self.share for g in ids)
        return ItemResults(ids, {g: {A: ShareGroupOffset(12, 0, 38), B: ShareGroupOffset(None, None, None)}
                                 for g in ids if g != "gs-denied"},
                           {g: GroupAuthorizationFailedError(f"share group {g!r}") for g in ids if g == "gs-denied"})

    async def list_offsets(self, wanted: dict[TopicPartition, int]) -> dict[TopicPartition, tuple[int, int]]:
        return {tp: ({FIRST: EARLIEST, LAST: LATEST}[stamp][tp], -1) for tp, stamp in wanted.items()}

    async def alter_share_group_offsets(self, gid: str, plan: dict[TopicPartition, int]) -> ItemResults[Any, None]:
        self.altered.append(("share", gid, plan))
        return ItemResults(list(plan), dict.fromkeys(plan), {})

    async def alter_consumer_group_offsets(self, gid: str, plan: dict[TopicPartition, int]) -> ItemResults[Any, None]:
        self.altered.append(("consumer", gid, plan))
        return ItemResults(list(plan), dict.fromkeys(plan), {})

    async def delete_share_groups(self, ids: list[str]) -> ItemResults[str, None]:
        self.deleted.append(("share", ids))
        return ItemResults(ids, dict.fromkeys(ids), {})

    async def delete_consumer_groups(self, ids: list[str]) -> ItemResults[str, None]:
        self.deleted.append(("consumer", ids))
        return ItemResults(ids, {g: None for g in ids if g in self.consumer},
                           {g: GroupIdNotFoundError(f"group {g!r}") for g in ids if g not in self.consumer})


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
    share_row, *offset_rows = [line.split() for line in out.splitlines() if line.startswith("gs ")]
    assert share_row == ["gs", "s1", "/h", "cid-s1", "2", "t:0,1"]
    assert offset_rows == [["gs", "t", "0", "12", "38"], ["gs", "t", "1", "-", "-"]]   # START-OFFSET, LAG
    assert "group none: GroupIdNotFoundError: group 'none' does not exist" in err

    args = build_parser().parse_args(["groups", "describe", "g848", "gs", "--json"])
    assert await _describe_groups(admin, args) == 0
    lines = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(x["group"], x["type"], x["group_epoch"]) for x in lines] == [("g848", "consumer", 5), ("gs", "share", 2)]
    assert lines[0]["members"][0]["target_assignment"] == [["t", 0], ["t", 1]]
    assert lines[0]["offsets"][0]["member_id"] == "m1"
    assert lines[1]["offsets"] == [{"topic": "t", "partition": 0, "start_offset": 12, "lag": 38},
                                   {"topic": "t", "partition": 1, "start_offset": None, "lag": None}]


async def test_groups_describe_of_a_share_group_whose_offsets_fail_shows_members_and_exits_1(
        capsys: pytest.CaptureFixture[str]) -> None:
    share = GroupDescription("gs-denied", "Empty", "share", "simple", (), 3, group_type="share", group_epoch=2,
                             assignment_epoch=2)
    args = build_parser().parse_args(["groups", "describe", "gs-denied"])
    assert await _describe_groups(_GroupsAdmin({}, {"gs-denied": share}), args) == 1
    out, err = capsys.readouterr()
    assert "group gs-denied: state Empty" in out
    assert "group gs-denied: offsets: GroupAuthorizationFailedError: share group 'gs-denied'" in err


async def test_reset_offsets_of_a_share_group_moves_its_start_offsets(capsys: pytest.CaptureFixture[str]) -> None:
    """The previous offset is the share group's start offset (none yet on B: a shift starts at the log end)."""
    share = GroupDescription("gs", "Empty", "share", "simple", (), 3, group_type="share", group_epoch=2,
                             assignment_epoch=2)
    admin = _GroupsAdmin({}, {"gs": share})
    args = build_parser().parse_args(["groups", "reset-offsets", "gs", "--all-topics", "--shift-by", "-10",
                                      "--execute"])
    assert await _reset_offsets(admin, args) == 0
    assert admin.altered == [("share", "gs", {A: 5, B: 0})]     # A: 12 - 10 clamped to its log start 5; B: 10 - 10
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert rows == [["gs", "t", "0", "12", "5", "reset"], ["gs", "t", "1", "-", "0", "reset"]]
    # a group ShareGroupDescribe does not describe is a consumer group, as before
    args = build_parser().parse_args(["groups", "reset-offsets", "billing", "--topic", "t:0", "--to-earliest",
                                      "--execute"])
    assert await _reset_offsets(admin, args) == 0
    assert admin.altered[1:] == [("consumer", "billing", {A: 5})]
    assert admin.share_asked == ["gs", "billing"]


async def test_groups_delete_deletes_each_group_by_its_type(capsys: pytest.CaptureFixture[str]) -> None:
    """``groups describe`` shows share groups too, so ``groups delete`` deletes them, with delete_share_groups
    (delete_consumer_groups leaves a share group alone); a group neither finds is reported, exit 1."""
    share = GroupDescription("gs", "Empty", "", "simple", (), 1, group_type="share")
    classic = GroupDescription("gc", "Empty", "consumer", "", (), 1)
    admin = _GroupsAdmin({"gc": classic}, {"gs": share})
    args = build_parser().parse_args(["groups", "delete", "gc", "gs", "none", "--json"])
    assert await _delete_groups(admin, args) == 1
    assert admin.deleted == [("share", ["gs"]), ("consumer", ["gc", "none"])]
    rows = {r["item"]: r["result"] for r in map(orjson.loads, capsys.readouterr().out.splitlines())}
    assert rows["gs"] == rows["gc"] == "deleted" and rows["none"].startswith("GroupIdNotFoundError")


class _RemovingAdmin:
    def __init__(self) -> None:
        self.asked: list[tuple[str, list[str] | None, str | None]] = []

    async def remove_members_from_consumer_group(self, group: str, members: list[str] | None,
                                                 *, reason: str | None = None) -> ItemResults[str, None]:
        self.asked.append((group, members, reason))
        names = members or ["box-1"]
        return ItemResults(names, {m: None for m in names if m != "gone"},
                           {"gone": UnknownMemberIdError("member 'gone' of group 'g': unknown")})


async def test_groups_remove_members_names_members_or_takes_them_all(capsys: pytest.CaptureFixture[str]) -> None:
    admin = _RemovingAdmin()
    args = build_parser().parse_args(["groups", "remove-members", "g", "--member", "box-1", "--member", "gone",
                                      "--reason", "host retired", "--json"])
    assert await _remove_members(admin, args) == 1             # a member that failed: exit 1
    rows = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows[0] == {"item": "box-1", "result": "removed"}
    assert rows[1]["item"] == "gone" and rows[1]["result"].startswith("UnknownMemberIdError")
    assert await _remove_members(admin, build_parser().parse_args(["groups", "remove-members", "g",
                                                                   "--all-members"])) == 0
    assert admin.asked == [("g", ["box-1", "gone"], "host retired"), ("g", None, None)]
    for bad in (["g"], ["g", "--member", "a", "--all-members"]):     # exactly one of the two
        with pytest.raises(SystemExit):
            build_parser().parse_args(["groups", "remove-members", *bad])
