"""Index entries, the binary searches and the entry-count rule, over plain buffers and real files."""

from __future__ import annotations

import bisect
import mmap
import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkafs.errors import CorruptRecordError, InvalidInput
from kafkafs.format.index import (
    MAX_RELATIVE_OFFSET,
    OFFSET_ENTRY_SIZE,
    OFFSET_INDEX,
    OFFSET_KEY,
    OFFSET_POSITION,
    TIME_ENTRY_SIZE,
    TIME_INDEX,
    TIME_KEY,
    TIME_OFFSET,
    ceiling_slot,
    check_offset_index,
    check_time_index,
    decode_offset_entry,
    decode_time_entry,
    encode_offset_entry,
    encode_time_entry,
    floor_slot,
    live_entry_count,
    round_down_to_entry,
)

from ..conftest import FIXTURES


def valid_entry_count(buf: bytes, layout, known: int = 0) -> int:
    """``live_entry_count`` over a buffer holding a whole index file (or its start)."""
    size = layout.entry_size
    return live_entry_count(len(buf) // size, lambda slot: bytes(buf[slot * size : (slot + 1) * size]), layout, known)

PARTITION = FIXTURES / "kafka-logs-a" / "__consumer_offsets-12"


def offset_index(entries: list[tuple[int, int]], spare: int = 0) -> bytes:
    return b"".join(encode_offset_entry(r, p) for r, p in entries) + bytes(spare * OFFSET_ENTRY_SIZE)


def time_index(entries: list[tuple[int, int]], spare: int = 0) -> bytes:
    return b"".join(encode_time_entry(t, r) for t, r in entries) + bytes(spare * TIME_ENTRY_SIZE)


# -- entries --------------------------------------------------------------------------------------------


def test_entry_layouts_are_kafkas() -> None:
    assert encode_offset_entry(0x3C, 0x1124) == bytes.fromhex("0000003c00001124")
    assert encode_time_entry(0x0190C70216BD, 0x3C) == bytes.fromhex("00000190c70216bd0000003c")
    buf = offset_index([(1, 2), (3, 4)])
    assert decode_offset_entry(buf) == (1, 2)
    assert decode_offset_entry(buf, 1) == (3, 4)
    assert decode_time_entry(time_index([(5, 6), (7, 8)]), 1) == (7, 8)


@pytest.mark.parametrize(
    "call",
    [
        lambda: encode_offset_entry(-1, 0),
        lambda: encode_offset_entry(MAX_RELATIVE_OFFSET + 1, 0),
        lambda: encode_offset_entry(0, 2**31),
        lambda: encode_time_entry(-1, 0),
        lambda: encode_time_entry(0, 2**31),
    ],
)
def test_encode_rejects_what_kafka_cannot_store(call) -> None:  # noqa: ANN001
    with pytest.raises(InvalidInput):
        call()


def test_decode_past_the_end() -> None:
    with pytest.raises(CorruptRecordError) as err:
        decode_offset_entry(bytes(12), 1)
    assert err.value.position == 8
    with pytest.raises(CorruptRecordError):
        decode_time_entry(bytes(11))
    with pytest.raises(CorruptRecordError):
        decode_time_entry(bytes(24), -1)


def test_sizes() -> None:
    assert round_down_to_entry(67, 8) == 64
    assert round_down_to_entry(10 * 1024 * 1024, 12) == 10485756


# -- search ---------------------------------------------------------------------------------------------


def _keys(seed: int, n: int, strict: bool) -> list[int]:
    rng = random.Random(seed)
    keys, k = [], rng.randrange(0, 50)
    for _ in range(n):
        keys.append(k)
        k += rng.randrange(1 if strict else 0, 20)
    return keys


def _expected_floor(keys: list[int], target: int) -> int:
    return bisect.bisect_right(keys, target) - 1


def _expected_ceiling(keys: list[int], target: int) -> int:
    i = bisect.bisect_left(keys, target)
    return -1 if i == len(keys) else i


# sizes around Kafka's warm section (8192 bytes: 1024 offset entries, 682 time entries)
sizes = st.one_of(st.integers(0, 8), st.integers(670, 700), st.integers(1015, 1035), st.integers(0, 2500))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32), n=sizes, data=st.data())
def test_offset_searches_match_bisect(seed: int, n: int, data: st.DataObject) -> None:
    rels = _keys(seed, n, strict=True)
    positions = [r * 3 + 1 for r in rels]
    buf = offset_index(list(zip(rels, positions, strict=True)), spare=data.draw(st.integers(0, 3)))
    hi = (rels[-1] if rels else 0) + 30
    for target in data.draw(st.lists(st.integers(-5, hi), min_size=1, max_size=25)):
        assert floor_slot(buf, n, target, OFFSET_KEY) == _expected_floor(rels, target)
        assert ceiling_slot(buf, n, target, OFFSET_KEY) == _expected_ceiling(rels, target)
        assert ceiling_slot(buf, n, target, OFFSET_POSITION) == _expected_ceiling(positions, target)
        assert floor_slot(buf, n, target, OFFSET_POSITION) == _expected_floor(positions, target)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32), n=sizes, data=st.data())
