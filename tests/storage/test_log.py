"""Log: the scenarios of Kafka's UnifiedLogTest / LogTest (rolls, truncation, reads, appends), ported."""

from __future__ import annotations

import struct
import threading
import time
from pathlib import Path

import pytest

from kafkafs.errors import ConfigError, InvalidInput, OffsetOutOfRange, ReadOnlyError, RecordTooLargeError
from kafkafs.format.batch import encode_batch, read_batch_header, scan_batches
from kafkafs.format.encode import encode_control_batch
from kafkafs.storage.config import LogConfig, parse_setting
from kafkafs.storage.log import Log
from kafkafs.storage.segment import LogSegment

from .helpers import (
    Clock,
    all_records,
    batch,
    config,
    kafka_indexes,
    open_log,
    read_offset,
    record,
    segment_bases,
)

MAX_REL = 2**31 - 1


def batch_size(log: Log, n: int = 1, value: bytes = b"v" * 100) -> int:
    return len(encode_batch([(log.clock(), None, value, ())] * n))


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


def test_one_append_of_several_batches_rolls_between_them(tmp_path: Path) -> None:
    """review19 R19-6: Kafka checks the roll per append and a producer sends each batch as its own, so
    no segment passes segment.bytes; one append_batches / append_lines of several batches rolls between
    them (it put 7,015 bytes in a segment of segment.bytes=2048)."""
    clock = Clock()
    probe = open_log(tmp_path / "probe-0", clock=clock)
    size = batch_size(probe)
    probe.close()
    limit = 3 * size
    log = open_log(tmp_path / "t-0", config(segment_bytes=limit), clock=clock)
    data = b"".join(encode_batch([(1000 + i, None, b"v" * 100, ())]) for i in range(10))
    result = log.append_batches(data, client=True)
    assert (result.first_offset, result.last_offset, result.batches) == (0, 9, 10)
    assert segment_bases(log) == [0, 3, 6, 9]
    assert all(0 < s.size <= limit for s in log.segments)
    lines = b"\n".join(b'{"key": "k%d", "value": "%0100d"}' % (i, 0) for i in range(60))
    result, taken = log.append_lines(lines)
    assert taken == 60 and (result.first_offset, result.last_offset) == (10, 69) and result.batches > 1
    assert len(log.segments) > 4 and all(0 < s.size <= limit for s in log.segments)
    expected = all_records(log)
    assert [r[0] for r in expected] == list(range(70))
    log.close()
    for clean in (True, False):  # a reload (recovery too) finds every segment whole, the same records
        again = open_log(tmp_path / "t-0", config(segment_bytes=limit), clean=clean, clock=clock)
        assert all_records(again) == expected
        again.close()


def test_a_roll_inside_one_append_keeps_an_abort_in_its_own_segments_txnindex(tmp_path: Path) -> None:
    """The batches of one transactional append that rolls: the ABORT's .txnindex entry goes to the
    segment that holds the marker, as Kafka's append of that marker alone would put it."""
    txn = encode_batch([(1000, None, b"v" * 100, ())] * 3, transactional=True, producer_id=7,
                       producer_epoch=0, base_sequence=0)
    marker = encode_control_batch("ABORT", producer_id=7, producer_epoch=0, timestamp=1010)
    log = open_log(tmp_path / "t-0", config(segment_bytes=len(txn) + len(marker) - 1))
    log.append_batches(txn + marker, client=True)
    assert segment_bases(log) == [0, 3]
    assert not log.segments.get(0).txn_index.exists()  # type: ignore[union-attr]
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in log.aborted_transactions(0, 4)] == [(7, 0, 3)]
    assert log.segments.get(3).txn_index.exists()  # type: ignore[union-attr]
    assert log.transactions().first_undecided_offset() is None
    log.close()


