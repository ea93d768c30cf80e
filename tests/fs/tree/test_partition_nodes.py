"""A partition folder's children: records.jsonl, by-offset/, by-time/, segments/, partition.json."""

from __future__ import annotations

import json
import random

import orjson
import pytest

from kafkafs.errors import NotFound
from kafkafs.format.jsonview import parse_timestamp, render_record_pretty
from kafkafs.fs.tree.root import Tree
from kafkafs.storage.logdir import LogDir

from ...storage.helpers import read_offset
from ..conftest import BASE_TS, engine_records, expected_jsonl, late_log, tree_of


@pytest.mark.parametrize("mode", ["auto", "string", "base64"])
def test_records_jsonl_is_the_engines_rendering(built_logdir, mode):
    t = tree_of(built_logdir, mode=mode)
    try:
        for name in ("orders-0", "events-3", "empty-0"):
            data = t.read_file(f"{name}/records.jsonl")
            assert data == expected_jsonl(built_logdir, name, mode=mode)
            assert t.resolve(f"{name}/records.jsonl").attr().size == len(data)
            for line in data.splitlines():
                json.loads(line)
    finally:
        t.close()


def test_records_jsonl_random_reads(tree, built_logdir):
    whole = expected_jsonl(built_logdir, "orders-0")
    handle = tree.resolve("orders-0/records.jsonl").open(False)
    rng = random.Random(1)
    for _ in range(300):
        off = rng.randrange(len(whole) + 10)
        size = rng.choice([1, 7, 100, 4096, 131072])
        assert handle.read(off, size) == whole[off : off + size]


def test_partition_json(tree):
    info = json.loads(tree.read_file("orders-0/partition.json"))
    assert info["topic"] == "orders" and info["partition"] == 0
    assert info["logStartOffset"] == 0 and info["logEndOffset"] == 1500
    assert len(info["segments"]) > 3 and {"baseOffset", "sizeBytes"} <= set(info["segments"][0])
    assert tree.resolve("orders-0/partition.json").attr().size == len(
        tree.read_file("orders-0/partition.json")
    )


def test_by_offset_listing_and_files(tree, built_logdir):
    names = tree.listdir("orders-0/by-offset")
    assert names == [f"{i}.json" for i in range(1500)]
    records = engine_records(built_logdir, "orders-0")
    with LogDir(built_logdir) as d:
        log = d.log("orders-0")
        for offset in (0, 1, 9, 10, 777, 1499):
            batch, i = read_offset(log, offset)
            data = tree.read_file(f"orders-0/by-offset/{offset}.json")
            assert data == render_record_pretty("orders", 0, batch, i)
            node = tree.resolve(f"orders-0/by-offset/{offset}.json")
            attr = node.attr()
            assert attr.size == len(data)
            assert attr.mtime_ns == records[offset].timestamp * 1_000_000
    for missing in ("1500.json", "99999.json", "01.json", "-1.json"):
        with pytest.raises(NotFound):
            tree.resolve(f"orders-0/by-offset/{missing}")


def test_by_offset_listing_resumes_from_ids(tree):
    node = tree.resolve("orders-0/by-offset")
    first = list(zip(range(25), node.entries(0), strict=False))
    next_id = first[-1][1][0]
    rest = [name for _id, name, _n in node.entries(next_id)]
    assert [e[1][1] for e in first] + rest == [f"{i}.json" for i in range(1500)]


def test_offset_ranges(tree, built_logdir):
    for first, last in ((0, 0), (0, 1499), (5, 14), (95, 433), (1490, 5000)):
        data = tree.read_file(f"orders-0/by-offset/{first}-{last}.jsonl")
        assert data == expected_jsonl(built_logdir, "orders-0", first, last)
        assert tree.resolve(f"orders-0/by-offset/{first}-{last}.jsonl").attr().size == len(data)
    assert tree.read_file("orders-0/by-offset/2000-3000.jsonl") == b""
    with pytest.raises(NotFound):
        tree.resolve("orders-0/by-offset/10-5.jsonl")


def test_offset_range_reuses_built_layouts(tree, built_logdir):
    tree.partitions.state("orders-0").composition()  # every segment laid out
    data = tree.read_file("orders-0/by-offset/3-1200.jsonl")
    assert data == expected_jsonl(built_logdir, "orders-0", 3, 1200)


def test_by_time(tree, built_logdir):
    records = engine_records(built_logdir, "orders-0")
    data = tree.read_file(f"orders-0/by-time/{BASE_TS + 55}.json")
    assert json.loads(data)["offset"] == 6
    iso = "2025-11-21T04:40:00.123Z"
    ts = parse_timestamp(iso)
    want = next(r.offset for r in records if r.timestamp >= ts)
    assert json.loads(tree.read_file(f"orders-0/by-time/{iso}.json"))["offset"] == want
    with pytest.raises(NotFound):
        tree.resolve(f"orders-0/by-time/{BASE_TS + 10**9}.json")
    with pytest.raises(NotFound):
        tree.resolve("orders-0/by-time/tomorrow.json")


