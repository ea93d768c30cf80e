"""Operations, the pyfuse3 adapter, driven without a kernel (as s3ql tests its own): requests go in as
the kernel sends them, entries and errno come out."""

from __future__ import annotations

import errno
import os
import threading
import time

import pyfuse3
import pytest
import trio

from kafkafs.fs.operations import Operations
from kafkafs.fs.tree.inodes import ROOT_INODE
from kafkafs.fs.tree.nodes import VOLATILE_TIMEOUT
from kafkafs.fs.tree.root import Tree
from kafkafs.storage.logdir import LogDir

from .conftest import SMALL_SEGMENTS, expected_jsonl


def _ops(path, *, rw: bool = False) -> Operations:
    return Operations(Tree(LogDir(path, SMALL_SEGMENTS, writable=rw), rw=rw))


def _close(ops: Operations) -> None:
    ops.workers.stop()
    ops.tree.close()


def _listing(ops: Operations, ino: int, monkeypatch) -> list[tuple[str, int]]:
    """opendir, readdir to the end (pyfuse3's reply collected), releasedir."""
    seen: list[tuple[str, int]] = []

    def reply(_token, name, entry, _next_id):
        seen.append((os.fsdecode(name), entry.st_ino))
        return True

    monkeypatch.setattr(pyfuse3, "readdir_reply", reply)

    async def run():
        fh = await ops.opendir(ino, None)
        await ops.readdir(fh, 0, None)
        await ops.releasedir(fh)

    trio.run(run)
    return seen


def test_lookup_getattr_open_read_release(built_logdir):
    ops = _ops(built_logdir)
    try:
        async def run():
            part = await ops.lookup(ROOT_INODE, b"events-3")
            assert part.st_mode & 0o040000
            records = await ops.lookup(part.st_ino, b"records.jsonl")
            attr = await ops.getattr(records.st_ino)
            info = await ops.open(records.st_ino, os.O_RDONLY, None)
            data = b""
            while chunk := await ops.read(info.fh, len(data), 128 * 1024):
                data += chunk
            await ops.release(info.fh)
            return attr.st_size, data

        size, data = trio.run(run)
        assert data == expected_jsonl(built_logdir, "events-3") and size == len(data)
    finally:
        _close(ops)


def test_record_lookup_on_the_loop_and_no_flush_when_read_only(built_logdir, monkeypatch):
    """by-offset/N.json resolves without a worker thread (its batch in the page cache); a read-only mount
    answers FLUSH with ENOSYS, which tells the kernel to send no more of them."""
    for segment in (built_logdir / "orders-0").glob("*.log"):
        segment.read_bytes()  # in the page cache: a batch on disk would go to a worker
    ops = _ops(built_logdir)
    try:
        async def run():
            part = await ops.lookup(ROOT_INODE, b"orders-0")
            by_offset = await ops.lookup(part.st_ino, b"by-offset")

            async def no_worker(fn, *args):
                raise AssertionError("a worker thread was asked")

            monkeypatch.setattr(ops, "_run", no_worker)
            entry = await ops.lookup(by_offset.st_ino, b"42.json")
            info = await ops.open(entry.st_ino, os.O_RDONLY, None)
            data = await ops.read(info.fh, 0, 1 << 20)
            with pytest.raises(pyfuse3.FUSEError) as failed:
                await ops.flush(info.fh)
            await ops.release(info.fh)
            return entry.st_size, data, failed.value.errno

        size, data, flush_errno = trio.run(run)
        assert size == len(data) and b'"offset": 42' in data and flush_errno == errno.ENOSYS
    finally:
        _close(ops)


def test_first_record_lookup_in_an_open_partition_needs_no_worker(built_logdir, monkeypatch):
    """The path of a first by-offset/N.json in a partition already open (its partition.json read, say):
    by-offset/ (and by-time/, segments/) are looked up on the loop, as N.json is; no worker trip on the
    way (issue 25: the worker trip for by-offset/ cost more than the record's own lookup). A partition not
    open yet is opened by a worker, as before."""
    for segment in (built_logdir / "orders-0").glob("*.log"):
        segment.read_bytes()  # in the page cache: a batch on disk would go to a worker
    ops = _ops(built_logdir)
    try:
        async def run():
            asked: list = []
            real = ops._run

            async def counted(fn, *args):
                asked.append(fn)
                return await real(fn, *args)

            monkeypatch.setattr(ops, "_run", counted)
            part = await ops.lookup(ROOT_INODE, b"events-3")
            assert ops.tree.partitions.open_state("events-3") is None
            await ops.lookup(part.st_ino, b"by-offset")  # opens the partition: a worker's
            assert len(asked) == 1 and ops.tree.partitions.open_state("events-3") is not None
            part = await ops.lookup(ROOT_INODE, b"orders-0")
            await ops.lookup(part.st_ino, b"partition.json")  # opens the partition (a worker)
            asked.clear()
            by_offset = await ops.lookup(part.st_ino, b"by-offset")
            for name in (b"by-time", b"segments"):
                await ops.lookup(part.st_ino, name)
            entry = await ops.lookup(by_offset.st_ino, b"42.json")
            info = await ops.open(entry.st_ino, os.O_RDONLY, None)
            data = await ops.read(info.fh, 0, 1 << 20)
            await ops.release(info.fh)
            assert asked == []
            return by_offset.entry_timeout, entry.st_size, data

        timeout, size, data = trio.run(run)
        assert size == len(data) and b'"offset": 42' in data
        assert timeout == VOLATILE_TIMEOUT  # no watcher here: its mtime moves with appends, kept briefly
    finally:
        _close(ops)


