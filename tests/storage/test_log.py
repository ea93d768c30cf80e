"""Log: the scenarios of Kafka's UnifiedLogTest / LogTest (rolls, truncation, reads, appends), ported."""

from __future__ import annotations

import os
import struct
import threading
import time
from pathlib import Path

import pytest

from kafkafs.errors import InvalidInput, OffsetOutOfRange, ReadOnlyError, RecordTooLargeError
from kafkafs.format.batch import encode_batch, read_batch_header, scan_batches
from kafkafs.format.jsonview import ProducerRecord
from kafkafs.storage.log import Log

from .helpers import Clock, all_records, batch, config, kafka_indexes, open_log, read_offset

MAX_REL = 2**31 - 1


def record(value: bytes = b"v" * 100, ts: int | None = None, key: bytes | None = None) -> ProducerRecord:
    return ProducerRecord(ts, key, value, ())


def batch_size(log: Log, n: int = 1, value: bytes = b"v" * 100) -> int:
    return len(encode_batch([(log.clock(), None, value, ())] * n))


def segment_bases(log: Log) -> list[int]:
    return log.segments.bases()


# -- rolls: the four conditions -------------------------------------------------------------------------


def test_roll_by_segment_bytes(tmp_path: Path) -> None:
    clock = Clock()
    probe = open_log(tmp_path / "probe-0", clock=clock)
    size = batch_size(probe)
    probe.close()
    per_segment = 7
    log = open_log(tmp_path / "t-0", config(segment_bytes=per_segment * size), clock=clock)
    for _ in range(100):
        log.append_records([record()])
    assert log.log_end_offset == 100
    assert segment_bases(log) == list(range(0, 100, per_segment))
    assert all(s.size <= per_segment * size for s in log.segments)
    log.close()


def test_roll_by_segment_ms(tmp_path: Path) -> None:
    clock = Clock()
    hour = 3_600_000
    log = open_log(tmp_path / "t-0", config(segment_ms=hour), clock=clock)
    log.append_records([record()])
    assert len(log.segments) == 1
    clock.sleep(hour)  # not yet: the roll needs more than segment.ms
    log.append_records([record()])
    assert len(log.segments) == 1
    for n in range(2, 6):
        clock.sleep(hour + 1)
        log.append_records([record()])
        assert len(log.segments) == n
    # a record whose timestamp is not newer than the segment's first does not roll it, whatever the time
    first_ts = log.active_segment.rolling_timestamp()  # type: ignore[union-attr]
    clock.sleep(10 * hour)
    log.append_records([record(ts=first_ts)])
    assert len(log.segments) == 5
    log.close()


def test_roll_by_segment_ms_without_timestamps_counts_from_creation(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "t-0", config(segment_ms=1000), clock=clock)
    log.append_batches(batch(1, ts=-1))
    clock.sleep(1000)
    log.append_batches(batch(1, ts=-1))
    assert len(log.segments) == 1
    clock.sleep(1)
    log.append_batches(batch(1, ts=-1))
    assert segment_bases(log) == [0, 2]
    log.close()


def test_roll_jitter(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "t-0", config(segment_ms=10_000, segment_jitter_ms=4_000), clock=clock)
    jitter = log.active_segment.roll_jitter_ms  # type: ignore[union-attr]
    assert 0 <= jitter < 4_000
    log.append_records([record()])
    clock.sleep(10_000 - jitter)
    log.append_records([record()])
    assert len(log.segments) == 1
    clock.sleep(1)
    log.append_records([record()])
    assert len(log.segments) == 2
    log.close()


def test_roll_by_index_full(tmp_path: Path) -> None:
    """segment.index.bytes 40: 5 offset index entries, 3 time index slots (the last for the roll entry);
    an entry before every batch but the first (index.interval.bytes 1), timestamps rising: the time
    index is full after 3 batches, and the segment rolls."""
    clock = Clock()
    log = open_log(tmp_path / "t-0", config(segment_index_bytes=40, index_interval_bytes=1), clock=clock)
    for _ in range(30):
        log.append_records([record()])
        clock.sleep(1)
    assert segment_bases(log) == list(range(0, 30, 3))
    log.close()
    for base in range(0, 30, 3):
        assert (tmp_path / "t-0" / f"{base:020d}.index").stat().st_size == 2 * 8
        # two entries: the roll entry would repeat the last one (the rising timestamps' maximum)
        assert (tmp_path / "t-0" / f"{base:020d}.timeindex").stat().st_size == 2 * 12


