"""Loading and recovery: the scenarios of Kafka's LogLoaderTest, ported (not copied)."""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import pytest

from kafkafs.errors import CorruptRecordError, NeedsRecovery
from kafkafs.format.batch import encode_batch, set_base_offset
from kafkafs.format.jsonview import ProducerRecord
from kafkafs.storage.log import Log

from .helpers import (
    Clock,
    all_records,
    batch,
    config,
    headers_of,
    kafka_indexes,
    open_log,
    read_offset,
    tree_fingerprint,
    write_segment,
)


def record(value: bytes = b"test", ts: int | None = None) -> ProducerRecord:
    return ProducerRecord(ts, None, value, ())


def crash(log: Log) -> None:
    """Let go of a log as a killed process would: nothing sealed, trimmed or flushed."""
    for segment in log.segments:
        segment.close_handlers()


def segment_files(directory: Path) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n[:20].isdigit() and not n.endswith(".snapshot"))


def filled(directory: Path, n: int = 200, cfg=None, clock: Clock | None = None) -> Log:
    """Kafka's recovery tests' log: small segments, an index entry per batch, timestamps 10 ms apart."""
    clock = clock or Clock()
    log = open_log(directory, cfg or config(segment_bytes=200, index_interval_bytes=1), clock=clock)
    for i in range(n):
        log.append_records([record(os.urandom(10), ts=clock() + i * 10)])
    return log


def crashed_with_a_tail(directory: Path, n: int, tail: bytes) -> None:
    """``n`` records appended, the writer gone without a clean stop, then ``tail`` after the last
    segment's data (a torn write, garbage)."""
    log = filled(directory, n=n)
    crash(log)
    with open(directory / f"{log.segments.last().base_offset:020d}.log", "ab") as f:  # type: ignore[index]
        f.write(tail)


def three_records_closed(directory: Path) -> tuple[Path, int]:
    """A log of three records, closed cleanly: its active segment's ``.log`` and that file's size."""
    log = open_log(directory)
    log.append_records([record()] * 3)
    active = log.active_segment
    log.close()
    assert active is not None
    return active.log_path, active.log_path.stat().st_size


def check_reads(log: Log, n: int, t0: int) -> None:
    assert log.log_end_offset == n
    for i in range(n):
        found = read_offset(log, i)
        assert found is not None and found[0].offsets[found[1]] == i
    for i in list(range(0, n, 7)) + [n - 1]:  # by time: each search walks the segments from the first
        expected = log.segments.first().base_offset if i == 0 else i  # type: ignore[index]
        assert log.offset_for_timestamp(t0 + i * 10) == (expected, t0 + i * 10)


def indexes_match_kafka(directory: Path, interval: int) -> None:
    for name in segment_files(directory):
        if name.endswith(".log"):
            base = int(name[:20])
            index, timeindex = kafka_indexes((directory / name).read_bytes(), base, interval)
            assert (directory / f"{base:020d}.index").read_bytes() == index, name
            assert (directory / f"{base:020d}.timeindex").read_bytes() == timeindex, name


# -- indexes --------------------------------------------------------------------------------------------


def test_index_rebuild_after_deleting_the_index_files(tmp_path: Path) -> None:
    for clean in (True, False):
        directory = tmp_path / f"t-{int(clean)}"
        clock = Clock()
        log = filled(directory, clock=clock)
        log.close()
        before = {n: (directory / n).read_bytes() for n in segment_files(directory) if not n.endswith(".log")}
        for name in before:
            (directory / name).unlink()
        log = open_log(directory, config(segment_bytes=200, index_interval_bytes=1), clean=clean)
        assert log.last_recovery.rebuilt_indexes  # type: ignore[union-attr]
        first = log.segments.first()  # type: ignore[index]
        assert first.offset_index.entries > 0 and first.time_index.entries > 0
        check_reads(log, 200, clock())
        log.close()
        after = {n: (directory / n).read_bytes() for n in segment_files(directory) if not n.endswith(".log")}
        assert after == before  # rebuilt byte for byte as they were written
        indexes_match_kafka(directory, 1)


