"""Retention: whole segments past retention.ms / retention.bytes go, the log start moves (SPEC §2)."""

from __future__ import annotations

import os

from kafkafs.storage.cleaner import apply_retention
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir

from .test_cleaner import _fill


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


def test_size_retention_deletes_the_active_segment_too_as_kafka_does(tmp_path):
    # Kafka's deletableSegments stops only at an EMPTY last segment: retention.bytes=0 deletes every
    # non-empty segment, the active one after a roll (a new empty segment at the log end takes its place)
    settings = Settings({"segment.bytes": 300, "retention.bytes": 0, "retention.ms": -1})
    with LogDir(tmp_path, settings, writable=True) as logdir:
        log = logdir.create_partition("t", 0)
        _fill(log, 30)
        assert len(log.segments) > 2
        apply_retention(log, now_ms=10**13)
        assert len(log.segments) == 1
        assert log.log_end_offset == 30
        assert log.log_start_offset == log.active_segment.base_offset == 30
        assert log.active_segment.size == 0
        assert apply_retention(log, now_ms=10**13) == []  # an empty last segment is never deleted


def test_size_retention_keeps_what_fits(tmp_path):
    settings = Settings({"segment.bytes": 300, "retention.ms": -1})
    with LogDir(tmp_path, settings, writable=True) as logdir:
        log = logdir.create_partition("t", 0)
        _fill(log, 30)
        sizes = [s.size for s in log.segments]
        # exactly the last two segments' bytes: everything before them goes, they stay
        log.config = Settings({"retention.bytes": sum(sizes[-2:]), "retention.ms": -1}).for_topic("t")
        apply_retention(log, now_ms=10**13)
        assert [s.size for s in log.segments] == sizes[-2:]


def test_time_retention_of_segments_without_timestamps_uses_the_file_time(tmp_path):
    # magic 0 messages carry no timestamp: Kafka's LogSegment.largestTimestamp falls back to the .log's
    # modification time, so a segment written just now is young, not "older than retention.ms"
    import struct

    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    data = b""
    for i in range(3):
        builder = LegacyRecordBatchBuilder(magic=0, compression_type=0, batch_size=1 << 20)
        builder.append(0, timestamp=None, key=b"k%d" % i, value=b"v%d" % i)
        entry = bytearray(builder.build())
        struct.pack_into(">q", entry, 0, i)
        data += bytes(entry)
    folder = tmp_path / "old-0"
    folder.mkdir()
    log_file = folder / "00000000000000000000.log"
    log_file.write_bytes(data)
    now_ms = os.stat(log_file).st_mtime_ns // 1_000_000 + 1000
    settings = Settings({"retention.ms": 60_000})
    with LogDir(tmp_path, settings, writable=True) as logdir:
        log = logdir.log("old-0")
        assert apply_retention(log, now_ms=now_ms) == []
        assert log.log_start_offset == 0 and log.log_end_offset == 3
        os.utime(log_file, ns=(0, (now_ms - 120_000) * 1_000_000))  # two minutes old now
        assert len(apply_retention(log, now_ms=now_ms)) == 1
        assert log.log_start_offset == 3


def test_segments_below_the_log_start_go_whatever_the_policy(tmp_path):
    # Kafka's deleteOldSegments runs deleteLogStartOffsetBreachedSegments for every log, compacted ones
    # too: a segment whose next segment starts at or below the log start offset (after DeleteRecords,
    # or a checkpoint that says so) is deleted; the one the log start falls in stays
    for policy in ("delete", "compact"):
        settings = Settings({"segment.bytes": 300, "retention.ms": -1, "cleanup.policy": policy})
        (tmp_path / policy).mkdir()
        with LogDir(tmp_path / policy, settings, writable=True) as logdir:
            log = logdir.create_partition("t", 0)
            _fill(log, 30)
            bases = [s.base_offset for s in log.segments]
            assert len(bases) > 3
            log.log_start_offset = bases[2] + 1  # inside the third segment
            lines = apply_retention(log, now_ms=10**13)
            assert [s.base_offset for s in log.segments] == bases[2:], (policy, lines)
            assert log.log_start_offset == bases[2] + 1
            assert [r[0] for r in log.records()][0] == bases[2] + 1


def test_log_cleaner_enable_false_turns_compaction_off_not_retention(tmp_path):
    # Kafka's log.cleaner.enable only starts or not the LogCleaner (compaction); the LogManager's
    # retention runs regardless for the logs that are not compacted (a compacted log's retention is the
    # cleaner's: test_compact_then_delete). kafkafs's `clean` compacted anyway, and a --rw mount's
    # cleaner thread did not start at all, so retention never ran.
    from kafkafs.storage.cleaner import LogCleaner, clean_logdir

    settings = Settings({"segment.bytes": 300, "log.cleaner.enable": False, "retention.ms": 10_000},
                        {"kv": {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.0}})
    with LogDir(tmp_path, settings, writable=True) as logdir:
        ev = logdir.create_partition("ev", 0)
        _fill(ev, 30, ts=lambda i: 1000 + i)
        kv = logdir.create_partition("kv", 0)
        _fill(kv, 30, key=lambda i: b"k%d" % (i % 3))
        segments = len(kv.segments)
        lines = clean_logdir(logdir, now_ms=10**13)
        assert any(line.startswith("ev-0: deleted") for line in lines), lines
        assert not any("compact" in line for line in lines), lines
        assert len(kv.segments) == segments
        _fill(ev, 30, ts=lambda i: 10**13 - 100_000 + i)
        cleaner = LogCleaner(logdir, clock=lambda: 10**13)
        assert cleaner.run_once() is False  # retention ran, nothing compacted
        assert ev.log_start_offset == 60 and len(kv.segments) == segments
