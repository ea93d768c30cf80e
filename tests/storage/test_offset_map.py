"""The cleaner's offset map: fixed memory, hashes only, full at its load factor, exact against a dict."""

from __future__ import annotations

import random

import pytest

from kafkafs.storage.offset_map import BYTES_PER_ENTRY, OffsetMap


def test_slots_come_from_the_memory_and_fill_up_to_the_load_factor():
    omap = OffsetMap(1000 * BYTES_PER_ENTRY, 0.5)
    assert omap.slots <= 1000 and omap.slots > 990  # the largest prime that fits
    assert omap.max_entries == int(omap.slots * 0.5)
    taken = omap.put_many([b"k%d" % i for i in range(2000)], list(range(2000)))
    assert taken == omap.max_entries == omap.size and omap.full
    assert omap.latest_offset == taken - 1
    with pytest.raises(ValueError):
        OffsetMap(10, 0.1)


def test_latest_offset_per_key_matches_a_dict_under_heavy_collisions():
    rng = random.Random(3)
    omap = OffsetMap(211 * BYTES_PER_ENTRY, 0.95)  # a small table: long probe sequences
    expected: dict[bytes, int] = {}
    keys = [b"key-%d" % rng.randrange(150) for _ in range(5000)]
    omap.put_many(keys, list(range(5000)))
    for offset, key in enumerate(keys):
        expected[key] = offset
    assert omap.size == len(expected)
    assert all(omap.get(k) == v for k, v in expected.items())
    assert omap.get(b"absent") == -1
    flags = omap.retain_flags(keys + [None, b"later", None, None], list(range(5000)) + [5000, 5001, 4999, 4998])
    # past the latest offset (4999) a record stays, with a key or without; within it a keyless one goes
    assert list(map(bool, flags)) == [expected[k] == i for i, k in enumerate(keys)] + [True, True, False, False]


def test_clear_keeps_the_memory_and_forgets_the_keys():
    omap = OffsetMap(100 * BYTES_PER_ENTRY)
    omap.put(b"a", 5)
    omap.put(b"a", 7)
    assert omap.get(b"a") == 7 and omap.size == 1
    slots = omap.slots
    omap.clear()
    assert omap.size == 0 and omap.latest_offset == -1 and omap.get(b"a") == -1 and omap.slots == slots


# ------------------------------------------------------------------ the kernel against the reference

import hashlib  # noqa: E402
import struct  # noqa: E402

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import kafkafs.storage.offset_map as offset_map  # noqa: E402
from kafkafs.format.kernel import KERNEL  # noqa: E402

needs_kernel = pytest.mark.skipif(
    getattr(KERNEL, "omap_put", None) is None, reason="the compiled kernel is not built"
)
_keys = st.lists(
    st.one_of(st.none(), st.binary(max_size=140), st.sampled_from([b"", b"a", b"b", b"k" * 55, b"k" * 56, b"k" * 64])),
    max_size=25,
)


def _columns(omap: OffsetMap) -> tuple[bytes, bytes, bytes, int, int]:
    return omap._lo.tobytes(), omap._hi.tobytes(), omap._offsets.tobytes(), omap.size, omap.latest_offset