def test_corrupt_index_rebuild(tmp_path: Path) -> None:
    clock = Clock()
    log = filled(tmp_path / "t-0", clock=clock)
    log.close()
    for name in segment_files(tmp_path / "t-0"):
        if not name.endswith(".log"):
            (tmp_path / "t-0" / name).write_bytes(b"  ")
    log = open_log(tmp_path / "t-0", config(segment_bytes=200, index_interval_bytes=1), clean=False)
    check_reads(log, 200, clock())
    log.close()
    indexes_match_kafka(tmp_path / "t-0", 1)


@pytest.mark.allow_warnings("damage on purpose: recovery and readers say what they cut or skip")
def test_a_corrupt_active_index_is_rebuilt_even_after_a_clean_shutdown(tmp_path: Path) -> None:
    log = filled(tmp_path / "t-0", n=30)
    log.close()
    last = log.segments.last().base_offset  # type: ignore[index]
    entries = struct.pack(">II", 5, 100) + struct.pack(">II", 3, 200) + struct.pack(">II", 9, 300)
    (tmp_path / "t-0" / f"{last:020d}.index").write_bytes(entries)  # offsets not increasing
    log = open_log(tmp_path / "t-0", config(segment_bytes=200, index_interval_bytes=1), clean=True)
    assert log.last_recovery.rebuilt_indexes == [f"{last:020d}.log"]  # type: ignore[union-attr]
    assert log.log_end_offset == 30
    log.close()


