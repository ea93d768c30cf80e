"""The key index file: what it holds, how it is checked when opened and when each block is read."""

from __future__ import annotations

import os
import random
import shutil

import pytest

from kafkafs.format.keyindex import ENTRY, key_hash
from kafkafs.storage import keyfile
from kafkafs.storage.handles import HandleBudget
from kafkafs.storage.keyfile import DamagedIndex, SegmentKeyIndex
from kafkafs.storage.keyscan import build_key_index

from .helpers import config, open_log
from .keylogs import fill


@pytest.fixture
def built(tmp_path):
    log = open_log(tmp_path / "t-0", config(segment_bytes=10**6))
    model = fill(log, random.Random(21), 200)
    segment = log.segments.first()
    path = tmp_path / "seg.keys"
    with open(path, "w+b") as f:
        head = build_key_index(segment, f, ["the key"], size=segment.size)
    yield path, head, model
    log.close()


def test_an_index_answers_for_every_key(built):
    path, head, model = built
    with open(path, "rb") as f:
        index = SegmentKeyIndex.open(f, ["the key"], path)
        assert index.entries == head["entries"] == sum(1 for r in model.records if r.key is not None and not r.control)
        for key in {r.key for r in model.records if r.key is not None}:
            want = [(r.offset, r.value is None) for r in model.records if r.key == key and not r.control]
            got = [(rel, bool(flags & 1)) for rel, flags in index.find(*key_hash(key))]
            assert got == want
        assert index.find(*key_hash(b"absent")) == []
        txns = index.transactional_batches()
        assert txns == sorted(txns) and len(txns) == head["txns"] > 0
        # slices by prefix cover every entry once, in order
        for bits in (0, 1, index.bits, index.bits + 3):
            joined = b"".join(index.slice(p, bits) for p in range(1 << bits))
            assert joined == index.entry_bytes(0, index.entries)
        rows = [ENTRY.unpack_from(joined, i) for i in range(0, len(joined), ENTRY.size)]
        assert rows == sorted(rows)


def test_another_key_is_refused(built):
    path, _head, _model = built
    with open(path, "rb") as f, pytest.raises(DamagedIndex, match="stale"):
        SegmentKeyIndex.open(f, ["another key"], path)


@pytest.mark.parametrize("change", ["truncate", "head", "table", "digest", "append"])
def test_a_damaged_file_is_refused_when_opened(built, change):
    path, _head, _model = built
    data = bytearray(path.read_bytes())
    if change == "truncate":
        data = data[:-10]
    elif change == "append":
        data += b"x"
    elif change == "head":
        data[30] ^= 1
    elif change == "table":
        data[-40] ^= 1
    else:
        data[-1] ^= 1
    path.write_bytes(bytes(data))
    with open(path, "rb") as f, pytest.raises(DamagedIndex):
        SegmentKeyIndex.open(f, ["the key"], path)


def test_a_damaged_block_is_found_when_it_is_read(built):
    path, _head, model = built
    with open(path, "rb") as f:
        index = SegmentKeyIndex.open(f, ["the key"], path)
        with open(path, "r+b") as w:
            w.seek(keyfile.HEAD_SIZE + 5)
            w.write(b"\xff")
        with pytest.raises(DamagedIndex) as caught:
            index.entry_bytes(0, index.entries)
        assert caught.value.index is index


def test_an_index_gives_its_descriptor_back_and_opens_its_file_again(built):
    """The handle budget (review11 R11-1): an index's descriptor is given back like a segment's and
    opened again by its path at the next read; a file replaced since is not read (DamagedIndex)."""
    path, _head, _model = built
    budget = HandleBudget(limit=1)
    fd = os.open(path, os.O_RDONLY)
    index = SegmentKeyIndex.open(fd, ["the key"], path, budget=budget)
    assert index in budget
    entries = index.entry_bytes(0, index.entries)
    budget.opened(_Other(), 1)  # another owner pushes it out: its descriptor closes
    assert index not in budget and index._handle is None
    assert not os.path.exists(f"/proc/self/fd/{fd}") or os.readlink(f"/proc/self/fd/{fd}") != str(path)
    assert index.entry_bytes(0, index.entries) == entries and index in budget  # opened again
    index.release_handles()
    shutil.copy(path, path.with_suffix(".new"))
    os.replace(path.with_suffix(".new"), path)  # the same bytes, another file
    with pytest.raises(DamagedIndex) as caught:
        index.entry_bytes(0, index.entries)
    assert caught.value.index is index
    index.close()
    assert index not in budget


class _Other:
    pinned = False

    def release_handles(self) -> None:
        pass
