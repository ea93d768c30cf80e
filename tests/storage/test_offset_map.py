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
    assert flags == [expected[k] == i for i, k in enumerate(keys)] + [True, True, False, False]


def test_clear_keeps_the_memory_and_forgets_the_keys():
    omap = OffsetMap(100 * BYTES_PER_ENTRY)
    omap.put(b"a", 5)
    omap.put(b"a", 7)
    assert omap.get(b"a") == 7 and omap.size == 1
    slots = omap.slots
    omap.clear()
    assert omap.size == 0 and omap.latest_offset == -1 and omap.get(b"a") == -1 and omap.slots == slots
