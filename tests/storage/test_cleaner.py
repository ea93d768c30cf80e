"""Retention and compaction (``kafkafs clean``): what goes, what stays, and that the result is a log
a broker (here: kafka-python's reader) accepts."""

from __future__ import annotations

import os

from kafka.record.memory_records import MemoryRecords

from kafkafs.format.batch import encode_batch, encode_control_batch
from kafkafs.format.checkpoint import parse_offset_checkpoint
from kafkafs.format.txnindex import AbortedTxn
from kafkafs.storage.cleaner import apply_retention, clean_logdir, cleanable_segments, compact
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
    # the files were renamed .deleted; file.delete.delay.ms (60 s) has not passed, so they are still there
    deleted = [n for n in os.listdir(tmp_path / "t-0") if n.endswith(".deleted")]
    bases = {int(n[:20]) for n in deleted}
    assert len(bases) == len(lines) and max(bases) < log.log_start_offset
    assert len(deleted) == 3 * len(bases)  # .log, .index, .timeindex
    with LogDir(tmp_path, settings) as reader:  # readers never list them
        assert reader.log("t-0").log_start_offset == log.log_start_offset
        assert reader.log("t-0").segments.bases()[0] == log.log_start_offset
    with LogDir(tmp_path, settings, writable=True) as logdir:
        reopened = logdir.log("t-0")  # a writable open removes what a previous run left
        assert not [n for n in os.listdir(tmp_path / "t-0") if n.endswith(".deleted")]
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


def _txn(pid, key, value, ts=1000):
    return encode_batch([(ts, key, value, ())], transactional=True, producer_id=pid, producer_epoch=0, base_sequence=0)


def _marker(kind, pid, ts=1000):
    return encode_control_batch(kind, producer_id=pid, producer_epoch=0, timestamp=ts)


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


def test_a_live_reader_stops_listing_segments_renamed_deleted(tmp_path):
    from kafkafs.storage.log import Log

    settings = Settings({"segment.bytes": 300, "retention.bytes": 0, "retention.ms": -1})
    with LogDir(tmp_path, settings, writable=True) as logdir:
        log = logdir.create_partition("t", 0)
        _fill(log, 30)
        with Log.open(tmp_path / "t-0") as reader:
            assert len(reader.segments) == len(log.segments) > 1
            apply_retention(log, now_ms=10**13)
            reader.refresh()
            assert reader.segments.bases() == log.segments.bases()
            assert reader.log_start_offset == log.log_start_offset
            assert [n for n in os.listdir(tmp_path / "t-0") if n.endswith(".log.deleted")]


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


def test_the_background_cleaner_compacts_the_dirtiest_log_and_stops(tmp_path):
    import time

    from kafkafs.storage.cleaner import LogCleaner

    settings = Settings(
        {"segment.bytes": 1024, "log.cleaner.backoff.ms": 10, "log.initial.task.delay.ms": 0,
         "log.retention.check.interval.ms": 100,
         "retention.bytes": 2048, "retention.ms": -1},
        {"kv": {"cleanup.policy": "compact"}},
    )
    with LogDir(tmp_path, settings, writable=True) as logdir:
        kv = logdir.create_partition("kv", 0)
        ev = logdir.create_partition("ev", 0)
        cleaner = LogCleaner(logdir)
        cleaner.start()
        try:
            for i in range(600):
                kv.append_records([(1000 + i, b"k%d" % (i % 10), b"v%d" % i, ())])
                ev.append_records([(1000 + i, None, b"e%d" % i, ())])
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and (kv.size_in_bytes() > 4096 or ev.size_in_bytes() > 4096):
                time.sleep(0.05)
        finally:
            cleaner.stop()
        assert cleaner.errors == 0
        assert kv.size_in_bytes() <= 4096 and ev.size_in_bytes() <= 4096
        assert logdir.cleaner_offsets()[("kv", 0)] > 0
        kept = {}
        for _offset, _ts, key, value, _h in kv.records():
            kept[key] = value
        assert kept == {b"k%d" % k: b"v%d" % (590 + k) for k in range(10)}
        assert [r[3] for r in ev.records()][-1] == b"e599"
    assert not [n for n in os.listdir(tmp_path / "kv-0") if n.endswith((".cleaned", ".swap"))]


def test_clean_reports_progress_on_long_runs(tmp_path):
    import io

    settings = Settings({"segment.bytes": 1000}, {"kv": {"cleanup.policy": "compact"}})
    with LogDir(tmp_path, settings, writable=True) as logdir:
        log = logdir.create_partition("kv", 0)
        _fill(log, 200, key=lambda i: b"k%d" % (i % 4))
        quiet, chatty = io.StringIO(), io.StringIO()
        clean_logdir(logdir, now_ms=10**13, dry_run=True, progress=quiet)  # shorter than a second
        assert quiet.getvalue() == ""
        clean_logdir(logdir, now_ms=10**13, progress=chatty, progress_interval=0)
    lines = chatty.getvalue().splitlines()
    assert lines and lines[-1].startswith("clean: 1/1 partition(s), ")
    assert "MiB read" in lines[-1] and "MiB reclaimed" in lines[-1]


def test_a_reader_iterating_across_a_swap_sees_each_offset_once_in_order(tmp_path):
    settings = Settings({"segment.bytes": 300}, {"kv": {"cleanup.policy": "compact"}})
    with LogDir(tmp_path, settings, writable=True) as logdir:
        log = logdir.create_partition("kv", 0)
        _fill(log, 60, key=lambda i: b"k%d" % (i % 4))
        active_base = log.active_segment.base_offset
        reader = log.batches(0)
        first = next(reader)[1].header
        assert compact(log, now_ms=10**13)  # merges the sealed segments under the reader
        offsets = [first.base_offset] + [view.header.base_offset for _seg, view in reader]
        assert offsets == sorted(set(offsets))
        assert [o for o in offsets if o >= active_base] == list(range(active_base, 60))


def test_a_swap_is_refused_when_retention_removed_a_segment_meanwhile(tmp_path):
    from kafkafs.storage.segment import LogSegment

    settings = Settings({"segment.bytes": 300})
    with LogDir(tmp_path, settings, writable=True) as logdir:
        log = logdir.create_partition("t", 0)
        _fill(log, 30)
        first = next(iter(log.segments.values()))
        cleaned = LogSegment(log.dir, first.base_offset, log.config, writable=True, suffix=".cleaned")
        log.delete_segments([first], "retention")
        assert log.replace_segments(cleaned, [first]) is False
        assert not [n for n in os.listdir(tmp_path / "t-0") if n.endswith((".cleaned", ".swap"))]