def test_by_time_with_sub_millisecond_digits(tmp_path):
    # the first record at or after 10:01:00.0015 is the one at .002 (it gave the one at .001)
    at = parse_timestamp("2026-11-21T10:01:00Z")
    with LogDir(tmp_path, writable=True) as d:
        d.create_partition("t", 0).append_records([(at + i, None, b"v%d" % i, ()) for i in range(5)])
    t = tree_of(tmp_path)
    try:
        assert json.loads(t.read_file("t-0/by-time/2026-11-21T10:01:00.0015Z.json"))["offset"] == 2
        assert json.loads(t.read_file("t-0/by-time/2026-11-21T10:01:00.002Z.json"))["offset"] == 2
        data = t.read_file("t-0/by-time/2026-11-21T10:01:00.0005Z..2026-11-21T10:01:00.0025Z.jsonl")
        assert [orjson.loads(line)["offset"] for line in data.splitlines()] == [1, 2]  # at + 1 <= ts < at + 2.5
    finally:
        t.close()


def test_time_ranges(tree, built_logdir):
    records = engine_records(built_logdir, "orders-0")
    for ts1, ts2 in (
        (BASE_TS, BASE_TS + 100),
        (BASE_TS + 5, BASE_TS + 5000),
        (BASE_TS - 10**6, BASE_TS + 10**9),
    ):
        data = tree.read_file(f"orders-0/by-time/{ts1}..{ts2}.jsonl")
        offsets = [orjson.loads(line)["offset"] for line in data.splitlines()]
        assert offsets == [r.offset for r in records if ts1 <= r.timestamp < ts2]
        assert tree.resolve(f"orders-0/by-time/{ts1}..{ts2}.jsonl").attr().size == len(data)
    assert tree.read_file(f"orders-0/by-time/{BASE_TS}..{BASE_TS}.jsonl") == b""
    with pytest.raises(NotFound):
        tree.resolve(f"orders-0/by-time/{BASE_TS + 9}..{BASE_TS}.jsonl")


