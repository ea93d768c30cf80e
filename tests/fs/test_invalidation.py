"""Live views: the kernel hears that files grew (Invalidator), before an append returns."""

from __future__ import annotations

import time

from kafkafs.fs.invalidation import Invalidator
from kafkafs.fs.tree.inodes import InodeTable
from kafkafs.fs.tree.root import Tree
from kafkafs.storage.logdir import LogDir

from .conftest import SMALL_SEGMENTS


def test_invalidator_sends_growing_files(logdir_copy):
    tree = Tree(LogDir(logdir_copy, SMALL_SEGMENTS, writable=True), rw=True)
    try:
        table = InodeTable(tree)
        sent = []
        inv = Invalidator(table, sent.append)
        tree.partitions.add_listener(inv.partition_changed)
        inv.start()
        records, _ = table.register(tree.resolve("events-3/records.jsonl"), count=1)
        info, _ = table.register(tree.resolve("events-3/partition.json"), count=1)
        done_range, _ = table.register(tree.resolve("events-3/by-offset/0-1.jsonl"), count=1)
        table.get(done_range).attr()
        other, _ = table.register(tree.resolve("orders-0/records.jsonl"), count=1)
        handle = tree.resolve("events-3/append").open(True)
        handle.write(0, b"new\n")
        deadline = time.monotonic() + 2
        while records not in sent and time.monotonic() < deadline:
            time.sleep(0.01)
        inv.stop()
        assert records in sent and info in sent
        assert done_range not in sent and other not in sent
    finally:
        tree.close()


def test_appends_mark_attributes_stale_before_returning(logdir_copy):
    """The write path's own invalidation: attributes only (no page is waited for), synchronous."""
    tree = Tree(LogDir(logdir_copy, SMALL_SEGMENTS, writable=True), rw=True)
    try:
        table = InodeTable(tree)
        calls = []
        inv = Invalidator(table, lambda ino, attr_only=False: calls.append((ino, attr_only)))
        tree.partitions.add_append_listener(inv.attrs_now)  # the thread is not started: only attrs_now can send
        records = _given(table, tree.resolve("events-3/records.jsonl"))
        info = _given(table, tree.resolve("events-3/partition.json"))
        stable = _given(table, tree.resolve("events-3/by-offset/0-1.jsonl"))
        handle = tree.resolve("events-3/append").open(True)
        handle.write(0, b"partial")
        assert calls == []
        handle.write(0, b" line\n")
        assert {(records, True), (info, True)} <= set(calls) and all(attr_only for _i, attr_only in calls)
        assert stable not in {ino for ino, _a in calls}
        calls.clear()
        _given(table, tree.resolve("events-3/records.jsonl"))
        handle.write(0, b"x")
        handle.flush()
        assert calls == [(records, True)]  # partition.json's attributes were not asked for again
    finally:
        tree.close()


def _given(table: InodeTable, node) -> int:
    """Register ``node`` and give the kernel its attributes, as a lookup's reply does."""
    ino, known = table.register(node, count=1)
    table.attrs_replying(ino)
    table.attrs_given(ino, known.attr().timeout)
    return ino


