"""Cache entries of segments that left the log go (review15 R15-6), and so does the mount's per-segment
state (R15-5): retention done as a broker does it (rename to ``.deleted``, then unlink), no broker."""

from __future__ import annotations

import gc
import os
import random
import weakref
from pathlib import Path

import pytest

from kafkafs.fs.tree.nodes import File
from kafkafs.fs.tree.root import Tree
from kafkafs.fs.views import streams
from kafkafs.fs.views.layoutcache import LayoutCache
from kafkafs.storage.cachedir import entry_head, prune_entries
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir
from kafkafs.storage.segment import LogSegment

from ...storage.keylogs import fill

SETTINGS = Settings({"segment.bytes": 3000})


@pytest.fixture
def logs(tmp_path) -> Path:
    logs = tmp_path / "logs"
    logs.mkdir()
    with LogDir(logs, SETTINGS, writable=True) as logdir:
        fill(logdir.create_partition("kv", 0), random.Random(5), 200, keys=20)
    return logs


def _tree(logs: Path, cache: Path) -> Tree:
    return Tree(LogDir(logs, SETTINGS), cache=LayoutCache(cache), list_limit=100_000)


def _segments(logs: Path) -> list[Path]:
    return sorted((logs / "kv-0").glob("*.log"))


def _delete_like_a_broker(log_file: Path) -> None:
    stems = [log_file.with_suffix(s) for s in (".log", ".index", ".timeindex")]
    for f in stems:
        if f.exists():
            os.rename(f, f.with_name(f.name + ".deleted"))
    for f in stems:
        deleted = f.with_name(f.name + ".deleted")
        if deleted.exists():
            os.unlink(deleted)


def _entries(cache: Path) -> dict[str, list[int]]:
    """entry name -> [dev, ino] of the segment it was written for."""
    found = {}
    for p in cache.iterdir():
        if p.suffix in (".layout", ".keys"):
            head = entry_head(p)
            if head is not None:
                found[p.name] = head["key"][:2]
    return found


def _inodes(files: list[Path]) -> set[tuple[int, int]]:
    return {(os.stat(f).st_dev, os.stat(f).st_ino) for f in files}


def _fill_cache(tree: Tree) -> None:
    tree.resolve("kv-0/records.jsonl").attr()
    tree.read_file("kv-0/table.jsonl")


def test_entries_of_deleted_segments_go_while_mounted(logs, tmp_path):
    cache = tmp_path / "cache"
    segs = _segments(logs)
    assert len(segs) >= 6
    tree = _tree(logs, cache)
    try:
        _fill_cache(tree)
        before = _entries(cache)
        gone = segs[:4]
        gone_inodes = _inodes(gone)
        assert sum(1 for v in before.values() if tuple(v) in gone_inodes) >= 8  # layouts and key indexes
        for f in gone:
            _delete_like_a_broker(f)
        tree.partitions.state("kv-0").refresh(force=True)
        _fill_cache(tree)
        after = _entries(cache)
        assert not [n for n, v in after.items() if tuple(v) in gone_inodes]
        live = _inodes(_segments(logs))
        # entries of the segments still there stay (the sealed ones' at least)
        assert sum(1 for v in after.values() if tuple(v) in live) >= len(live) - 1
        state = tree.partitions.state("kv-0")
        assert set(state._layouts) <= {int(f.stem) for f in _segments(logs)}
        assert len(tree.partitions.keys_store._building) == 0
    finally:
        tree.close()


def test_entries_of_segments_deleted_while_unmounted_go_at_start_and_unmount(logs, tmp_path):
    cache = tmp_path / "cache"
    tree = _tree(logs, cache)
    try:
        _fill_cache(tree)
    finally:
        tree.close()
    (cache / "notes.layout").write_bytes(b"not an entry")
    (cache / "README").write_text("mine")
    segs = _segments(logs)
    gone_inodes = _inodes(segs[:3])
    for f in segs[:3]:
        _delete_like_a_broker(f)
    # a copy of the log directory elsewhere (another mount's entries): never removed by this one
    copy = tmp_path / "copy"
    copy.mkdir()
    os.symlink(logs / "kv-0", copy / "kv-0")
    names_before = set(_entries(cache))
    tree = _tree(logs, cache)
    try:
        removed = tree.partitions.prune_cache()
        assert removed >= 6
        after = _entries(cache)
        assert not [n for n, v in after.items() if tuple(v) in gone_inodes]
        assert set(after) < names_before
        assert (cache / "notes.layout").read_bytes() == b"not an entry"
        assert (cache / "README").read_text() == "mine"
    finally:
        tree.close()
    # at unmount too: delete more, close a tree that never looked at the partition
    segs = _segments(logs)
    gone_inodes = _inodes(segs[:2])
    for f in segs[:2]:
        _delete_like_a_broker(f)
    tree = _tree(logs, cache)
    tree.close()
    assert not [n for n, v in _entries(cache).items() if tuple(v) in gone_inodes]
    assert prune_entries(cache, copy) == 0  # entries of logs/ are not copy/'s to remove


