"""The size summary: a remount answers ``records.jsonl``'s size without opening the partition, and never
from an entry that no longer holds (a changed, added or removed file, a moved log start)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from kafkafs.format.checkpoint import render_offset_checkpoint
from kafkafs.fs.tree.inodes import InodeTable
from kafkafs.fs.tree.nodes import VOLATILE_TIMEOUT, RecordsKey
from kafkafs.fs.tree.partition_nodes import RecordsFile
from kafkafs.fs.tree.root import Tree
from kafkafs.fs.views.layoutcache import LayoutCache
from kafkafs.fs.views.summary import SizeSummary
from kafkafs.storage.logdir import LOG_START_FILE, LogDir

from ..conftest import SMALL_SEGMENTS, expected_jsonl

NAMES = ("orders-0", "events-3", "empty-0")


def tree_of(path: Path, cache_dir: Path | None, **kw) -> Tree:
    return Tree(LogDir(path, SMALL_SEGMENTS), cache=LayoutCache(cache_dir), **kw)


def size_all(path: Path, cache_dir: Path, **kw) -> dict[str, int]:
    """A mount's life: every records.jsonl sized, then closed (the summary written)."""
    t = tree_of(path, cache_dir, **kw)
    try:
        return {n: t.resolve(f"{n}/records.jsonl").attr().size for n in NAMES}
    finally:
        t.close()


def on_loop(t: Tree, name: str) -> RecordsFile | None:
    """records.jsonl of ``name`` as the FUSE loop looks it up (None: it would ask a worker)."""
    folder = t.root.lookup_now(name)
    assert folder is not None
    found = folder.lookup_now("records.jsonl")
    assert found is None or isinstance(found, RecordsFile)
    return found


def poison(path: Path, cache_dir: Path, mode: str = "auto") -> None:
    """Rewrite the summary, validly, with every size 7 bytes too large (to see what is served)."""
    summary = SizeSummary(cache_dir, path, mode)
    for name in NAMES:
        entry = summary._entries[name]
        summary.record(name, entry.start, entry.decoder, lambda files, e=entry: (e.total + 7, e.active))
    assert summary.save()


def test_a_remount_answers_sizes_without_opening_a_log(logdir_copy, tmp_path):
    cache_dir = tmp_path / "cache"
    want = {n: len(expected_jsonl(logdir_copy, n)) for n in NAMES}
    assert size_all(logdir_copy, cache_dir) == want
    assert len(list(cache_dir.glob("*.summary"))) == 1

    t = tree_of(logdir_copy, cache_dir)
    try:
        for name in NAMES:
            node = on_loop(t, name)
            assert node is not None
            attr = node.attr()
            assert attr.size == want[name] and attr.timeout == VOLATILE_TIMEOUT
            assert node.key == RecordsKey("records.jsonl", name, 1)
            assert t.partitions.open_state(name) is None, "answered without opening the partition"
            active = max((logdir_copy / name).glob("*.log"))
            assert attr.mtime_ns == active.stat().st_mtime_ns
        # reading it opens the partition: the same bytes, the same (first) generation
        node = on_loop(t, "orders-0")
        assert node is not None
        inodes = InodeTable(t)
        inode = inodes.register(node)
        assert node.stream.number == 1 and t.partitions.open_state("orders-0") is not None
        assert t.read_file("orders-0/records.jsonl") == expected_jsonl(logdir_copy, "orders-0")
        again = inodes.register(t.resolve("orders-0/records.jsonl"))
        assert again.ino == inode.ino and again.node is node
        assert node.attr().size == want["orders-0"]
    finally:
        t.close()


def test_the_summary_is_what_is_served_while_it_holds(logdir_copy, tmp_path):
    """The control for the staleness tests below: an unchanged partition is answered from the summary,
    poison and all (so those tests show a changed one is not)."""
    cache_dir = tmp_path / "cache"
    want = size_all(logdir_copy, cache_dir)
    poison(logdir_copy, cache_dir)
    t = tree_of(logdir_copy, cache_dir)
    try:
        for name in NAMES:
            node = on_loop(t, name)
            assert node is not None and node.attr().size == want[name] + 7
    finally:
        t.close()