def test_time_searches_match_bisect(seed: int, n: int, data: st.DataObject) -> None:
    stamps = [1_700_000_000_000 + k for k in _keys(seed, n, strict=True)]
    rels = _keys(seed + 1, n, strict=False)  # offsets may repeat in a time index
    buf = time_index(list(zip(stamps, rels, strict=True)))
    lo = stamps[0] if stamps else 1_700_000_000_000
    hi = (stamps[-1] if stamps else lo) + 30
    targets = data.draw(st.lists(st.integers(lo - 5, hi), min_size=1, max_size=25))
    for target in [*targets, -1, 0, 2**63 - 1]:
        assert floor_slot(buf, n, target, TIME_KEY) == _expected_floor(stamps, target)
        assert ceiling_slot(buf, n, target, TIME_KEY) == _expected_ceiling(stamps, target)
    for target in data.draw(
        st.lists(st.integers(-1, (rels[-1] if rels else 0) + 3), min_size=1, max_size=10)
    ):
        assert floor_slot(buf, n, target, TIME_OFFSET) == _expected_floor(rels, target)
        assert ceiling_slot(buf, n, target, TIME_OFFSET) == _expected_ceiling(rels, target)


def test_search_on_every_buffer_kind() -> None:
    entries = [(r, r * 10 + 1) for r in range(1, 3000, 2)]
    raw = offset_index(entries, spare=5)
    with mmap.mmap(-1, len(raw)) as mm:
        mm[:] = raw
        for buf in (raw, bytearray(raw), memoryview(raw), mm):
            assert floor_slot(buf, len(entries), 0, OFFSET_KEY) == -1
            assert floor_slot(buf, len(entries), 1, OFFSET_KEY) == 0
            assert floor_slot(buf, len(entries), 2000, OFFSET_KEY) == 999
            assert floor_slot(buf, len(entries), 10**9, OFFSET_KEY) == len(entries) - 1
            assert ceiling_slot(buf, len(entries), 12, OFFSET_POSITION) == 1


def test_search_uses_only_the_given_entries() -> None:
    buf = offset_index([(1, 1), (5, 5), (9, 9)])
    assert floor_slot(buf, 2, 100, OFFSET_KEY) == 1
    assert ceiling_slot(buf, 2, 9, OFFSET_KEY) == -1
    assert floor_slot(buf, 0, 100, OFFSET_KEY) == -1
    assert ceiling_slot(b"", 0, 5, TIME_KEY) == -1
    with pytest.raises(InvalidInput):
        floor_slot(buf, 4, 1, OFFSET_KEY)
    with pytest.raises(InvalidInput):
        floor_slot(buf, -1, 1, OFFSET_KEY)


def test_time_floor_and_ceiling_like_kafkas_time_index_test() -> None:
    # TimeIndexTest: entries (i*10, 45+i*10) for i in 1..29, base offset 45
    buf = time_index([(i * 10, i * 10) for i in range(1, 30)])
    assert floor_slot(buf, 29, 9, TIME_KEY) == -1
    assert decode_time_entry(buf, floor_slot(buf, 29, 25, TIME_KEY)) == (20, 20)
    assert decode_time_entry(buf, floor_slot(buf, 29, 30, TIME_KEY)) == (30, 30)
    assert decode_time_entry(buf, ceiling_slot(buf, 29, 25, TIME_KEY)) == (30, 30)
    assert ceiling_slot(buf, 29, 9, TIME_KEY) == 0
    assert ceiling_slot(buf, 29, 291, TIME_KEY) == -1


# -- how many entries are real --------------------------------------------------------------------------