def test_roll_by_offset_index_full_with_equal_timestamps(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", config(segment_index_bytes=40, index_interval_bytes=1))
    for _ in range(30):
        log.append_records([record()])  # the clock stands still: one time index entry per segment
    assert segment_bases(log) == list(range(0, 30, 6))
    log.close()


def test_roll_by_offset_overflow_of_a_batch_with_a_large_last_offset_delta(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_records([record(b"a")] * 5)
    gap = encode_batch([(1000, None, b"far", ())], last_offset_delta=MAX_REL)  # one record, offsets 5..5+MAX
    result = log.append_batches(gap)
    assert (result.first_offset, result.last_offset) == (5, 5 + MAX_REL)
    assert segment_bases(log) == [0, 5]  # 5 + MAX does not fit a segment based at 0
    log.append_records([record(b"next")])
    assert segment_bases(log) == [0, 5, 6 + MAX_REL]  # 6 + MAX does not fit one based at 5
    assert log.log_end_offset == 7 + MAX_REL
    assert read_offset(log, 5) is not None and read_offset(log, 6) is None
    found = read_offset(log, 6 + MAX_REL)
    assert found is not None and found[0].values[found[1]] == b"next"
    expected = all_records(log)
    log.close()
    for clean in (True, False):
        again = open_log(tmp_path / "t-0", clean=clean)
        assert again.log_end_offset == 7 + MAX_REL and all_records(again) == expected
        again.close()


def test_roll_when_the_log_end_nears_the_relative_offset_limit(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_batches(encode_batch([(1000, None, b"x", ())], last_offset_delta=MAX_REL - 2))
    assert log.log_end_offset == MAX_REL - 1
    log.append_records([record(b"y", ts=1000), record(b"z", ts=1000)])  # offsets MAX-1, MAX: the last that fit
    assert segment_bases(log) == [0]
    log.append_records([record(b"w", ts=1000)])
    assert segment_bases(log) == [0, MAX_REL + 1]
    log.close()


def test_empty_active_segment_is_not_rolled_again(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_records([record()])
    first = log.roll()
    assert log.roll() is first and segment_bases(log) == [0, 1]
    log.close()


# -- reopening ------------------------------------------------------------------------------------------


def test_reopen_after_a_clean_close_appends_to_the_same_segment(tmp_path: Path) -> None:
    cfg = config(index_interval_bytes=300)
    clock = Clock()
    log = open_log(tmp_path / "t-0", cfg, clock=clock)
    for i in range(20):
        log.append_records([record(ts=1000 + i)])
    log.close()
    closes = []
    for round_ in range(3):
        log = open_log(tmp_path / "t-0", cfg, clock=clock)
        assert segment_bases(log) == [0] and log.log_end_offset == 20 + 10 * round_
        closes.append(log.active_segment.size)  # type: ignore[union-attr]
        for i in range(10):
            log.append_records([record(ts=2000 + 10 * round_ + i)])
        assert segment_bases(log) == [0]
        log.close()
    data = (tmp_path / "t-0" / "00000000000000000000.log").read_bytes()
    # the offset index as if written in one go; the time index also has an entry from each close
    index, timeindex = kafka_indexes(data, 0, 300, closes=closes)
    assert (tmp_path / "t-0" / "00000000000000000000.index").read_bytes() == index
    assert (tmp_path / "t-0" / "00000000000000000000.timeindex").read_bytes() == timeindex


def test_recovery_point_after_clean_and_unclean_opens(tmp_path: Path) -> None:
    """Kafka's testLogRecoversToCorrectOffset: same entries either way; after an unclean shutdown the
    recovery point stays where it was until a flush."""
    cfg = config(segment_bytes=700, index_interval_bytes=300, segment_index_bytes=4096)
    clock = Clock()
    log = open_log(tmp_path / "t-0", cfg, clock=clock)
    for i in range(100):
        log.append_records([record(ts=clock() + i * 10)])
    active = log.active_segment
    assert active is not None
    last_index_offset, entries = active.offset_index.last_offset, active.offset_index.entries
    log.close()
    for recovery_point in (100, 10):
        again = open_log(tmp_path / "t-0", cfg, clean=False, recovery_point=recovery_point)
        assert again.recovery_point == recovery_point and again.log_end_offset == 100
        a = again.active_segment
        assert a is not None
        assert (a.offset_index.last_offset, a.offset_index.entries) == (last_index_offset, entries)
        assert (a.time_index.last_entry.timestamp, a.time_index.last_entry.offset) == (clock() + 990, 99)
        again.flush()
        assert again.recovery_point == 100
        again.close()


# -- truncation -----------------------------------------------------------------------------------------


def test_truncate_to(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", config(segment_bytes=600, index_interval_bytes=100))
    for i in range(60):
        log.append_records([record(b"%d-a" % i), record(b"%d-b" % i)])
    expected = all_records(log)
    assert len(log.segments) > 5
    assert not log.truncate_to(120) and not log.truncate_to(500)  # nothing past the end
    target = 51  # in the middle of a two-record batch: the whole batch goes
    holder = log.segment_for(target)
    assert holder is not None
    assert log.truncate_to(target)
    assert log.log_end_offset == 50
    assert log.active_segment is holder
    assert all_records(log) == expected[:50]
    assert not holder.offset_index.is_full() and holder.offset_index.length == config().segment_index_bytes
    names = os.listdir(tmp_path / "t-0")
    assert all(int(n[:20]) <= holder.base_offset for n in names if n[:20].isdigit())
    log.append_records([record(b"new")])
    assert log.log_end_offset == 51
    assert all_records(log)[-1][3] == b"new"
    log.close()
    again = open_log(tmp_path / "t-0", clean=False)
    assert [r[3] for r in all_records(again)] == [r[3] for r in expected[:50]] + [b"new"]
    again.close()


def test_truncate_to_a_segment_base_keeps_an_empty_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_records([record()] * 3)
    log.roll()
    log.append_records([record()] * 3)
    log.truncate_to(3)
    assert segment_bases(log) == [0, 3] and log.log_end_offset == 3
    log.append_records([record()])
    assert log.log_end_offset == 4
    log.close()


def test_truncate_below_the_first_segment_starts_over(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", log_start_offset=100)
    log.append_records([record()] * 5)
    assert segment_bases(log) == [100] and log.log_end_offset == 105
    log.truncate_to(40)
    assert segment_bases(log) == [40]
    assert log.log_start_offset == 40 and log.log_end_offset == 40
    log.append_records([record()])
    assert log.log_end_offset == 41
    log.close()


def test_reopen_then_truncate(tmp_path: Path) -> None:
    size = len(encode_batch([(1000, None, b"test", ())]))
    cfg = config(segment_bytes=size * 5, segment_index_bytes=1000, index_interval_bytes=10000)
    log = open_log(tmp_path / "t-0", cfg)
    for _ in range(100):
        log.append_records([record(b"test", ts=1000)])
    log.close()
    log = open_log(tmp_path / "t-0", cfg, clean=False)
    log.truncate_to(3)
    assert len(log.segments) == 1 and log.log_end_offset == 3
    log.close()


def test_truncate_to_zero_and_to_negative(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", config(segment_bytes=500))
    for _ in range(20):
        log.append_records([record()])
    with pytest.raises(InvalidInput):
        log.truncate_to(-1)
    log.truncate_to(0)
    assert segment_bases(log) == [0] and log.log_end_offset == 0 and log.active_segment.size == 0  # type: ignore[union-attr]
    assert sorted(os.listdir(tmp_path / "t-0")) == [f"{0:020d}{e}" for e in (".index", ".log", ".timeindex")] + [
        "leader-epoch-checkpoint"  # kept, emptied, as Kafka's LeaderEpochFileCache keeps it
    ]
    log.close()


# -- reading --------------------------------------------------------------------------------------------


def test_append_and_read_with_sequential_offsets(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", config(segment_bytes=300, index_interval_bytes=50))
    values = [b"%d" % i for i in range(200)]
    for i in range(0, 200, 4):
        log.append_records([record(v, ts=1000 + i) for v in values[i : i + 4]])
    for offset in range(200):
        found = read_offset(log, offset)
        assert found is not None
        batch_, i = found
        assert batch_.offsets[i] == offset and batch_.values[i] == values[offset]
    assert read_offset(log, 200) is None and read_offset(log, -1) is None
    got = [r.value for r in log.records(37, 151)]
    assert got == values[37:152]
    assert [b.offsets for b in log.read(198)] == [[198, 199]]
    assert list(log.read(200)) == []
    with pytest.raises(OffsetOutOfRange):
        list(log.read(201))
    log.close()


def test_reads_skip_compacted_gaps(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", config(segment_bytes=200))
    for i in range(20):  # every batch keeps only its last of 5 offsets, as compaction leaves it
        log.append_batches(encode_batch([(1000 + i, None, b"%d" % i, ())], offset_deltas=[4], last_offset_delta=4))
    assert log.log_end_offset == 100
    assert [r.offset for r in log.records()] == list(range(4, 100, 5))
    assert read_offset(log, 10) is None and read_offset(log, 14) is not None
    assert [r.offset for r in log.records(10, 30)] == [14, 19, 24, 29]
    assert log.offset_for_timestamp(1003) == (19, 1003)
    log.close()


def test_offset_for_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", config(segment_bytes=400, index_interval_bytes=60))
    stamps = [500, 100, 300, 900, 200, 800, 800, 1000, 50, 1200] * 4
    for ts in stamps:
        log.append_records([record(b"x" * 30, ts=ts)])
    assert len(log.segments) > 3
    for target in range(0, 1300, 25):
        expected = next(((o, ts) for o, ts in enumerate(stamps) if ts >= target), None)
        assert log.offset_for_timestamp(target) == expected, target
    log.close()


def test_segment_for_is_a_floor(tmp_path: Path) -> None:
    """Kafka's LogSegmentsTest closest-match operations, through the skip list."""
    log = open_log(tmp_path / "t-0", config(segment_bytes=300))
    for _ in range(40):
        log.append_records([record()])
    bases = segment_bases(log)
    for offset in range(40):
        segment = log.segment_for(offset)
        assert segment is not None and segment.base_offset == max(b for b in bases if b <= offset)
        assert segment.base_offset <= offset < segment.next_offset
    assert log.segments.higher(bases[1]).base_offset == bases[2]  # type: ignore[index]
    assert log.segments.lower(bases[1]).base_offset == bases[0]  # type: ignore[union-attr]
    assert [s.base_offset for s in log.segments.values(bases[1], bases[3])] == bases[1:3]
    log.close()


# -- appending ------------------------------------------------------------------------------------------


def test_append_rejects_what_a_broker_would(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", config(max_message_bytes=500))
    good = batch(2)
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0xFF
    with pytest.raises(InvalidInput):
        log.append_batches(bytes(bad_crc))
    with pytest.raises(InvalidInput):
        log.append_batches(good[:-3])  # a partial batch
    with pytest.raises(InvalidInput):
        log.append_batches(good + b"\x00" * 5)
    with pytest.raises(InvalidInput):
        log.append_batches(b"")
    legacy = bytearray(good)
    legacy[16] = 1
    with pytest.raises(InvalidInput):
        log.append_batches(bytes(legacy))
    with pytest.raises(InvalidInput):  # 3 records cannot fit offsets base..base+1
        log.append_batches(encode_batch([(1, None, b"a", ())] * 3, last_offset_delta=1))
    with pytest.raises(RecordTooLargeError):
        log.append_batches(batch([b"x" * 600]))
    assert log.log_end_offset == 0 and log.active_segment.size == 0  # type: ignore[union-attr]
    log.append_batches(good + batch(3))
    assert log.log_end_offset == 5
    log.close()
    with pytest.raises(ReadOnlyError):
        log.append_records([record()])
    reader = Log.open(tmp_path / "t-0")
    with pytest.raises(ReadOnlyError):
        reader.append_records([record()])
    with pytest.raises(ReadOnlyError):
        reader.truncate_to(0)
    reader.close()


def test_append_assigns_offsets_and_epoch_and_keeps_the_crc(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    directory.mkdir()
    (directory / "leader-epoch-checkpoint").write_bytes(b"0\n2\n3 0\n7 10\n")
    log = open_log(directory)
    log.append_batches(batch(3, base_offset=999) + batch(2, base_offset=12345))
    data = log.active_segment.read_at(0, log.active_segment.size)  # type: ignore[union-attr]
    headers = list(scan_batches(data))
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(0, 7), (3, 7)]
    log.close()


def test_log_append_time(tmp_path: Path) -> None:
    clock = Clock(5_000_000)
    log = open_log(tmp_path / "t-0", config(message_timestamp_type="LogAppendTime"), clock=clock)
    log.append_batches(batch(3, ts=17))
    clock.sleep(10)
    log.append_records([record(ts=18)])
    stamps = [(r.offset, r.timestamp) for r in log.records()]
    assert stamps == [(0, 5_000_000), (1, 5_000_000), (2, 5_000_000), (3, 5_000_010)]
    header = read_batch_header(log.active_segment.read_at(0, 200))  # type: ignore[union-attr]
    assert header.timestamp_type == 1
    log.close()


def test_flush_policies_and_durability(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "t-0", config(flush_messages=3), clock=clock)
    assert [log.append_records([record()]).durable for _ in range(6)] == [False, False, True] * 2
    assert log.recovery_point == 6
    assert log.append_records([record()], flush=True).durable
    assert not log.append_records([record()] * 5, flush=False).durable
    assert log.recovery_point == 7
    log.close()
    timed = open_log(tmp_path / "u-0", config(flush_ms=1000), clock=clock)
    assert not timed.append_records([record()]).durable
    clock.sleep(1000)
    assert timed.append_records([record()]).durable
    timed.close()


def test_listeners_and_waiting_for_records(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    seen: list[int] = []
    log.add_listener(lambda lg: seen.append(lg.log_end_offset))
    assert not log.wait_for_records(-1, timeout=0.01)
    timer = threading.Timer(0.05, lambda: log.append_records([record()] * 2))
    timer.start()
    assert log.wait_for_records(-1, timeout=5)
    timer.join()
    assert seen == [2]
    assert log.wait_for_records(1, timeout=0.01) is False
    assert log.wait_for_records(0, timeout=0.01) is True
    log.close()


def test_a_reader_follows_a_writer(tmp_path: Path) -> None:
    cfg = config(segment_bytes=600, index_interval_bytes=100)
    writer = open_log(tmp_path / "t-0", cfg)
    writer.append_records([record()] * 2)
    reader = Log.open(tmp_path / "t-0", cfg)
    assert reader.log_end_offset == 2
    for _ in range(30):
        writer.append_records([record()])
    assert reader.log_end_offset == 2
    assert reader.refresh()
    assert reader.log_end_offset == 32 and len(reader.segments) == len(writer.segments)
    assert [r.offset for r in reader.records()] == list(range(32))
    got = []
    thread = threading.Thread(target=lambda: got.append(reader.wait_for_records(31, timeout=5, poll_interval=0.01)))
    thread.start()
    writer.append_records([record()])
    thread.join()
    assert got == [True] and reader.log_end_offset == 33
    reader.close()
    writer.close()


def test_describe(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", config(segment_bytes=300))
    for i in range(5):
        log.append_records([record(ts=1000 + i)])
    info = log.describe()
    assert (info["topic"], info["partition"], info["logStartOffset"], info["logEndOffset"]) == ("t", 0, 0, 5)
    assert [s["baseOffset"] for s in info["segments"]] == segment_bases(log)
    assert info["segments"][-1]["maxTimestamp"] == 1004
    assert info["sizeBytes"] == log.size_in_bytes()
    log.close()


def test_records_bigger_than_a_read_chunk(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", config(max_message_bytes=2 << 20))
    big = os.urandom(600_000)
    log.append_records([record(big), record(b"small")])
    log.append_records([record(big[::-1])])
    assert [r.value for r in log.records()] == [big, b"small", big[::-1]]
    log.close()


def test_write_then_read_in_threads(tmp_path: Path) -> None:
    """Readers in other threads see a consistent prefix while the writer appends and rolls."""
    log = open_log(tmp_path / "t-0", config(segment_bytes=2000, index_interval_bytes=100))
    stop = threading.Event()
    errors: list[str] = []

    def reader() -> None:
        while not stop.is_set():
            end = log.log_end_offset
            start = max(0, end - 30)
            offsets = [r.offset for r in log.records(start, end - 1)] if end else []
            if offsets != list(range(start, end)):
                errors.append(f"read {offsets} for {start}..{end - 1}")
                return
            if end and read_offset(log, end - 1) is None:
                errors.append(f"offset {end - 1} missing")
                return
            time.sleep(0.0005)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for i in range(150):
        log.append_records([record(struct.pack(">I", i) * 10)] * (1 + i % 3))
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors
    assert [r.offset for r in log.records()] == list(range(log.log_end_offset))
    log.close()


def test_locate_returns_the_undecoded_batch_with_its_segment(tmp_path: Path) -> None:
    with open_log(tmp_path / "t-0", config(segment_bytes=400)) as log:
        for i in range(12):
            log.append_records([record(b"%d" % i), record(b"x")])
        for offset in range(log.log_end_offset):
            view = log.locate(offset)
            assert view is not None and view.segment is log.segment_for(offset)
            h = view.header
            assert h.base_offset <= offset <= h.last_offset
            assert view.raw() == view.segment.read_at(view.position, h.size)
            assert offset in view.decode().offsets
        assert log.locate(-1) is None and log.locate(log.log_end_offset) is None
