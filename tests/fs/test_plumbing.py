"""The FUSE layer's small parts, without a kernel: inode table, worker pool, invalidator, options."""

from __future__ import annotations

import errno
import threading
import time

import pytest
import trio

from kafkafs.errors import CorruptRecordError, InvalidInput, InvalidName, ReadOnlyError, RecordTooLargeError
from kafkafs.fs.errnos import errno_for
from kafkafs.fs.inodes import ROOT_INODE, InodeTable
from kafkafs.fs.live import Invalidator
from kafkafs.fs.mount import fuse_option_set
from kafkafs.fs.tree import NotFound, NotPermitted, Tree
from kafkafs.fs.workers import WorkerPool
from kafkafs.storage.logdir import LogDir

from .conftest import SMALL_SEGMENTS


@pytest.fixture
def tree(built_logdir):
    t = Tree(LogDir(built_logdir))
    yield t
    t.close()


def test_inode_table_counts_and_forgets(tree):
    table = InodeTable(tree)
    node = tree.resolve("orders-0/by-offset/5-9.jsonl")
    ino, same = table.register(node, count=1)
    assert same is node and ino != ROOT_INODE
    again, known = table.register(tree.resolve("orders-0/by-offset/5-9.jsonl"))
    assert again == ino and known is node  # the same key: the same inode and the same node (its layout)
    table.remember(ino, 2)
    table.forget(ino, 2)
    assert table.get(ino) is node
    table.forget(ino, 1)
    assert table.get(ino) is None
    assert table.register(node)[0] != ino  # a new number after the old one was forgotten
    assert table.get(ROOT_INODE) is tree.root
    table.forget(ROOT_INODE, 100)
    assert table.get(ROOT_INODE) is tree.root


def test_record_inodes_are_computed(tree):
    table = InodeTable(tree)
    node = tree.resolve("orders-0/by-offset/1234.json")
    ino, _ = table.register(node, count=1)
    assert ino == node.fixed_ino and len(table) == 1  # nothing stored for it
    back = table.get(ino)
    assert back.offset == 1234 and back.state.name == "orders-0"
    table.forget(ino, 1)
    assert table.get(ino).offset == 1234


def test_discard_gives_back_references(tree):
    table = InodeTable(tree)
    ino, _ = table.register(tree.resolve("orders-0/records.jsonl"), count=1)
    table.discard_if_unused(ino, taken=1)
    assert table.get(ino) is None


@pytest.mark.allow_warnings("errors are logged where they become errno")
def test_errno_mapping():
    assert errno_for(NotFound("x"), rw=False) == errno.ENOENT
    assert errno_for(NotPermitted("x"), rw=False) == errno.EROFS
    assert errno_for(NotPermitted("x"), rw=True) == errno.EACCES
    assert errno_for(ReadOnlyError("x"), rw=True) == errno.EROFS
    assert errno_for(CorruptRecordError("bad", 3, "/x.log"), rw=False) == errno.EIO
    assert errno_for(InvalidInput("x"), rw=True) == errno.EINVAL
    assert errno_for(InvalidName("x"), rw=True, mkdir=True) == errno.EINVAL
    assert errno_for(InvalidName("x"), rw=True) == errno.ENOENT
    assert errno_for(RecordTooLargeError("x"), rw=True) == errno.EFBIG
    assert errno_for(FileExistsError(), rw=True) == errno.EEXIST
    assert errno_for(OSError(errno.ENOSPC, "full"), rw=True) == errno.ENOSPC
    assert errno_for(RuntimeError("?"), rw=True) == errno.EIO


def test_worker_pool_runs_off_the_loop():
    """Calls block until the loop itself releases them: that only works if the loop keeps running."""
    pool = WorkerPool(threads=2)
    release = threading.Event()
    results = []

    async def main():
        loop_thread = threading.get_ident()

        async def one():
            results.append(await pool.run(lambda: (release.wait(5), threading.get_ident())[1]))

        start = time.monotonic()
        async with trio.open_nursery() as nursery:
            for _ in range(2):
                nursery.start_soon(one)
            await trio.sleep(0.01)  # the loop is alive while both calls block
            release.set()
        assert time.monotonic() - start < 4
        assert len(results) == 2 and loop_thread not in results
        with pytest.raises(ZeroDivisionError):
            await pool.run(lambda: 1 / 0)

    trio.run(main)
    pool.stop()


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


def test_fuse_options():
    options, rw, values = fuse_option_set(False, ["allow_other,noatime", "values=base64"])
    assert {"ro", "allow_other", "noatime", "fsname=kafkafs", "subtype=kafkafs"} <= options
    assert rw is False and values == "base64"
    options, rw, _ = fuse_option_set(True, ["rw", "defaults"])
    assert rw is True and "ro" not in options and "rw" not in options and "defaults" not in options
    options, rw, _ = fuse_option_set(True, ["ro"])
    assert rw is False and "ro" in options
    # the mount is named after the log directory, unless the user names it
    options, _, _ = fuse_option_set(False, [], "/var/lib/kafka/data")
    assert {"fsname=/var/lib/kafka/data", "subtype=kafkafs"} <= options
    options, _, _ = fuse_option_set(False, ["fsname=mine,subtype=kfs"], "/var/lib/kafka/data")
    assert {"fsname=mine", "subtype=kfs"} <= options
    assert not {"fsname=/var/lib/kafka/data", "subtype=kafkafs"} & options
    options, _, _ = fuse_option_set(False, [], "/data/a,b\\c")
    assert "fsname=/data/a\\,b\\\\c" in options  # libfuse splits at commas; a backslash escapes
    options, _, _ = fuse_option_set(False, [], "/data/kafka-\u00e9t\u00e9")
    assert "fsname=kafkafs" in options  # pyfuse3 passes options as ASCII