def test_count_sealed_and_preallocated() -> None:
    entries = [(r, r * 100) for r in range(3, 300, 3)]
    sealed = offset_index(entries)
    assert valid_entry_count(sealed, OFFSET_INDEX) == len(entries)
    assert valid_entry_count(offset_index(entries, spare=5000), OFFSET_INDEX) == len(entries)
    assert valid_entry_count(offset_index(entries, spare=1), OFFSET_INDEX) == len(entries)
    stamps = [(1000 + i, i * 7) for i in range(1, 50)]
    assert valid_entry_count(time_index(stamps), TIME_INDEX) == 49
    assert valid_entry_count(time_index(stamps, spare=3000), TIME_INDEX) == 49


def test_count_empty_and_slot_zero() -> None:
    assert valid_entry_count(b"", OFFSET_INDEX) == 0
    assert valid_entry_count(bytes(7), OFFSET_INDEX) == 0
    assert valid_entry_count(bytes(8 * 100), OFFSET_INDEX) == 0  # a fresh preallocated index
    assert valid_entry_count(bytes(12 * 100), TIME_INDEX) == 0
    # one real entry in slot 0, with zeros after it
    assert valid_entry_count(offset_index([(5, 100)], spare=10), OFFSET_INDEX) == 1
    assert valid_entry_count(time_index([(1721659255114, 0)], spare=10), TIME_INDEX) == 1  # a roll entry
    # (0, 0) in slot 0 counts when real entries follow it (Kafka's tests write such indexes)
    assert valid_entry_count(offset_index([(0, 0), (1, 1), (2, 2)], spare=4), OFFSET_INDEX) == 3
    # ... and alone it cannot be told from nothing: documented as empty
    assert valid_entry_count(offset_index([(0, 0)], spare=4), OFFSET_INDEX) == 0
    # a trailing partial byte count does not make an entry
    assert valid_entry_count(offset_index([(5, 100)]) + b"\x00\x01", OFFSET_INDEX) == 1


def test_count_half_written_entries() -> None:
    # the broker stores the relative offset, then the position: a position of 0 is not yet written
    assert valid_entry_count(offset_index([(5, 100), (9, 0)], spare=3), OFFSET_INDEX) == 1
    # the time index stores the timestamp, then the relative offset
    assert valid_entry_count(time_index([(10, 5), (20, 0)], spare=3), TIME_INDEX) == 1
    # a dump-log-style end: relative offset 0 after slot 0
    assert valid_entry_count(offset_index([(5, 100), (0, 300)], spare=3), OFFSET_INDEX) == 1


@given(n=st.integers(0, 400), spare=st.integers(0, 400), known=st.integers(0, 900))
def test_count_with_a_hint(n: int, spare: int, known: int) -> None:
    buf = offset_index([(i + 1, (i + 1) * 50) for i in range(n)], spare=spare)
    assert valid_entry_count(buf, OFFSET_INDEX, known=min(known, n)) == n