def test_appends_tell_the_kernel_only_of_attributes_it_may_hold(logdir_copy):
    """Issue 25 (writes beside readers): the attributes of growing files are marked stale only where the
    kernel may hold them: given in a reply (until that reply's timeout and a margin) or being computed for
    one, and not again once told, until they are given again."""
    from kafkafs.fs.tree.inodes import ATTR_MARGIN

    tree = Tree(LogDir(logdir_copy, SMALL_SEGMENTS, writable=True), rw=True)
    try:
        now = [1000.0]
        table = InodeTable(tree, clock=lambda: now[0])
        calls = []
        inv = Invalidator(table, lambda ino, attr_only=False: calls.append(ino))
        tree.partitions.add_append_listener(inv.attrs_now)
        never, _ = table.register(tree.resolve("events-3/records.jsonl"), count=1)  # no attributes given
        growing = [_given(table, tree.resolve(f"events-3/by-offset/{i}-100000.jsonl")) for i in range(3)]
        computing, _ = table.register(tree.resolve("events-3/partition.json"), count=1)
        table.attrs_replying(computing)
        handle = tree.resolve("events-3/append").open(True)
        handle.write(0, b"one\n")
        assert sorted(calls) == sorted([*growing, computing]) and never not in calls
        calls.clear()
        handle.write(0, b"two\n")
        assert calls == [computing]  # its reply is still being computed
        table.attrs_given(computing, 0.1)
        calls.clear()
        handle.write(0, b"three\n")
        assert calls == [computing]  # given after the last one was told: held until 0.1 s + margin
        calls.clear()
        listed = growing[0]
        table.attrs_given(listed, 0.1, replied=False)  # a listing's entry (READDIRPLUS)
        now[0] += 0.1 + ATTR_MARGIN + 0.01  # past every timeout given
        handle.write(0, b"four\n")
        assert calls == []
        table.attrs_given(listed, 0.1, replied=False)
        marks = {ino: mark for (ino, _node), mark in table.attrs_held_in("events-3")}
        assert set(marks) == {listed}
        now[0] += 0.01
        table.attrs_given(listed, 0.1, replied=False)  # given again after attrs_held_in, before attrs_dropped
        table.attrs_dropped(listed, marks[listed])
        [((ino, _node), newer)] = table.attrs_held_in("events-3")  # the newer mark stays
        assert ino == listed and newer > marks[listed]
        table.attrs_dropped(listed, newer)
        assert table.attrs_held_in("events-3") == []
    finally:
        tree.close()


def test_a_rewrite_drops_the_kernels_entries_for_records_and_replaced_segments(tmp_path):
    from kafkafs.storage.cleaner import compact
    from kafkafs.storage.config import Settings

    settings = Settings({"segment.bytes": 700}, topics={"kv": {"cleanup.policy": "compact"}})
    with LogDir(tmp_path, settings, writable=True) as logdir:
        logdir.create_partition("kv", 0)
    tree = Tree(LogDir(tmp_path, settings, writable=True), rw=True)
    try:
        table = InodeTable(tree)
        entries = []
        inv = Invalidator(table, lambda ino, attr_only=False: None, lambda parent, name: entries.append((parent, name)))
        tree.partitions.add_listener(inv.partition_changed)
        inv.start()
        log = tree.partitions.state("kv-0").log
        for i in range(150):
            log.append_records([(1000 + i, b"k%d" % (i % 5), b"v%d" % i, ())])
        folder, _ = table.register(tree.resolve("kv-0"), count=1)
        segments, _ = table.register(tree.resolve("kv-0/segments"), count=1)
        table.register(tree.resolve("kv-0/records.jsonl"), count=1)
        by_offset, _ = table.register(tree.resolve("kv-0/by-offset"), count=1)
        table.register(tree.resolve("kv-0/by-offset/0-40.jsonl"), count=1)
        last = f"{log.active_segment.base_offset:020d}.log"
        for name in (f"{0:020d}.log", last):
            table.register(tree.resolve(f"kv-0/segments/{name}"), count=1)
        assert compact(log, 10**13)
        deadline = time.monotonic() + 2
        while len(entries) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        inv.stop()
        assert (folder, b"records.jsonl") in entries and (segments, f"{0:020d}.log".encode()) in entries
        assert (by_offset, b"0-40.jsonl") in entries
        assert (segments, last.encode()) not in entries  # the active segment's files stay what they are
    finally:
        tree.close()


def test_a_folder_gone_drops_its_name_from_the_root(logdir_copy):
    # review13 R13-3: the kernel kept a deleted topic's watched folder name 10 s
    from kafkafs.fs.tree.inodes import ROOT_INODE

    tree = Tree(LogDir(logdir_copy))
    try:
        table = InodeTable(tree)
        entries: list[tuple[int, bytes]] = []
        sent: list[int] = []
        inv = Invalidator(table, lambda ino, attr_only=False: sent.append(ino),
                          lambda parent, name: entries.append((parent, name)))
        inv.start()
        folder, _ = table.register(tree.resolve("orders-0"), count=1)
        inv.folder_changed("events-3")  # a change in a folder that is there: only attributes
        inv.folder_gone("orders-0")
        deadline = time.monotonic() + 2
        while not entries and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)
        inv.stop()
        assert entries == [(ROOT_INODE, b"orders-0")]
        assert folder in sent  # and its attributes
    finally:
        tree.close()


