"""The operator commands of ``akresil``: ``groups list|describe|reset-offsets|delete`` (describe shows classic,
KIP-848 and share groups; reset-offsets moves a share group's start offsets too), ``configs describe|alter``,
``topics add-partitions``, ``partitions reassign|list-reassignments``, ``quotas describe|alter`` and
``cluster log-dirs|features|quorum``, printing
aligned tables (as kafka-consumer-groups.sh does) or, with ``--json``, one JSON object per line.

``groups reset-offsets`` follows kafka-consumer-groups.sh: it only shows the plan unless ``--execute`` is
given, and target offsets are clamped into each partition's [log start, log end] range. The plan itself is
``plan_reset``, a pure function, so its rules are tested without a broker.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping, Sequence

import orjson

from .types import TopicPartition, partitions_by_topic


class AdminUsageError(Exception):
    """Bad command-line input for an admin command (reported with exit code 2)."""


# ---------------------------------------------------------------------------------------------- output
def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Columns padded to their widest cell; None shows as '-' (kafka-consumer-groups.sh's blank)."""
    cells = [[("-" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    return "\n".join(lines)


def emit(args: argparse.Namespace, headers: Sequence[str], rows: list[dict[str, Any]]) -> None:
    """JSON lines with ``--json``, else a table of ``headers`` (keys of each row, lower-cased)."""
    if args.json:
        for row in rows:
            sys.stdout.write(orjson.dumps(row).decode() + "\n")
        return
    keys = [h.lower().replace("-", "_") for h in headers]
    print(table(headers, ([row.get(k) for k in keys] for row in rows)))


# ---------------------------------------------------------------------------------------------- reset plan
RESET_MODES = ("to_earliest", "to_latest", "to_offset", "shift_by", "to_datetime", "to_current")


def plan_reset(mode: str, value: int | None, partitions: Iterable[TopicPartition],
               committed: Mapping[TopicPartition, int | None], earliest: Mapping[TopicPartition, int],
               latest: Mapping[TopicPartition, int],
               by_time: Mapping[TopicPartition, int] | None = None) -> dict[TopicPartition, int]:
    """Target offsets of a reset, each clamped into [log start, log end] as kafka-consumer-groups.sh does.

    ``to_offset``/``shift_by`` take ``value``; ``to_datetime`` takes ``by_time`` (the first offset at or after
    the time, -1 when there is none: the log end); ``shift_by`` and ``to_current`` start from the committed
    offset, or from the log end when the partition has none."""
    if mode not in RESET_MODES:
        raise AdminUsageError(f"reset mode {mode!r} is not one of {', '.join(RESET_MODES)}")
    out: dict[TopicPartition, int] = {}
    for tp in partitions:
        lo, hi = earliest[tp], latest[tp]
        current = committed.get(tp)
        if mode == "to_earliest":
            target = lo
        elif mode == "to_latest":
            target = hi
        elif mode == "to_offset":
            assert value is not None
            target = value
        elif mode == "shift_by":
            assert value is not None
            target = (hi if current is None else current) + value
        elif mode == "to_current":
            target = hi if current is None else current
        else:
            assert by_time is not None
            found = by_time.get(tp, -1)
            target = hi if found < 0 else found
        out[tp] = min(max(target, lo), hi)
    return out


def parse_datetime_ms(text: str) -> int:
    """``2024-05-01T12:00:00`` (UTC unless an offset is given) or epoch milliseconds."""
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise AdminUsageError(f"--to-datetime {text!r}: expected ISO 8601 (2024-05-01T12:00:00[+02:00]) "
                              f"or epoch milliseconds") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


def parse_topic_spec(spec: str) -> tuple[str, list[int] | None]:
    """``orders`` (every partition) or ``orders:0,2``."""
    topic, sep, parts = spec.partition(":")
    if not topic:
        raise AdminUsageError(f"--topic {spec!r}: expected TOPIC or TOPIC:P,P")
    if not sep:
        return topic, None
    try:
        partitions = [int(p) for p in parts.split(",") if p.strip()]
    except ValueError:
        raise AdminUsageError(f"--topic {spec!r}: partitions must be integers, e.g. {topic}:0,1") from None
    if not partitions or any(p < 0 for p in partitions):
        raise AdminUsageError(f"--topic {spec!r}: expected partitions >= 0 after ':'")
    return topic, partitions


def parse_move(spec: str) -> tuple[TopicPartition, list[int] | None]:
    """``orders:0=3,1,2`` (new replicas, the first preferred as leader) or ``orders:0=cancel``."""
    where, sep, replicas = spec.rpartition("=")
    topic, colon, part = where.rpartition(":")
    if not sep or not colon or not topic or not part.isdigit():
        raise AdminUsageError(f"{spec!r}: expected TOPIC:PARTITION=BROKER,BROKER,... or TOPIC:PARTITION=cancel")
    tp = TopicPartition(topic, int(part))
    if replicas == "cancel":
        return tp, None
    try:
        ids = [int(b) for b in replicas.split(",")]
    except ValueError:
        raise AdminUsageError(f"{spec!r}: replicas must be broker ids, e.g. {where}=1,2,3") from None
    if any(b < 0 for b in ids) or len(set(ids)) != len(ids):
        raise AdminUsageError(f"{spec!r}: replicas must be distinct broker ids >= 0")
    return tp, ids


#: a quota entity option given without a name (``--user``): any entity of that type, for ``quotas describe``
ANY_NAME: Any = object()


def quota_parts(args: argparse.Namespace) -> dict[str, Any]:
    """``{"user"|"client_id"|"ip": name, DEFAULT or ANY_NAME}`` from ``--user [NAME]`` / ``--user-default`` etc."""
    from .admin_types import DEFAULT
    parts: dict[str, Any] = {}
    for attr, flag in (("user", "--user"), ("client_id", "--client-id"), ("ip", "--ip")):
        name, default = getattr(args, attr), getattr(args, attr + "_default")
        if name is not None and default:
            raise AdminUsageError(f"quotas: give {flag} or {flag}-default, not both")
        if name == "":
            raise AdminUsageError(f"quotas: {flag} needs a non-empty name")
        if default or name is not None:
            parts[attr] = DEFAULT if default else name
    return parts


# ---------------------------------------------------------------------------------------------- commands
async def cmd_groups(args: argparse.Namespace, config: dict[str, Any]) -> int:
    from .admin import Admin
    if args.groups_command == "reset-offsets":
        _reset_mode(args)   # bad usage is refused before connecting
    async with Admin(**config) as admin:
        if args.groups_command == "list":
            groups = await _listed_groups(admin, args.state)
            emit(args, ["GROUP", "STATE", "TYPE", "PROTOCOL-TYPE", "COORDINATOR"], [
                {"group": g.group_id, "state": g.state, "type": g.group_type, "protocol_type": g.protocol_type,
                 "coordinator": g.coordinator} for g in groups])
            return 0
        if args.groups_command == "describe":
            return await _describe_groups(admin, args)
        if args.groups_command == "delete":
            return await _delete_groups(admin, args)
        if args.groups_command == "remove-members":
            return await _remove_members(admin, args)
        return await _reset_offsets(admin, args)


async def _listed_groups(admin: Any, states: list[str] | None) -> list[Any]:
    """ListGroups, with each state the broker did not give asked from the group's coordinator.

    Before ListGroups v4 a broker gives no state; Tansu gives "Unknown" for every group.  DescribeGroups knows
    it, so the states are filled in before ``--state`` filters (which therefore runs here, not on the broker)."""
    from dataclasses import replace
    groups = await admin.list_consumer_groups()
    unknown = [g.group_id for g in groups if g.state in (None, "", "Unknown")]
    if unknown:
        described = await admin.describe_consumer_groups(unknown)
        groups = [replace(g, state=described.ok[g.group_id].state) if g.group_id in described.ok else g
                  for g in groups]
    if states:
        wanted = {s.lower() for s in states}
        groups = [g for g in groups if (g.state or "").lower() in wanted]
    return list(groups)


def _report(args: argparse.Namespace, verb: str, *results: Any) -> int:
    rows = [{"item": str(k), "result": verb if k in r.ok else f"{type(r.errors[k]).__name__}: {r.errors[k]}"}
            for r in results for k in r]
    emit(args, ["ITEM", "RESULT"], rows)
    return 0 if not any(r.errors for r in results) else 1


async def _delete_groups(admin: Any, args: argparse.Namespace) -> int:
    """Each group by its type, as ``groups describe`` shows both: a share group (ShareGroupDescribe describes it)
    with ``delete_share_groups``, the others with ``delete_consumer_groups`` (which would leave a share group)."""
    share = set((await admin.describe_share_groups(args.groups)).ok)
    results = []
    if share:
        results.append(await admin.delete_share_groups([g for g in args.groups if g in share]))
    if not share.issuperset(args.groups):
        results.append(await admin.delete_consumer_groups([g for g in args.groups if g not in share]))
    return _report(args, "deleted", *results)


async def _remove_members(admin: Any, args: argparse.Namespace) -> int:
    """Static members named by ``--member`` (their group instance ids), or with ``--all-members`` every member
    of the described group; one row per member."""
    results = await admin.remove_members_from_consumer_group(
        args.group, None if args.all_members else args.member, reason=args.reason)
    return _report(args, "removed", results)


async def _describe_groups(admin: Any, args: argparse.Namespace) -> int:
    """Consumer groups of both protocols (classic and KIP-848) with their offsets and lag, and share groups
    (KIP-932) with their members' assignments: a group ``describe_consumer_groups`` does not find is asked as
    a share group before it is reported missing."""
    from .errors import GroupIdNotFoundError
    described = await admin.describe_consumer_groups(args.groups)
    found: dict[str, Any] = dict(described.ok)
    failures: dict[str, BaseException] = dict(described.errors)
    maybe_share = [g for g, e in described.errors.items() if isinstance(e, GroupIdNotFoundError)]
    if maybe_share:
        shared = await admin.describe_share_groups(maybe_share)
        for gid, desc in shared.ok.items():
            found[gid] = desc
            del failures[gid]
    share_ids = [g for g in args.groups if g in found and found[g].group_type == "share"]
    starts = await admin.list_share_group_offsets(share_ids) if share_ids else None
    rows: list[dict[str, Any]] = []
    share_rows: list[dict[str, Any]] = []
    share_offsets: list[dict[str, Any]] = []
    for gid in args.groups:
        if gid in failures:
            print(f"group {gid}: {type(failures[gid]).__name__}: {failures[gid]}", file=sys.stderr)
            continue
        desc = found[gid]
        if desc.group_type == "share":
            assert starts is not None
            if gid in starts.errors:      # the members are still shown; the exit status tells
                failures[gid] = starts.errors[gid]
                print(f"group {gid}: offsets: {type(starts.errors[gid]).__name__}: {starts.errors[gid]}",
                      file=sys.stderr)
            _describe_share_group(args, desc, starts.ok.get(gid, {}), share_rows, share_offsets)
            continue
        owner = {tp: m for m in desc.members for tp in m.assignment}
        offsets = await admin.list_consumer_group_offsets(gid)
        tps = sorted(set(offsets) | set(owner))
        if args.json:
            sys.stdout.write(orjson.dumps({
                **_group_json(desc),
                "offsets": [{"topic": tp.topic, "partition": tp.partition,
                             "current_offset": offsets[tp].committed if tp in offsets else None,
                             "log_end_offset": offsets[tp].log_end if tp in offsets else None,
                             "lag": offsets[tp].lag if tp in offsets else None,
                             "member_id": owner[tp].member_id if tp in owner else None} for tp in tps],
            }).decode() + "\n")
            continue
        print(_group_line(desc))
        for tp in tps:
            o = offsets.get(tp)
            m = owner.get(tp)
            rows.append({"group": gid, "topic": tp.topic, "partition": tp.partition,
                         "current_offset": o.committed if o else None, "log_end_offset": o.log_end if o else None,
                         "lag": o.lag if o else None, "consumer_id": m.member_id if m else None,
                         "host": m.client_host if m else None, "client_id": m.client_id if m else None})
    if not args.json and rows:
        print(table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                     "HOST", "CLIENT-ID"],
                    ([r["group"], r["topic"], r["partition"], r["current_offset"], r["log_end_offset"], r["lag"],
                      r["consumer_id"], r["host"], r["client_id"]] for r in rows)))
    if not args.json and share_rows:
        print(table(["GROUP", "MEMBER-ID", "HOST", "CLIENT-ID", "MEMBER-EPOCH", "ASSIGNMENT"],
                    ([r["group"], r["member_id"], r["host"], r["client_id"], r["member_epoch"], r["assignment"]]
                     for r in share_rows)))
    if not args.json and share_offsets:
        print(table(["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"],
                    ([r["group"], r["topic"], r["partition"], r["start_offset"], r["lag"]] for r in share_offsets)))
    return 1 if failures else 0


def _describe_share_group(args: argparse.Namespace, desc: Any, offsets: Mapping[TopicPartition, Any],
                          rows: list[dict[str, Any]], offset_rows: list[dict[str, Any]]) -> None:
    """A share group has no committed offset per member (its members share the partitions): its members and
    what each is assigned, and per partition the group's start offset and lag (``list_share_group_offsets``)."""
    listed = [{"topic": tp.topic, "partition": tp.partition, "start_offset": o.start_offset, "lag": o.lag}
              for tp, o in sorted(offsets.items())]
    if args.json:
        sys.stdout.write(orjson.dumps({**_group_json(desc), "offsets": listed}).decode() + "\n")
        return
    print(_group_line(desc))
    for m in sorted(desc.members, key=lambda m: m.member_id):
        rows.append({"group": desc.group_id, "member_id": m.member_id, "host": m.client_host,
                     "client_id": m.client_id, "member_epoch": m.member_epoch,
                     "assignment": _partitions_text(m.assignment)})
    offset_rows += [{"group": desc.group_id, **r} for r in listed]


def _group_line(desc: Any) -> str:
    """One line per group: state, assignor, coordinator, members, then (KIP-848 and share groups) the group's
    type and epochs; a classic group's line is unchanged from before KIP-848 groups were described."""
    extra = (f", type {desc.group_type}, group epoch {desc.group_epoch}, assignment epoch {desc.assignment_epoch}"
             if desc.group_type != "classic" else "")
    return (f"group {desc.group_id}: state {desc.state}, assignor {desc.protocol or '-'}, "
            f"coordinator {desc.coordinator}, {len(desc.members)} member(s){extra}")


def _group_json(desc: Any) -> dict[str, Any]:
    return {
        "group": desc.group_id, "type": desc.group_type, "state": desc.state, "protocol": desc.protocol,
        "coordinator": desc.coordinator, "group_epoch": desc.group_epoch, "assignment_epoch": desc.assignment_epoch,
        "members": [{"member_id": m.member_id, "client_id": m.client_id, "host": m.client_host,
                     "group_instance_id": m.group_instance_id, "rack": m.rack, "member_epoch": m.member_epoch,
                     "subscribed_topics": list(m.subscribed_topics),
                     "assignment": [[tp.topic, tp.partition] for tp in sorted(m.assignment)],
                     "target_assignment": (None if m.target_assignment is None else
                                           [[tp.topic, tp.partition] for tp in sorted(m.target_assignment)])}
                    for m in desc.members],
    }


def _partitions_text(tps: Iterable[TopicPartition]) -> str:
    """``orders:0,1 payments:2``: partitions grouped by topic, both sorted."""
    return " ".join(f"{t}:{','.join(map(str, ps))}" for t, ps in partitions_by_topic(tps).items()) or "-"


def _reset_mode(args: argparse.Namespace) -> tuple[str, Any]:
    modes = [(m, getattr(args, m)) for m in RESET_MODES if getattr(args, m) not in (None, False)]
    if len(modes) != 1:
        raise AdminUsageError("reset-offsets: give exactly one of --to-earliest, --to-latest, --to-offset, "
                              "--shift-by, --to-datetime, --to-current")
    if not args.topic and not args.all_topics:
        raise AdminUsageError("reset-offsets: name the partitions with --topic TOPIC[:P,P] or use --all-topics")
    if modes[0][0] == "to_datetime":
        parse_datetime_ms(modes[0][1])
    return modes[0]


async def _reset_offsets(admin: Any, args: argparse.Namespace) -> int:
    """A consumer group's committed offsets, or a share group's start offsets (KIP-932: the group is a share group
    when ShareGroupDescribe describes it; a broker without share groups answers that it is not)."""
    from .checks import EARLIEST, LATEST
    mode, raw = _reset_mode(args)
    share = args.group in (await admin.describe_share_groups([args.group])).ok
    current_all: dict[TopicPartition, int | None]
    if share:
        starts = (await admin.list_share_group_offsets([args.group]))[args.group]
        current_all = {tp: o.start_offset for tp, o in starts.items()}
    else:
        current_all = {tp: o.committed
                       for tp, o in (await admin.list_consumer_group_offsets(args.group, with_lag=False)).items()}
    tps: list[TopicPartition] = []
    if args.all_topics:
        tps = sorted(current_all)
    for spec in args.topic or ():
        topic, parts = parse_topic_spec(spec)
        if parts is None:
            described = await admin.describe_topics([topic])
            parts = [p.partition for p in described[topic].partitions]
        tps.extend(TopicPartition(topic, p) for p in parts)
    tps = sorted(set(tps))
    if not tps:
        raise AdminUsageError(f"reset-offsets: {'share ' if share else ''}group {args.group!r} has no "
                              f"{'offsets' if share else 'committed offsets'} to reset")
    earliest = await admin.list_offsets({tp: EARLIEST for tp in tps})
    latest = await admin.list_offsets({tp: LATEST for tp in tps})
    by_time = None
    value = raw if isinstance(raw, int) and not isinstance(raw, bool) else None
    if mode == "to_datetime":
        stamp = parse_datetime_ms(raw)
        by_time = {tp: off for tp, (off, _) in (await admin.list_offsets({tp: stamp for tp in tps})).items()}
    committed = {tp: current_all.get(tp) for tp in tps}
    plan = plan_reset(mode, value, tps, committed, {tp: v[0] for tp, v in earliest.items()},
                      {tp: v[0] for tp, v in latest.items()}, by_time)
    status = "planned (dry run: add --execute)"
    errors_by_tp: dict[TopicPartition, Any] = {}
    if args.execute:
        alter = admin.alter_share_group_offsets if share else admin.alter_consumer_group_offsets
        results = await alter(args.group, plan)
        errors_by_tp = dict(results.errors)
        status = "reset"
    emit(args, ["GROUP", "TOPIC", "PARTITION", "PREVIOUS-OFFSET", "NEW-OFFSET", "STATUS"], [
        {"group": args.group, "topic": tp.topic, "partition": tp.partition, "previous_offset": committed[tp],
         "new_offset": plan[tp], "status": (f"{type(errors_by_tp[tp]).__name__}: {errors_by_tp[tp]}"
                                            if tp in errors_by_tp else status)} for tp in tps])
    return 1 if errors_by_tp else 0


async def cmd_configs(args: argparse.Namespace, config: dict[str, Any]) -> int:
    from .admin import Admin
    from .admin_types import ConfigResource
    if (args.topic is None) == (args.broker is None):
        raise AdminUsageError(f"configs {args.configs_command}: give exactly one of --topic or --broker")
    resource = ConfigResource("topic", args.topic) if args.topic is not None else ConfigResource("broker", args.broker)
    async with Admin(**config) as admin:
        if args.configs_command == "describe":
            entries = (await admin.describe_configs([resource]))[resource]
            shown = [e for _, e in sorted(entries.items()) if args.all or not e.is_default]
            emit(args, ["NAME", "VALUE", "SOURCE", "READ-ONLY", "SENSITIVE"], [
                {"name": e.name, "value": "<sensitive>" if e.is_sensitive else e.value, "source": e.source,
                 "read_only": e.read_only, "sensitive": e.is_sensitive} for e in shown])
            return 0
        changes: dict[str, str | None] = {}
        for item in args.set or ():
            name, sep, value = item.partition("=")
            if not sep or not name:
                raise AdminUsageError(f"--set {item!r}: expected NAME=VALUE")
            changes[name] = value
        for name in args.delete or ():
            changes[name] = None
        if not changes:
            raise AdminUsageError("configs alter: nothing to change (use --set NAME=VALUE and/or --delete NAME)")
        results = await admin.incremental_alter_configs({resource: changes}, validate_only=args.dry_run)
        return _report(args, "validated" if args.dry_run else "altered", results)


async def cmd_add_partitions(args: argparse.Namespace, config: dict[str, Any]) -> int:
    from .admin import Admin
    async with Admin(**config) as admin:
        results = await admin.create_partitions({args.name: args.total}, validate_only=args.dry_run)
        return _report(args, f"{'validated' if args.dry_run else 'now'} {args.total} partitions", results)


async def cmd_partitions(args: argparse.Namespace, config: dict[str, Any]) -> int:
    from .admin import Admin
    if args.partitions_command == "reassign":
        moves = dict(parse_move(m) for m in args.moves)
        if len(moves) != len(args.moves):
            raise AdminUsageError("partitions reassign: a partition is named twice")
        async with Admin(**config) as admin:
            results = await admin.alter_partition_reassignments(
                moves, allow_replication_factor_change=not args.keep_replication_factor)
        rows = [{"topic": tp.topic, "partition": tp.partition,
                 "replicas": "cancel" if moves[tp] is None else ",".join(map(str, moves[tp] or ())),
                 "result": ("cancelled" if moves[tp] is None else "accepted") if tp in results.ok else
                 f"{type(results.errors[tp]).__name__}: {results.errors[tp]}"} for tp in results]
        emit(args, ["TOPIC", "PARTITION", "REPLICAS", "RESULT"], rows)
        return 1 if results.errors else 0
    specs = [parse_topic_spec(t) for t in args.topic or ()]
    async with Admin(**config) as admin:
        wanted: list[TopicPartition] | None = None
        if specs:
            wanted = []
            for topic, parts in specs:
                if parts is None:
                    parts = [p.partition for p in (await admin.describe_topics([topic]))[topic].partitions]
                wanted.extend(TopicPartition(topic, p) for p in parts)
        found = await admin.list_partition_reassignments(sorted(set(wanted)) if wanted is not None else None)
    if args.json:
        for tp, r in found.items():
            sys.stdout.write(orjson.dumps({"topic": tp.topic, "partition": tp.partition, "replicas": r.replicas,
                                           "adding": r.adding_replicas, "removing": r.removing_replicas}).decode()
                             + "\n")
        return 0
    print(table(["TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING"], (
        [tp.topic, tp.partition, ",".join(map(str, r.replicas)), ",".join(map(str, r.adding_replicas)) or None,
         ",".join(map(str, r.removing_replicas)) or None] for tp, r in found.items())))
    return 0


async def cmd_quotas(args: argparse.Namespace, config: dict[str, Any]) -> int:
    from .admin import Admin
    from .admin_types import ClientQuotaEntity, ClientQuotaFilter, ClientQuotaFilterComponent
    parts = quota_parts(args)
    if args.quotas_command == "describe":
        flt = ClientQuotaFilter(tuple(ClientQuotaFilterComponent(attr, None if name == ANY_NAME else name)
                                      for attr, name in parts.items()), strict=args.strict)
        async with Admin(**config) as admin:
            quotas = await admin.describe_client_quotas(flt)
        rows = [(str(entity), key, value) for entity, values in quotas.items() for key, value in sorted(values.items())]
        rows.sort()
        if args.json:
            for entity, values in quotas.items():
                sys.stdout.write(orjson.dumps({"entity": entity.components(), "quotas": values}).decode()
                                 + "\n")
            return 0
        print(table(["ENTITY", "KEY", "VALUE"], rows))
        return 0
    if not parts:
        raise AdminUsageError("quotas alter: name the entity with --user, --client-id and/or --ip "
                              "(or their -default forms)")
    if ANY_NAME in parts.values():
        raise AdminUsageError("quotas alter: --user/--client-id/--ip need a name here (or use their -default forms)")
    changes: dict[str, float | None] = {}
    for item in args.set or ():
        key, sep, value = item.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not sep or not key or not math.isfinite(number):
            raise AdminUsageError(f"--set {item!r}: expected KEY=NUMBER, e.g. producer_byte_rate=1048576")
        changes[key] = number
    for key in args.delete or ():
        changes[key] = None
    if not changes:
        raise AdminUsageError("quotas alter: nothing to change (use --set KEY=NUMBER and/or --delete KEY)")
    entity = ClientQuotaEntity(**parts)
    async with Admin(**config) as admin:
        results = await admin.alter_client_quotas({entity: changes}, validate_only=args.dry_run)
    return _report(args, "validated" if args.dry_run else "altered", results)


async def cmd_cluster(args: argparse.Namespace, config: dict[str, Any]) -> int:
    from .admin import Admin
    specs = [parse_topic_spec(t) for t in getattr(args, "topic", None) or ()]
    async with Admin(**config) as admin:
        if args.cluster_command == "log-dirs":
            dirs = await admin.describe_log_dirs(args.broker or None)
            return show_log_dirs(args, dirs, specs)
        if args.cluster_command == "features":
            return show_features(args, await admin.describe_features())
        return show_quorum(args, await admin.describe_metadata_quorum(), now_ms=int(time.time() * 1000))


def _wanted(tp: TopicPartition, specs: list[tuple[str, list[int] | None]]) -> bool:
    return not specs or any(tp.topic == t and (ps is None or tp.partition in ps) for t, ps in specs)


def show_log_dirs(args: argparse.Namespace, results: Any, specs: list[tuple[str, list[int] | None]]) -> int:
    """One row per log dir (its replicas, their bytes, usable and total bytes), or with ``--topic`` one row per
    replica of those partitions; a broker that could not answer is reported on stderr (exit code 1)."""
    for node, error in results.errors.items():
        print(f"broker {node}: {type(error).__name__}: {error}", file=sys.stderr)
    dirs = [(node, path, d) for node in results.ok for path, d in sorted(results.ok[node].items())]
    if args.json:
        for node, path, d in dirs:
            replicas = [{"topic": tp.topic, "partition": tp.partition, "size": r.size, "offset_lag": r.offset_lag,
                         "is_future": r.is_future} for tp, r in sorted(d.replicas.items()) if _wanted(tp, specs)]
            sys.stdout.write(orjson.dumps({
                "broker": node, "log_dir": path, "error": None if d.error is None else
                f"{type(d.error).__name__}: {d.error}", "total_bytes": d.total_bytes, "usable_bytes": d.usable_bytes,
                "replicas": replicas}).decode() + "\n")
    elif specs:
        print(table(["BROKER", "LOG-DIR", "TOPIC", "PARTITION", "SIZE", "OFFSET-LAG", "FUTURE"], (
            [node, path, tp.topic, tp.partition, r.size, r.offset_lag, "yes" if r.is_future else None]
            for node, path, d in dirs for tp, r in sorted(d.replicas.items()) if _wanted(tp, specs))))
    else:
        print(table(["BROKER", "LOG-DIR", "REPLICAS", "SIZE", "USABLE-BYTES", "TOTAL-BYTES", "ERROR"], (
            [node, path, len(d.replicas), sum(r.size for r in d.replicas.values()), d.usable_bytes, d.total_bytes,
             None if d.error is None else type(d.error).__name__] for node, path, d in dirs)))
    return 1 if results.errors else 0


def show_features(args: argparse.Namespace, features: Any) -> int:
    """Each feature's finalized level (the cluster's) and the levels the answering broker supports."""
    names = sorted(set(features.finalized) | set(features.supported))
    rows = [{"feature": n,
             "finalized": features.finalized[n].max_version if n in features.finalized else None,
             "supported_min": features.supported[n].min_version if n in features.supported else None,
             "supported_max": features.supported[n].max_version if n in features.supported else None}
            for n in names]
    emit(args, ["FEATURE", "FINALIZED", "SUPPORTED-MIN", "SUPPORTED-MAX"], rows)
    return 0


def show_quorum(args: argparse.Namespace, quorum: Any, *, now_ms: int) -> int:
    """The metadata quorum's leader, epoch and high watermark, then each voter and observer: its log end offset,
    lag behind the high watermark and when it last fetched / caught up (kafka-metadata-quorum.sh's views)."""
    def replica(r: Any, role: str) -> dict[str, Any]:
        return {"node": r.replica_id, "role": role, "log_end_offset": r.log_end_offset,
                "lag": max(quorum.high_watermark - r.log_end_offset, 0),
                "last_fetch_timestamp": r.last_fetch_timestamp, "last_caught_up_timestamp": r.last_caught_up_timestamp}

    rows = [replica(r, "leader" if r.replica_id == quorum.leader_id else "voter") for r in quorum.voters]
    rows += [replica(r, "observer") for r in quorum.observers]
    if args.json:
        sys.stdout.write(orjson.dumps({"leader_id": quorum.leader_id, "leader_epoch": quorum.leader_epoch,
                                       "high_watermark": quorum.high_watermark, "replicas": rows}).decode() + "\n")
        return 0

    def ago(ts: int | None) -> str | None:
        return None if ts is None else f"{max(now_ms - ts, 0)} ms ago"

    print(f"leader {quorum.leader_id}, epoch {quorum.leader_epoch}, high watermark {quorum.high_watermark}")
    print(table(["NODE", "ROLE", "LOG-END-OFFSET", "LAG", "LAST-FETCH", "LAST-CAUGHT-UP"], (
        [r["node"], r["role"], r["log_end_offset"], r["lag"], ago(r["last_fetch_timestamp"]),
         ago(r["last_caught_up_timestamp"])] for r in rows)))
    return 0


# ---------------------------------------------------------------------------------------------- parsers
def add_parsers(sub: Any, topics_sub: Any, client: argparse.ArgumentParser, positive_int: Any) -> None:
    """Register the admin subcommands on ``akresil``'s parser (``topics_sub``: the ``topics`` actions)."""
    out = argparse.ArgumentParser(add_help=False)
    out.add_argument("--json", action="store_true", help="one JSON object per line instead of a table")

    groups = sub.add_parser("groups", help="list, describe, reset offsets of, remove members from or delete "
                                           "consumer groups "
                                           "(describe and reset-offsets also take share groups)")
    gsub = groups.add_subparsers(dest="groups_command", metavar="ACTION", required=True)
    g = gsub.add_parser("list", parents=[client, out], help="every group on every broker")
    g.add_argument("--state", action="append", help="only groups in this state (repeatable), e.g. Stable")
    g = gsub.add_parser("describe", parents=[client, out],
                        help="members, committed offsets, log ends and lag (classic and KIP-848 groups); "
                             "members, assignments, start offsets and lag (share groups)")
    g.add_argument("groups", nargs="+", metavar="GROUP")
    g = gsub.add_parser("delete", parents=[client, out], help="delete groups (they must have no members)")
    g.add_argument("groups", nargs="+", metavar="GROUP")
    g = gsub.add_parser("remove-members", parents=[client, out],
                        help="remove static members (gone for good) from a consumer group now, not after their "
                             "session timeout; or every member")
    g.add_argument("group", metavar="GROUP")
    who = g.add_mutually_exclusive_group(required=True)
    who.add_argument("--member", action="append", metavar="INSTANCE_ID",
                     help="a static member's group.instance.id (repeatable)")
    who.add_argument("--all-members", action="store_true", help="every member the group has now")
    g.add_argument("--reason", help="logged by the broker (LeaveGroup v5+)")
    g = gsub.add_parser("reset-offsets", parents=[client, out],
                        help="move a group's committed offsets, or a share group's start offsets "
                             "(dry run unless --execute)")
    g.add_argument("group", metavar="GROUP")
    g.add_argument("--topic", action="append", metavar="TOPIC[:P,P]", help="partitions to reset (repeatable)")
    g.add_argument("--all-topics", action="store_true", help="every partition the group has committed")
    g.add_argument("--to-earliest", action="store_true")
    g.add_argument("--to-latest", action="store_true")
    g.add_argument("--to-current", action="store_true", help="the committed offset (log end if none)")
    g.add_argument("--to-offset", type=int, metavar="N")
    g.add_argument("--shift-by", type=int, metavar="N", help="committed offset + N (negative: back)")
    g.add_argument("--to-datetime", metavar="TIME", help="first offset at or after TIME (ISO 8601 or epoch ms)")
    g.add_argument("--execute", action="store_true", help="apply the plan (default: only show it)")

    configs = sub.add_parser("configs", help="describe or alter topic and broker configs")
    csub = configs.add_subparsers(dest="configs_command", metavar="ACTION", required=True)
    for action, text in (("describe", "configs of a topic or broker (non-default ones unless --all)"),
                         ("alter", "set or delete configs (incremental: other configs keep their values)")):
        c = csub.add_parser(action, parents=[client, out], help=text)
        c.add_argument("--topic", metavar="TOPIC")
        c.add_argument("--broker", metavar="NODE_ID")
        if action == "describe":
            c.add_argument("--all", action="store_true", help="include configs at their default")
        else:
            c.add_argument("--set", action="append", metavar="NAME=VALUE", help="repeatable")
            c.add_argument("--delete", action="append", metavar="NAME", help="back to the default (repeatable)")
            c.add_argument("--dry-run", action="store_true", help="let the broker validate, change nothing")

    parts = sub.add_parser("partitions", help="move partitions to other brokers, list moves in progress")
    psub = parts.add_subparsers(dest="partitions_command", metavar="ACTION", required=True)
    p = psub.add_parser("reassign", parents=[client, out],
                        help="new replicas per partition (the first is the preferred leader), or cancel a move")
    p.add_argument("moves", nargs="+", metavar="TOPIC:P=B,B,...|TOPIC:P=cancel")
    p.add_argument("--keep-replication-factor", action="store_true",
                   help="refuse a move that changes a partition's replica count (Kafka 4.1+)")
    p = psub.add_parser("list-reassignments", parents=[client, out], help="reassignments in progress")
    p.add_argument("--topic", action="append", metavar="TOPIC[:P,P]", help="only these partitions (repeatable)")

    quotas = sub.add_parser("quotas", help="describe or alter client quotas (users, client ids, IPs)")
    qsub = quotas.add_subparsers(dest="quotas_command", metavar="ACTION", required=True)
    for action, text in (("describe", "quotas of matching entities (all without entity options)"),
                         ("alter", "set or remove quotas of one entity (other keys keep their values)")):
        q = qsub.add_parser(action, parents=[client, out], help=text)
        for flag, what in (("--user", "user"), ("--client-id", "client id"), ("--ip", "IP")):
            if action == "describe":
                q.add_argument(flag, nargs="?", const=ANY_NAME, metavar="NAME",
                               help=f"this {what} (without NAME: any {what})")
            else:
                q.add_argument(flag, metavar="NAME", help=f"the {what}")
            q.add_argument(flag + "-default", action="store_true", help=f"the default {what} entity")
        if action == "describe":
            q.add_argument("--strict", action="store_true", help="only entities with exactly these entity types")
        else:
            q.add_argument("--set", action="append", metavar="KEY=NUMBER",
                           help="e.g. producer_byte_rate=1048576 (repeatable)")
            q.add_argument("--delete", action="append", metavar="KEY", help="remove a quota (repeatable)")
            q.add_argument("--dry-run", action="store_true", help="let the broker validate, change nothing")

    cluster = sub.add_parser("cluster", help="log dirs, feature levels and the metadata quorum (read only)")
    ksub = cluster.add_subparsers(dest="cluster_command", metavar="ACTION", required=True)
    k = ksub.add_parser("log-dirs", parents=[client, out],
                        help="each broker's log dirs (replicas, bytes, usable and total bytes); with --topic: "
                             "each replica of those partitions")
    k.add_argument("--broker", action="append", type=int, metavar="NODE_ID", help="only this broker (repeatable)")
    k.add_argument("--topic", action="append", metavar="TOPIC[:P,P]", help="show these partitions (repeatable)")
    ksub.add_parser("features", parents=[client, out], help="finalized and supported feature levels")
    ksub.add_parser("quorum", parents=[client, out],
                    help="the KRaft metadata quorum: leader, epoch, high watermark, voters and observers")

    t = topics_sub.add_parser("add-partitions", parents=[client, out], help="raise a topic's partition count")
    t.add_argument("name", metavar="TOPIC")
    t.add_argument("--total", type=positive_int, required=True, help="the new total partition count")
    t.add_argument("--dry-run", action="store_true", help="let the broker validate, change nothing")
