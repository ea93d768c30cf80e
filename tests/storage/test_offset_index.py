"""The ``.index`` (OffsetIndex): Kafka's OffsetIndexTest scenarios."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from kafkafs.errors import InvalidInput, KafkafsError, ReadOnlyError
from kafkafs.storage.offset_index import OffsetIndex, OffsetPosition

from .conftest import BASE, PARTITION, _monotonic  # noqa: F401 (index and tindex are conftest fixtures)

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
    assert idx._state is None  # not opened
    assert idx.lookup(5) == OffsetPosition(3, 30)  # a preallocated file: the count is re-derived
    idx.close()
    with pytest.raises(KafkafsError):
        idx.lookup(1)


def test_sanity_last_offset_equal_to_base_offset(tmp_path: Path) -> None:
    with OffsetIndex(tmp_path / "20.index", 20, max_index_size=80) as idx:
        idx.append(20, 0)
        idx.sanity_check()
        idx.sanity_check(full=False)


