"""The pyfuse3 adapter: inodes to nodes, requests to worker threads, exceptions to errno.

Each handler is short: find the node or handle, run the blocking part in a worker thread
(:mod:`kafkafs.fs.workers`, so the loop keeps answering while a big read decodes), turn the result
into pyfuse3's types. Short work skips the worker trip, which costs more than it: reads of bytes
already rendered (``Handle.read_now``), a record's lookup (``Dir.lookup_now``), opens from memory
(``File.open_now``), appends that wait for no other thread (``Handle.write_now``), closes of files read
from memory (``Handle.release_now``). Errors become
``FUSEError`` in one place: :func:`_handler`, with :func:`kafkafs.fs.errnos.errno_for`.
"""

from __future__ import annotations

import errno
import functools
import itertools
import logging
import os
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pyfuse3
import trio

from ..errors import NotFound, NotPermitted
from .errnos import errno_for
from .tree.handles import Handle
from .tree.inodes import ROOT_INODE, InodeTable
from .tree.nodes import BLOCK_SIZE, Attr, Dir, File, Node
from .tree.partition_nodes import AppendFile
from .tree.root import Tree
from .workers import WorkerPool

__all__ = ["Operations"]

log = logging.getLogger("kafkafs.fs")

T = TypeVar("T")

#: Entries a readdir pulls from a listing per trip to a worker thread.
READDIR_CHUNK = 1024
#: Times a read waits on the loop for what other threads are rendering before it asks a worker.
READ_SOON_WAITS = 3


def _handler(mkdir: bool = False):
    """Turn any exception of a handler into a FUSEError (pyfuse3 stops on anything else). A handler the
    stopping mount cancels answers ENOTCONN: unanswered, its request would hold what the kernel keeps for
    it (a read, its pages locked) until the connection closes, and a page invalidation the invalidator
    sent meanwhile would wait for them, its thread in the kernel for good (mount.py). The cancellation
    stays: the loop's next checkpoint raises it again."""

    def wrap(fn):
        @functools.wraps(fn)
        async def wrapper(self: Operations, *args):
            try:
                return await fn(self, *args)
            except pyfuse3.FUSEError:
                raise
            except trio.Cancelled:
                raise pyfuse3.FUSEError(errno.ENOTCONN) from None
            except Exception as exc:
                raise pyfuse3.FUSEError(errno_for(exc, rw=self.rw, mkdir=mkdir)) from None

        return wrapper

    return wrap


class _DirHandle:
    __slots__ = ("node", "ino", "entries", "buffer", "next_id")

    def __init__(self, node: Dir, ino: int) -> None:
        self.node = node
        self.ino = ino
        self.entries: Iterator | None = None
        self.buffer: deque = deque()
        self.next_id = -1


def _take(entries: Iterator, n: int) -> list:
    return list(itertools.islice(entries, n))


_NO_ATTR = Attr(0, 0, 0)


_MAX_READDIR_ID = 2**63 - 1


