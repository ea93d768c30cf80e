"""Memory-mapped indexes: Kafka's OffsetIndexTest and TimeIndexTest scenarios, live files, real files."""

from __future__ import annotations

import os
import random
import shutil
import struct
import threading
from pathlib import Path

import pytest

from kafkafs.errors import CorruptRecordError, InvalidInput, KafkafsError, ReadOnlyError
from kafkafs.format.index import NO_TIMESTAMP
from kafkafs.storage.index import DEFAULT_MAX_INDEX_SIZE
from kafkafs.storage.offset_index import OffsetIndex, OffsetPosition
from kafkafs.storage.time_index import TimeIndex, TimestampOffset

from ..conftest import FIXTURES

PARTITION = FIXTURES / "kafka-logs-a" / "__consumer_offsets-12"
BASE = 45


@pytest.fixture
def index(tmp_path: Path):
    idx = OffsetIndex(tmp_path / "00000000000000000045.index", BASE, max_index_size=30 * 8)
    yield idx
    idx.close()


@pytest.fixture
def tindex(tmp_path: Path):
    idx = TimeIndex(tmp_path / "00000000000000000045.timeindex", BASE, max_index_size=30 * 12)
    yield idx
    idx.close()


def _monotonic(rng: random.Random, base: int, n: int) -> list[int]:
    out, last = [], base
    for _ in range(n):
        last += rng.randrange(1, 16)
        out.append(last)
    return out


# -- OffsetIndexTest ------------------------------------------------------------------------------------


def test_random_lookup(index: OffsetIndex) -> None:
    assert index.lookup(92) == OffsetPosition(BASE, 0)  # nothing there: position 0
    rng = random.Random(1)
    offsets = _monotonic(rng, BASE + 1, index.max_entries)
    positions = _monotonic(rng, 0, index.max_entries)
    for o, p in zip(offsets, positions, strict=True):
        index.append(o, p)
    for o, p in zip(offsets, positions, strict=True):
        assert index.lookup(o) == OffsetPosition(o, p)
    for target in rng.sample(range(BASE, offsets[-1]), 30):
        i = max((i for i, o in enumerate(offsets) if o <= target), default=None)
        expected = OffsetPosition(BASE, 0) if i is None else OffsetPosition(offsets[i], positions[i])
        assert index.lookup(target) == expected


def test_lookup_extreme_cases(index: OffsetIndex) -> None:
    assert index.lookup(BASE) == OffsetPosition(BASE, 0)
    for i in range(index.max_entries):
        index.append(BASE + i + 1, i)
    assert index.lookup(BASE) == OffsetPosition(BASE, 0)
    assert index.lookup(BASE + index.max_entries) == OffsetPosition(
        BASE + index.max_entries, index.max_entries - 1
    )
    assert index.lookup(BASE - 10) == OffsetPosition(BASE, 0)
    assert index.lookup(BASE + 2**33) == OffsetPosition(BASE + index.max_entries, index.max_entries - 1)


def test_entry(index: OffsetIndex) -> None:
    for i in range(index.max_entries):
        index.append(BASE + i, i)
    for i in range(index.max_entries):
        assert index.entry(i) == OffsetPosition(BASE + i, i)
    assert list(index) == [OffsetPosition(BASE + i, i) for i in range(30)]


def test_entry_overflow(index: OffsetIndex) -> None:
    with pytest.raises(InvalidInput):
        index.entry(0)


def test_append_too_many(index: OffsetIndex) -> None:
    for i in range(index.max_entries):
        index.append(BASE + i + 1, i)
    assert index.is_full()
    with pytest.raises(InvalidInput, match="full"):
        index.append(BASE + index.max_entries + 1, 1)


def test_append_out_of_order(index: OffsetIndex) -> None:
    index.append(51, 0)
    with pytest.raises(InvalidInput):
        index.append(50, 1)
    with pytest.raises(InvalidInput):
        index.append(51, 1)  # equal is out of order too