def test_bogus_index_files_are_removed(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    directory.mkdir()
    for name in ("00000000000000000005.index", "00000000000000000005.timeindex"):
        (directory / name).write_bytes(b"")
    size = len(encode_batch([(1000, None, b"test", ())]))
    log = open_log(directory, config(segment_bytes=size * 5, segment_index_bytes=1000, index_interval_bytes=1))
    assert not (directory / "00000000000000000005.index").exists()
    assert not (directory / "00000000000000000005.timeindex").exists()
    assert (directory / "00000000000000000000.index").stat().st_size == 1000  # the active one, preallocated
    for _ in range(10):
        log.append_records([record(ts=1000)])
    assert log.log_end_offset == 10
    log.close()


# -- leftovers ------------------------------------------------------------------------------------------


def three_segments(directory: Path) -> Log:
    log = open_log(directory, config(index_interval_bytes=1))
    for base in (0, 10, 20):
        if base:
            log.roll()
        for i in range(10):
            log.append_records([record(b"%d" % (base + i), ts=1000 + base + i)])
    log.close()
    return log


def test_obsolete_deleted_files_are_removed_on_open(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    three_segments(directory)
    for ext in (".log", ".index", ".timeindex", ".txnindex"):
        (directory / f"{30:020d}{ext}.deleted").write_bytes(b"old")
    log = open_log(directory, clean=False)
    assert not [n for n in os.listdir(directory) if n.endswith(".deleted")]
    assert len(log.segments) == 3 and log.log_end_offset == 30
    log.close()


def test_retention_deletes_through_deleted_files(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "t-0", config(segment_bytes=300), clock=clock)
    for _ in range(10):
        log.append_records([record(b"x" * 100)])
    first_two = list(log.segments)[:2]
    prefix = f"{first_two[0].base_offset:020d}"
    log.delete_segments(first_two, "retention")
    assert log.log_start_offset == first_two[1].next_offset
    assert [r.offset for r in log.records()][0] == log.log_start_offset
    # renamed .deleted, and removed once file.delete.delay.ms (60 s) has passed
    left = sorted(n for n in os.listdir(tmp_path / "t-0") if n.startswith(prefix))
    assert left == [f"{prefix}.index.deleted", f"{prefix}.log.deleted", f"{prefix}.timeindex.deleted"]
    assert log.delete_expired_files() == []
    clock.sleep(59_999)
    assert log.delete_expired_files() == []
    clock.sleep(1)
    assert log.delete_expired_files() == [f"{prefix}.log.deleted", f"{first_two[1].base_offset:020d}.log.deleted"]
    assert not [n for n in os.listdir(tmp_path / "t-0") if n.endswith(".deleted")]
    log.close()


def test_a_swap_left_by_a_compaction_is_completed(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    three_segments(directory)
    kept = [3, 7, 12, 19]  # what a compaction of segments 0 and 10 kept
    with open(directory / "00000000000000000000.log.swap", "wb") as f:
        for offset in kept:
            f.write(encode_batch([(1000 + offset, None, b"%d" % offset, ())], base_offset=offset))
    (directory / "00000000000000000000.index.swap").write_bytes(b"junk")
    for clean in (True, False):
        log = open_log(directory, config(index_interval_bytes=1), clean=clean)
        assert log.segments.bases() == [0, 20]
        assert [r.offset for r in log.records()] == kept + list(range(20, 30))
        assert [r.value for r in log.records()][:4] == [b"3", b"7", b"12", b"19"]
        assert read_offset(log, 5) is None and read_offset(log, 7) is not None
        if not clean:
            break
        assert log.last_recovery.swapped_in == ["00000000000000000000.log.swap"]  # type: ignore[union-attr]
        assert not [n for n in os.listdir(directory) if n.endswith(".swap")]
        assert not (directory / "00000000000000000010.log").exists()
        log.close()
    log.close()
    indexes_match_kafka(directory, 1)


def test_cleaned_files_are_deleted_with_the_swaps_of_the_same_operation(tmp_path: Path) -> None:
    """A split that crashed with one output renamed .swap and the other still .cleaned: both go
    (Kafka's KAFKA-6264 rule) and the original segments stay as they were."""
    directory = tmp_path / "t-0"
    three_segments(directory)
    records_before = None
    with Log.open(directory) as reader:
        records_before = all_records(reader)
    (directory / "00000000000000000010.log.cleaned").write_bytes(batch(1, base_offset=10))
    (directory / "00000000000000000015.log.swap").write_bytes(batch(1, base_offset=15))
    (directory / "00000000000000000010.index.cleaned").write_bytes(b"")
    log = open_log(directory, clean=False)
    assert not [n for n in os.listdir(directory) if n.endswith((".swap", ".cleaned"))]
    assert log.segments.bases() == [0, 10, 20]
    assert all_records(log) == records_before
    log.close()


@pytest.mark.allow_warnings("damage on purpose: recovery and readers say what they cut or skip")
def test_read_only_opens_ignore_leftovers_and_change_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    three_segments(directory)
    # a .swap at or above a .cleaned file is a swap never committed (Kafka's recovery deletes it); what a
    # read-only open makes of a committed one is tests/storage/test_swap_view.py's
    (directory / "00000000000000000010.log.swap").write_bytes(batch(1, base_offset=13))
    (directory / "00000000000000000010.log.cleaned").write_bytes(b"x")
    (directory / "00000000000000000040.log.deleted").write_bytes(b"x")
    (directory / "00000000000000000050.index").write_bytes(b"")
    with open(directory / "00000000000000000020.log", "ab") as f:
        f.write(b"garbage after the last batch")
    before = tree_fingerprint(directory)
    with Log.open(directory) as log:
        assert log.segments.bases() == [0, 10, 20]
        assert log.log_end_offset == 30  # the garbage is not taken for data
        assert [r.offset for r in log.records(0, 29)] == list(range(30))
        with pytest.raises(CorruptRecordError):  # but a read that meets it says so
            list(log.records())
        assert log.offset_for_timestamp(1015) == (15, 1015)
        log.refresh()
    assert tree_fingerprint(directory) == before


# -- cutting what is not valid --------------------------------------------------------------------------


@pytest.mark.allow_warnings("damage on purpose: recovery and readers say what they cut or skip")
def test_corrupt_log(tmp_path: Path) -> None:
    """Kafka's testCorruptLog: random bytes after the active segment's data and index; recovery from
    offset 50 brings back exactly what was appended."""
    rng = random.Random(11)
    cfg = config(segment_bytes=1000, index_interval_bytes=1, max_message_bytes=64 * 1024)
    for round_ in range(10):
        directory = tmp_path / f"t-{round_}"
        log = open_log(directory, cfg)
        n = 50 + rng.randrange(50)
        for _ in range(n):
            log.append_records([record(ts=1000)])
        expected = all_records(log)
        active = log.active_segment
        log.close()
        assert active is not None
        for path in (active.offset_index.path, active.log_path):
            with open(path, "ab") as f:
                f.write(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 1025))))
        log = open_log(directory, cfg, clean=False, recovery_point=50, recover_all=True)  # kafkafs recover
        assert log.log_end_offset == n
        assert all_records(log) == expected
        log.close()