def test_a_read_that_shows_records_the_kernels_size_lacks_has_it_dropped_first(tmp_path):
    """SPEC §3 (exact size in ``stat``; the flaky schemas_live test under load): records another process
    appended, which the mount saw (its watcher's refresh) before its invalidator's thread told the kernel,
    are shown by a read (direct I/O reads past the size the kernel holds): before that read returns, the
    kernel is told to drop the file's attributes, so the reader's next ``stat`` asks and counts them.
    Reads within the size the kernel was given tell it nothing, and the FUSE loop's quick read leaves
    such a read to the worker."""
    path = tmp_path / "logs"
    path.mkdir()
    with LogDir(path, writable=True) as writer:
        writer.create_partition("data", 0).append_records([(1_700_000_000_000 + i, b"k", b"v%d" % i, ()) for i in range(5)])
    tree = Tree(LogDir(path))
    try:
        table = InodeTable(tree)
        calls = []
        inv = Invalidator(table, lambda ino, attr_only=False: calls.append((ino, attr_only)))
        tree.partitions.add_append_listener(inv.attrs_now)  # the thread is not started: it tells nothing
        node = tree.resolve("data-0/records.jsonl")
        records = _given(table, node)
        size = table.get(records).attr().size
        handle = node.open(False)
        assert len(handle.read(0, size + 4096)) == size and calls == []
        with LogDir(path, writable=True) as writer:
            writer.log("data-0").append_records([(1_700_000_000_005, b"k", b"later", ())])
        tree.partitions.state("data-0").refresh(force=True)  # the watcher's refresh; the invalidator lags
        assert handle.read_now(size, 4096) is None  # (the FUSE loop leaves it to the worker)
        new = bytes(handle.read(size, 4096))
        assert b'"later"' in new and calls == [(records, True)]
        assert table.get(records).attr().size == size + len(new)  # what the kernel asks next: all of it
        calls.clear()
        assert handle.read(size + len(new), 4096) == b"" and bytes(handle.read(size, 4096)) == new
        assert calls == []
        handle.release()
    finally:
        tree.close()


def test_a_change_is_told_again_for_replies_that_may_have_been_on_their_way(logdir_copy):
    """A reply that makes a new inode in the kernel (a lookup of records.jsonl after a rewrite or a schema
    change) is taken by the kernel whatever was told before it: an invalidation of an inode it does not
    know yet is lost. So a change is told again (attributes only) a moment later for the growing files
    whose attributes were given from ATTR_MARGIN before it on; not for those given long before."""
    from kafkafs.fs import invalidation
    from kafkafs.fs.tree.inodes import ATTR_MARGIN

    tree = Tree(LogDir(logdir_copy, SMALL_SEGMENTS, writable=True), rw=True)
    try:
        now = [1000.0]
        table = InodeTable(tree, clock=lambda: now[0])
        calls: list[tuple[int, bool, float]] = []
        inv = Invalidator(table, lambda ino, attr_only=False: calls.append((ino, attr_only, time.monotonic())))
        tree.partitions.add_listener(inv.partition_changed)
        old = _given(table, tree.resolve("events-3/by-offset/0-100000.jsonl"))
        now[0] += ATTR_MARGIN + 1  # its reply went long ago
        records = _given(table, tree.resolve("events-3/records.jsonl"))  # its reply may be on its way
        inv.start()
        changed = time.monotonic()
        tree.resolve("events-3/append").open(True).write(0, b"new\n")
        deadline = time.monotonic() + 5
        while (records, True, ) not in {c[:2] for c in calls} and time.monotonic() < deadline:
            time.sleep(0.01)
        inv.stop()
        told = [(attr_only, at) for ino, attr_only, at in calls if ino == records]
        assert told[0][0] is False  # the change, pages and attributes
        again = [at for attr_only, at in told if attr_only]
        assert again and again[0] - changed >= invalidation.TOLD_AGAIN_AFTER
        assert [attr_only for ino, attr_only, _at in calls if ino == old] == [False]  # told once
    finally:
        tree.close()
