"""Streams (generations) of records.jsonl (fs/views/streams.py), without FUSE: an inode's bytes never change and its
size only grows across compaction and retention, appended records follow it as whole lines, and new
lookups get the new file."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
from collections.abc import Iterator
from typing import Any

import pytest

from kafkafs.errors import NotFound, SegmentClosedError
from kafkafs.format.jsonview import render_batch_jsonl
from kafkafs.fs.tree.inodes import InodeTable
from kafkafs.fs.tree.root import Tree
from kafkafs.fs.views import streams
from kafkafs.fs.views.layout import Layout
from kafkafs.fs.views.partition import Composition
from kafkafs.fs.views.reading import Part
from kafkafs.fs.views.streams import handle_view
from kafkafs.storage.cleaner import apply_retention, compact
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir

SETTINGS = Settings(
    {"segment.bytes": 700, "index.interval.bytes": 128, "file.delete.delay.ms": 600_000},
    topics={
        "kv": {"cleanup.policy": "compact", "delete.retention.ms": 0},
        "ev": {"retention.bytes": 1500, "retention.ms": -1},
    },
)
NOW = 10**13


class Writer:
    """Appends to kv-0 (30 keys, some tombstones) and ev-0, and remembers what each offset holds."""

    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self.rng = random.Random(3)
        self.appended: dict[str, dict[int, tuple]] = {"kv-0": {}, "ev-0": {}}

    def append(self, name: str, n: int) -> None:
        log = self.tree.partitions.state(name).log
        for _ in range(n // 3):
            start = log.log_end_offset
            rows = []
            for i in range(3):
                off = start + i
                if name == "kv-0":
                    key = f"k{self.rng.randrange(30)}"
                    value = None if self.rng.random() < 0.05 else f"{off}:{key}"
                else:
                    key, value = None, f"e{off}"
                rows.append((1000 + off, None if key is None else key.encode(), None if value is None else value.encode(), ()))
                self.appended[name][off] = (key, value)
            log.append_records(rows)

    def check_line(self, name: str, line: bytes) -> int:
        rec = json.loads(line)
        assert (rec["key"], rec["value"]) == self.appended[name][rec["offset"]], rec
        return rec["offset"]


def read_all(handle, start: int = 0, chunk: int = 1000) -> bytes:
    out, offset = [], start
    while True:
        data = handle.read(offset, chunk)
        if not data:
            return b"".join(out)
        out.append(data)
        offset += len(data)


def rendered(log) -> bytes:
    return b"".join(render_batch_jsonl(log.topic, log.partition, b, "auto") for b in log.read())


class Follower:
    """What ``tail -f`` does with one open inode: stat, read from where it was, check."""

    def __init__(self, writer: Writer, name: str) -> None:
        self.writer, self.name = writer, name
        self.node = writer.tree.resolve(f"{name}/records.jsonl")
        self.handle = self.node.open(False)
        self.data = b""
        self.last = -1

    def follow(self) -> None:
        size = self.node.attr().size
        assert size >= len(self.data)  # never shrinks
        new = read_all(self.handle, len(self.data))
        assert len(self.data) + len(new) >= size
        if size:
            assert (self.data + new)[size - 1 : size] == b"\n"  # every size ends a line
        self.data += new
        assert not self.data or self.data.endswith(b"\n")
        for line in new.splitlines():
            offset = self.writer.check_line(self.name, line)
            assert offset > self.last
            self.last = offset

    def check_unchanged(self, rng: random.Random) -> None:
        """Bytes already served, read again at random places, are the same."""
        for _ in range(20):
            a = rng.randrange(len(self.data))
            n = rng.randrange(1, 300)
            assert self.handle.read(a, n) == self.data[a : a + n]


def _writer(tmp_path) -> Writer:
    """A :class:`Writer` through a writable tree of a new log directory that holds an empty kv-0."""
    with LogDir(tmp_path, SETTINGS, writable=True) as logdir:
        logdir.create_partition("kv", 0)
    return Writer(Tree(LogDir(tmp_path, SETTINGS, writable=True), rw=True))


@contextlib.contextmanager
def _beside_another_process(tmp_path) -> Iterator[tuple[Writer, Tree]]:
    """kv-0 with 150 records appended by a :class:`Writer`, and a read-only tree of the same folder (another
    process's view of it); both trees closed at the end."""
    writer = _writer(tmp_path)
    ro = Tree(LogDir(tmp_path, SETTINGS))
    try:
        writer.append("kv-0", 150)
        yield writer, ro
    finally:
        ro.close()
        writer.tree.close()


def _follower_of(ro: Tree, writer: Writer) -> Follower:
    """A :class:`Follower` of kv-0's records.jsonl in the read-only tree ``ro`` (not the writer's), caught up."""
    follower = Follower(writer, "kv-0")
    follower.handle.release()  # it follows the read-only tree's file instead
    follower.node = ro.resolve("kv-0/records.jsonl")
    follower.handle = follower.node.open(False)
    follower.follow()
    return follower


@pytest.fixture
def tree(tmp_path):
    with LogDir(tmp_path, SETTINGS, writable=True) as logdir:
        logdir.create_partition("kv", 0)
        logdir.create_partition("ev", 0)
    t = Tree(LogDir(tmp_path, SETTINGS, writable=True), rw=True)
    yield t
    t.close()


def test_a_partition_that_only_grows_keeps_its_records_inode(tree):
    writer = Writer(tree)
    writer.append("ev-0", 30)
    first = tree.resolve("ev-0/records.jsonl")
    writer.append("ev-0", 90)  # rolls segments: still only growth
    again = tree.resolve("ev-0/records.jsonl")
    assert again.key == first.key and again.stream is first.stream and not first.stream.detached
    assert first.attr().size == len(rendered(tree.partitions.state("ev-0").log))


@pytest.mark.parametrize("name", ["kv-0", "ev-0"])
def test_open_inodes_only_grow_across_swaps_and_new_lookups_see_the_new_file(tree, name):
    writer = Writer(tree)
    rng = random.Random(11)
    log = tree.partitions.state(name).log
    followers: list[Follower] = []
    keys = set()
    for round_ in range(12):
        writer.append(name, rng.randrange(6, 60))
        followers.append(Follower(writer, name))
        keys.add(followers[-1].node.key)
        for f in followers:
            f.follow()
        writer.append(name, rng.randrange(3, 30))
        removed = compact(log, NOW) if name == "kv-0" else apply_retention(log, NOW)
        assert removed or round_ < 2, "the settings make every round rewrite segments"
        for f in followers:
            f.follow()
            f.check_unchanged(rng)
        fresh = tree.resolve(f"{name}/records.jsonl")  # a new lookup: the file as it is now
        assert tree.read_file(f"{name}/records.jsonl") == rendered(log)
        assert fresh.attr().size == len(rendered(log))
        for f in followers:
            assert f.node.stream.detached == bool(removed) or f.node.stream.detached
            assert f.node.key != fresh.key or not removed
    assert len(keys) >= len(followers) - 2  # a new generation each round that rewrote segments
    for f in followers:
        assert f.last == log.log_end_offset - 1  # every follower got to the end


def test_deleted_segments_read_back_say_stale_and_following_goes_on(tmp_path):
    settings = Settings({"segment.bytes": 700, "retention.bytes": 1500, "retention.ms": -1,
                         "file.delete.delay.ms": 0})
    with LogDir(tmp_path, settings, writable=True) as logdir:
        logdir.create_partition("ev", 0)
    tree = Tree(LogDir(tmp_path, settings, writable=True), rw=True)
    try:
        writer = Writer(tree)
        writer.append("ev-0", 60)
        follower = Follower(writer, "ev-0")
        follower.follow()
        log = tree.partitions.state("ev-0").log
        writer.append("ev-0", 60)
        assert apply_retention(log, NOW)
        log.delete_expired_files(NOW)  # past file.delete.delay.ms: the files are gone
        follower.follow()  # reading on from where it was needs only segments that are there
        with pytest.raises(SegmentClosedError):
            follower.handle.read(0, 100)
    finally:
        tree.close()


def test_a_listing_renders_nothing_and_sizes_no_generation_it_has_not_seen(tree):
    writer = Writer(tree)
    writer.append("ev-0", 30)
    listed = {name: node for _i, name, node in tree.resolve("ev-0").entries(0)}
    assert listed["records.jsonl"].quick_attr().size == 0  # nothing laid out yet: no size promised
    node = tree.resolve("ev-0/records.jsonl")
    size = node.attr().size
    writer.append("ev-0", 60)
    assert apply_retention(tree.partitions.state("ev-0").log, NOW)
    listed = {name: node for _i, name, node in tree.resolve("ev-0").entries(0)}
    # the listing names the new generation (the rewritten file), with no size promised until asked
    fresh = listed["records.jsonl"]
    assert fresh.key != node.key and (fresh.quick_attr().size, fresh.quick_attr().timeout) == (0, 0)
    assert node.attr().size >= size  # the old one never shrinks
    assert tree.resolve("ev-0/records.jsonl").key == fresh.key


def test_the_inode_table_keeps_a_detached_generation_until_forgotten(tree):
    writer = Writer(tree)
    table = InodeTable(tree)
    writer.append("ev-0", 60)
    old_ino, old = table.register(tree.resolve("ev-0/records.jsonl"), count=1)
    size = old.attr().size
    writer.append("ev-0", 60)
    assert apply_retention(tree.partitions.state("ev-0").log, NOW)
    new_ino, new = table.register(tree.resolve("ev-0/records.jsonl"), count=1)
    assert new_ino != old_ino and table.get(old_ino) is old
    assert old.attr().size > size and new.attr().size < old.attr().size
    assert (old_ino, old) in table.of_partition("ev-0")  # appends invalidate it too
    table.forget(old_ino, 1)
    assert table.get(old_ino) is None and table.get(new_ino) is new


def _held_with_suffix(path, suffix: str) -> list[str]:
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(path)) and target.endswith(suffix):
            held.append(target)
    return held