def test_time_ranges_with_timestamps_out_of_order(tmp_path):
    """SPEC: ``ts1..ts2`` holds every record with ts1 <= timestamp < ts2, in offset order; a record at
    or past ts2 does not end it (CreateTime need not grow with offsets)."""
    records = late_log(tmp_path)
    assert sorted(r.timestamp for r in records) != [r.timestamp for r in records]
    rng = random.Random(3)
    bounds = [
        (BASE_TS, BASE_TS + 2_500),  # the old blocks only, from the first of them to the last
        (BASE_TS + 100_000, BASE_TS + 102_000),  # recent blocks, sealed segments skipped between
        (BASE_TS - 1, BASE_TS),  # only the straggler at the end
        (BASE_TS - 10, BASE_TS + 10**6),  # everything
        (BASE_TS + 10**6, BASE_TS + 10**7),  # nothing
    ]
    bounds += [
        tuple(sorted(rng.randrange(BASE_TS - 10, BASE_TS + 106_000) for _ in range(2))) for _ in range(25)
    ]
    t = Tree(LogDir(tmp_path))
    try:
        for ts1, ts2 in bounds:
            name = f"late-0/by-time/{ts1}..{ts2}.jsonl"
            data = t.read_file(name)
            got = [orjson.loads(line)["offset"] for line in data.splitlines()]
            assert got == [r.offset for r in records if ts1 <= r.timestamp < ts2], (ts1, ts2)
            assert t.resolve(name).attr().size == len(data)
            handle = t.resolve(name).open(False)
            assert handle.read(len(data) // 3, 1000) == data[len(data) // 3 : len(data) // 3 + 1000]
    finally:
        t.close()


def test_folders_of_a_watched_partition_are_kept_long(built_logdir):
    """With the mount's watcher: a partition folder is watched from its first lookup (before it opens), so
    the kernel keeps its name 10 s, not 1 s; by-offset/ and by-time/ of a watched partition are kept as
    long (an event drops what the kernel holds of them: the Invalidator), of one that is polled briefly."""
    from kafkafs.fs.tree.nodes import VOLATILE_TIMEOUT, WATCHED_TIMEOUT
    from kafkafs.fs.watching import ChangeWatcher

    t = tree_of(built_logdir)
    watcher = ChangeWatcher()
    watcher.start()
    t.partitions.watch_folder = watcher.watch_folder
    try:
        folder = t.root.lookup_now("orders-0")
        assert folder is not None and t.partitions.open_state("orders-0") is None
        assert folder.attr().timeout == WATCHED_TIMEOUT
        assert folder.lookup_now("by-offset") is None  # the partition is not open: a worker opens it
        by_offset, by_time = folder.lookup("by-offset"), folder.lookup("by-time")
        assert by_offset.attr().timeout == by_time.attr().timeout == WATCHED_TIMEOUT  # the partition opens
        state = t.partitions.open_state("orders-0")
        assert state is not None and state.watched
        assert folder.lookup_now("by-offset").key == by_offset.key  # open: on the loop
        state.watched = False  # as a partition the watcher could not take (polled)
        assert by_offset.attr().timeout == by_time.attr().timeout == VOLATILE_TIMEOUT
    finally:
        watcher.stop()
        t.close()


def test_a_partition_whose_folder_left_the_logdir_resolves_no_more(logdir_copy):
    # review13 R13-3: a broker deleting a topic renames its folders NAME.<id>-delete; the folder node the
    # kernel holds (its name kept 10 s when watched) must not serve the partition, open or not, as empty
    t = tree_of(logdir_copy)
    try:
        folder = t.resolve("orders-0")
        assert json.loads(t.read_file("orders-0/partition.json"))["logEndOffset"] > 0  # open now
        (logdir_copy / "orders-0").rename(logdir_copy / "orders-0.0123456789abcdef0123456789abcdef-delete")
        t.partitions.state("orders-0").refresh(force=True)  # what the watcher does at the rename
        for name in ("partition.json", "records.jsonl", "by-offset", "by-key", "segments"):
            assert folder.lookup_now(name) is None, name
            with pytest.raises(NotFound):
                folder.lookup(name)
        with pytest.raises(NotFound):
            t.resolve("orders-0")
        with pytest.raises(NotFound):
            t.resolve("orders-0/partition.json")
        assert "orders-0" not in t.listdir("")
        assert t.resolve("events-3/partition.json")  # the others are as they were
    finally:
        t.close()


def test_a_watched_partitions_folder_is_statted_only_once_its_event_said_it_went(logdir_copy, monkeypatch):
    # R13-3 made every open and every lookup under a partition folder stat it on the FUSE loop (a repeated
    # by-offset/N.json read 0.38 ms, was 0.23): a watched folder's events say when it goes (the mount's hook)
    import pathlib
    import time

    from kafkafs.fs.mount import _folder_event
    from kafkafs.fs.watching import ChangeWatcher

    class Told:  # the Invalidator's side of the hook
        def __init__(self) -> None:
            self.gone: list[str] = []
            self.changed: list[str] = []

        def folder_changed(self, name: str) -> None:
            self.changed.append(name)

        def folder_gone(self, name: str) -> None:
            self.gone.append(name)

    def until(check, seconds: float = 3.0) -> bool:
        deadline = time.monotonic() + seconds
        while not check() and time.monotonic() < deadline:
            time.sleep(0.01)
        return check()

    stats: list[str] = []
    is_dir = pathlib.Path.is_dir

    def counted(self, *args, **kwargs):
        stats.append(self.name)
        return is_dir(self, *args, **kwargs)

    t = tree_of(logdir_copy)
    told = Told()
    watcher = ChangeWatcher()
    watcher.on_folder_event = _folder_event(t.partitions, told)
    watcher.start()
    t.partitions.watch_folder = watcher.watch_folder
    try:
        folder = t.resolve("orders-0")
        assert json.loads(t.read_file("orders-0/partition.json"))["logEndOffset"] > 0  # open, watched
        state = t.partitions.open_state("orders-0")
        assert state is not None and state.watched
        monkeypatch.setattr(pathlib.Path, "is_dir", counted)
        assert not t.partitions.folder_gone("orders-0")
        assert folder.lookup_now("by-offset") is not None and folder.lookup("by-time") is not None
        assert stats == []  # failed before (seen): ['orders-0', 'orders-0', 'orders-0']
        gone = logdir_copy / "orders-0.0123456789abcdef0123456789abcdef-delete"
        (logdir_copy / "orders-0").rename(gone)
        assert until(lambda: "orders-0" in told.gone), told.gone
        for name in ("partition.json", "records.jsonl", "by-offset", "by-key", "segments"):
            assert folder.lookup_now(name) is None, name
            with pytest.raises(NotFound):
                folder.lookup(name)
        assert t.partitions.folder_gone("orders-0")
        gone.rename(logdir_copy / "orders-0")  # back (a folder made again under the name)
        assert t.partitions.folder_gone("orders-0") is False  # not watched now: one stat says it
        assert watcher.watch(state)  # what the poll loop does with a partition no longer watched
        assert until(lambda: "orders-0" in told.changed), told.changed
        stats.clear()
        assert not t.partitions.folder_gone("orders-0") and folder.lookup_now("by-offset") is not None
        assert stats == []
    finally:
        watcher.stop()
        t.close()
