"""The size cache: layouts kept across mounts, never served stale; ``kafkafs index``; the first sizing."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
from array import array
from pathlib import Path

import pytest

from kafkafs.errors import InvalidInput
from kafkafs.fs.tree.root import Tree
from kafkafs.fs.views.layout import SegmentLayout
from kafkafs.fs.views.layoutcache import (
    CachedLayout,
    LayoutCache,
    LayoutKey,
    check_outside,
    default_cache_dir,
    stat_key,
)
from kafkafs.storage.logdir import LogDir

from ..conftest import ROOT, SMALL_SEGMENTS, expected_jsonl


def tree_of(path: Path, cache_dir: Path | None, **kw) -> Tree:
    return Tree(LogDir(path, SMALL_SEGMENTS), cache=LayoutCache(cache_dir), **kw)


class Counting:
    """Counts calls of SegmentLayout.extend that lay out bytes (sizing work done)."""

    def __init__(self, monkeypatch) -> None:
        self.sized = 0
        original = SegmentLayout.extend

        def extend(layout, renderer, on_piece=None):
            n = original(layout, renderer, on_piece)
            if n:
                self.sized += 1
            return n

        monkeypatch.setattr(SegmentLayout, "extend", extend)


def records_size(path: Path, cache_dir: Path | None, name: str = "orders-0") -> int:
    t = tree_of(path, cache_dir)
    try:
        return t.resolve(f"{name}/records.jsonl").attr().size
    finally:
        t.close()


def entries(cache_dir: Path) -> list[Path]:
    return sorted(cache_dir.glob("*.layout"))


# ---------------------------------------------------------------------------------------------- the store


def _key(**kw) -> LayoutKey:
    base = dict(dev=1, ino=2, size=1000, mtime_ns=5, ctime_ns=5, topic="t", partition=0, mode="auto", decoder=None)
    base.update(kw)
    return LayoutKey(**base)


def _layout() -> CachedLayout:
    return CachedLayout(array("q", [0, 400]), array("q", [400, 600]), array("q", [9, 19]), array("q", [1500, 2400]), 1000)


def test_store_and_load(tmp_path):
    cache = LayoutCache(tmp_path / "c")
    key = _key()
    assert cache.load(key) is None
    assert cache.store(key, _layout())
    assert cache.load(key) == _layout()
    assert not list((tmp_path / "c").glob(".tmp-*")), "the temporary file is renamed, never left"


@pytest.mark.parametrize(
    "changed", [dict(size=1001), dict(mtime_ns=6), dict(ctime_ns=6), dict(mode="string"), dict(decoder="x"), dict(partition=1)]
)
def test_an_entry_for_another_key_is_not_served(tmp_path, changed):
    cache = LayoutCache(tmp_path)
    cache.store(_key(), _layout())
    other = _key(**changed)
    # same file name when only size/mtime differ (a segment rewritten in place): the entry is refused
    assert cache.load(other) is None


def test_corrupt_and_foreign_entries_are_refused(tmp_path):
    cache = LayoutCache(tmp_path)
    key = _key()
    cache.store(key, _layout())
    (path,) = entries(tmp_path)
    data = bytearray(path.read_bytes())
    for i in (0, 20, len(data) // 2, len(data) - 1):
        bad = bytearray(data)
        bad[i] ^= 0x40
        path.write_bytes(bad)
        assert cache.load(key) is None, f"a flipped byte at {i} was served"
    path.write_bytes(data[:-10])
    assert cache.load(key) is None
    path.write_bytes(b"")
    assert cache.load(key) is None
    # an entry of another segment copied over this one's name (checksum fine, key not)
    other = _key(ino=3)
    cache.store(other, _layout())
    shutil.copy(tmp_path / f"{other.file_stem()}.layout", path)
    assert cache.load(key) is None
    assert cache.rejected >= 6


def test_an_entry_of_impossible_shape_is_refused(tmp_path):
    cache = LayoutCache(tmp_path)
    key = _key()
    bad = CachedLayout(array("q", [0, 100]), array("q", [400, 600]), array("q", [9, 19]), array("q", [1500, 2400]), 1000)
    cache.store(key, bad)  # pieces overlap: not what a layout can be
    assert cache.load(key) is None


def test_cache_dir_is_never_inside_the_logdir(tmp_path):
    logdir = tmp_path / "logs"
    logdir.mkdir()
    with pytest.raises(InvalidInput):
        check_outside(logdir / "cache", logdir)
    with pytest.raises(InvalidInput):
        check_outside(logdir, logdir)
    os.symlink(logdir, tmp_path / "link")
    with pytest.raises(InvalidInput):
        check_outside(tmp_path / "link" / "cache", logdir)
    assert check_outside(tmp_path / "cache", logdir) == (tmp_path / "cache").resolve()


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("CACHE_DIRECTORY", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "kafkafs"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "kafkafs"
    monkeypatch.setenv("CACHE_DIRECTORY", "/var/cache/kafkafs")
    assert default_cache_dir() == Path("/var/cache/kafkafs")


def test_an_unwritable_cache_warns_once(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("")
    cache = LayoutCache(blocker / "cache")
    with caplog.at_level(logging.WARNING, "kafkafs"):
        assert not cache.store(_key(), _layout())
        assert not cache.store(_key(ino=9), _layout())
    assert len([r for r in caplog.records if "not writable" in r.message]) == 1


# ---------------------------------------------------------------------------------------------- across mounts


def test_sizes_survive_a_remount(logdir_copy, tmp_path, monkeypatch):
    cache_dir = tmp_path / "cache"
    want = len(expected_jsonl(logdir_copy, "orders-0"))
    counting = Counting(monkeypatch)
    assert records_size(logdir_copy, cache_dir) == want
    first = counting.sized
    assert first >= 3 and len(entries(cache_dir)) == first  # every segment, the active one included
    stamps = {p: p.stat().st_mtime_ns for p in entries(cache_dir)}

    counting.sized = 0
    t = tree_of(logdir_copy, cache_dir)
    try:
        assert t.resolve("orders-0/records.jsonl").attr().size == want
        assert counting.sized == 0, "a remount of an unchanged partition renders nothing"
        assert t.partitions.cache.hits == first
        assert t.read_file("orders-0/records.jsonl") == expected_jsonl(logdir_copy, "orders-0")
    finally:
        t.close()
    assert {p: p.stat().st_mtime_ns for p in entries(cache_dir)} == stamps, "nothing rewritten"


def _poison(cache_dir: Path) -> None:
    """Rewrite every entry, validly, with sizes that are wrong by 7 bytes a piece."""
    cache = LayoutCache(cache_dir)
    import orjson

    for path in entries(cache_dir):
        data = path.read_bytes()
        head_len = int.from_bytes(data[15:19], "big")
        head = orjson.loads(data[19 : 19 + head_len])
        key = LayoutKey(*head["key"])
        found = cache.load(key)
        assert found is not None
        ends = array("q", (e + 7 * (i + 1) for i, e in enumerate(found.ends)))
        cache.store(key, found._replace(ends=ends))


def test_a_changed_segment_is_never_served_from_its_old_entry(logdir_copy, tmp_path):
    cache_dir = tmp_path / "cache"
    want = len(expected_jsonl(logdir_copy, "orders-0"))
    assert records_size(logdir_copy, cache_dir) == want
    _poison(cache_dir)
    # control: unchanged segments are served from the cache, poison and all
    assert records_size(logdir_copy, cache_dir) != want
    # every segment "changes" (its mtime moves): the old entries must not be served
    for seg in (logdir_copy / "orders-0").glob("*.log"):
        st = seg.stat()
        os.utime(seg, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert records_size(logdir_copy, cache_dir) == want
    assert records_size(logdir_copy, cache_dir) == want  # and the rebuilt entries are right


def test_a_segment_rewritten_in_place_with_its_old_mtime_is_not_served_stale(logdir_copy, tmp_path):
    """``cp -p``, ``rsync --inplace -t`` and ``touch -r`` put the old mtime back on a file whose bytes
    changed (same inode, same size): only the ctime, which nobody can set, says it changed."""
    cache_dir = tmp_path / "cache"
    want = len(expected_jsonl(logdir_copy, "orders-0"))
    assert records_size(logdir_copy, cache_dir) == want
    _poison(cache_dir)
    assert records_size(logdir_copy, cache_dir) != want  # control: the poisoned entries are served
    time.sleep(0.05)  # past the clock's granularity, so the ctime moves
    for seg in (logdir_copy / "orders-0").glob("*.log"):
        st = seg.stat()
        with open(seg, "r+b") as f:  # in place: same inode, same size
            data = f.read()
            f.seek(0)
            f.write(data)
        os.utime(seg, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert seg.stat().st_mtime_ns == st.st_mtime_ns and seg.stat().st_ino == st.st_ino
    assert records_size(logdir_copy, cache_dir) == want


def test_a_segment_cut_shorter_is_laid_out_afresh(logdir_copy, tmp_path):
    cache_dir = tmp_path / "cache"
    assert records_size(logdir_copy, cache_dir) == len(expected_jsonl(logdir_copy, "orders-0"))
    with LogDir(logdir_copy, SMALL_SEGMENTS, writable=True) as d:
        d.log("orders-0").truncate_to(1234)
    assert records_size(logdir_copy, cache_dir) == len(expected_jsonl(logdir_copy, "orders-0"))


def test_corrupt_entries_are_rebuilt(logdir_copy, tmp_path):
    cache_dir = tmp_path / "cache"
    want = len(expected_jsonl(logdir_copy, "orders-0"))
    records_size(logdir_copy, cache_dir)
    for path in entries(cache_dir):
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 1
        path.write_bytes(data)
    t = tree_of(logdir_copy, cache_dir)
    try:
        assert t.resolve("orders-0/records.jsonl").attr().size == want
        assert t.partitions.cache.hits == 0 and t.partitions.cache.rejected == len(entries(cache_dir))
    finally:
        t.close()
    t = tree_of(logdir_copy, cache_dir)
    try:
        assert t.resolve("orders-0/records.jsonl").attr().size == want
        assert t.partitions.cache.rejected == 0 and t.partitions.cache.hits == len(entries(cache_dir)), "rebuilt and stored again"
    finally:
        t.close()


def test_values_modes_have_their_own_entries(built_logdir, tmp_path):
    cache_dir = tmp_path / "cache"
    for mode in ("auto", "base64", "auto", "base64"):
        t = Tree(LogDir(built_logdir, SMALL_SEGMENTS), mode=mode, cache=LayoutCache(cache_dir))
        try:
            assert t.resolve("orders-0/records.jsonl").attr().size == len(
                expected_jsonl(built_logdir, "orders-0", mode=mode)
            )
        finally:
            t.close()


def test_growth_after_a_cached_load(logdir_copy, tmp_path):
    """The active segment's entry serves an unchanged segment; appends then extend it in memory."""
    cache_dir = tmp_path / "cache"
    records_size(logdir_copy, cache_dir)
    t = Tree(LogDir(logdir_copy, SMALL_SEGMENTS, writable=True), rw=True, cache=LayoutCache(cache_dir))
    try:
        assert t.resolve("orders-0/records.jsonl").attr().size == len(expected_jsonl(logdir_copy, "orders-0"))
        state = t.partitions.state("orders-0")
        from ..conftest import sample_records

        state.log.append_records(sample_records(5000, 50))
        assert t.read_file("orders-0/records.jsonl") == expected_jsonl(logdir_copy, "orders-0")
    finally:
        t.close()
    # saved at close: the next mount knows the grown active segment
    t = tree_of(logdir_copy, cache_dir)
    try:
        assert t.resolve("orders-0/records.jsonl").attr().size == len(expected_jsonl(logdir_copy, "orders-0"))
        assert t.partitions.cache.rejected == 0 and t.partitions.cache.misses == 0
    finally:
        t.close()