def _deleted_files_held(path) -> list[str]:
    return _held_with_suffix(path, "(deleted)")


def test_a_lagging_reader_reads_what_it_was_shown_after_the_files_go(tree, tmp_path):
    writer = Writer(tree)
    log = tree.partitions.state("ev-0").log
    writer.append("ev-0", 120)
    lagging = Follower(writer, "ev-0")
    shown = lagging.node.attr().size  # tail -f saw the size, then blocked on its pipe
    writer.append("ev-0", 120)
    assert apply_retention(log, NOW)
    assert log.delete_expired_files(NOW + 10**9)  # file.delete.delay.ms is over: the files go
    assert not any(n.endswith(".deleted") for n in os.listdir(tmp_path / "ev-0"))
    assert _deleted_files_held(tmp_path)  # ... but what the reader was shown stays readable
    lagging.follow()
    assert len(lagging.data) > shown and lagging.last == log.log_end_offset - 1
    lagging.handle.release()
    assert _deleted_files_held(tmp_path) == []  # nobody reads: nothing held


def test_removed_segments_held_for_lagging_readers_are_in_the_descriptor_budget(tree, tmp_path):
    """review24 R24-4: beside a broker deleting segments, hundreds of streams held the ``.log`` of removed
    segments for their lagging readers outside the handle budget, and the read-only mount ran out of
    descriptors (reads of open files failed EMFILE). Now they are the budget's: given back when it asks
    (opened again by inode under the ``.deleted`` name at the next read), but kept once the file is gone
    from the disk (the only copy of those bytes)."""
    from kafkafs.storage.handles import BUDGET

    writer = Writer(tree)
    log = tree.partitions.state("ev-0").log
    writer.append("ev-0", 120)
    first, second = Follower(writer, "ev-0"), Follower(writer, "ev-0")
    writer.append("ev-0", 120)
    assert apply_retention(log, NOW)  # renamed .deleted (file.delete.delay.ms is 10 minutes)
    assert _held_with_suffix(tmp_path, ".deleted")  # held for the readers
    BUDGET.release_all()  # (before: the held ones were not the budget's, and stayed)
    assert _held_with_suffix(tmp_path, ".deleted") == []
    first.follow()  # reads them again, opened by inode under their .deleted names
    assert first.last == log.log_end_offset - 1
    assert log.delete_expired_files(NOW + 10**9)  # the files go: second's pins hold the only copy
    assert _deleted_files_held(tmp_path)
    BUDGET.release_all()
    assert _deleted_files_held(tmp_path)  # kept
    second.follow()
    assert second.data == first.data
    first.handle.release()
    second.handle.release()
    assert _deleted_files_held(tmp_path) == []


