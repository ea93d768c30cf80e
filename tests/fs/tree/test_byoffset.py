"""``by-offset/``: one find per lookup, and listings past ``--list-limit`` (SPEC §3)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from kafkafs.errors import NotFound
from kafkafs.format.jsonview import render_record_pretty
from kafkafs.fs.tree.inodes import record_ino
from kafkafs.fs.tree.partitions import LIST_LIMIT
from kafkafs.fs.tree.root import Tree
from kafkafs.storage.log import Log
from kafkafs.storage.logdir import LogDir
from kafkafs.storage.records import BatchView
from kafkafs.storage.segment import LogSegment

from ..conftest import SMALL_SEGMENTS, expected_jsonl


def tree_of(path: Path, **kw) -> Tree:
    return Tree(LogDir(path, SMALL_SEGMENTS), **kw)


@pytest.fixture
def tree(built_logdir):
    t = tree_of(built_logdir)
    yield t
    t.close()


# ---------------------------------------------------------------------------------------------- one decode


class EngineCalls:
    """Counts what the mount asks the engine for: batch lookups, decodes, and raw reads."""

    def __init__(self, monkeypatch) -> None:
        self.finds = self.decodes = self.reads = 0
        decode, read_at = BatchView.decode, LogSegment.read_at

        def counted_decode(view, **kw):
            self.decodes += 1
            return decode(view, **kw)

        def counted_read(segment, position, size):
            self.reads += 1
            return read_at(segment, position, size)

        monkeypatch.setattr(BatchView, "decode", counted_decode)
        monkeypatch.setattr(LogSegment, "read_at", counted_read)
        locate = Log.locate

        def counted_locate(log, offset, **kw):
            self.finds += 1  # one lookup through the engine (it asks the segment's find once or twice)
            return locate(log, offset, **kw)

        monkeypatch.setattr(Log, "locate", counted_locate)


def test_one_find_per_lookup(tree, built_logdir, monkeypatch):
    """lookup, then getattr and open and read of the inode it gave (as the kernel does them): the
    batch is found once, its one record rendered from its bytes (no record of it decoded into Python
    objects), and its bytes are never read a second time."""
    calls = EngineCalls(monkeypatch)
    parent = tree.resolve("orders-0/by-offset")
    node = parent.lookup("777.json")
    assert (calls.finds, calls.decodes, calls.reads) == (1, 0, 0)
    # getattr, open, read arrive by inode number: a node made afresh from it
    again = tree.node_for_ino(node.fixed_ino)
    attr = again.attr()
    handle = tree.node_for_ino(node.fixed_ino).open_now()  # from memory: no worker thread needed
    assert handle is not None and not handle.blocking
    data = handle.read(0, 1 << 20)
    assert tree.node_for_ino(node.fixed_ino).open(False).read(0, 1 << 20) == data
    assert len(data) == attr.size
    with LogDir(built_logdir) as d:
        log = d.log("orders-0")
        for batch in log.read(777, 777):
            want = render_record_pretty("orders", 0, batch, batch.offsets.index(777))
    assert data == want
    assert calls.finds == 1 and calls.decodes == 1  # the check above decoded it
    assert calls.reads == 0
    state = tree.partitions.state("orders-0")
    assert tree.node_for_ino(record_ino(state.index, 1400)).open_now() is None  # not looked up yet


def test_neighbours_in_one_batch_are_found_once(tree, monkeypatch):
    calls = EngineCalls(monkeypatch)
    parent = tree.resolve("orders-0/by-offset")
    for offset in range(100, 110):  # one batch of ten records
        parent.lookup(f"{offset}.json").attr()
    assert calls.finds == 1 and calls.decodes == 0 and calls.reads == 0


def test_offsets_that_do_not_resolve(tree):
    parent = tree.resolve("orders-0/by-offset")
    for name in ("1500.json", "999999.json", "-1.json", "x.json"):
        with pytest.raises(NotFound):
            parent.lookup(name)


# ---------------------------------------------------------------------------------------------- list limit


def test_every_offset_listed_up_to_the_limit(built_logdir):
    assert LIST_LIMIT == 100_000
    t = tree_of(built_logdir, list_limit=1500)
    try:
        names = t.listdir("orders-0/by-offset")
        assert names == [f"{o}.json" for o in range(1500)]
    finally:
        t.close()


def _ranges(names: list[str]) -> list[tuple[int, int]]:
    out = []
    for name in names:
        m = re.fullmatch(r"(\d+)-(\d+)\.jsonl", name)
        assert m, name
        out.append((int(m[1]), int(m[2])))
    return out


def test_past_the_limit_one_range_per_segment(built_logdir):
    t = tree_of(built_logdir, list_limit=1499)
    try:
        names = t.listdir("orders-0/by-offset")
        ranges = _ranges(names)
        with LogDir(built_logdir, SMALL_SEGMENTS) as d:
            bases = d.log("orders-0").segments.bases()
        assert [first for first, _ in ranges] == bases and len(bases) > 3
        assert ranges[-1][1] == 1499
        for (_f, last), (first, _l) in zip(ranges, ranges[1:], strict=False):
            assert first == last + 1  # contiguous, no offset left out
        for first, last in ranges:
            got = t.read_file(f"orders-0/by-offset/{first}-{last}.jsonl")
            assert got == expected_jsonl(built_logdir, "orders-0", first, last)
            assert t.resolve(f"orders-0/by-offset/{first}-{last}.jsonl").attr().size == len(got)
        # every offset still resolves by name
        for offset in (0, 1, 733, 1499):
            assert t.read_file(f"orders-0/by-offset/{offset}.json").startswith(b"{")
        # small partitions of the same mount still list their offsets
        assert t.listdir("events-3/by-offset") == [f"{o}.json" for o in range(5)]
    finally:
        t.close()


def test_range_listing_resumes_from_ids(built_logdir):
    t = tree_of(built_logdir, list_limit=10)
    try:
        node = t.resolve("orders-0/by-offset")
        listed = list(node.listing(0))
        assert len(listed) > 3
        next_id = listed[1][0]
        resumed = list(node.listing(next_id))
        assert [e[1] for e in resumed] == [e[1] for e in listed[2:]]
        assert [e[1] for e in node.entries(next_id)] == [e[1].decode() for e in listed[2:]]
    finally:
        t.close()


def test_list_limit_through_a_mount(built_logdir, mounted):
    m = mounted(built_logdir, "--list-limit", "100")
    names = os.listdir(m / "orders-0" / "by-offset")
    ranges = sorted(_ranges(names))
    assert ranges[0][0] == 0 and ranges[-1][1] == 1499
    first, last = ranges[1]
    assert (m / "orders-0" / "by-offset" / f"{first}-{last}.jsonl").read_bytes() == expected_jsonl(
        built_logdir, "orders-0", first, last
    )
    assert (m / "orders-0" / "by-offset" / "1234.json").read_bytes().startswith(b"{")
    assert sorted(os.listdir(m / "events-3" / "by-offset")) == sorted(f"{o}.json" for o in range(5))


def test_lookup_now_decodes_short_batches_only(tree, monkeypatch):
    """On the FUSE loop (``lookup_now``) a record of a short uncompressed batch resolves; a longer
    batch is left to a worker thread (None), and a missing offset is ENOENT either way (one past the
    known end of a read-only partition after a worker has read the folder again: test_live_lookups)."""
    from kafkafs.fs.views import record

    parent = tree.resolve("orders-0/by-offset")
    node = parent.lookup_now("777.json")
    assert node is not None and node.attr() == parent.lookup("777.json").attr()
    assert parent.lookup_now("999999.json") is None
    with pytest.raises(NotFound):
        parent.lookup("999999.json")
    assert parent.lookup_now("0-9.jsonl") is None  # ranges always go to a worker
    monkeypatch.setattr(record, "INLINE_BATCH_BYTES", 0)
    assert parent.lookup_now("555.json") is None
    assert parent.lookup("555.json").attr().size > 0


def test_lookup_now_leaves_a_batch_on_disk_to_a_worker(tree):
    """A record whose batch is not in the page cache is not read on the FUSE loop (a cold disk read
    would stall every other request): ``lookup_now`` defers it, a worker's ``lookup`` reads it, and
    the loop then answers the next record of that batch itself."""
    import glob

    from tests.storage.test_records import _evict

    parent = tree.resolve("orders-0/by-offset")
    state = tree.partitions.state("orders-0")
    logs = sorted(glob.glob(os.path.join(state.log.dir, "*.log")))
    if not logs or not all(_evict(Path(p)) for p in logs):
        pytest.skip("cannot drop the segments' pages from the page cache here")
    first = int(Path(logs[-1]).stem)  # a segment's first batch: far from the last byte that _evict read
    assert parent.lookup_now(f"{first}.json") is None
    assert parent.lookup(f"{first}.json").attr().size > 0
    node = parent.lookup_now(f"{first + 1}.json")
    assert node is not None and node.attr() == parent.lookup(f"{first + 1}.json").attr()
    for p in logs:
        Path(p).read_bytes()  # back in the page cache for the tests after this one


def test_records_of_legacy_message_sets_resolve(tmp_path):
    """Magic 0 and 1 messages, plain and in a gzip wrapper whose inner offsets are relative (v1):
    each by-offset file is the record decoded the reference's way, pretty-printed."""
    from kafkafs.format.batch import decode_batch
    from kafkafs.format.compression import Codec
    from tests.format.test_legacy import message, wrapper

    inner = b"".join(message(i, 1, timestamp=1000 + i, key=b"k%d" % i, value=b'{"n":%d}' % i) for i in range(3))
    log = (
        message(0, 0, key=None, value=b"plain v0")
        + message(1, 1, timestamp=1700000000000, key=b"k", value=b"\xff\xfe")
        + wrapper(1, Codec.GZIP, inner, 4, timestamp=1005)  # inner relative offsets 0..2 -> 2..4
    )
    part = tmp_path / "legacy-0"
    part.mkdir()
    (part / "00000000000000000000.log").write_bytes(log)
    t = tree_of(tmp_path)
    try:
        names = {}
        pos = 0
        while pos < len(log):
            size = 12 + int.from_bytes(log[pos + 8 : pos + 12], "big")
            batch = decode_batch(log[pos : pos + size])
            for i, offset in enumerate(batch.offsets):
                names[offset] = render_record_pretty("legacy", 0, batch, i)
            pos += size
        assert sorted(names) == [0, 1, 2, 3, 4]
        for offset, want in names.items():
            assert t.read_file(f"legacy-0/by-offset/{offset}.json") == want
        with pytest.raises(NotFound):
            t.resolve("legacy-0/by-offset/5.json")
    finally:
        t.close()