def test_a_disk_error_between_the_runs_of_one_append_takes_back_the_first(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """All or nothing in the process: an OS error writing the second segment of one append truncates
    the log back to where the append began, and the error is raised."""
    data = b"".join(encode_batch([(1000 + i, None, b"v" * 100, ())]) for i in range(4))
    one = read_batch_header(data, 0).size  # type: ignore[union-attr]
    log = open_log(tmp_path / "t-0", config(segment_bytes=2 * one))
    log.append_records([record(b"before", ts=999)])
    real = LogSegment.append

    def append(segment: LogSegment, *args: object) -> None:
        if segment.base_offset > 0:
            raise OSError(28, "No space left on device")
        real(segment, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(LogSegment, "append", append)
    with pytest.raises(OSError):
        log.append_batches(data, client=True)
    assert log.log_end_offset == 1 and segment_bases(log) == [0] and log.write_failed
    assert [r[3] for r in all_records(log)] == [b"before"]
    log.close()


def test_internal_segment_bytes_is_the_segment_size_when_set(tmp_path: Path) -> None:
    # review7 R4: Kafka 4's LogConfig.segmentSize() is internal.segment.bytes when set (Kafka 4 keeps
    # segment.bytes at 1 MiB or more); it was an unknown setting. The broker's own rolls by it:
    # tests/broker/test_settings_vs_kafka.py
    clock = Clock()
    probe = open_log(tmp_path / "probe-0", clock=clock)
    size = batch_size(probe)
    probe.close()
    cfg = LogConfig.from_mapping({"segment.bytes": 1 << 20, "internal.segment.bytes": str(5 * size)})
    assert cfg.segment_size == 5 * size and cfg.as_dict()["internal.segment.bytes"] == 5 * size
    assert "internal.segment.bytes" not in config().as_dict() and config().segment_size == 1 << 30
    log = open_log(tmp_path / "t-0", cfg, clock=clock)
    for _ in range(20):
        log.append_records([record()])
    assert segment_bases(log) == [0, 5, 10, 15]
    log.close()
    with pytest.raises(ConfigError, match="is not an integer"):
        parse_setting("internal.segment.bytes", "big")


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
    # issue 19 finding 4: the index interval is counted afresh after each reopen, as a broker does;
    # the time index also has an entry from each close
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


def test_append_records_splits_under_max_message_bytes(tmp_path: Path) -> None:
    """Records that one batch of ``max.message.bytes`` cannot hold go as several batches of one append
    (all or nothing); a single record too large for any batch is refused and nothing is appended."""
    with open_log(tmp_path / "t-0", config(max_message_bytes=1000)) as log:
        result = log.append_records([record(b"x" * 300) for _ in range(10)])
        assert (result.first_offset, result.last_offset) == (0, 9) and result.batches > 1
        sizes = [view.size for _segment, view in log.batches()]
        assert len(sizes) == result.batches and all(size <= 1000 for size in sizes)
        assert [r[3] for r in log.records()] == [b"x" * 300] * 10
        with pytest.raises(RecordTooLargeError):
            log.append_records([record(b"small"), record(b"y" * 2000)])
        assert log.log_end_offset == 10


@pytest.mark.parametrize("setting", ["segment_bytes", "internal_segment_bytes"])
def test_append_batches_stay_within_the_segment_size(tmp_path: Path, setting: str) -> None:
    """R17-5: Kafka refuses a client's batch larger than the segment size (RECORD_LIST_TOO_LARGE), so one
    write's lines (the mount's append) are cut into batches within it, appended all or nothing; a record
    too large for such a batch is refused and nothing of its write is appended."""
    with open_log(tmp_path / "t-0", config(**{setting: 2048})) as log:
        lines = b"\n".join(b'{"key": "k%d", "value": "%s"}' % (i, b"y" * 100) for i in range(60))
        result, taken = log.append_lines(lines)
        assert taken == 60 and (result.first_offset, result.last_offset) == (0, 59) and result.batches > 1
        sizes = [view.size for _segment, view in log.batches()]
        assert all(size <= 2048 for size in sizes), sizes
        assert [(r[2], r[3]) for r in log.records()] == [(b"k%d" % i, b"y" * 100) for i in range(60)]
        with pytest.raises(RecordTooLargeError, match="segment.bytes=2048"):
            log.append_lines(b"small\n" + b"x" * 3000)
        with pytest.raises(RecordTooLargeError, match="segment.bytes=2048"):
            log.append_batches(encode_batch([(1, None, b"x" * 3000, ())]), client=True)
        assert log.log_end_offset == 60