def test_removed_segments_are_let_go_once_every_reader_is_past_them(tree, tmp_path, monkeypatch):
    monkeypatch.setattr(streams, "PIN_MARGIN", 0)
    writer = Writer(tree)
    log = tree.partitions.state("ev-0").log
    writer.append("ev-0", 120)
    fast, slow = Follower(writer, "ev-0"), Follower(writer, "ev-0")
    fast.follow()
    writer.append("ev-0", 120)
    assert apply_retention(log, NOW)
    log.delete_expired_files(NOW + 10**9)
    assert _deleted_files_held(tmp_path)  # slow has read nothing yet
    slow.follow()
    fast.follow()
    assert _deleted_files_held(tmp_path) == []  # both are past every removed segment
    with pytest.raises(SegmentClosedError):  # reading back there is ESTALE
        slow.handle.read(0, 100)
    assert slow.data == fast.data


def test_by_offset_and_by_time_stay_right_across_swaps(tree):
    """Per-record files: every listed name resolves to the record appended at that offset, every other
    offset is ENOENT, and by-time/ finds the first remaining record at or after a time."""
    writer = Writer(tree)
    rng = random.Random(5)
    log = tree.partitions.state("kv-0").log
    for _round in range(8):
        writer.append("kv-0", rng.randrange(30, 90))
        tree.listdir("kv-0/by-offset")  # the kernel may hold names listed before the swap
        assert compact(log, NOW)
        listed = tree.listdir("kv-0/by-offset")
        present = {int(n[: -len(".json")]) for n in listed}
        assert present == {off for off, *_ in log.records()}
        for off in range(log.log_start_offset, log.log_end_offset):
            path = f"kv-0/by-offset/{off}.json"
            if off in present:
                rec = json.loads(tree.read_file(path))
                assert rec["offset"] == off and (rec["key"], rec["value"]) == writer.appended["kv-0"][off]
            else:
                with pytest.raises(NotFound):
                    tree.resolve(path)
        for ts in rng.sample(range(1000, 1000 + log.log_end_offset), 5):
            rec = json.loads(tree.read_file(f"kv-0/by-time/{ts}.json"))
            assert rec["offset"] == min(o for o in present if 1000 + o >= ts)