# ---------------------------------------------------------------------------------------------- first sizing


# ---------------------------------------------------------------------------------------------- kafkafs index


# ---------------------------------------------------------------------------------------------- real mounts


def _snapshot(path: Path) -> dict:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in [path, *path.rglob("*")]}


def test_mount_keeps_sizes_outside_and_writes_nothing_in_logdir(logdir_copy, tmp_path, mounted):
    cache_dir = tmp_path / "cache"
    before = _snapshot(logdir_copy)
    m = mounted(logdir_copy, "--cache-dir", str(cache_dir))
    want = expected_jsonl(logdir_copy, "orders-0")
    assert os.stat(m / "orders-0" / "records.jsonl").st_size == len(want)
    assert (m / "orders-0" / "records.jsonl").read_bytes() == want
    assert (m / "orders-0" / "by-offset" / "7.json").read_bytes()
    m.stop()
    stored = {p: p.stat().st_mtime_ns for p in entries(cache_dir)}
    assert len(stored) >= 3
    assert _snapshot(logdir_copy) == before, "a read-only mount wrote inside LOGDIR"

    m2 = mounted(logdir_copy, "--cache-dir", str(cache_dir))
    assert os.stat(m2 / "orders-0" / "records.jsonl").st_size == len(want)
    assert (m2 / "orders-0" / "records.jsonl").read_bytes() == want
    m2.stop()
    assert {p: p.stat().st_mtime_ns for p in entries(cache_dir)} == stored, "served from the cache, not rebuilt"
    assert _snapshot(logdir_copy) == before


def test_mount_refuses_a_cache_inside_the_logdir(built_logdir, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "kafkafs.cli", "mount", str(built_logdir), str(mnt), "-f",
         "--cache-dir", str(built_logdir / "c")],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=60,
    )
    assert done.returncode == 2 and "inside the log directory" in done.stderr
    assert not os.path.ismount(mnt) and not (built_logdir / "c").exists()


def test_stat_key_follows_the_file(tmp_path):
    f = tmp_path / "x"
    f.write_bytes(b"abc")
    k = stat_key(f, "t", 0, "auto", None)
    assert k is not None and k.size == 3
    assert stat_key(tmp_path / "missing", "t", 0, "auto", None) is None


# ---------------------------------------------------------------------------------------------- whole-batch path