def test_per_segment_state_stays_bounded_as_segments_come_and_go(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    cache = tmp_path / "cache"
    with LogDir(logs, SETTINGS, writable=True) as logdir:
        fill(logdir.create_partition("kv", 0), random.Random(5), 60, keys=20)
    tree = _tree(logs, cache)
    try:
        state = tree.partitions.state("kv-0")
        rng = random.Random(9)
        for _round in range(5):
            with LogDir(logs, SETTINGS, writable=True) as logdir:
                fill(logdir.log("kv-0"), rng, 40, keys=20)
            for f in _segments(logs)[:-3]:
                _delete_like_a_broker(f)
            state.refresh(force=True)
            _fill_cache(tree)
        live = len(_segments(logs))
        assert len(state._layouts) <= live
        assert len(tree.partitions.keys_store._building) == 0
        assert len(tree.partitions.keys_store._open) <= live
        assert len(list(cache.glob("*.layout"))) <= live
        assert len(list(cache.glob("*.keys"))) <= live
    finally:
        tree.close()


def _dead(segments: list[weakref.ref]) -> list[LogSegment]:
    """The segment objects still alive whose files are gone (neither the name nor ``.deleted``)."""
    gc.collect()
    alive = [s for s in (ref() for ref in segments) if s is not None]
    return [s for s in alive if not s.log_path.exists() and not s.log_path.with_name(s.log_path.name + ".deleted").exists()]


def test_no_view_keeps_a_deleted_segment_once_no_open_file_reads_it(tmp_path, monkeypatch):
    """R15-5: the mount's memory is bounded by the live segments, not by every segment it has seen. Segments
    roll and go (retention, as a broker deletes them) while records.jsonl, table.jsonl and a key's history
    are read: once the partition noticed (a refresh, as the watcher's), no cache, composition or view
    keeps a segment whose files are gone, except for an open file that still reads it, until its release."""
    monkeypatch.setattr(streams, "OPEN_GRACE_S", 0.0)  # no open of a file rewritten since its lookup comes now
    logs = tmp_path / "logs"
    logs.mkdir()
    with LogDir(logs, SETTINGS, writable=True) as logdir:
        fill(logdir.create_partition("kv", 0), random.Random(5), 60, keys=20, txn=False)
    tree = _tree(logs, tmp_path / "cache")
    try:
        state = tree.partitions.state("kv-0")
        history = "kv-0/by-key/key-4.jsonl"
        seen: list[weakref.ref] = []
        rng = random.Random(9)
        held = None
        for round_ in range(5):
            with LogDir(logs, SETTINGS, writable=True) as logdir:
                fill(logdir.log("kv-0"), rng, 20, keys=20, txn=False)
            state.refresh(force=True)
            tree.read_file("kv-0/records.jsonl")
            tree.read_file("kv-0/table.jsonl")
            tree.read_file(history)
            tree.read_file("kv-0/partition.json")
            if round_ == 3:  # an open file that has read its first bytes only
                node = tree.resolve("kv-0/records.jsonl")
                assert isinstance(node, File)
                held = node.open(False)
                first = held.read(0, 100)
            seen.extend(weakref.ref(s) for s in state.log.segments)
            for f in _segments(logs)[:-3]:
                _delete_like_a_broker(f)
            state.refresh(force=True)
            if held is None:
                assert not _dead(seen), f"round {round_}"
        # the open file reads on in the segments deleted since it opened, and keeps them until released
        assert held is not None and held.read(0, 100) == first
        assert _dead(seen)
        held.release()
        held = first = None
        assert not _dead(seen)
    finally:
        tree.close()
