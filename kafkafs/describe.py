"""``kafkafs groups`` and ``kafkafs transactions``: the groups and transactions of a log directory as
tables (or JSON), offline (SPEC §4; the models are :mod:`kafkafs.storage.groups` and
:mod:`kafkafs.storage.txnstate`).

``groups`` prints, per group, a line of its state and then the rows ``kafka-consumer-groups --describe``
prints: each committed or assigned partition with its committed offset, the log end offset in LOGDIR,
the lag, and the member it is assigned to ("-" where there is none). ``transactions`` prints each
transaction open in a partition, and whether it is hanging; with ``--hanging`` only those, and the
exit code says whether there were any.

Damage is local (SPEC §3, §4): a group or transactional id whose records lie in a partition of its
topic that met damage cannot be known exactly and is left out, said on stderr with the damage; every
other one is printed exact, and the exit code is 1. One whose records all lie in the damaged bytes
cannot be named at all: the line says the damaged bytes may hide some. A transaction whose hanging such damage hides is
printed with ``unknown`` (``"hanging": null`` in JSON).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

from .errors import InvalidName

# The models are imported by the functions that use them: every command's parser is built from this
# module's argument functions, and none of them should pay for the decoders' import.

__all__ = ["print_groups", "print_transactions", "transactions_report", "describe", "DESCRIBE_COMMANDS"]


def add_groups_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """consumer groups from __consumer_offsets: state, members, committed offsets and lag (offline)"""
    p.add_argument("group", nargs="?", metavar="GROUP", help="only this group")
    p.add_argument("--json", action="store_true", help="print groups/<group>.json objects instead of tables")
    return p


def add_transactions_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """transactions open in each partition, and which are hanging (exit 1 with --hanging when any is)"""
    p.add_argument("--hanging", action="store_true",
                   help="only hanging transactions (the coordinator's record says they ended or does not "
                        "name the partition, or they outlived its timeout, or transaction.max.timeout.ms "
                        "without a record); exit 1 when there is one")
    p.add_argument("--json", action="store_true", help="print transactions.json and transactions/<id>.json objects")
    return p


#: The commands of this module: name -> the function that adds its arguments (its docstring: the help).
DESCRIBE_COMMANDS = {"groups": add_groups_arguments, "transactions": add_transactions_arguments}


def describe(args: argparse.Namespace, logdir, out: TextIO, err: TextIO | None = None) -> int:
    """Run ``kafkafs groups`` or ``kafkafs transactions``; returns what was found wrong (damage, said
    on ``err``; the hanging transactions ``--hanging`` asked for), 0 when nothing."""
    err = sys.stderr if err is None else err
    if args.command == "groups":
        return print_groups(logdir, args.group, out, as_json=args.json, err=err)
    damage: list = []
    hanging = print_transactions(logdir, out, hanging_only=args.hanging, as_json=args.json, settings=logdir.settings,
                                 err=err, damage=damage)
    return len(damage) + (hanging if args.hanging else 0)


def _say_damage(replay, what: str, err: TextIO, unknown: dict | None = None) -> int:
    """One line per damaged partition of a replay (the ids it hides); returns how many."""
    hidden = replay.damaged()
    for partition, damage in replay.damage.items():
        names = sorted(i for i, d in hidden.items() if d is damage)
        line = f"kafkafs: {partition}: damaged: {damage}; {what}s whose records lie there cannot be known exactly"
        line += f" and are left out: {', '.join(names)}" if names else " (none read there)"
        # the damaged bytes' ids are not known: one whose records all lie there cannot be named (review6 F10)
        line += f"; the damaged bytes may hide {'more ' if names else ''}{what}s, which cannot be named"
        if unknown and unknown.get(partition):
            line += f"; hanging unknown for {unknown[partition]} open transaction(s)"
        err.write(line + "\n")
    return len(replay.damage)


def _say_unreadable(groups: dict[str, dict], unreadable: dict[str, OSError], err: TextIO) -> int:
    """One line per partition that could not be opened and that a printed group has an offset in (its
    log end offset and lag are unknown: "-"); returns how many. One no group names is not its business."""
    from .errors import describe_os_error
    from .storage.names import parse_partition_dir_name

    named = {(o["topic"], o["partition"]) for view in groups.values() for o in view["offsets"]}
    said = 0
    for name, exc in unreadable.items():
        if parse_partition_dir_name(name) in named:
            err.write(f"kafkafs: error: {describe_os_error(exc)}; {name}'s log end offset and lag are unknown (-)\n")
            said += 1
    return said


def _table(rows: Sequence[Sequence[Any]], out: TextIO) -> None:
    """Columns padded to their widest cell, as Kafka's tools print them."""
    cells = [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    for row in cells:
        out.write(" ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n")


def _group_rows(view: dict) -> list[list[Any]]:
    owners: dict[tuple[str, int], dict] = {}
    for member in view["members"]:
        for a in member["assignment"]:
            if "topic" not in a:  # a streams group's tasks (subtopology, partitions): no topic-partition
                continue
            for p in a["partitions"]:
                owners[(a["topic"], p)] = member
    committed = {(o["topic"], o["partition"]): o for o in view["offsets"]}
    rows = []
    for tp in sorted(set(committed) | set(owners), key=lambda tp: (tp[0] or "", tp[1])):
        o = committed.get(tp, {})
        m = owners.get(tp, {})
        rows.append([view["group"], tp[0], tp[1], o.get("offset"), o.get("logEndOffset"), o.get("lag"),
                     m.get("memberId"), m.get("clientHost"), m.get("clientId")])
    return rows


def print_groups(logdir, group: str | None, out: TextIO, *, as_json: bool = False, err: TextIO | None = None) -> int:
    """Print the groups of ``logdir`` (or ``group`` only), the damaged ones said on ``err``; returns how
    many damaged partitions that took (0: every group exact). InvalidName when ``group`` has no entry."""
    from .storage.groups import group_views, replay_logdir

    err = sys.stderr if err is None else err
    replay = replay_logdir(logdir)
    unreadable: dict[str, OSError] = {}
    groups = group_views(logdir, replay, group, unreadable)
    if group is not None and group not in groups:
        if replay.damage_of(group) is not None:
            return _say_damage(replay, "group", err)
        if replay.damage:  # its records may be in the damaged bytes
            err.write(f"kafkafs: no group {group} in what can be read of {logdir.path} (the damaged bytes said "
                      "below may hold it)\n")
            return _say_damage(replay, "group", err)
        raise InvalidName(f"no group {group} in {logdir.path} (its metadata and commits may all be deleted)")
    # a group asked for by name and known exactly: the damage of other partitions is not its business
    damaged = 0 if group is not None else _say_damage(replay, "group", err)
    damaged += _say_unreadable(groups, unreadable, err)
    if as_json:
        value: Any = groups[group] if group is not None else list(groups.values())
        out.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")
        return damaged
    if not groups:
        out.write("no consumer groups\n")
        return damaged
    for i, view in enumerate(groups.values()):
        if i:
            out.write("\n")
        _table([["GROUP", "STATE", "PROTOCOL-TYPE", "PROTOCOL", "GENERATION", "#MEMBERS"],
                [view["group"], view["state"], view["protocolType"], view["protocol"], view["generation"],
                 len(view["members"])]], out)
        rows = _group_rows(view)
        out.write("\n")
        if not rows:
            out.write(f"Consumer group '{view['group']}' has no committed offsets and no assignment.\n")
            continue
        _table([["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                 "CLIENT-ID"], *rows], out)
    return damaged


def transactions_report(logdir, *, now_ms: int | None = None, settings=None,
                        damage: list | None = None, replay=None) -> dict[str, Any]:
    """``{"partitions": {name: transactions.json}, "transactionalIds": {id: transactions/<id>.json}}``,
    of the ids known exactly; a hanging that damage hides is None, the damage appended to ``damage``."""
    from .storage.config import broker_setting
    from .storage.txnstate import CoordinatorView, partition_transactions, replay_transactions

    now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    replay = replay_transactions(logdir) if replay is None else replay
    coordinator = CoordinatorView.of(replay, broker_setting(settings, "transaction.max.timeout.ms"))
    damage = [] if damage is None else damage
    partitions = {}
    for name in logdir.partition_names():
        partitions[name] = partition_transactions(logdir.log(name), now_ms, coordinator, damage)
    return {"partitions": partitions, "transactionalIds": replay.exact()}


def print_transactions(logdir, out: TextIO, *, hanging_only: bool = False, as_json: bool = False,
                       now_ms: int | None = None, settings=None, err: TextIO | None = None,
                       damage: list | None = None) -> int:
    """Print the open (or only the hanging) transactions; returns how many hanging ones there are. The
    damage of ``__transaction_state`` is said on ``err`` and appended to ``damage`` (one per partition)."""
    from .storage.txnstate import replay_transactions

    err = sys.stderr if err is None else err
    replay = replay_transactions(logdir)
    unknown: list = []
    report = transactions_report(logdir, now_ms=now_ms, settings=settings, damage=unknown, replay=replay)
    counts: dict[str, int] = {}
    for partition, d in replay.damage.items():
        counts[partition] = sum(u is d for u in unknown)
    _say_damage(replay, "transactional id", err, counts)
    if damage is not None:
        damage.extend(replay.damage.values())
    ids = report["transactionalIds"]
    by_producer = {record["producerId"]: tid for tid, record in ids.items()}
    rows = []
    hanging = 0
    for name, view in report["partitions"].items():
        for t in view["open"]:
            hanging += bool(t["hanging"])
            if t["hanging"] is not False or not hanging_only:
                rows.append([name, t["producerId"], t["producerEpoch"], t["firstOffset"], t["firstTimestamp"],
                             t["ageMs"], by_producer.get(t["producerId"]), view["lastStableOffset"],
                             {True: "yes", False: "no", None: "unknown"}[t["hanging"]]])
    if as_json:
        if hanging_only:
            kept = {}
            for name, view in report["partitions"].items():
                open_ = [t for t in view["open"] if t["hanging"] is not False]
                if open_:
                    kept[name] = {**view, "open": open_}
            pids = {t["producerId"] for view in kept.values() for t in view["open"]}
            report = {"partitions": kept, "transactionalIds": {k: v for k, v in ids.items() if v["producerId"] in pids}}
        out.write(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
        return hanging
    if not rows:
        out.write("no hanging transactions\n" if hanging_only else "no open transactions\n")
        return hanging
    _table([["PARTITION", "PRODUCER-ID", "EPOCH", "FIRST-OFFSET", "FIRST-TIMESTAMP", "AGE-MS", "TRANSACTIONAL-ID",
             "LAST-STABLE-OFFSET", "HANGING"], *rows], out)
    return hanging