def _touch(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def _rewrite_in_place_keeping_mtime(path: Path) -> None:
    st = path.stat()
    time.sleep(0.05)  # past the clock's granularity, so the ctime moves
    with open(path, "r+b") as f:
        data = f.read()
        f.seek(0)
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _append(logdir: Path) -> None:
    with LogDir(logdir, SMALL_SEGMENTS, writable=True) as d:
        d.log("orders-0").append_lines(b'{"value": {"late": 1}}\nplain')


def _new_file(logdir: Path) -> None:
    (logdir / "orders-0" / "00000000000000099999.snapshot").write_bytes(b"")


def _drop_first_segment(logdir: Path) -> None:
    first = min((logdir / "orders-0").glob("*.log"))
    for suffix in (".log", ".index", ".timeindex"):
        first.with_suffix(suffix).unlink(missing_ok=True)


def _log_start(logdir: Path) -> None:
    (logdir / LOG_START_FILE).write_bytes(render_offset_checkpoint({("orders", 0): 700}))


CHANGES = {
    "active segment appended to": _append,
    "a segment's mtime moved": lambda d: _touch(max((d / "orders-0").glob("*.log"))),
    "a sealed segment rewritten in place, old mtime put back": lambda d: _rewrite_in_place_keeping_mtime(
        min((d / "orders-0").glob("*.log"))),
    "a new file in the folder": _new_file,
    "a segment removed": _drop_first_segment,
    "the log start checkpoint moved": _log_start,
}


@pytest.mark.parametrize("change", CHANGES)
def test_a_changed_partition_is_never_answered_from_the_summary(logdir_copy, tmp_path, change):
    cache_dir = tmp_path / "cache"
    size_all(logdir_copy, cache_dir)
    poison(logdir_copy, cache_dir)
    CHANGES[change](logdir_copy)
    t = tree_of(logdir_copy, cache_dir)
    try:
        assert on_loop(t, "orders-0") is None, "the loop asks a worker: the summary does not hold"
        assert t.resolve("orders-0/records.jsonl").attr().size == len(t.read_file("orders-0/records.jsonl"))
        assert on_loop(t, "events-3") is not None  # the others still hold
    finally:
        t.close()
    # the next mount keeps the new size
    t = tree_of(logdir_copy, cache_dir)
    try:
        node = on_loop(t, "orders-0")
        assert node is not None
        assert node.attr().size == len(t.read_file("orders-0/records.jsonl"))
    finally:
        t.close()


def test_a_damaged_or_foreign_summary_is_ignored(logdir_copy, tmp_path):
    cache_dir = tmp_path / "cache"
    size_all(logdir_copy, cache_dir)
    (path,) = cache_dir.glob("*.summary")
    data = bytearray(path.read_bytes())
    data[40] ^= 1
    path.write_bytes(bytes(data))
    t = tree_of(logdir_copy, cache_dir)
    try:
        assert on_loop(t, "orders-0") is None
        assert t.resolve("orders-0/records.jsonl").attr().size
    finally:
        t.close()
    assert SizeSummary(cache_dir, logdir_copy, "auto")._entries  # rewritten whole at that unmount
    assert not SizeSummary(cache_dir, logdir_copy, "string")._entries  # another values mode: its own


def test_a_values_mode_has_its_own_summary(logdir_copy, tmp_path):
    cache_dir = tmp_path / "cache"
    auto = size_all(logdir_copy, cache_dir)
    base64 = size_all(logdir_copy, cache_dir, mode="base64")
    assert auto != base64
    t = tree_of(logdir_copy, cache_dir, mode="base64")
    try:
        node = on_loop(t, "orders-0")
        assert node is not None and node.attr().size == base64["orders-0"]
    finally:
        t.close()


def test_a_read_write_tree_keeps_no_summary(logdir_copy, tmp_path):
    cache_dir = tmp_path / "cache"
    t = Tree(LogDir(logdir_copy, SMALL_SEGMENTS, writable=True), cache=LayoutCache(cache_dir), rw=True)
    try:
        assert t.resolve("orders-0/records.jsonl").attr().size
        assert not t.partitions.summary.enabled
    finally:
        t.close()
    assert not list(cache_dir.glob("*.summary"))


def test_a_remounted_mount_serves_the_same_sizes_and_bytes(logdir_copy, tmp_path, mounted):
    cache_dir = tmp_path / "cache"
    m = mounted(logdir_copy, "--cache-dir", str(cache_dir))
    want = {n: expected_jsonl(logdir_copy, n) for n in NAMES}
    assert {n: os.stat(m / n / "records.jsonl").st_size for n in NAMES} == {n: len(w) for n, w in want.items()}
    m.stop()
    assert list(cache_dir.glob("*.summary"))
    m2 = mounted(logdir_copy, "--cache-dir", str(cache_dir))
    assert {n: os.stat(m2 / n / "records.jsonl").st_size for n in NAMES} == {n: len(w) for n, w in want.items()}
    for n in NAMES:
        assert (m2 / n / "records.jsonl").read_bytes() == want[n]
    m2.stop()


def test_a_watched_folder_keeps_the_summary_answer_until_an_event_drops_it(logdir_copy, tmp_path):
    """With the mount's watcher, the summary's answer is kept as long as a watched partition's (its
    folder is watched before the check); an event in the folder drops it (the Invalidator's
    folder_changed), and the partition, once opened, is refreshed for what came meanwhile."""
    from kafkafs.fs.tree.nodes import WATCHED_TIMEOUT
    from kafkafs.fs.watching import ChangeWatcher

    cache_dir = tmp_path / "cache"
    want = size_all(logdir_copy, cache_dir)
    t = tree_of(logdir_copy, cache_dir)
    watcher = ChangeWatcher()
    touched: list[str] = []
    watcher.on_folder_event = touched.append
    watcher.start()
    t.partitions.watch_folder = watcher.watch_folder
    try:
        folder = t.root.lookup_now("orders-0")
        assert folder is not None and folder.attr().timeout == WATCHED_TIMEOUT
        node = on_loop(t, "orders-0")
        assert node is not None
        attr = node.attr()
        assert (attr.size, attr.timeout) == (want["orders-0"], WATCHED_TIMEOUT)
        assert t.partitions.open_state("orders-0") is None
        _append(logdir_copy)
        deadline = time.monotonic() + 10
        while "orders-0" not in touched and time.monotonic() < deadline:
            time.sleep(0.01)
        assert "orders-0" in touched, "an event in the folder is heard before the partition opens"
        assert on_loop(t, "orders-0") is None, "the summary no longer holds"
        got = node.attr()  # the kernel asks again (its attributes were dropped): the partition opens
        state = t.partitions.open_state("orders-0")
        assert state is not None and state.watched
        assert got.size == len(t.read_file("orders-0/records.jsonl")) > want["orders-0"]
    finally:
        watcher.stop()
        t.close()


def test_watching_a_folder_twice_before_it_loads_forgets_no_event(tmp_path):
    from kafkafs.fs.watching import ChangeWatcher

    folder = tmp_path / "t-0"
    folder.mkdir()
    watcher = ChangeWatcher()
    watcher.start()
    try:
        first = watcher.watch_folder(folder)
        (folder / "x").write_bytes(b"1")
        deadline = time.monotonic() + 10
        while not any(watcher._early.values()) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert any(watcher._early.values())
        second = watcher.watch_folder(folder)
        assert first is not None and second is not None
        assert any(watcher._early.values()), "the event seen before the second watch is kept"
    finally:
        watcher.stop()


def test_a_remount_sees_records_appended_after_its_summary_answer(logdir_copy, tmp_path, mounted):
    cache_dir = tmp_path / "cache"
    m = mounted(logdir_copy, "--cache-dir", str(cache_dir))
    before = os.stat(m / "orders-0" / "records.jsonl").st_size
    m.stop()
    m2 = mounted(logdir_copy, "--cache-dir", str(cache_dir))
    assert os.stat(m2 / "orders-0" / "records.jsonl").st_size == before
    _append(logdir_copy)
    want = len(expected_jsonl(logdir_copy, "orders-0"))
    deadline = time.monotonic() + 5
    while os.stat(m2 / "orders-0" / "records.jsonl").st_size != want and time.monotonic() < deadline:
        time.sleep(0.02)
    assert os.stat(m2 / "orders-0" / "records.jsonl").st_size == want > before
    assert (m2 / "orders-0" / "records.jsonl").read_bytes() == expected_jsonl(logdir_copy, "orders-0")
    m2.stop()


def test_kafkafs_index_writes_the_summary_the_first_mount_answers_from(logdir_copy, tmp_path):
    from kafkafs.fs.views.prefill import index_logdir

    cache_dir = tmp_path / "cache"
    index_logdir(logdir_copy, cache_dir=cache_dir, out=None)
    t = tree_of(logdir_copy, cache_dir)
    try:
        for name in NAMES:
            node = on_loop(t, name)
            assert node is not None and node.attr().size == len(expected_jsonl(logdir_copy, name))
            assert t.partitions.open_state(name) is None
    finally:
        t.close()