@needs_kernel
@given(st.lists(st.binary(max_size=300), max_size=20))
def test_the_kernels_md5_halves_are_hashlibs(blobs):
    for data in blobs + [bytes(range(n % 256)) * (1 + n // 256) for n in range(0, 200, 7)]:
        assert KERNEL.md5_halves(data) == struct.unpack("<qq", hashlib.md5(data).digest())


@needs_kernel
@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    batches=st.lists(st.tuples(_keys, st.integers(0, 3), st.one_of(st.none(), st.integers(0, 12))), max_size=8),
    slots=st.integers(5, 60),
    load=st.sampled_from([0.3, 0.9, 0.99, 1.0]),
    probes=st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=8)), st.integers(-1, 400)), max_size=30),
)
def test_the_kernels_map_equals_the_python_reference_slot_for_slot(batches, slots, load, probes):
    kernel, reference = OffsetMap(slots * BYTES_PER_ENTRY, load), OffsetMap(slots * BYTES_PER_ENTRY, load)
    assert kernel.max_entries < kernel.slots  # a free slot always ends a probe (as in the cleaner)
    offset = 0
    for keys, gap, limit in batches:  # offsets increase, with gaps; limits below the fill and at it
        limit = None if limit is None else min(limit, kernel.max_entries)
        offsets = list(range(offset, offset + len(keys)))
        offset += len(keys) + gap
        assert kernel.put_many(keys, offsets, limit) == reference.put_many_py(keys, offsets, limit)
        assert _columns(kernel) == _columns(reference)
        assert list(kernel.retain_flags(keys, offsets)) == [int(f) for f in reference.retain_flags_py(keys, offsets)]
    keys, offsets = [k for k, _ in probes], [o for _, o in probes]  # keys absent or present, offsets either side
    assert list(kernel.retain_flags(keys, offsets)) == [int(f) for f in reference.retain_flags_py(keys, offsets)]


@needs_kernel
def test_the_kernel_and_the_reference_refuse_the_same_input():
    omap = OffsetMap(50 * BYTES_PER_ENTRY)
    for put in (omap.put_many, omap.put_many_py):
        with pytest.raises(ValueError):
            put([b"a", b"b"], [1])
        with pytest.raises(TypeError):
            put(["text"], [1])
    for flags in (omap.retain_flags, omap.retain_flags_py):
        with pytest.raises(ValueError):
            flags([b"a"], [1, 2])
        with pytest.raises(TypeError):
            flags([7], [-5])
    with pytest.raises(ValueError):  # columns of different lengths
        KERNEL.omap_put([b"a"], [1], omap._lo, omap._hi[:3], omap._offsets, 10, 0)
    assert omap.size == 0 and omap.latest_offset == -1


def test_without_the_kernel_the_map_runs_its_python_loops(monkeypatch):
    monkeypatch.setattr(offset_map, "_OMAP_PUT", None)
    monkeypatch.setattr(offset_map, "_OMAP_RETAIN", None)
    omap = OffsetMap(50 * BYTES_PER_ENTRY)
    assert omap.put_many([b"a", None, b"a"], [1, 2, 3]) == 3 and omap.get(b"a") == 3
    assert omap.retain_flags([b"a", None, b"a"], [1, 2, 3]) == [False, False, True]


@pytest.mark.parametrize("python", [False, True])
def test_a_full_map_stops_at_the_next_key_even_one_it_holds(python):
    omap = OffsetMap(5 * BYTES_PER_ENTRY, 0.5)  # 5 slots, 2 keys
    assert omap.max_entries == 2
    put = omap.put_many_py if python else omap.put_many
    # Kafka's buildOffsetMapForSegment: "if (map.size < maxDesiredMapSize) map.put(...) else return true",
    # for every keyed record: the round ends before the second "a" though the map holds "a"
    assert put([b"a", None, b"b", None, b"a", b"c"], [10, 11, 12, 13, 14, 15]) == 4
    assert omap.get(b"a") == 10 and omap.size == 2
    assert omap.latest_offset == 12  # the last key put; the keyless record at 13 does not move it


@pytest.mark.parametrize("python", [False, True])
def test_a_load_factor_of_one_leaves_a_slot_free_so_lookups_end(python):
    omap = OffsetMap(7 * BYTES_PER_ENTRY, 1.0)
    assert omap.slots == 7 and omap.max_entries == 6
    put = omap.put_many_py if python else omap.put_many
    flags = omap.retain_flags_py if python else omap.retain_flags
    assert put([b"k%d" % i for i in range(10)], list(range(10))) == 6 and omap.full
    assert list(map(bool, flags([b"absent", b"k0"], [1, 2]))) == [True, True]
