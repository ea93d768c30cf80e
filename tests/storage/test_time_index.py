"""The ``.timeindex`` (TimeIndex): Kafka's TimeIndexTest scenarios."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from kafkafs.errors import CorruptRecordError, InvalidInput
from kafkafs.format.index import NO_TIMESTAMP
from kafkafs.storage.offset_index import OffsetIndex
from kafkafs.storage.time_index import TimeIndex, TimestampOffset

from .conftest import BASE, PARTITION, _monotonic  # noqa: F401 (index and tindex are conftest fixtures)

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