@pytest.mark.allow_warnings("damage on purpose: recovery and readers say what they cut or skip")
def test_recovery_cuts_a_half_written_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_records([record()] * 3)
    log.flush()
    active = log.active_segment
    assert active is not None
    good = active.size
    crash(log)
    torn = encode_batch([(1, None, b"torn" * 50, ())], base_offset=3)
    for cut in (5, 17, 61, len(torn) - 1):
        with open(active.log_path, "ab") as f:
            f.write(torn[:cut])
        log = open_log(tmp_path / "t-0", clean=False)
        assert log.last_recovery.truncated_bytes == cut  # type: ignore[union-attr]
        assert active.log_path.stat().st_size == good and log.log_end_offset == 3
        crash(log)
    log = open_log(tmp_path / "t-0", clean=False)
    assert log.append_records([record(b"after")]).first_offset == 3
    assert [r.offset for r in log.records()] == [0, 1, 2, 3]
    log.close()


@pytest.mark.allow_warnings("damage on purpose: recovery and readers say what they cut or skip")
def test_recovery_cuts_a_bad_crc_and_deletes_the_segments_after_it(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    three_segments(directory)
    path = directory / "00000000000000000010.log"
    data = bytearray(path.read_bytes())
    position, _base, _last, size, _ts = headers_of(bytes(data))[4]  # the batch of offset 14
    data[position + size - 3] ^= 0x55  # a byte of its record: the CRC no longer matches
    path.write_bytes(bytes(data))
    # a writer that was not asked to recover cuts no whole batch: it refuses the partition, untouched
    before = {p.name: p.read_bytes() for p in directory.iterdir()}
    with pytest.raises(NeedsRecovery, match=f"position {position}: CRC mismatch.*every later segment"):
        open_log(directory, clean=False, recovery_point=0)
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == before
    log = open_log(directory, clean=False, recovery_point=0, recover_all=True)  # kafkafs recover
    report = log.last_recovery
    assert report.truncated_bytes == len(data) - position  # type: ignore[union-attr]
    assert report.deleted_segments == ["00000000000000000020.log"]  # type: ignore[union-attr]
    assert log.segments.bases() == [0, 10]
    assert log.log_end_offset == 14
    assert [r.offset for r in log.records()] == list(range(14))
    assert not (directory / "00000000000000000020.log").exists()
    log.append_records([record()])
    assert log.log_end_offset == 15
    log.close()


@pytest.mark.allow_warnings("damage on purpose: recovery and readers say what they cut or skip")
def test_recovery_cuts_garbage_after_the_last_batch(tmp_path: Path) -> None:
    rng = random.Random(5)
    tails = [
        bytes(rng.randrange(256) for _ in range(300)),
        bytes(4096),  # zeros, as a file system leaves a file extended but not written
        struct.pack(">qi", 3, 10**8) + bytes(50),  # a header promising more than there is
        struct.pack(">qiibI", 3, 100, 0, 7, 0) + bytes(100),  # an unknown magic
    ]
    for i, tail in enumerate(tails):
        directory = tmp_path / f"t-{i}"
        log_path, good = three_records_closed(directory)
        with open(log_path, "ab") as f:
            f.write(tail)
        if i in (1, 2):  # a torn tail (zeros, a batch shorter than its header says): any writer cuts it
            log = open_log(directory, clean=False)
        else:  # whole garbage: only a recovery asked for cuts it (kafkafs recover)
            with pytest.raises(NeedsRecovery):
                open_log(directory, clean=False)
            assert log_path.stat().st_size == good + len(tail), i
            log = open_log(directory, clean=False, recover_all=True)
        assert log_path.stat().st_size == good, i
        assert log.log_end_offset == 3
        log.close()


@pytest.mark.allow_warnings("damage on purpose: recovery says the batch it keeps")
def test_recovery_keeps_a_last_batch_whose_offsets_go_backwards_as_kafka_does(tmp_path: Path) -> None:
    """review11 R11-9 (SPEC §9): Kafka's recovery checks no offset against the batch before (only sizes,
    CRCs and offsets that fit the segment): it keeps the batch, and its log end offset is that batch's
    next offset (``readNextOffset``). kafkafs cut it (a whole batch: a plain writer refused to open)."""
    directory = tmp_path / "t-0"
    log_path, good = three_records_closed(directory)
    with open(log_path, "ab") as f:
        f.write(batch(1, base_offset=1))  # a whole batch whose offsets go backwards (1 after 2)
    for recover_all in (False, True):
        log = open_log(directory, clean=False, recover_all=recover_all)
        assert log_path.stat().st_size > good
        assert log.log_end_offset == 2
        log.close()


def test_recovery_starts_at_the_recovery_point(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    three_segments(directory)
    log = open_log(directory, clean=False, recovery_point=15)
    assert log.last_recovery.recovered_segments == [  # type: ignore[union-attr]
        "00000000000000000010.log",
        "00000000000000000020.log",
    ]
    assert log.recovery_point == 15
    log.close()
    log = open_log(directory, clean=True)
    assert log.last_recovery.recovered_segments == [] and log.recovery_point == 30  # type: ignore[union-attr]
    log.close()


@pytest.mark.allow_warnings("damage on purpose: recovery and readers say what they cut or skip")
def test_recovery_is_idempotent(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    crashed_with_a_tail(directory, 50, b"\x01" * 33)
    first = open_log(directory, clean=False)
    assert first.last_recovery.truncated_bytes == 33  # type: ignore[union-attr]
    records = all_records(first)
    crash(first)
    again = open_log(directory, clean=False)
    assert again.last_recovery.truncated_bytes == 0 and not again.last_recovery.deleted_segments  # type: ignore[union-attr]
    assert all_records(again) == records
    again.close()


def test_a_crash_leaves_preallocated_indexes_that_recovery_trims(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = filled(directory, n=40, cfg=config(segment_bytes=2000, index_interval_bytes=100))
    active = log.active_segment
    assert active is not None and active.offset_index.length == config().segment_index_bytes
    crash(log)
    log = open_log(directory, config(segment_bytes=2000, index_interval_bytes=100), clean=False)
    sealed = [s for s in log.segments if s is not log.active_segment]
    assert sealed and all(s.offset_index.path.stat().st_size == 8 * s.offset_index.entries for s in sealed)
    log.close()
    indexes_match_kafka(directory, 100)


def test_recovery_keeps_a_batch_whose_offsets_do_not_fit_the_segment(tmp_path: Path) -> None:
    """Kafka would split such a segment (old, compacted data); kafkafs keeps it whole, unindexed."""
    directory = tmp_path / "t-0"
    directory.mkdir()
    far = 2**31 + 5
    write_segment(directory, 0, [batch([b"a"], base_offset=0), batch([b"b"], base_offset=far)])
    log = open_log(directory, clean=False)
    assert log.last_recovery.truncated_bytes == 0  # type: ignore[union-attr]
    assert [(r.offset, r.value) for r in log.records()] == [(0, b"a"), (far, b"b")]
    assert log.log_end_offset == far + 1
    log.append_records([record(b"c")])
    assert log.segments.bases() == [0, far + 1]
    log.close()


@pytest.mark.allow_warnings("damage on purpose: recovery and readers say what they cut or skip")
def test_a_writable_open_that_does_not_know_the_shutdown_recovers(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    crashed_with_a_tail(directory, 10, bytes(20))  # a torn tail, as a crash leaves it: any writer's recovery cuts it
    again = Log.open(directory, config(segment_bytes=200, index_interval_bytes=1), writable=True)
    assert again.last_recovery.truncated_bytes == 20  # type: ignore[union-attr]
    again.close()


def test_an_empty_segment_left_by_a_crash_after_a_roll(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory)
    log.append_records([record()] * 4)
    log.roll()
    crash(log)
    for ext in (".index", ".timeindex"):
        (directory / f"{4:020d}{ext}").unlink()
    log = open_log(directory, clean=False)
    assert log.segments.bases() == [0, 4] and log.log_end_offset == 4
    assert log.append_records([record()]).first_offset == 4
    log.close()


def test_segments_written_directly_with_gaps_between_them(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    directory.mkdir()
    template = bytearray(batch(2, ts=5000))
    for base in (0, 100, 250):
        data = bytearray(template)
        set_base_offset(data, 0, base)
        write_segment(directory, base, [bytes(data)])
    log = open_log(directory, clean=False)
    assert [r.offset for r in log.records()] == [0, 1, 100, 101, 250, 251]
    assert read_offset(log, 50) is None and read_offset(log, 101) is not None
    assert log.log_end_offset == 252
    log.close()