def test_a_segment_swapped_in_under_the_same_name_is_a_new_file(tree, tmp_path):
    writer = Writer(tree)
    log = tree.partitions.state("kv-0").log
    writer.append("kv-0", 150)
    name = f"{0:020d}.log"
    old = tree.resolve(f"kv-0/segments/{name}")
    before, attr = tree.read_file(f"kv-0/segments/{name}"), old.attr()
    assert before == (tmp_path / "kv-0" / name).read_bytes() and not old.replaced()
    assert compact(log, NOW)  # a cleaned segment takes the name
    after = (tmp_path / "kv-0" / name).read_bytes()
    assert after != before and old.replaced()
    assert old.attr() == attr  # the old file, for whoever holds it
    with pytest.raises(SegmentClosedError):  # ESTALE: the kernel looks the name up again
        old.open(False)
    new = tree.resolve(f"kv-0/segments/{name}")
    assert new.key != old.key and tree.read_file(f"kv-0/segments/{name}") == after
    assert new.attr().size == len(after)


@pytest.mark.parametrize("name", ["0-1000000.jsonl", "0-60.jsonl"])
def test_an_open_range_keeps_its_bytes_across_a_swap(tree, name):
    """A range file read across a compaction: the open one keeps its bytes (each piece reads the segment
    it was laid out from) and, while it reaches the end, goes on with the records appended; a new
    lookup gets the compacted range."""
    writer = Writer(tree)
    log = tree.partitions.state("kv-0").log
    writer.append("kv-0", 150)
    path = f"kv-0/by-offset/{name}"
    node = tree.resolve(path)
    handle = node.open(False)
    size = node.attr().size
    before = read_all(handle)
    assert len(before) == size
    assert compact(log, NOW)
    writer.append("kv-0", 30)
    assert node.attr().size >= size
    after = read_all(node.open(False))  # a second open of the old inode: nothing cached in it
    assert after[:size] == before and read_all(handle) == after
    last = -1
    for line in after.splitlines():
        last = max(last, writer.check_line("kv-0", line))
    hi = int(name.split("-")[1].split(".")[0])
    assert last == min(hi, log.log_end_offset - 1)
    fresh = tree.resolve(path)
    assert fresh.key != node.key
    assert tree.read_file(path) == b"".join(
        render_batch_jsonl(log.topic, log.partition, b, "auto") for b in log.read(0, hi))


