"""Damage in the coordinators' topics is local (SPEC §3; review6 F10): a bad batch in a partition of
``__consumer_offsets`` or ``__transaction_state`` makes only the ids whose records lie in that
partition unknown; every other group, transactional id and partition view stays exact."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kafkafs.errors import CorruptRecordError
from kafkafs.format.batch import encode_batch
from kafkafs.storage.config import Settings
from kafkafs.storage.groups import group_view, replay_logdir
from kafkafs.storage.logdir import LogDir
from kafkafs.storage.txnstate import (
    CoordinatorView,
    partition_transactions,
    replay_transactions,
)

from .groupslogs import (
    classic_group,
    commit_key,
    commit_value,
    read_groups,
    read_transaction_ids,
    txn_key,
    txn_value,
)


def batch_positions(log: Path) -> list[int]:
    """Where each batch of a ``.log`` starts (from each batch's length field, Kafka's layout)."""
    data = log.read_bytes()
    out, pos = [], 0
    while pos + 12 <= len(data):
        out.append(pos)
        pos += 12 + int.from_bytes(data[pos + 8 : pos + 12], "big")
    return out


def spoil(log: Path, batch: int) -> int:
    """Change the last byte of batch number ``batch`` of a ``.log`` (its CRC then fails); its position."""
    positions = batch_positions(log)
    end = positions[batch + 1] if batch + 1 < len(positions) else log.stat().st_size
    log.chmod(0o644)  # a copy of a fixture is read-only
    with open(log, "r+b") as f:
        f.seek(end - 1)
        last = f.read(1)
        f.seek(end - 1)
        f.write(bytes([last[0] ^ 0x5A]))
    return positions[batch]


def _txn(pid: int, ts: int) -> bytes:
    return encode_batch([(ts, b"k", b"v", ())], transactional=True, producer_id=pid, producer_epoch=1, base_sequence=0)


def build_damaged(root: Path) -> Path:
    """A log directory whose coordinators' topics each have one damaged partition:

    - ``__consumer_offsets-0``: group ``a`` (exact); ``-1``: ``b`` before a damaged batch (which holds
      ``c``), ``d`` after it;
    - ``__transaction_state-0``: ``app-3`` (producer 3, exact); ``-1``: ``app-7`` (producer 7) before a
      damaged batch (``app-9``);
    - ``t-0``: a transaction of producer 3 open; ``u-0``: one of producer 7 open; ``v-0``: none open.
    """
    now = time.time_ns() // 1_000_000
    logs = root / "logs"
    logs.mkdir()
    with LogDir(logs, Settings(), writable=True) as logdir:
        logdir.create_partition("__consumer_offsets", 0).append_records(
            [(1, *classic_group("a", 1, [("m", "c", {"v": [0]})]), ()), (1, commit_key("a", "v", 0), commit_value(1), ())])
        one = logdir.create_partition("__consumer_offsets", 1)
        one.append_records([(1, commit_key("b", "v", 0), commit_value(1), ())])
        one.append_records([(1, commit_key("c", "v", 0), commit_value(1), ())])
        one.append_records([(1, commit_key("d", "v", 0), commit_value(2), ())])
        logdir.create_partition("__transaction_state", 0).append_records(
            [(1, txn_key("app-3"), txn_value(3, 1, "Ongoing", {"t": [0]}), ())])
        ts1 = logdir.create_partition("__transaction_state", 1)
        ts1.append_records([(1, txn_key("app-7"), txn_value(7, 1, "Ongoing", {"u": [0]}), ())])
        ts1.append_records([(1, txn_key("app-9"), txn_value(9, 1, "Ongoing", {"v": [0]}), ())])
        logdir.create_partition("t", 0).append_batches(_txn(3, now - 1_000))
        logdir.create_partition("u", 0).append_batches(_txn(7, now - 1_000))
        logdir.create_partition("v", 0).append_records([(1, b"k", b"x", ())] * 3)
    spoil(logs / "__consumer_offsets-1" / "00000000000000000000.log", 1)
    spoil(logs / "__transaction_state-1" / "00000000000000000000.log", 1)
    return logs


def test_a_damaged_offsets_partition_hides_only_its_own_groups(tmp_path):
    logs = build_damaged(tmp_path)
    with LogDir(logs) as logdir:
        replay = replay_logdir(logdir)
        assert list(replay.damage) == ["__consumer_offsets-1"]
        assert replay.damage["__consumer_offsets-1"].file.endswith("__consumer_offsets-1/00000000000000000000.log")
        assert replay.groups() == ["a", "b", "d"]  # c's only record is in the damaged batch: not known at all
        assert sorted(replay.damaged()) == ["b", "d"]  # read before and after the damage: both unknown
        groups = read_groups(logdir)
        assert list(groups) == ["a"]
        assert groups["a"]["offsets"][0]["offset"] == 1 and groups["a"]["state"] == "Stable"
        for g in ("b", "d"):
            with pytest.raises(CorruptRecordError):
                group_view(replay, g, {}, {})


def test_a_damaged_transaction_state_partition_hides_only_what_needs_it(tmp_path):
    logs = build_damaged(tmp_path)
    now = time.time_ns() // 1_000_000
    with LogDir(logs) as logdir:
        replay = replay_transactions(logdir)
        assert list(replay.damage) == ["__transaction_state-1"]
        assert replay.ids() == ["app-3", "app-7"] and list(replay.damaged()) == ["app-7"]
        assert list(read_transaction_ids(logdir)) == ["app-3"]
        with pytest.raises(CorruptRecordError):
            replay.record("app-7")
        coordinator = CoordinatorView.of(replay, 900_000)
        t = partition_transactions(logdir.log("t-0"), now, coordinator)  # producer 3: its record is exact
        assert [(o["producerId"], o["hanging"]) for o in t["open"]] == [(3, False)]
        v = partition_transactions(logdir.log("v-0"), now, coordinator)  # nothing open: needs no coordinator
        assert v == {"lastStableOffset": 3, "open": [], "abortedRanges": []}
        with pytest.raises(CorruptRecordError):  # producer 7's record is in the damaged partition
            partition_transactions(logdir.log("u-0"), now, coordinator)
        damage: list[CorruptRecordError] = []
        u = partition_transactions(logdir.log("u-0"), now, coordinator, damage)
        assert [(o["producerId"], o["hanging"]) for o in u["open"]] == [(7, None)] and len(damage) == 1


def test_a_producer_nobody_names_is_unknown_while_the_coordinator_is_damaged(tmp_path):
    logs = build_damaged(tmp_path)
    with LogDir(logs, writable=True) as logdir:
        logdir.create_partition("w", 0).append_batches(_txn(11, time.time_ns() // 1_000_000 - 1_000))
    with LogDir(logs) as logdir:
        coordinator = CoordinatorView.of(replay_transactions(logdir), 900_000)
        with pytest.raises(CorruptRecordError):  # producer 11's record may be the damaged batch
            partition_transactions(logdir.log("w-0"), time.time_ns() // 1_000_000, coordinator)


def test_bytes_that_are_not_a_batch_end_their_segment_only(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    with LogDir(logs, Settings(), writable=True) as logdir:
        offsets = logdir.create_partition("__consumer_offsets", 0)
        for group in ("a", "b", "c", "d"):
            offsets.append_records([(1, commit_key(group, "t", 0), commit_value(1), ())])
            offsets.roll()
    first = sorted((logs / "__consumer_offsets-0").glob("*.log"))[0]
    assert len(sorted((logs / "__consumer_offsets-0").glob("*.log"))) >= 2
    with open(first, "r+b") as f:  # the first batch's length: none has it
        f.seek(8)
        f.write((2**31 - 1).to_bytes(4, "big"))
    with LogDir(logs) as logdir:
        replay = replay_logdir(logdir)
        assert list(replay.damage) == ["__consumer_offsets-0"]
        assert replay.groups() == ["b", "c", "d"]  # the next segments were read, their groups damaged
        assert read_groups(logdir) == {}