def test_append_overflow(index: OffsetIndex) -> None:
    with pytest.raises(InvalidInput):
        index.append(BASE - 1, 0)
    with pytest.raises(InvalidInput):
        index.append(BASE + 2**31, 0)
    assert index.can_append_offset(BASE + 2**31 - 1)
    assert not index.can_append_offset(BASE + 2**31)
    with pytest.raises(InvalidInput):
        index.append(BASE + 1, 2**31)
    assert index.entries == 0


def test_fetch_upper_bound_offset(index: OffsetIndex) -> None:
    first, second = OffsetPosition(BASE, 0), OffsetPosition(BASE + 1, 10)
    third, fourth = OffsetPosition(BASE + 2, 23), OffsetPosition(BASE + 3, 37)
    assert index.fetch_upper_bound_offset(first, 5) is None
    for e in (first, second, third, fourth):
        index.append(e.offset, e.position)
    assert index.fetch_upper_bound_offset(first, 5) == second
    assert index.fetch_upper_bound_offset(first, 10) == second
    assert index.fetch_upper_bound_offset(first, 23) == third
    assert index.fetch_upper_bound_offset(first, 22) == third
    assert index.fetch_upper_bound_offset(second, 24) == fourth
    assert index.fetch_upper_bound_offset(fourth, 1) is None
    assert index.fetch_upper_bound_offset(first, 200) is None
    assert index.fetch_upper_bound_offset(second, 200) is None


def test_reopen(index: OffsetIndex) -> None:
    first, second = OffsetPosition(51, 0), OffsetPosition(52, 1)
    index.append(*first)
    index.append(*second)
    index.close()
    assert index.path.stat().st_size == 16  # trimmed on close
    again = OffsetIndex(index.path, BASE)
    try:
        assert again.lookup(51) == first
        assert again.lookup(52) == second
        assert again.last_offset == 52
        assert again.entries == 2
        with pytest.raises(InvalidInput, match="full"):  # a trimmed index has no room
            again.append(53, 1)
    finally:
        again.close()
    ro = OffsetIndex(index.path, BASE, writable=False)
    assert ro.entries == 2
    with pytest.raises(ReadOnlyError):
        ro.append(53, 1)
    ro.close()


def test_truncate(tmp_path: Path) -> None:
    with OffsetIndex(tmp_path / "0.index", 0, max_index_size=10 * 8) as idx:
        idx.truncate()
        for i in range(1, 10):
            idx.append(i, i)
        idx.truncate_to(12)
        assert idx.lookup(10) == OffsetPosition(9, 9)  # truncating past the end changes nothing
        assert idx.last_offset == 9
        idx.append(10, 10)
        idx.truncate_to(10)
        assert idx.lookup(10) == OffsetPosition(9, 9)
        assert idx.last_offset == 9
        idx.append(10, 10)
        idx.truncate_to(9)
        assert idx.lookup(10) == OffsetPosition(8, 8)
        assert idx.last_offset == 8
        idx.append(9, 9)
        idx.truncate_to(5)
        assert idx.lookup(10) == OffsetPosition(4, 4)
        assert idx.last_offset == 4
        idx.append(5, 5)
        idx.truncate()
        assert idx.entries == 0
        assert idx.last_offset == 0
        idx.append(0, 0)
        idx.truncate_to(-3)
        assert idx.entries == 0