@pytest.mark.parametrize("source", ["built", "kafka-logs-a", "kafka-logs-b", "kafka-logs-c"])
def test_a_listing_gives_each_record_the_size_its_stat_gives(source, built_logdir, fixtures_dir, tmp_path):
    """review24 R24-5: by-offset/ listed every name with size 0 and timeout 0, so `ls -l`, `find -size`
    and `du` looked each name up (a render each, 0.25 ms to 11 ms a name). Each batch is now rendered once
    for the sizes of all its names, with the attributes a lookup gives (kept as long: the kernel asks
    nothing more)."""
    import shutil

    if source == "built":
        path = built_logdir
    else:
        path = tmp_path / source
        shutil.copytree(fixtures_dir / source, path)
    t = Tree(LogDir(path))
    try:
        sized = unsized = 0
        for folder in sorted(p.name for p in path.iterdir() if p.is_dir() and "-" in p.name):
            try:
                node = t.resolve(f"{folder}/by-offset")
            except NotFound:
                continue
            for _next_id, name, target, attr in node.listing(0):
                if not name.endswith(b".json"):
                    continue
                record = t.resolve(f"{folder}/by-offset/{name.decode()}")
                if attr.timeout == 0:  # not known from the listing (a decoder's topic): asked at the stat
                    unsized += 1
                    continue
                assert target == record.fixed_ino
                assert attr == record.attr(), (folder, name)
                sized += 1
        assert sized and (unsized == 0 or source != "built"), (sized, unsized)
    finally:
        t.close()
