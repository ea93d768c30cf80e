"""Compaction: the latest record per key, tombstones, transactions, swaps (SPEC §2, Kafka's cleaner)."""

from __future__ import annotations

import os

from kafkafs.format.checkpoint import parse_offset_checkpoint
from kafkafs.format.txnindex import AbortedTxn
from kafkafs.storage.cleaner import clean_logdir, cleanable_segments, compact
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir

from .test_cleaner import _fill, _kafka_python_offsets, _marker, _txn


def test_compaction_keeps_the_latest_record_per_key(tmp_path):
    settings = Settings({"segment.bytes": 400}, {"kv": {"cleanup.policy": "compact", "delete.retention.ms": 1000}})
    with LogDir(tmp_path, settings, writable=True) as logdir:
        log = logdir.create_partition("kv", 0)
        # 100 records over 5 keys; k0 is deleted (tombstone) early, k1 late
        def value(i):
            if i == 50 or i == 95:
                return None
            return b"v%d" % i

        _fill(log, 100, key=lambda i: b"k%d" % (i % 5), value=value, ts=lambda i: 1000 + i * 100)
        active_base = log.active_segment.base_offset
        lines = compact(log, now_ms=1000 + 100 * 100 + 5000)
        assert lines
        records = list(log.records())
        sealed = [r for r in records if r[0] < active_base]
        keys = [r[2] for r in sealed]
        # in the sealed part, each key appears at most once, and it is that key's latest sealed record
        assert len(keys) == len(set(keys))
        for offset, _ts, key, _value, _h in sealed:
            later = [i for i in range(100) if b"k%d" % (i % 5) == key and i < active_base]
            assert offset == max(later)
        # offsets are kept: gaps, strictly increasing, the active segment untouched
        offsets = [r[0] for r in records]
        assert offsets == sorted(set(offsets)) and offsets[-1] == 99
        assert [r[0] for r in records if r[0] >= active_base] == list(range(active_base, 100))
        # the tombstone at 50 (older than delete.retention.ms) is gone if it was the key's latest
        assert all(not (r[0] == 50) for r in records) or active_base <= 50
    assert not [n for n in os.listdir(tmp_path / "kv-0") if n.endswith((".cleaned", ".swap"))]
    assert _kafka_python_offsets(tmp_path / "kv-0") == offsets
    with LogDir(tmp_path, settings, writable=True) as logdir:
        assert [r[0] for r in logdir.log("kv-0").records()] == offsets


def test_recent_records_are_not_compacted_within_the_lag(tmp_path):
    settings = Settings(
        {"segment.bytes": 300}, {"kv": {"cleanup.policy": "compact", "min.compaction.lag.ms": 10**9}}
    )
    with LogDir(tmp_path, settings, writable=True) as logdir:
        log = logdir.create_partition("kv", 0)
        _fill(log, 40, key=lambda i: b"same")
        assert compact(log, now_ms=2000) == []
        assert len(list(log.records())) == 40


def test_compaction_swaps_through_deleted_files_and_checkpoints_the_cleaned_offset(tmp_path):
    settings = Settings({"segment.bytes": 400, "file.delete.delay.ms": 1000}, {"kv": {"cleanup.policy": "compact"}})
    with LogDir(tmp_path, settings, writable=True) as logdir:
        log = logdir.create_partition("kv", 0)
        logdir.create_partition("other", 0).append_records([(1000, b"k", b"v", ())])
        clock = [10**12]
        log.clock = lambda: clock[0]
        _fill(log, 60, key=lambda i: b"k%d" % (i % 3))
        active_base = log.active_segment.base_offset
        lines = clean_logdir(logdir, now_ms=10**13)
        assert any("compacted" in line for line in lines)
        # the originals are renamed .deleted, the compacted segments took their names
        deleted = sorted(n for n in os.listdir(tmp_path / "kv-0") if n.endswith(".log.deleted"))
        assert deleted and all((tmp_path / "kv-0" / n[: -len(".deleted")]).exists() for n in deleted)
        assert logdir.cleaner_offsets() == {("kv", 0): active_base}
        assert parse_offset_checkpoint((tmp_path / "cleaner-offset-checkpoint").read_bytes()) == {("kv", 0): active_base}
        # the next clean run first removes the files whose delay has passed
        clock[0] += 1000
        clean_logdir(logdir, now_ms=10**13)
        assert not [n for n in os.listdir(tmp_path / "kv-0") if n.endswith(".deleted")]
        offsets = [r[0] for r in log.records()]
    assert _kafka_python_offsets(tmp_path / "kv-0") == offsets
    assert (tmp_path / "cleaner-offset-checkpoint").read_bytes() == b"0\n1\nkv 0 %d\n" % active_base