def test_a_read_only_mount_follows_another_processs_compaction(tmp_path):
    """A read-only tree over a folder another writer compacts (a broker, ``kafkafs clean``): the swap is
    noticed (a segment replaced under the same name), the open file keeps its bytes and follows the
    appends, a new lookup gets the compacted file."""
    with _beside_another_process(tmp_path) as (writer, ro):
        log = writer.tree.partitions.state("kv-0").log
        follower = _follower_of(ro, writer)
        assert compact(log, NOW)
        writer.append("kv-0", 30)
        ro.partitions.state("kv-0").refresh(force=True)
        follower.follow()
        assert follower.last == log.log_end_offset - 1
        assert ro.resolve("kv-0/records.jsonl").key != follower.node.key
        assert ro.read_file("kv-0/records.jsonl") == rendered(log)


# ---------------------------------------------------------------------------------------------- handle_view


def _layout(*sizes: int) -> Layout:
    p = Layout()
    for i, n in enumerate(sizes):
        p.add(0, i * 100, 100, n, i)
    return p


def _comp(*layouts: Layout) -> Composition:
    parts, starts, total = [], [], 0
    for layout in layouts:
        parts.append(Part(layout, len(layout), total))
        starts.append(total)
        total += layout.total()
    return Composition(("shape", len(layouts)), parts, starts, total)


def test_a_handle_follows_growth_and_keeps_its_bytes_across_a_swap():
    a, b, c, active = _layout(10, 10), _layout(20), _layout(5), _layout(7)
    before = _comp(a, b, c, active)
    assert handle_view(None, before) is before
    rolled = _layout(3)
    grown = _comp(a, b, c, active, rolled)
    assert handle_view(before, grown) is grown
    merged = _layout(12)  # compaction swapped one segment in for a, b and c
    after = _comp(merged, active, rolled)
    view = handle_view(grown, after)
    assert [p.layout for p in view.parts] == [a, b, c, active, rolled]
    assert view.starts == grown.starts and view.total == grown.total  # nothing moved for this handle
    assert handle_view(None, after) is after  # a new open sees the compacted file


def test_after_a_roll_and_a_merge_the_handle_gets_the_later_segments_only():
    a, active = _layout(10, 10), _layout(5, 5)  # last offsets 0, 1 and 0, 1: offsets stand for order
    a.last_offsets[:] = type(a.last_offsets)("q", [0, 1])
    active.last_offsets[:] = type(a.last_offsets)("q", [2, 3])
    before = _comp(a, active)
    merged, new_active = _layout(4, 4), _layout(6)  # the old active rolled and was merged with a
    merged.last_offsets[:] = type(a.last_offsets)("q", [1, 4])  # 4: appended after the handle's read
    new_active.last_offsets[:] = type(a.last_offsets)("q", [5])
    after = _comp(merged, new_active)
    asked = []

    def layout_from(pieces, lo):
        asked.append((pieces, lo))
        tail = _layout(4)
        tail.last_offsets[:] = type(a.last_offsets)("q", [4])
        return tail

    view = handle_view(before, after, layout_from)
    assert asked == [(merged, 4)]
    assert [p.layout for p in view.parts][:2] == [a, active] and view.parts[3].layout is new_active
    assert view.starts[:2] == before.starts and view.total == before.total + 4 + 6


