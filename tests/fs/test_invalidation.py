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
        records, _ = table.register(tree.resolve("events-3/records.jsonl"), count=1)
        info, _ = table.register(tree.resolve("events-3/partition.json"), count=1)
        stable, _ = table.register(tree.resolve("events-3/by-offset/0-1.jsonl"), count=1)
        table.get(stable).attr()
        handle = tree.resolve("events-3/append").open(True)
        handle.write(0, b"partial")
        assert calls == []
        handle.write(0, b" line\n")
        assert {(records, True), (info, True)} <= set(calls) and all(attr_only for _i, attr_only in calls)
        assert stable not in {ino for ino, _a in calls}
        calls.clear()
        handle.write(0, b"x")
        handle.flush()
        assert (records, True) in calls
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