def test_compaction_ignores_and_drops_aborted_records_and_keeps_the_txnindex(tmp_path):
    settings = Settings({}, {"kv": {"cleanup.policy": "compact"}})
    with LogDir(tmp_path, settings, writable=True) as logdir:
        log = logdir.create_partition("kv", 0)
        log.append_records([(1000, b"k", b"committed", ())])  # 0
        log.append_batches(_txn(1, b"k", b"aborted"))  # 1
        log.append_batches(_marker("ABORT", 1))  # 2
        log.append_batches(_txn(2, b"j", b"j1"))  # 3
        log.append_batches(_marker("COMMIT", 2))  # 4
        log.roll()
        log.append_records([(1000, b"x", b"x", ())])  # 5, active
        index_before = (tmp_path / "kv-0" / "00000000000000000000.txnindex").read_bytes()
        lines = clean_logdir(logdir, now_ms=10**13)
        assert lines == ["kv-0: compacted 00000000000000000000.log: 0 superseded record(s) removed, "
                         "1 record(s) of aborted transactions"]
        assert [(r[0], r[2], r[3]) for r in log.records()] == [
            (0, b"k", b"committed"), (2, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00"), (3, b"j", b"j1"),
            (4, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00"), (5, b"x", b"x"),
        ]
        assert (tmp_path / "kv-0" / "00000000000000000000.txnindex").read_bytes() == index_before
        assert log.aborted_transactions(0, 6) == [AbortedTxn(1, 1, 2, 3)]
        assert logdir.cleaner_offsets() == {("kv", 0): 5}


def test_compaction_stops_at_a_transaction_still_in_progress(tmp_path):
    settings = Settings({}, {"kv": {"cleanup.policy": "compact"}})
    with LogDir(tmp_path, settings, writable=True) as logdir:
        log = logdir.create_partition("kv", 0)
        log.append_records([(1000, b"k", b"a", ())])  # 0
        log.append_batches(_txn(1, b"k", b"b"))  # 1, undecided
        log.roll()
        log.append_records([(1000, b"k", b"c", ())])  # 2
        log.roll()
        log.append_records([(1000, b"y", b"y", ())])  # 3, active
        assert cleanable_segments(log, 10**13) == []
        assert clean_logdir(logdir, now_ms=10**13) == ["nothing to clean"]
        assert not (tmp_path / "cleaner-offset-checkpoint").exists()
        log.append_batches(_marker("COMMIT", 1))  # 4
        lines = clean_logdir(logdir, now_ms=10**13)
        # both sealed segments fit segment.bytes: merged into one, as Kafka's cleaner groups them
        assert lines == ["kv-0: compacted 00000000000000000000.log (+1 segment(s) merged): 2 superseded record(s) removed"]
        assert [r[0] for r in log.records()] == [2, 3, 4]
        assert logdir.cleaner_offsets() == {("kv", 0): 3}


def test_a_map_smaller_than_the_keys_cleans_in_rounds_to_the_latest_per_key(tmp_path):
    settings = Settings({"segment.bytes": 4096}, {"kv": {"cleanup.policy": "compact"}})
    with LogDir(tmp_path, settings, writable=True) as logdir:
        log = logdir.create_partition("kv", 0)
        latest = {}
        for i in range(3000):
            key = b"k%d" % ((i * 7919) % 700)
            log.append_records([(1000 + i, key, b"v%d" % i, ())])
            latest[key] = i
        log.roll()
        rounds: list[int] = []
        from kafkafs.storage.cleaner import _compact

        lines, end = _compact(log, 10**13, dry_run=False, memory=200 * 24, on_round=rounds.append)
        assert len(rounds) >= 4 and rounds == sorted(rounds) and end == rounds[-1] == 3000
        kept = {r[2]: r[0] for r in log.records()}
        assert kept == latest
        assert len(list(log.records())) == len(latest)  # nothing superseded is left
    assert _kafka_python_offsets(tmp_path / "kv-0") == sorted(latest.values())


def test_tombstones_get_a_delete_horizon_and_go_once_it_has_passed(tmp_path):
    from kafka.record.default_records import DefaultRecordBatch

    settings = Settings({}, {"kv": {"cleanup.policy": "compact", "delete.retention.ms": 5000}})
    with LogDir(tmp_path, settings, writable=True) as logdir:
        log = logdir.create_partition("kv", 0)
        log.append_records([(1000, b"a", b"1", ()), (1001, b"b", b"2", ())])
        log.append_records([(1002, b"a", None, ()), (1003, b"c", b"3", ())])
        log.roll()
        log.append_records([(1004, b"x", b"x", ())])
        compact(log, now_ms=50_000)
        assert [(r[0], r[1], r[2], r[3]) for r in log.records()] == [
            (1, 1001, b"b", b"2"), (2, 1002, b"a", None), (3, 1003, b"c", b"3"), (4, 1004, b"x", b"x")]
        data = (tmp_path / "kv-0" / "00000000000000000000.log").read_bytes()
        batches = []
        pos = 0
        while pos < len(data):
            size = int.from_bytes(data[pos + 8:pos + 12], "big") + 12
            batches.append(DefaultRecordBatch(data[pos:pos + size]))
            pos += size
        horizon = [b for b in batches if b.attributes & 0x40]
        assert len(horizon) == 1 and horizon[0].first_timestamp == 50_000 + 5000  # KIP-534
        assert horizon[0].validate_crc()
        assert [r.timestamp for r in horizon[0]] == [1002, 1003]  # record timestamps unchanged
        compact(log, now_ms=54_999, checkpoint=0)  # before the horizon: stays
        assert 2 in [r[0] for r in log.records()]
        compact(log, now_ms=55_000, checkpoint=0)
        assert [r[0] for r in log.records()] == [1, 3, 4]


def test_an_emptied_last_batch_of_a_group_goes_as_kafka_drops_it(tmp_path):
    """Finding 1 of issue 19: Kafka's cleaner keeps an empty batch only at the round's upper bound or
    for a still-active producer (RETAIN_EMPTY); the last batch of a cleaned segment whose records were
    all superseded goes with them. A segment holding a tombstone batch and then such a batch is the
    tombstone batch alone afterwards (here kafkafs used to add a 61-byte empty batch and a time index
    entry for it)."""
    settings = Settings({"segment.bytes": 300}, {"kv": {"cleanup.policy": "compact"}})
    with LogDir(tmp_path, settings, writable=True) as logdir:
        log = logdir.create_partition("kv", 0)
        log.append_records([(1000, b"a", None, ())])  # offset 0: a tombstone, kept (horizon set)
        log.append_records([(1001, b"b%d" % i, b"old", ()) for i in range(6)])  # 1-6: all superseded
        log.roll()
        log.append_records([(1002, b"b%d" % i, b"new", ()) for i in range(6)])  # 7-12
        log.roll()
        log.append_records([(1003, b"c", b"active", ())])  # 13: the active segment
        compact(log, now_ms=10_000)
        first = log.segments.floor(0)
        assert [r[0] for r in log.records() if r[0] < 7] == [0]
        batches = [v.header for v in first.read_from(0)]
        assert [(h.base_offset, h.last_offset) for h in batches] == [(0, 0)]  # no empty batch 1-6 after it
        assert first.log_path.stat().st_size == batches[0].size
        assert first.next_offset == 1
        # one time index entry at most, for offset 0 (none for the batch that went)
        assert first.time_index.entries <= 1