def test_a_segment_that_appears_below_what_a_handle_read_is_said_once(caplog):
    """A segment that appears below the ones an open records.jsonl has read (a restored or copied-in
    older segment, not compaction's rewrite of records it read): the handle does not go back for it,
    and that is said once, not passed over silently."""
    a, active, older = Layout(), Layout(), Layout()  # pieces of segments 10, 12 and (new) 2
    for layout, base, offsets in ((a, 10, (10, 11)), (active, 12, (12, 13)), (older, 2, (2, 3))):
        for i, offset in enumerate(offsets):
            layout.add(base, i * 100, 100, 10, offset)
    before = _comp(a, active)
    after = _comp(older, a, active)
    with caplog.at_level(logging.WARNING, logger="kafkafs.fs"):
        for _ in range(2):
            view = handle_view(before, after)
            assert [p.layout for p in view.parts] == [a, active] and view.total == before.total
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "offsets 2..3" in said[0] and "appeared below what an open reader has read" in said[0]
    merged = Layout()  # compaction's rewrite of a (and what followed): no word
    merged.add(10, 0, 100, 9, 11)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kafkafs.fs"):
        handle_view(before, _comp(merged, active))
    assert caplog.records == []


def test_a_new_open_of_a_records_file_a_compaction_replaced_is_stale(tmp_path):
    """review8 R8-3: a read-only tree over a folder another writer compacts; a name the kernel kept from
    before the swap is opened after the tree noticed it (its removed segments closed): the open went on
    and its first read failed with ESTALE ("segment is closed"). The open is refused (ESTALE: the kernel
    looks the name up again), and the new lookup reads the compacted file whole."""
    with _beside_another_process(tmp_path) as (writer, ro):
        log = writer.tree.partitions.state("kv-0").log
        kept = ro.resolve("kv-0/records.jsonl")
        kept.attr()  # its size shown: the kernel holds the name and the inode
        kept.stream.looked_up -= streams.OPEN_GRACE_S + 1  # held without a lookup for a while
        assert compact(log, NOW)
        ro.partitions.state("kv-0").refresh(force=True)
        with pytest.raises(SegmentClosedError, match="rewritten"):
            kept.open(False)
        assert ro.resolve("kv-0/records.jsonl").key != kept.key
        assert ro.read_file("kv-0/records.jsonl") == rendered(log)


def _merging(delay_ms: int) -> Settings:
    """Another process's compaction that merges every sealed segment of kv-0 into one."""
    return Settings({"segment.bytes": 100_000, "file.delete.delay.ms": delay_ms},
                    topics={"kv": {"cleanup.policy": "compact", "delete.retention.ms": 0}})


@contextlib.contextmanager
def _kv_tree(tmp_path) -> Iterator[Tree]:
    """A read-only tree of a log directory whose kv-0 holds 600 records in many small segments; closed at
    the end."""
    writer = _writer(tmp_path)
    writer.append("kv-0", 600)
    writer.tree.close()
    ro = Tree(LogDir(tmp_path, SETTINGS))
    try:
        yield ro
    finally:
        ro.close()


def _lagging(ro: Tree) -> tuple[Any, int, bytes]:
    """An open of kv-0/records.jsonl that read its first 100 bytes only (it lags): the handle, the file's
    size and those bytes."""
    node = ro.resolve("kv-0/records.jsonl")
    size = node.attr().size
    handle = node.open(False)
    return handle, size, bytes(handle.read(0, 100))


