"""Retention and compaction (``kafkafs clean``): what goes, what stays, and that the result is a log
a broker (here: kafka-python's reader) accepts."""

from __future__ import annotations

import os

from kafka.record.memory_records import MemoryRecords

from kafkafs.storage.cleaner import apply_retention, clean_logdir, compact
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir


def _fill(log, n, *, key=lambda i: None, value=lambda i: b"v%d" % i, ts=lambda i: 1000 + i):
    for i in range(n):
        log.append_records([(ts(i), key(i), value(i), ())])


def _kafka_python_offsets(directory) -> list[int]:
    offsets = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(".log"):
            records = MemoryRecords((directory / name).read_bytes())
            while (batch := records.next_batch()) is not None:
                assert batch.validate_crc()
                offsets.extend(r.offset for r in batch)
    return offsets


def test_time_retention_deletes_old_segments_and_moves_the_log_start(tmp_path):
    settings = Settings({"segment.bytes": 500, "retention.ms": 10_000})
    with LogDir(tmp_path, settings, writable=True) as logdir:
        log = logdir.create_partition("t", 0)
        _fill(log, 40, ts=lambda i: 1000 + i * 1000)  # 1s apart
        segments = len(log.segments)
        assert segments > 3
        lines = apply_retention(log, now_ms=1000 + 40 * 1000)
        assert lines and all("deleted" in line for line in lines)
        assert log.log_start_offset > 0
        assert [r[0] for r in log.records()] == list(range(log.log_start_offset, 40))
        # everything kept is younger than retention allows, give or take the segment holding the edge
        first = next(iter(log.records()))
        assert first[1] >= 1000 + 40 * 1000 - 10_000 - 10_000
    assert not [n for n in os.listdir(tmp_path / "t-0") if n.endswith(".deleted")]
    with LogDir(tmp_path, settings, writable=True) as logdir:
        reopened = logdir.log("t-0")
        assert reopened.log_start_offset == log.log_start_offset
        assert reopened.log_end_offset == 40


def test_size_retention_never_deletes_the_active_segment(tmp_path):
    settings = Settings({"segment.bytes": 300, "retention.bytes": 0, "retention.ms": -1})
    with LogDir(tmp_path, settings, writable=True) as logdir:
        log = logdir.create_partition("t", 0)
        _fill(log, 30)
        apply_retention(log, now_ms=10**13)
        assert len(log.segments) == 1
        assert log.log_end_offset == 30
        assert log.log_start_offset == log.active_segment.base_offset


def test_dry_run_changes_nothing(tmp_path):
    settings = Settings({"segment.bytes": 300, "retention.ms": 1})
    with LogDir(tmp_path, settings, writable=True) as logdir:
        log = logdir.create_partition("t", 0)
        _fill(log, 30)
        before = sorted(os.listdir(tmp_path / "t-0"))
        lines = clean_logdir(logdir, dry_run=True, now_ms=10**13)
        assert lines and all("would" in line for line in lines)
        assert sorted(os.listdir(tmp_path / "t-0")) == before
        assert log.log_start_offset == 0


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