def test_truncate_zeroes_what_it_drops(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    with OffsetIndex(path, 0, max_index_size=80) as idx:
        for i in range(1, 8):
            idx.append(i, i * 100)
        idx.truncate_to(4)
        assert path.read_bytes()[24:] == bytes(80 - 24)
        assert idx.entries == 3


def test_close_handler_then_use_reopens(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "0.index", 0, max_index_size=80)
    idx.append(3, 30)
    idx.close_handler()
    assert not idx.is_open
    assert idx.lookup(5) == OffsetPosition(3, 30)  # a preallocated file: the count is re-derived
    idx.close()
    with pytest.raises(KafkafsError):
        idx.lookup(1)


def test_sanity_last_offset_equal_to_base_offset(tmp_path: Path) -> None:
    with OffsetIndex(tmp_path / "20.index", 20, max_index_size=80) as idx:
        idx.append(20, 0)
        idx.sanity_check()
        idx.sanity_check(full=False)


# -- TimeIndexTest --------------------------------------------------------------------------------------


def _append_entries(idx: TimeIndex, n: int) -> None:
    for i in range(1, n + 1):
        idx.maybe_append(i * 10, i * 10 + BASE)


def test_time_lookup(tindex: TimeIndex) -> None:
    assert tindex.lookup(100) == TimestampOffset(-1, BASE)
    _append_entries(tindex, tindex.max_entries - 1)
    assert tindex.lookup(9) == TimestampOffset(-1, BASE)
    assert tindex.lookup(25) == TimestampOffset(20, 65)
    assert tindex.lookup(30) == TimestampOffset(30, 75)
    assert tindex.ceiling(25) == TimestampOffset(30, 75)
    assert tindex.ceiling(30) == TimestampOffset(30, 75)
    assert tindex.ceiling(0) == TimestampOffset(10, 55)
    assert tindex.ceiling(291) is None


def test_time_entry(tindex: TimeIndex) -> None:
    _append_entries(tindex, tindex.max_entries - 1)
    assert tindex.entry(0) == TimestampOffset(10, 55)
    assert tindex.entry(1) == TimestampOffset(20, 65)
    assert tindex.entry(2) == TimestampOffset(30, 75)
    assert tindex.entry(3) == TimestampOffset(40, 85)


def test_time_entry_overflow(tindex: TimeIndex) -> None:
    with pytest.raises(InvalidInput):
        tindex.entry(0)


def test_time_truncate(tindex: TimeIndex) -> None:
    _append_entries(tindex, tindex.max_entries - 1)
    tindex.truncate()
    assert tindex.entries == 0
    _append_entries(tindex, tindex.max_entries - 1)
    tindex.truncate_to(10 + BASE)
    assert tindex.entries == 0
    _append_entries(tindex, 5)
    tindex.truncate_to(30 + BASE)  # drops the entries for offsets 75, 85, 95
    assert tindex.entries == 2
    assert tindex.last_entry == TimestampOffset(20, 65)
    tindex.truncate_to(66)
    assert tindex.entries == 2


def test_time_truncate_with_repeated_offsets(tindex: TimeIndex) -> None:
    for ts, off in [(10, 50), (20, 50), (30, 60), (40, 60), (50, 70)]:
        tindex.maybe_append(ts, off)
    tindex.truncate_to(60)
    assert list(tindex) == [TimestampOffset(10, 50), TimestampOffset(20, 50)]


def test_time_append(tindex: TimeIndex) -> None:
    _append_entries(tindex, tindex.max_entries - 1)
    with pytest.raises(InvalidInput, match="full"):
        tindex.maybe_append(10000, 1000)
    with pytest.raises(InvalidInput):
        tindex.maybe_append(10000, (tindex.max_entries - 2) * 10, skip_full_check=True)
    tindex.maybe_append(10000, 1000, skip_full_check=True)  # the slot kept for the roll entry
    assert tindex.entries == tindex.max_entries
    with pytest.raises(InvalidInput):
        tindex.maybe_append(10001, 1001, skip_full_check=True)  # no room at all


def test_time_append_rules(tindex: TimeIndex) -> None:
    tindex.maybe_append(-1, BASE)  # NO_TIMESTAMP is never indexed
    assert tindex.entries == 0
    tindex.maybe_append(100, BASE + 5)
    tindex.maybe_append(100, BASE + 9)  # same timestamp: skipped (roll or close repeating it)
    assert list(tindex) == [TimestampOffset(100, BASE + 5)]
    with pytest.raises(InvalidInput):
        tindex.maybe_append(99, BASE + 10)  # the caller must keep timestamps monotonic
    with pytest.raises(InvalidInput):
        tindex.maybe_append(200, BASE + 4)
    tindex.maybe_append(200, BASE + 5)  # the same offset with a larger timestamp is fine
    assert tindex.entries == 2


def test_time_index_stays_monotonic_with_out_of_order_timestamps(tindex: TimeIndex) -> None:
    """Batches arrive with timestamps out of order; the index holds the running maximum, as
    LogSegment feeds it (maxTimestampSoFar and the offset of the batch that set it)."""
    batches = [
        (BASE + 2, 100),
        (BASE + 5, 90),
        (BASE + 9, 150),
        (BASE + 12, 120),
        (BASE + 20, 150),
        (BASE + 25, 170),
    ]
    best = (NO_TIMESTAMP, BASE)
    for last_offset, max_ts in batches:
        if max_ts > best[0]:
            best = (max_ts, last_offset)
        tindex.maybe_append(*best)
    assert list(tindex) == [TimestampOffset(100, 47), TimestampOffset(150, 54), TimestampOffset(170, 70)]
    tindex.sanity_check()
    assert tindex.lookup(160) == TimestampOffset(150, 54)


def test_time_sanity_check(tmp_path: Path, tindex: TimeIndex) -> None:
    tindex.sanity_check()
    _append_entries(tindex, 5)
    tindex.sanity_check()
    tindex.close()
    good = tindex.path.read_bytes()
    assert len(good) == 60

    def check(data: bytes, full: bool) -> None:
        path = tmp_path / "check.timeindex"
        path.write_bytes(data)
        with TimeIndex(path, BASE, writable=False) as idx:
            idx.sanity_check(full=full)

    for full in (True, False):
        check(good, full)
        with pytest.raises(CorruptRecordError, match="offset"):  # last offset below the base offset
            check(good[:-4] + struct.pack(">I", 2**31 + 5), full)
        with pytest.raises(CorruptRecordError, match="timestamp"):  # last timestamp below the first
            check(good[:-12] + struct.pack(">qI", 9, 50), full)
        with pytest.raises(CorruptRecordError, match="multiple") as err:
            check(good[:-1], full)
        assert err.value.file is not None and err.value.file.endswith("check.timeindex")
    with pytest.raises(CorruptRecordError, match="timestamp"):  # only the full check looks inside
        check(good[:12] + good[24:36] + good[12:24] + good[36:], True)
    check(good[:12] + good[24:36] + good[12:24] + good[36:], False)


def test_offset_sanity_check(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    path.write_bytes(struct.pack(">IIII", 5, 100, 9, 200))
    with OffsetIndex(path, 0, writable=False) as idx:
        idx.sanity_check(log_size=201)
        with pytest.raises(CorruptRecordError, match="past the end"):
            idx.sanity_check(log_size=200)
    path.write_bytes(struct.pack(">IIII", 5, 100, 5, 200))
    with (
        OffsetIndex(path, 0, writable=False) as idx,
        pytest.raises(CorruptRecordError, match="relative offset"),
    ):
        idx.sanity_check()


def test_time_is_full(tindex: TimeIndex) -> None:
    assert not tindex.is_full()
    _append_entries(tindex, tindex.max_entries - 1)
    assert tindex.is_full()


def test_time_last_entry(tindex: TimeIndex) -> None:
    assert tindex.last_entry == TimestampOffset(NO_TIMESTAMP, BASE)
    tindex.maybe_append(1, 1 + BASE)
    assert tindex.last_entry == TimestampOffset(1, BASE + 1)


def test_time_resize(tindex: TimeIndex) -> None:
    assert not tindex.resize(30 * 12)
    assert tindex.resize(15 * 12)
    assert tindex.max_entries == 15
    assert tindex.resize(60 * 12 + 5)
    assert tindex.max_entries == 60
    assert tindex.path.stat().st_size == 720
    _append_entries(tindex, 3)
    with pytest.raises(InvalidInput):
        tindex.resize(2 * 12)


def test_time_entry_size(tindex: TimeIndex) -> None:
    assert tindex.entry_size == 12
    assert OffsetIndex("x", 0).entry_size == 8


# -- files: creation, preallocation, trimming, renames --------------------------------------------------


def test_lazy_creation_and_preallocation(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.index"
    idx = OffsetIndex(path, 100, max_index_size=1000 * 8 + 5)
    assert not path.exists() and not idx.is_open
    assert idx.entries == 0
    assert path.stat().st_size == 8000  # rounded down to whole entries
    assert idx.max_entries == 1000
    idx.append(110, 4200)
    idx.flush()
    data = path.read_bytes()
    assert data[:8] == struct.pack(">II", 10, 4200) and data[8:] == bytes(7992)
    idx.trim_to_valid_size()
    assert path.stat().st_size == 8
    assert idx.is_full()
    idx.reset()
    assert path.stat().st_size == 8000 and idx.entries == 0
    idx.close()
    assert path.stat().st_size == 0


def test_default_size_is_segment_index_bytes(tmp_path: Path) -> None:
    with TimeIndex(tmp_path / "0.timeindex", 0) as idx:
        assert idx.length == DEFAULT_MAX_INDEX_SIZE - DEFAULT_MAX_INDEX_SIZE % 12
        assert idx.max_entries == 873813


def test_bad_max_index_size(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput):
        _ = OffsetIndex(tmp_path / "0.index", 0, max_index_size=7).entries
    assert not (tmp_path / "0.index").exists()


def test_reopen_after_a_crash_finds_the_entries(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    idx = OffsetIndex(path, 0, max_index_size=4096)
    for i in range(1, 20):
        idx.append(i * 3, i * 4096)
    idx.flush()
    # no close: the file stays preallocated, as after a crash
    again = OffsetIndex(path, 0, max_index_size=4096)
    assert again.entries == 19
    assert again.lookup(31) == OffsetPosition(30, 10 * 4096)
    again.append(60, 20 * 4096)
    again.close()
    assert path.stat().st_size == 20 * 8
    idx.close_handler()


def test_never_opened_close_creates_nothing(tmp_path: Path) -> None:
    idx = TimeIndex(tmp_path / "0.timeindex", 0)
    idx.close()
    assert not (tmp_path / "0.timeindex").exists()


def test_rename_and_delete(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    idx = OffsetIndex(path, 0, max_index_size=80)
    idx.append(5, 50)
    deleted = tmp_path / "00000000000000000000.index.deleted"
    idx.rename(deleted)
    assert idx.path == deleted and deleted.exists() and not path.exists()
    idx.append(9, 90)  # the map survives the rename
    assert idx.lookup(9) == OffsetPosition(9, 90)
    assert idx.delete()
    assert not deleted.exists()
    with pytest.raises(KafkafsError):
        _ = idx.entries
    lazy = OffsetIndex(tmp_path / "1.index", 1)
    lazy.rename(tmp_path / "1.index.swap")  # nothing on disk yet: not an error
    assert lazy.path.name == "1.index.swap"
    assert not lazy.delete()


# -- read-only, and a file a live broker is writing -----------------------------------------------------


def test_read_only_missing_file_is_empty_until_it_appears(tmp_path: Path) -> None:
    path = tmp_path / "7.index"
    ro = OffsetIndex(path, 7, writable=False)
    assert ro.entries == 0
    assert ro.lookup(100) == OffsetPosition(7, 0)
    assert not path.exists()
    with OffsetIndex(path, 7, max_index_size=80) as w:
        w.append(9, 100)
        assert ro.refresh() == 1
        assert ro.lookup(100) == OffsetPosition(9, 100)
    ro.close()


def test_read_only_follows_a_live_writer(tmp_path: Path) -> None:
    path = tmp_path / "0.timeindex"
    writer = TimeIndex(path, 1000, max_index_size=12 * 100)
    writer.maybe_append(10, 1005)
    reader = TimeIndex(path, 1000, writable=False)
    assert reader.entries == 1
    assert reader.length == 1200
    for i in range(2, 40):
        writer.maybe_append(i * 10, 1000 + i * 5)
    assert reader.entries == 1  # until asked to look again
    assert reader.refresh() == 39
    assert reader.lookup(255) == TimestampOffset(250, 1125)
    assert reader.last_entry == TimestampOffset(390, 1195)
    assert reader.refresh() == 39
    writer.maybe_append(400, 1200, skip_full_check=True)
    writer.close()  # roll: the broker trims the file under the reader
    assert path.stat().st_size == 40 * 12
    assert reader.lookup(395) == TimestampOffset(390, 1195)  # the old snapshot stays readable
    assert reader.refresh() == 40
    assert reader.length == 480
    reader.sanity_check()
    with pytest.raises(ReadOnlyError):
        reader.maybe_append(500, 1300)
    with pytest.raises(ReadOnlyError):
        reader.truncate_to(1100)
    with pytest.raises(ReadOnlyError):
        reader.resize(12)
    reader.flush()  # nothing to do
    reader.close()
    assert path.stat().st_size == 480  # a reader never resizes


def test_read_only_broker_file_with_half_written_entry(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    data = bytearray(8 * 1000)
    struct.pack_into(">II", data, 0, 5, 4100)
    struct.pack_into(">II", data, 8, 11, 8300)
    struct.pack_into(">I", data, 16, 17)  # relative offset written, position not yet
    path.write_bytes(bytes(data))
    with OffsetIndex(path, 0, writable=False) as ro:
        assert ro.entries == 2
        with path.open("r+b") as f:
            f.seek(20)
            f.write(struct.pack(">I", 12500))
        assert ro.refresh() == 3
        assert ro.lookup(20) == OffsetPosition(17, 12500)


def test_read_only_real_files() -> None:
    log_size = (PARTITION / "00000000000000000000.log").stat().st_size
    with OffsetIndex(PARTITION / "00000000000000000000.index", 0, writable=False) as idx:
        assert idx.entries == 14 and idx.length == 112
        idx.sanity_check(log_size=log_size)
        entries = list(idx)
        assert entries[0] == OffsetPosition(60, 4388)
        assert entries[-1] == OffsetPosition(830, 61784)
        assert idx.lookup(59) == OffsetPosition(0, 0)
        assert idx.lookup(60) == OffsetPosition(60, 4388)
        assert idx.lookup(500) == OffsetPosition(475, 35296)
        assert idx.lookup(10_000) == OffsetPosition(830, 61784)
        assert idx.fetch_upper_bound_offset(OffsetPosition(60, 4388), 5000) == OffsetPosition(180, 13228)
    with TimeIndex(PARTITION / "00000000000000000000.timeindex", 0, writable=False) as tidx:
        assert tidx.entries == 15
        tidx.sanity_check()
        times = list(tidx)
        assert [t.offset for t in times[:14]] == [e.offset for e in entries]
        assert times[-1] == TimestampOffset(1721659255114, 861)
        assert tidx.lookup(times[3].timestamp + 1) == times[3]
        assert tidx.ceiling(times[3].timestamp + 1) == times[4]
    with OffsetIndex(PARTITION / "00000000000000000862.index", 862, writable=False) as empty:
        assert empty.entries == 0 and empty.lookup(900) == OffsetPosition(862, 0)
    with TimeIndex(PARTITION / "00000000000000000862.timeindex", 862, writable=False) as roll:
        assert list(roll) == [TimestampOffset(0x191_2205_A714, 868)]


def test_real_index_entries_point_at_batch_ends() -> None:
    log = (PARTITION / "00000000000000000000.log").read_bytes()
    with OffsetIndex(PARTITION / "00000000000000000000.index", 0, writable=False) as idx:
        for offset, position in idx:
            assert position < len(log)
            base, length = struct.unpack_from(">qi", log, position)
            (last_delta,) = struct.unpack_from(">i", log, position + 23)
            assert base + last_delta == offset
            assert position + 12 + length <= len(log)


def test_real_files_as_a_live_broker_had_them(tmp_path: Path) -> None:
    """The same entries in a preallocated, zero-filled file: read-only and writable opens agree."""
    for name, cls, n in (
        ("00000000000000000000.index", OffsetIndex, 14),
        ("00000000000000000000.timeindex", TimeIndex, 15),
    ):
        copy = tmp_path / name
        data = (PARTITION / name).read_bytes()
        copy.write_bytes(
            data + bytes(10 * 1024 * 1024 - len(data) - (10 * 1024 * 1024) % (8 if n == 14 else 12))
        )
        with cls(copy, 0, writable=False) as ro:
            assert ro.entries == n
            assert ro.length > 10_000_000
        with cls(copy, 0) as rw:
            assert rw.entries == n
        assert copy.read_bytes() == data  # closing a writable index trims it to the broker's sealed file
    assert sorted(os.listdir(PARTITION)) == sorted(os.listdir(PARTITION))  # fixtures untouched


def test_writable_copy_of_real_files(tmp_path: Path) -> None:
    shutil.copy(PARTITION / "00000000000000000000.index", tmp_path)
    with OffsetIndex(tmp_path / "00000000000000000000.index", 0, max_index_size=4096) as idx:
        assert idx.entries == 14 and idx.is_full()
        assert idx.resize(4096)  # becoming active again
        idx.append(900, 65000)
        idx.truncate_to(830)
        assert idx.entries == 13 and idx.last_offset == 770
    assert (tmp_path / "00000000000000000000.index").stat().st_size == 13 * 8


# -- threads --------------------------------------------------------------------------------------------


def test_lookups_race_appends_and_resizes(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "0.index", 0, max_index_size=64)
    stop = threading.Event()
    errors: list[str] = []

    def writer() -> None:
        for i in range(1, 3000):
            if idx.is_full():
                idx.resize(idx.length * 2)
            idx.append(i * 2, i * 10)
        stop.set()

    def reader() -> None:
        rng = random.Random(3)
        while not stop.is_set() and not errors:
            target = rng.randrange(0, 6000)
            found = idx.lookup(target)
            if found.offset > target and found != OffsetPosition(0, 0):
                errors.append(f"lookup({target}) = {found}")
            if found.offset and found.position != found.offset * 5:
                errors.append(f"lookup({target}) = {found}: torn entry")

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not errors, errors[:5]
    assert idx.entries == 2999
    assert idx.lookup(5999) == OffsetPosition(5998, 29990)
    idx.close()


def test_read_only_maps_only_the_entries_and_follows_a_shrink(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    writer = OffsetIndex(path, 0, max_index_size=8 * 500)
    for i in range(1, 101):
        writer.append(i, i * 10)
    reader = OffsetIndex(path, 0, writable=False)
    assert reader.entries == 100
    mm = reader._state.mm  # white box: the map must not reach past what a trim keeps
    assert mm is not None and len(mm) == 800
    writer.truncate_to(41)  # follower truncation, then a roll
    writer.close()
    assert path.stat().st_size == 320
    assert reader.refresh() == 40
    assert len(reader._state.mm) == 320
    assert reader.lookup(1000) == OffsetPosition(40, 400)
    reader.close()
