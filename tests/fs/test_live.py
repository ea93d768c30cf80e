"""Live views: the kernel hears that files grew (Invalidator), before an append returns."""

from __future__ import annotations

import time

from kafkafs.fs.inodes import InodeTable
from kafkafs.fs.live import Invalidator
from kafkafs.fs.tree import Tree
from kafkafs.storage.logdir import LogDir

from .conftest import SMALL_SEGMENTS


def test_invalidator_sends_growing_files(logdir_copy):
    tree = Tree(LogDir(logdir_copy, SMALL_SEGMENTS, writable=True), rw=True)
    try:
        table = InodeTable(tree)
        sent = []
        inv = Invalidator(table, sent.append)
        tree.add_listener(inv.partition_changed)
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
        tree.add_append_listener(inv.attrs_now)  # the thread is not started: only attrs_now can send
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