def test_readdir_lists_every_partition_and_counts_lookups(built_logdir, monkeypatch):
    ops = _ops(built_logdir)
    try:
        names = [name for name, _ino in _listing(ops, ROOT_INODE, monkeypatch)]
        assert names[:2] == [".", ".."]
        partitions = {p.name for p in built_logdir.iterdir() if p.is_dir()}
        assert partitions <= set(names[2:]) <= {p.name for p in built_logdir.iterdir()}  # and LOGDIR's own files
        listed = dict(_listing(ops, ROOT_INODE, monkeypatch))
        ino = listed["events-3"]
        before = len(ops.inodes)
        trio.run(ops.forget, [(ino, 2)])  # the two listings each counted one reference
        assert len(ops.inodes) == before - 1
    finally:
        _close(ops)


def test_errors_become_errno(built_logdir):
    ops = _ops(built_logdir)
    try:
        async def expect(code, fn, *args):
            with pytest.raises(pyfuse3.FUSEError) as info:
                await fn(*args)
            assert info.value.errno == code

        async def run():
            await expect(errno.ENOENT, ops.lookup, ROOT_INODE, b"nothere-0")
            await expect(errno.ENOENT, ops.getattr, 987654)
            part = await ops.lookup(ROOT_INODE, b"events-3")
            records = await ops.lookup(part.st_ino, b"records.jsonl")
            await expect(errno.ENOTDIR, ops.lookup, records.st_ino, b"x")
            await expect(errno.EISDIR, ops.open, part.st_ino, os.O_RDONLY, None)
            await expect(errno.EROFS, ops.mkdir, ROOT_INODE, b"new-0", 0o755, None)
            await expect(errno.EROFS, ops.unlink, part.st_ino, b"records.jsonl", None)

        trio.run(run)
    finally:
        _close(ops)


def test_append_through_the_adapter(logdir_copy):
    ops = _ops(logdir_copy, rw=True)
    try:
        async def run():
            made = await ops.mkdir(ROOT_INODE, b"fresh-0", 0o755, None)
            append = await ops.lookup(made.st_ino, b"append")
            info = await ops.open(append.st_ino, os.O_WRONLY | os.O_APPEND, None)
            assert await ops.write(info.fh, 0, b"one\ntwo\nthr") == 11
            await ops.flush(info.fh)  # close: the partial line becomes a record too
            await ops.release(info.fh)

        trio.run(run)
        with LogDir(logdir_copy) as d:
            assert [r[3] for r in d.log("fresh-0").records()] == [b"one", b"two", b"thr"]
    finally:
        _close(ops)


def test_open_and_close_of_an_open_partitions_records_jsonl_need_no_worker(built_logdir, monkeypatch):
    """Once its partition is open, records.jsonl opens on the loop (RecordsFile.open_now) and closes there
    (Handle.release_now: it touches only memory); a close while a rewrite holds the stream's lock (pinning
    removed segments) is left to a worker, which waits for it."""
    ops = _ops(built_logdir)
    try:
        async def run():
            part = await ops.lookup(ROOT_INODE, b"events-3")
            records = await ops.lookup(part.st_ino, b"records.jsonl")
            asked: list = []
            real = ops._run

            async def counted(fn, *args):
                asked.append(fn)
                return await real(fn, *args)

            monkeypatch.setattr(ops, "_run", counted)
            info = await ops.open(records.st_ino, os.O_RDONLY, None)
            data = await ops.read(info.fh, 0, 1 << 20)
            handle = ops._files[info.fh]
            await ops.release(info.fh)
            assert asked == [] and handle.stream._readers == {}
            info = await ops.open(records.st_ino, os.O_RDONLY, None)
            handle = ops._files[info.fh]
            with handle.stream._pin_lock:
                assert not handle.release_now()  # busy: nothing done
            assert id(handle) in handle.stream._readers
            holding = threading.Event()

            def hold() -> None:  # a rewrite pinning segments, on another thread, for a while
                with handle.stream._pin_lock:
                    holding.set()
                    time.sleep(0.2)

            rewrite = threading.Thread(target=hold)
            rewrite.start()
            holding.wait()
            await ops.release(info.fh)
            rewrite.join()
            assert len(asked) == 1 and handle.stream._readers == {}
            return data

        assert trio.run(run) == expected_jsonl(built_logdir, "events-3")
    finally:
        _close(ops)