def test_a_lagging_reader_reads_on_across_another_processs_merging_compaction(tmp_path):
    """review8 R8-4: an open records.jsonl of a read-only tree whose reader lags (``tail -f`` between two
    polls, a slow pipe) while another process's compaction merges the segments ahead of it: the tree
    closed the merged-away segments when it noticed, before the stream could hold their files open for
    that reader, so its next read was ESTALE ("segment is closed") and ``tail -f`` died. Now they are
    closed after the stream held them: the bytes the reader was shown stay readable."""
    with _kv_tree(tmp_path) as ro:
        handle, size, head = _lagging(ro)
        with LogDir(tmp_path, _merging(600_000), writable=True) as logdir:
            before = rendered(logdir.log("kv-0"))
            segments = len(logdir.log("kv-0").segments)
            assert compact(logdir.log("kv-0"), NOW) and len(logdir.log("kv-0").segments) < segments / 4
        ro.partitions.state("kv-0").refresh(force=True)
        rest = b"".join(bytes(handle.read(a, 4096)) for a in range(100, size, 4096))
        assert head + rest == before
        handle.release()


def test_a_lagging_reader_reads_on_when_its_segments_descriptors_were_released(tmp_path):
    """review8 R8-4 (fix9's "left"): the handle budget had closed the descriptors of the segments a lagging
    reader has yet to read (a mount over many partitions), then another process's compaction removed
    them the way Kafka's cleaner does (merged ``.cleaned`` -> ``.swap``, the old files -> ``.deleted``,
    ``.swap`` -> ``.log``): holding them for the reader opened them again by name and found the merged
    file or nothing, so the reader's next read was ESTALE and ``tail -f`` died. They are found again
    under their ``.deleted`` names (the same inode), held, and stay readable after the files go."""
    with _kv_tree(tmp_path) as ro:
        handle, size, head = _lagging(ro)
        segments = list(ro.partitions.state("kv-0").log.segments)
        for segment in segments:
            segment.release_handles()  # as the handle budget does when too many segments hold some
        with LogDir(tmp_path, _merging(600_000), writable=True) as logdir:
            before = rendered(logdir.log("kv-0"))
            assert compact(logdir.log("kv-0"), NOW) and len(logdir.log("kv-0").segments) < len(segments) / 4
        assert os.path.exists(segments[1].log_path.with_name(segments[1].log_path.name + ".deleted"))
        ro.partitions.state("kv-0").refresh(force=True)
        for name in os.listdir(tmp_path / "kv-0"):  # file.delete.delay.ms later: the files go
            if name.endswith(".deleted"):
                os.unlink(tmp_path / "kv-0" / name)
        rest = b"".join(bytes(handle.read(a, 4096)) for a in range(100, size, 4096))
        assert head + rest == before
        handle.release()


def test_a_follower_never_shows_a_segment_removed_while_its_view_was_laid_out(tmp_path, monkeypatch):
    """review8 R8-4 (beside a broker whose cleaner compacts each segment as soon as it rolls): ``tail -f``
    stats its open records.jsonl; the partition's composition is laid out with the segments rolled since
    its last read, and before the stream moves to it, another process's compaction merges them away
    (its files deleted at once, ``file.delete.delay.ms`` 0) and the tree notices and closes them. The
    stream showed those parts anyway, nothing could hold them, and the read of them was ESTALE
    ("segment is closed"): tail -f died. Now such a view is laid out again from the log as it is: the
    follower reads on, in offset order, each record once, what the cleaner kept of them."""
    with _beside_another_process(tmp_path) as (writer, ro):
        follower = _follower_of(ro, writer)
        writer.append("kv-0", 150)  # segments roll: the follower's next stat lays them out
        writer.tree.close()
        state = ro.partitions.state("kv-0")
        state.refresh(force=True)
        lay_out = state.composition
        raced = []

        def racing_composition():
            composition = lay_out()
            if not raced:  # the other process's cleaner, noticed by the tree, before the stream moves on
                raced.append(True)
                with LogDir(tmp_path, _merging(0), writable=True) as logdir:
                    assert compact(logdir.log("kv-0"), NOW)
                assert not any(name.endswith(".deleted") for name in os.listdir(tmp_path / "kv-0"))
                state.refresh(force=True)
            return composition

        monkeypatch.setattr(state, "composition", racing_composition)
        before = follower.last
        follower.follow()
        assert raced and follower.last > before
        assert follower.last == state.log.log_end_offset - 1
        assert ro.read_file("kv-0/records.jsonl").endswith(follower.data.splitlines(keepends=True)[-1])