class Operations(pyfuse3.Operations):
    """pyfuse3's handlers for one mount.

    Threads: the handlers run on the trio loop, one task per request; the blocking part of each runs in
    a worker thread. Shared state is safe for that: the inode table takes its own lock, the open-file
    tables are only changed on the loop, and a handle serves concurrent reads itself."""

    supports_dot_lookup = True
    enable_writeback_cache = False

    def __init__(self, tree: Tree) -> None:
        super().__init__()
        self.tree = tree
        #: a read-write mount (the log directory writable): changes to read-only things are EACCES, not EROFS
        self.rw = tree.partitions.rw
        self.inodes = InodeTable(tree)
        self._files: dict[int, Handle] = {}
        self._dirs: dict[int, _DirHandle] = {}
        self._fh = itertools.count(1)
        self.uid = os.getuid()
        self.gid = os.getgid()
        self.workers = WorkerPool()

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run the blocking part of a request off the loop."""
        return await self.workers.run(fn, *args)

    # ------------------------------------------------------------------------------------------ helpers

    def _node(self, ino: int) -> Node:
        node = self.inodes.get(ino)
        if node is None:
            raise NotFound(f"inode {ino}")
        return node

    def _entry(self, ino: int, attr: Attr) -> pyfuse3.EntryAttributes:
        entry = pyfuse3.EntryAttributes()
        entry.st_ino = ino
        entry.generation = 0
        entry.entry_timeout = attr.timeout
        entry.attr_timeout = attr.timeout
        entry.st_mode = attr.mode
        entry.st_nlink = attr.nlink
        entry.st_uid = self.uid
        entry.st_gid = self.gid
        entry.st_rdev = 0
        entry.st_size = attr.size
        entry.st_blksize = BLOCK_SIZE
        entry.st_blocks = (attr.size + 511) // 512
        entry.st_atime_ns = attr.mtime_ns
        entry.st_mtime_ns = attr.mtime_ns
        entry.st_ctime_ns = attr.mtime_ns
        return entry

    def _resolve(self, parent: Dir | None, name: str | None, node: Node | None) -> tuple[int, Attr]:
        """In a worker thread: look ``name`` up (or take ``node``), register it with one reference
        taken, and get its attributes; the reference is given back if that fails."""
        if node is None:
            assert parent is not None and name is not None
            node = parent.lookup(name)
        known = self.inodes.register(node, count=1)
        ino = known.ino
        try:
            return ino, self._attr(ino, known.node)
        except BaseException:
            self.inodes.discard_if_unused(ino, taken=1)
            raise

    def _attr(self, ino: int, node: Node) -> Attr:
        """``node.attr()`` for a reply: the inode table knows that the kernel may hold them."""
        self.inodes.attrs_replying(ino)
        attr = None
        try:
            attr = node.attr()
            return attr
        finally:
            self.inodes.attrs_given(ino, None if attr is None else attr.timeout)

    async def _found(self, node: Node) -> pyfuse3.EntryAttributes:
        """Answer a request that hands the kernel one more reference to ``node``."""
        ino, attr = await self._run(self._resolve, None, None, node)
        return self._entry(ino, attr)

    def _refuse(self) -> pyfuse3.FUSEError:
        return pyfuse3.FUSEError(errno.EACCES if self.rw else errno.EROFS)

    # ------------------------------------------------------------------------------------------ names

    @_handler()
    async def lookup(self, parent_inode: int, name: bytes, ctx=None) -> pyfuse3.EntryAttributes:
        parent = self._node(parent_inode)
        text = os.fsdecode(name)
        if text == ".":
            return await self._found(parent)
        if text == "..":
            return await self._found(parent.parent or self.tree.root)
        if not isinstance(parent, Dir):
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        node = parent.lookup_now(text)  # by-offset/N.json: one short decode, cheaper here than a worker trip
        if node is not None:
            ino, attr = self._resolve(None, None, node)
        else:
            ino, attr = await self._run(self._resolve, parent, text, None)
        return self._entry(ino, attr)

    @_handler()
    async def forget(self, inode_list) -> None:
        for ino, n in inode_list:
            self.inodes.forget(ino, n)

    @_handler()
    async def getattr(self, inode: int, ctx=None) -> pyfuse3.EntryAttributes:
        node = self._node(inode)
        attr = await self._run(self._attr, inode, node)
        return self._entry(inode, attr)

    @_handler()
    async def setattr(self, inode: int, attr, fields, fh, ctx) -> pyfuse3.EntryAttributes:
        node = self._node(inode)
        # `echo x > append` truncates first: an append file is always empty, so that is a no-op
        if (
            not isinstance(node, AppendFile)
            or (fields.update_size and attr.st_size != 0)
            or (fields.update_mode or fields.update_uid or fields.update_gid)
        ):
            raise self._refuse()
        if not self.rw:
            raise self._refuse()
        return self._entry(inode, await self._run(self._attr, inode, node))

    @_handler()
    async def statfs(self, ctx) -> pyfuse3.StatvfsData:
        st = await self._run(os.statvfs, self.tree.partitions.logdir.path)
        out = pyfuse3.StatvfsData()
        out.f_bsize = st.f_bsize
        out.f_frsize = st.f_frsize
        out.f_blocks = st.f_blocks
        out.f_bfree = st.f_bfree if self.rw else 0
        out.f_bavail = st.f_bavail if self.rw else 0
        out.f_files = len(self.inodes)
        out.f_ffree = 0
        out.f_favail = 0
        out.f_namemax = 255
        return out

    # ------------------------------------------------------------------------------------------ folders

    @_handler()
    async def opendir(self, inode: int, ctx) -> int:
        node = self._node(inode)
        if not isinstance(node, Dir):
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        fh = next(self._fh)
        self._dirs[fh] = _DirHandle(node, inode)
        return fh

    def _listing_with_dots(self, handle: _DirHandle, start_id: int) -> Iterator:
        """``.`` and ``..`` (ids 1 and 2, given as inode numbers so that no lookup is counted: the
        kernel counts none for them), then the directory's own listing with its ids moved up by 2."""
        node = handle.node
        if start_id < 2:
            attr = node.quick_attr()
            if start_id < 1:
                yield 1, b".", handle.ino, attr
            parent = node.parent
            parent_ino = ROOT_INODE
            if parent is not None and handle.ino != ROOT_INODE:
                parent_ino = self.inodes.register(parent).ino
                self.inodes.discard_if_unused(parent_ino)
            yield 2, b"..", parent_ino, attr
        for next_id, name, target, attr in node.listing(max(start_id - 2, 0)):
            # readdir ids are signed 64-bit; only damaged data (offsets near 2**63) comes this far
            yield min(next_id + 2, _MAX_READDIR_ID), name, target, attr

    @_handler()
    async def readdir(self, fh: int, start_id: int, token) -> None:
        handle = self._dirs[fh]
        if handle.entries is None or handle.next_id != start_id:
            handle.entries = await self._run(self._listing_with_dots, handle, start_id)
            handle.buffer.clear()
        entry = self._entry(0, _NO_ATTR)  # one object: readdir_reply copies what it needs
        last_attr = None
        reply = pyfuse3.readdir_reply
        buffer = handle.buffer
        while True:
            if not buffer:
                chunk = await self._run(_take, handle.entries, READDIR_CHUNK)
                if not chunk:
                    handle.next_id = start_id
                    return
                buffer.extend(chunk)
            next_id, name, target, attr = buffer[0]
            counted = type(target) is not int
            ino = self.inodes.register(target).ino if counted else target
            if attr is not last_attr:
                entry.st_mode = attr.mode
                entry.st_nlink = attr.nlink
                entry.st_size = attr.size
                entry.st_blocks = (attr.size + 511) // 512
                entry.st_atime_ns = entry.st_mtime_ns = entry.st_ctime_ns = attr.mtime_ns
                entry.entry_timeout = entry.attr_timeout = attr.timeout
                last_attr = attr
            entry.st_ino = ino
            if not reply(token, name, entry, next_id):
                if counted:
                    self.inodes.discard_if_unused(ino)
                handle.next_id = start_id
                return
            if counted:
                self.inodes.remember(ino)
                if attr.timeout:  # the kernel may keep these (READDIRPLUS)
                    self.inodes.attrs_given(ino, attr.timeout, replied=False)
            buffer.popleft()
            start_id = handle.next_id = next_id

    @_handler()
    async def releasedir(self, fh: int) -> None:
        self._dirs.pop(fh, None)

    @_handler(mkdir=True)
    async def mkdir(self, parent_inode: int, name: bytes, mode: int, ctx) -> pyfuse3.EntryAttributes:
        if parent_inode != ROOT_INODE or not self.rw:
            raise self._refuse()
        node = await self._run(self.tree.mkdir, os.fsdecode(name))
        return await self._found(node)

    # ------------------------------------------------------------------------------------------ files

    @_handler()
    async def open(self, inode: int, flags: int, ctx) -> pyfuse3.FileInfo:
        node = self._node(inode)
        if isinstance(node, Dir):
            raise pyfuse3.FUSEError(errno.EISDIR)
        assert isinstance(node, File)
        partition = node.partition_name
        if partition is not None and self.tree.partitions.folder_gone(partition):
            # the kernel held the inode of a file of a deleted topic's partition (a name kept a moment
            # longer than the folder): its state may be refreshed empty by now; ENOENT, not that (R13-3)
            raise pyfuse3.FUSEError(errno.ENOENT)
        write = (flags & os.O_ACCMODE) != os.O_RDONLY or bool(flags & os.O_TRUNC)
        handle = None if write else node.open_now()
        if handle is None:
            handle = await self._run(node.open, write)
        handle.opened_by(getattr(ctx, "pid", 0), inode)  # (a test may pass no context)
        fh = next(self._fh)
        self._files[fh] = handle
        return pyfuse3.FileInfo(fh=fh, keep_cache=handle.keep_cache, direct_io=handle.direct_io)

    @_handler()
    async def read(self, fh: int, off: int, size: int) -> bytes | memoryview:
        handle = self._files[fh]
        if not handle.blocking:
            return handle.read(off, size)
        data = handle.read_now(off, size)  # rendered ahead by an earlier read: no worker trip
        if data is not None:
            return data
        token = trio.lowlevel.current_trio_token()
        for _ in range(READ_SOON_WAITS):  # a read may need two spans rendering at once: one wait each
            rendered = trio.Event()
            if not handle.read_soon(off, size, functools.partial(token.run_sync_soon, rendered.set)):
                break
            await rendered.wait()  # being rendered on another thread: no worker trip either
            data = handle.read_now(off, size)
            if data is not None:
                return data
        return await self._run(handle.read, off, size)

    @_handler()
    async def write(self, fh: int, off: int, buf: bytes) -> int:
        handle = self._files[fh]
        written = handle.write_now(off, buf)  # a small append that waits for nobody: no worker trip
        if written is not None:
            return written
        return await self._run(handle.write, off, buf)

    @_handler()
    async def flush(self, fh: int) -> None:
        if not self.rw:
            # Nothing to flush on a read-only mount. ENOSYS makes the kernel stop sending FLUSH for this
            # mount (the close still succeeds): one round trip fewer on every close.
            raise pyfuse3.FUSEError(errno.ENOSYS)
        handle = self._files.get(fh)
        if handle is not None and handle.blocking:
            await self._run(handle.flush)

    @_handler()
    async def fsync(self, fh: int, datasync: bool) -> None:
        handle = self._files.get(fh)
        if handle is not None and handle.blocking:
            await self._run(handle.fsync)

    @_handler()
    async def release(self, fh: int) -> None:
        handle = self._files.pop(fh, None)
        if handle is not None and handle.blocking and not handle.release_now():  # most need no worker
            await self._run(handle.release)

    # ------------------------------------------------------------------------------------------ refused

    async def _refused(self, *args) -> None:
        raise self._refuse()

    # one refusal for four handlers whose signatures differ (pyfuse3 calls each with its own arguments)
    create = mknod = symlink = link = _refused  # type: ignore[assignment]  # see above

    @_handler()
    async def unlink(self, parent_inode: int, name: bytes, ctx) -> None:
        await self._refuse_existing(parent_inode, name)

    @_handler()
    async def rmdir(self, parent_inode: int, name: bytes, ctx) -> None:
        await self._refuse_existing(parent_inode, name)

    @_handler()
    async def rename(
        self, parent_old: int, name_old: bytes, parent_new: int, name_new: bytes, flags, ctx
    ) -> None:
        await self._refuse_existing(parent_old, name_old)

    async def _refuse_existing(self, parent_inode: int, name: bytes) -> None:
        parent = self._node(parent_inode)
        if isinstance(parent, Dir):
            await self._run(parent.lookup, os.fsdecode(name))  # NotFound -> ENOENT
        raise NotPermitted("read-only")