def test_count_reads_few_entries() -> None:
    n, spare = 1000, 1_309_000
    buf = offset_index([(i + 1, i + 1) for i in range(n)], spare=spare)
    reads: list[int] = []

    def entry_at(slot: int) -> bytes:
        reads.append(slot)
        return buf[slot * 8 : slot * 8 + 8]

    assert live_entry_count(len(buf) // 8, entry_at, OFFSET_INDEX) == n
    assert len(reads) <= 25
    reads.clear()
    assert live_entry_count(len(buf) // 8, entry_at, OFFSET_INDEX, known=n) == n
    assert len(reads) == 1  # a live file that did not grow: one read


def test_count_short_reads_are_zeros() -> None:
    buf = offset_index([(1, 10), (2, 20)], spare=2)
    assert live_entry_count(4, lambda s: buf[s * 8 : s * 8 + 8] if s < 2 else b"\x00", OFFSET_INDEX) == 2


# -- sanity ---------------------------------------------------------------------------------------------


def test_check_offset_index() -> None:
    assert check_offset_index(b"", 0) is None
    good = offset_index([(1, 10), (5, 20), (9, 30)])
    assert check_offset_index(good, 3) is None
    assert check_offset_index(good, 3, log_size=31) is None
    assert "past the end" in check_offset_index(good, 3, log_size=30)
    assert "relative offset" in check_offset_index(offset_index([(1, 10), (1, 20)]), 2)
    assert "position" in check_offset_index(offset_index([(1, 10), (2, 10)]), 2)
    overflow = struct.pack(">II", 2**31, 10)
    assert "overflows" in check_offset_index(overflow, 1)
    assert "overflows" in check_offset_index(struct.pack(">II", 1, 2**31), 1)
    assert check_offset_index(good + bytes(8), 3) is None  # only the given entries are checked
    with pytest.raises(InvalidInput):
        check_offset_index(good, 4)


def test_check_time_index() -> None:
    assert check_time_index(time_index([(10, 1), (20, 1), (30, 4)]), 3) is None
    assert "timestamp" in check_time_index(time_index([(10, 1), (10, 2)]), 2)
    assert "timestamp" in check_time_index(time_index([(10, 1), (9, 2)]), 2)
    assert "smaller" in check_time_index(time_index([(10, 5), (20, 4)]), 2)
    assert "timestamp" in check_time_index(struct.pack(">qI", -1, 0), 1)
    assert "overflows" in check_time_index(struct.pack(">qI", 5, 2**31), 1)


# -- the real files a broker wrote ----------------------------------------------------------------------


def _batches(log: bytes) -> dict[int, int]:
    """position -> last offset of every batch in a .log."""
    out, pos = {}, 0
    while pos + 12 <= len(log):
        base, length = struct.unpack_from(">qi", log, pos)
        (last_delta,) = struct.unpack_from(">i", log, pos + 23)
        out[pos] = base + last_delta
        pos += 12 + length
    assert pos == len(log)
    return out


def test_real_offset_index() -> None:
    index = (PARTITION / "00000000000000000000.index").read_bytes()
    log = (PARTITION / "00000000000000000000.log").read_bytes()
    batches = _batches(log)
    assert len(batches) == 147
    assert len(index) == 14 * 8
    assert valid_entry_count(index, OFFSET_INDEX) == 14
    assert check_offset_index(index, 14, log_size=len(log)) is None
    entries = [decode_offset_entry(index, i) for i in range(14)]
    assert entries[0] == (60, 4388)
    for rel, pos in entries:
        assert batches[pos] == rel  # the LAST offset of the batch that starts there
    assert 0 not in {pos for _, pos in entries}  # never the first batch
    # about one entry per 4096 bytes of log
    gaps = [b[1] - a[1] for a, b in zip(entries, entries[1:], strict=False)]
    assert all(4096 < gap < 4096 + 1024 for gap in gaps)
    # a lookup lands on the batch that holds the target, or before it
    for target in range(0, 862, 7):
        slot = floor_slot(index, 14, target, OFFSET_KEY)
        pos = 0 if slot < 0 else entries[slot][1]
        assert batches[pos] <= max(target, batches[0])


def test_real_time_index() -> None:
    tindex = (PARTITION / "00000000000000000000.timeindex").read_bytes()
    index = (PARTITION / "00000000000000000000.index").read_bytes()
    assert valid_entry_count(tindex, TIME_INDEX) == 15
    assert check_time_index(tindex, 15) is None
    times = [decode_time_entry(tindex, i) for i in range(15)]
    offsets = [decode_offset_entry(index, i)[0] for i in range(14)]
    # one entry with each offset index entry, plus the one written when the segment rolled
    assert [rel for _, rel in times[:14]] == offsets
    assert times[14][1] == 861
    assert times[0][0] == 0x190C70216BD
    stamps = [ts for ts, _ in times]
    assert floor_slot(tindex, 15, stamps[5], TIME_KEY) == 5
    assert floor_slot(tindex, 15, stamps[5] - 1, TIME_KEY) == 4
    assert ceiling_slot(tindex, 15, stamps[5] - 1, TIME_KEY) == 5
    assert floor_slot(tindex, 15, 0, TIME_KEY) == -1


def test_real_files_of_the_rolled_and_empty_segments() -> None:
    assert (PARTITION / "00000000000000000862.index").read_bytes() == b""
    roll = (PARTITION / "00000000000000000862.timeindex").read_bytes()
    assert valid_entry_count(roll, TIME_INDEX) == 1
    assert decode_time_entry(roll) == (0x191_2205_A714, 6)
    assert check_time_index(roll, 1) is None
    # the same file as the broker had it while active: preallocated and zero-filled
    assert valid_entry_count(roll + bytes(12 * 873813), TIME_INDEX) == 1