def test_a_table_opened_before_another_processs_compaction_reads_whole_after_it(tmp_path):
    """review8 R8-3: ``table.jsonl`` (and a key's history) is laid out over the segments at its open; a
    read-only tree noticed another process's compaction before the first read and closed the segments
    it merged away: the read was ESTALE ("segment is closed"), ~0.2% of table opens beside a broker's
    cleaner. The file reads on from the segments' files while they are there (renamed ``.deleted``)."""
    with _kv_tree(tmp_path) as ro:
        node = ro.resolve("kv-0/table.jsonl")
        whole = node.open(False)
        expected = read_all(whole)
        handle = node.open(False)  # laid out now, read after the compaction
        with LogDir(tmp_path, _merging(600_000), writable=True) as logdir:
            assert compact(logdir.log("kv-0"), NOW)
        ro.partitions.state("kv-0").refresh(force=True)
        assert expected and read_all(handle) == expected
        assert read_all(ro.resolve("kv-0/table.jsonl").open(False)) == expected  # what the compaction keeps


@pytest.mark.parametrize("delay_ms", [600_000, 0])
def test_an_open_right_after_its_lookup_is_not_refused_for_a_rewrite_in_between(tmp_path, delay_ms, monkeypatch):
    """review8 R8-3: the kernel's one retry after an ESTALE open looks the name up and opens it at once;
    beside a broker whose cleaner swaps segments several times a second, a rewrite noticed in between
    refused that open too, and the caller got ESTALE (5 opens in a 50 s live4.py run). An open right
    after its lookup reads the file that lookup returned, its removed segments held (their files are
    there, renamed ``.deleted``); where they are gone already (``file.delete.delay.ms`` 0) it is
    refused, ESTALE, and the next lookup gets the new file."""
    monkeypatch.setattr(streams, "OPEN_GRACE_S", 3600.0)  # the open comes "right after" however slow the test
    with _kv_tree(tmp_path) as ro:
        node = ro.resolve("kv-0/records.jsonl")
        size = node.attr().size
        first = node.open(False)
        before = read_all(first)
        first.release()  # nobody has it open when the compaction comes
        assert len(before) == size
        with LogDir(tmp_path, _merging(delay_ms), writable=True) as logdir:
            assert compact(logdir.log("kv-0"), NOW)
            after = rendered(logdir.log("kv-0"))
        ro.partitions.state("kv-0").refresh(force=True)
        looked_up = ro.resolve("kv-0/records.jsonl")
        assert looked_up.key != node.key  # a lookup now gets the compacted file
        if delay_ms:
            assert read_all(node.open(False)) == before
        else:
            with pytest.raises(SegmentClosedError, match="removed"):
                node.open(False)
        assert read_all(looked_up.open(False)) == after


def test_a_follower_kept_open_across_many_compactions_keeps_only_the_parts_ahead_of_it(tree, monkeypatch):
    """A ``tail -f`` open for days over a partition that compacts: its detached stream lets go of the
    parts its reader has passed whose segments left the log (one placeholder stands for their bytes),
    instead of keeping every part it ever had; what is ahead of the reader, and the lines it reads,
    are unchanged. A read back into what it let go of is ESTALE, as after file.delete.delay.ms."""
    monkeypatch.setattr(streams, "PIN_MARGIN", 0)
    writer = Writer(tree)
    rng = random.Random(4)
    log = tree.partitions.state("kv-0").log
    writer.append("kv-0", 60)
    follower = Follower(writer, "kv-0")
    follower.follow()
    counts = []
    for _ in range(8):
        writer.append("kv-0", rng.randrange(6, 30))
        compact(log, NOW)
        follower.follow()
        counts.append(len(follower.node.stream.view.parts))
    assert follower.node.stream.detached and follower.last == log.log_end_offset - 1
    assert max(counts[4:]) <= len(log.segments) + 2, counts
    with pytest.raises(SegmentClosedError):
        follower.handle.read(0, 100)
    writer.append("kv-0", 9)
    follower.follow()  # it reads on
    assert follower.last == log.log_end_offset - 1
