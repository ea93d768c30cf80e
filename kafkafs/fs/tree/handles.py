"""Open files of the mounted tree: what ``open`` returns and ``read``/``write``/``flush`` act on.

Threads: a handle belongs to one open file; the kernel may send its requests from several threads
at once, and each handle is safe for that: reading handles keep only a small cache behind a lock
(:class:`~kafkafs.fs.views.reading.PieceCache`), :class:`AppendHandle` serialises on its
:class:`~.append.AppendBuffer`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from ...errors import KafkafsError, NotFound, NotPermitted, UnsafeFileError
from ...storage.safefiles import open_file
from ..views.partition import PartitionState
from ..views.ranges import RangeLayout
from ..views.reading import Bytes, Part, PieceCache, wake_when_rendered
from ..views.render import disk_error, unreadable
from ..views.streams import RecordsStream
from .append import AppendBuffer, WouldWait
from .contention import Contention
from .holders import Holders

__all__ = [
    "Handle", "BytesHandle", "SnapshotHandle", "Snapshots", "RecordsHandle", "RangeHandle", "OSFileHandle", "AppendHandle", "WRITE_NOW_MAX", "LARGE_WRITES",
    "NEAR_END",
]

log = logging.getLogger("kafkafs.fs")

#: The largest ``append`` write done on the FUSE loop (:meth:`AppendHandle.write_now`) whatever the
#: machine does, about half a millisecond of encoding. A larger one is done there while the loop's
#: thread gets the CPU it asks for (:data:`LARGE_WRITES`, :mod:`.contention`), else in a worker.
WRITE_NOW_MAX = 64 * 1024
#: A reader of ``records.jsonl`` that comes this many bytes from its end (a smaller file: at its first
#: read) has the partition it reads next opened and the first spans of that file rendered
#: (:class:`RecordsHandle`'s ``near_end``), so that its open and first read wait for neither: between
#: the files of ``cat MOUNT/*/records.jsonl`` both cores idled while a worker opened the partition and
#: then its first span rendered (issue 25).
NEAR_END = 8 << 20
#: How the mount's large ``append`` writes (over :data:`WRITE_NOW_MAX`) fare on the FUSE loop, and
#: whether the next one goes there.
LARGE_WRITES = Contention()


class Handle:
    """An open file. ``keep_cache``: the kernel may keep pages across opens (the content never changes
    underneath); ``direct_io``: every read comes here (small files rendered at open)."""

    keep_cache = False
    direct_io = False
    #: False for handles that only touch memory: the adapter then skips the worker thread
    blocking = True

    def read(self, offset: int, size: int) -> Bytes:
        raise NotPermitted("not readable")

    def read_now(self, offset: int, size: int) -> Bytes | None:
        """:meth:`read` when it can be answered from memory alone (on the FUSE loop), else None."""
        return None

    def read_soon(self, offset: int, size: int, wake: Callable[[], object]) -> bool:
        """After :meth:`read_now` said None, on the FUSE loop: True when what the read needs is being
        rendered on another thread now and ``wake()`` will be called from it once that is over (then
        ask :meth:`read_now` again); False: ask :meth:`read` in a worker."""
        return False

    def write(self, offset: int, data: bytes) -> int:
        raise NotPermitted("read-only file")

    def write_now(self, offset: int, data: bytes) -> int | None:
        """:meth:`write` when it can be done on the FUSE loop without waiting for another thread, else
        None (nothing done: ask :meth:`write` in a worker)."""
        return None

    def flush(self) -> None:
        pass

    def fsync(self) -> None:
        self.flush()

    def release(self) -> None:
        pass

    def release_now(self) -> bool:
        """:meth:`release` when it waits for no other thread (on the FUSE loop): True when done; False:
        ask :meth:`release` in a worker."""
        return False

    def opened_by(self, pid: int, inode: int) -> None:
        """Told at open: the process that opened it (the FUSE request's pid) and its inode number."""


class BytesHandle(Handle):
    blocking = False

    def __init__(self, data: bytes, *, keep_cache: bool = True, direct_io: bool = False) -> None:
        self.data = data
        self.keep_cache = keep_cache
        self.direct_io = direct_io

    def read(self, offset: int, size: int) -> Bytes:
        return self.data[offset : offset + size]


class SnapshotHandle(BytesHandle):
    """An open of a small generated file (``groups/<g>.json``, ``partition.json`` ...), made by
    :meth:`Snapshots.open`: it serves its inode's snapshot of when it opened; one not read yet takes a
    newer snapshot of its inode (:meth:`Snapshots.attr_data`: its ``fstat`` answered that size). Read on
    the FUSE loop (``read_now``), a newer snapshot given from worker threads (under the snapshots' lock);
    ``blocking`` only so that the mount calls :meth:`release_now`, which says it is closed."""

    blocking = True

    def __init__(self, snapshots: Snapshots, data: bytes) -> None:
        super().__init__(data, keep_cache=False, direct_io=True)
        self.snapshots = snapshots
        self.fixed = False

    def read(self, offset: int, size: int) -> Bytes:
        if not self.fixed:
            with self.snapshots.lock:
                self.fixed = True
        return self.data[offset : offset + size]

    def read_now(self, offset: int, size: int) -> Bytes | None:
        return self.read(offset, size)

    def release(self) -> None:
        self.snapshots.closed(self)

    def release_now(self) -> bool:
        self.release()
        return True


#: Seconds a generated file's snapshot stays what its ``stat`` answers and its opens serve while it is
#: open somewhere (:class:`Snapshots`).
SNAPSHOT_PIN = 2.0
#: Seconds a snapshot made by a lookup (a ``getattr``) is what an open serves when the file is not open
#: elsewhere: the kernel keeps even attributes given with timeout 0 until its clock ticks (1-10 ms), and
#: opens without a new lookup meanwhile.
SNAPSHOT_FRESH = 0.05


class Snapshots:
    """The content of one generated file's inode (rendered anew on request: group and transaction views,
    ``partition.json``) as one snapshot at a time, so that its size in ``stat``/``fstat`` is the size of
    what its open files read (SPEC §3; review14 R14-9: pyfuse3 does not say whether a ``getattr`` is a
    ``stat`` of the name or the ``fstat`` of an open file, and the kernel keeps even attributes given
    with timeout 0 until its clock ticks). While the file is open somewhere, the snapshot is kept
    :data:`SNAPSHOT_PIN` seconds: ``stat`` answers its size and a new open serves it; otherwise each
    ``getattr`` (a lookup too) renders anew, and an open serves the snapshot its lookup just made
    (:data:`SNAPSHOT_FRESH`). An open file read for longer than the pin keeps its bytes while ``stat``
    moves on. Safe from any thread."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.lock = threading.Lock()
        self.clock = clock
        self._open: set[SnapshotHandle] = set()
        self._snapshot: tuple[bytes, float] | None = None

    def _kept(self, within: float, pinned: bool) -> bytes | None:
        """Under the lock: the snapshot if it is younger than ``within`` (``pinned``: and the file open)."""
        snapshot = self._snapshot
        if snapshot is None or (pinned and not self._open):
            return None
        return snapshot[0] if self.clock() - snapshot[1] <= within else None

    def _taken(self, data: bytes) -> None:
        """Under the lock: ``data`` is the snapshot now; open files not read yet take it."""
        self._snapshot = (data, self.clock())
        for handle in self._open:
            if not handle.fixed:
                handle.data = data

    def attr_data(self, render: Callable[[], bytes]) -> bytes:
        """The content whose size a ``getattr`` (or a lookup) answers."""
        with self.lock:
            kept = self._kept(SNAPSHOT_PIN, pinned=True)
        if kept is not None:
            return kept
        data = render()
        with self.lock:
            self._taken(data)
        return data

    def open(self, render: Callable[[], bytes]) -> SnapshotHandle:
        """A new open file: the snapshot its lookup made, or the one kept while the file is open."""
        with self.lock:
            kept = self._kept(SNAPSHOT_PIN, pinned=True)
            if kept is None:
                kept = self._kept(SNAPSHOT_FRESH, pinned=False)
        if kept is None:
            kept = render()
            with self.lock:
                self._taken(kept)
        handle = SnapshotHandle(self, kept)
        with self.lock:
            self._open.add(handle)
        return handle

    def closed(self, handle: SnapshotHandle) -> None:
        with self.lock:
            self._open.discard(handle)


class RecordsHandle(Handle):
    """``records.jsonl``: an open of one of its generations (:class:`~kafkafs.fs.views.streams.RecordsStream`),
    an append-only stream shared by every open of its inode. Its bytes never change, so the kernel may
    keep its pages across opens (a new size drops them anyway), unless the partition is live: then it
    is read with direct I/O (:meth:`~kafkafs.fs.views.partition.PartitionState.live`: the last page
    of a growing file must never be kept), and so is one that shows damage (the reads before it are short)."""

    keep_cache = True

    def __init__(self, stream: RecordsStream, near_end: Callable[[], object] | None = None,
                 outgrown: Callable[[], object] | None = None) -> None:
        """``near_end()``: called once, when a read first comes within :data:`NEAR_END` bytes of the end
        (the tree opens the partition read next meanwhile: :meth:`~.partitions.Partitions.reading_to_end`);
        it must return at once (the FUSE loop calls it). ``outgrown()``: a read is about to show bytes
        past the size the kernel may hold for the inode (:meth:`~kafkafs.fs.views.streams.RecordsStream.told`:
        records the mount saw arrive before its invalidator told the kernel); it has the kernel drop
        the file's attributes before the read returns (:meth:`~.partitions.Partitions.shown_unsized`),
        so that a ``stat`` after the read counts them (SPEC §3; a worker thread calls it)."""
        self.stream = stream
        stream.opened(self)  # first: it may refuse the open (a segment it shows is gone already)
        self.cache = stream.take_spare() or PieceCache(renderer=stream.state.piece_renderer)
        self.near_end = near_end
        self.outgrown = outgrown
        if stream.state.live() or stream.shows_damage():
            # damage: direct I/O, so that the read that reaches it gives the records before it (a short
            # read) and only the next one fails; through the page cache the kernel would take a short
            # read for the end of the file (it shrinks the inode: `cat` ends quietly), and fails the
            # whole window instead (review23 R23-14: `cat` lost up to 128 KiB of records before it)
            self.keep_cache, self.direct_io = False, True

    def _reached(self, end: int, total: int) -> None:
        near_end = self.near_end
        if near_end is not None and end >= total - NEAR_END:
            self.near_end = None
            near_end()

    def read(self, offset: int, size: int) -> Bytes:
        stream = self.stream
        data = stream.read(self, offset, size, self.cache, short=self.direct_io)
        end = offset + len(data)
        if end > stream.told_size:  # (before the read returns: its reader's next stat must count it)
            if self.outgrown is not None:
                self.outgrown()
            stream.told(end)
        view = stream.view
        if view is not None:
            self._reached(end, view.total)
        return data

    def release(self) -> None:
        self.cache.stop()  # `head` read what it wanted: no span more is rendered for it
        self.stream.released(self)

    def release_now(self) -> bool:
        self.cache.stop()
        return self.stream.released(self, wait=False)

    def read_now(self, offset: int, size: int) -> Bytes | None:
        view = self.stream.view
        if view is None:
            return None
        if offset + size > view.total:  # the kernel asks for whole pages: past the end of the file
            if offset >= view.total or self.stream.view_if_current() is not view:
                return None  # the worker advances the stream: records may have come
            size = view.total - offset
        if offset + size > self.stream.told_size:
            return None  # past the size the kernel holds: the worker has it drop that first (read)
        data = self.stream.state.read_composition_now(view, offset, size, self.cache)
        if data is not None:
            self.stream.note_read(self, offset + len(data), wait=False)
            self._reached(offset + len(data), view.total)
        return data

    def read_soon(self, offset: int, size: int, wake: Callable[[], object]) -> bool:
        view = self.stream.view
        if view is None or offset >= view.total:
            return False
        if offset + size > view.total:
            if self.stream.view_if_current() is not view:
                return False
            size = view.total - offset
        if offset + size > self.stream.told_size:
            return False  # read_now would not answer it (past the size the kernel holds)
        return wake_when_rendered(view.parts, view.starts, offset, size, self.cache, wake)


class RangeHandle(Handle):
    keep_cache = True

    def __init__(self, state: PartitionState, layout: RangeLayout) -> None:
        self.state = state
        self.layout = layout
        self.cache = PieceCache(renderer=state.piece_renderer)
        if not layout.complete and state.live() or layout.bad:  # it grows, or damage: see RecordsHandle
            self.keep_cache, self.direct_io = False, True

    def read(self, offset: int, size: int) -> Bytes:
        if offset + size > self.layout.total():
            self.state.refresh()
            self.state.extend_range(self.layout)
        return self.state.read_range(self.layout, offset, size, self.cache, short=self.direct_io)

    def read_now(self, offset: int, size: int) -> Bytes | None:
        if offset + size > self.layout.total():
            return None
        return self.state.read_range_now(self.layout, offset, size, self.cache)

    def read_soon(self, offset: int, size: int, wake: Callable[[], object]) -> bool:
        if offset + size > self.layout.total():
            return False
        return wake_when_rendered([Part(self.layout, len(self.layout), 0)], [0], offset, size, self.cache, wake)

    def release(self) -> None:
        self.cache.stop()

    def release_now(self) -> bool:
        self.release()
        return True


class OSFileHandle(Handle):
    """A file of LOGDIR as it is; ``direct_io`` for one that grows or is replaced while open (the active
    segment's files of a live partition, the log directory's own files): see :class:`RecordsHandle`."""

    def __init__(self, path: str | os.PathLike[str], keep_cache: bool, direct_io: bool = False) -> None:
        try:
            self.fd = open_file(path, os.O_RDONLY)  # a link is never followed (SPEC §3)
        except (FileNotFoundError, UnsafeFileError):
            raise NotFound(str(path)) from None
        self.path = str(path)
        self.keep_cache = keep_cache
        self.direct_io = direct_io

    def read(self, offset: int, size: int) -> Bytes:
        """``size`` bytes at ``offset``, fewer only at the end of the file. A short ``pread`` is the disk
        failing past the bytes it gave, or the end: it is read on until one or the other is known (review15
        R15-2: a short read passed on is the end of the file to the kernel, which then served every later
        offset as empty, and ``cp`` copied 4 KiB of a 17 KiB segment with success). A disk error fails the
        whole read with EIO; the kernel then asks again for the pages its reader needs, one by one."""
        try:
            data = os.pread(self.fd, size, offset)
            if 0 < len(data) < size:
                parts = [data]
                done = len(data)
                while done < size:
                    more = os.pread(self.fd, size - done, offset + done)
                    if not more:  # the end of the file
                        break
                    parts.append(more)
                    done += len(more)
                data = b"".join(parts)
            return data
        except OSError as exc:  # a failing disk: EIO for this read, said once for the file
            if not disk_error(exc):
                raise
            raise unreadable(exc, self.path, offset) from None

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class AppendHandle(Handle):
    """``append``: see :mod:`.append`. Once records are in, ``on_appended(state, the active
    segment's base before)`` runs before the request returns (the tree tells its append listeners, and
    the mount tells the kernel that the views grew)."""

    direct_io = True

    def __init__(self, state: PartitionState, on_appended: Callable[[PartitionState, int | None], None]) -> None:
        self.on_appended = on_appended
        self.state = state
        self.buffer = AppendBuffer(state.log)
        self.name = f"{state.name}/append"
        self.holders: Holders | None = None

    def opened_by(self, pid: int, inode: int) -> None:
        if pid > 0:
            self.holders = Holders(pid, inode, self.name)

    def _shared(self) -> bool:
        """Whether a process still holds a descriptor of this open file (a FLUSH with a partial line)."""
        return self.holders is not None and self.holders.any()

    def read(self, offset: int, size: int) -> Bytes:
        return b""

    def _active_base(self) -> int | None:
        active = self.state.log.active_segment
        return active.base_offset if active is not None else None

    def write(self, offset: int, data: bytes) -> int:
        before = self._active_base()
        if self.buffer.write(data) is not None:
            self.on_appended(self.state, before)
        return len(data)

    def write_now(self, offset: int, data: bytes) -> int | None:
        """A write that needs no other thread, done here: one of at most :data:`WRITE_NOW_MAX` bytes
        (issue 20: beside 8 busy readers, a small write waited for a worker, then for the loop again,
        several times its own 0.3 ms), or a larger one while the loop's thread gets the CPU it asks for
        (issue 25: the trips to a worker and back cost a write of 1,000 lines 0.2-0.5 ms). Its work is
        encoding, which holds the GIL in a worker too."""
        try:
            if len(data) <= WRITE_NOW_MAX:
                return self._write_now(data)
            if not LARGE_WRITES.on_loop():
                return None
            with LARGE_WRITES.timed():  # a write left to a worker (WouldWait) is not counted
                return self._write_now(data)
        except WouldWait:
            return None

    def _write_now(self, data: bytes) -> int:
        before = self._active_base()
        if self.buffer.write_now(data) is not None:
            self.on_appended(self.state, before)
        return len(data)

    def flush(self) -> None:
        """A close of one of its descriptors: see :meth:`.append.AppendBuffer.flush`."""
        before = self._active_base()
        count = self.buffer.appended
        try:
            self.buffer.flush(self._shared)
        finally:
            if self.buffer.appended != count:
                self.on_appended(self.state, before)

    def release(self) -> None:
        """The last close: a partial line a FLUSH left pending is appended now; nobody can be told when
        that fails (close(2) has returned), so it is logged."""
        before = self._active_base()
        try:
            if self.buffer.release():
                self.on_appended(self.state, before)
        except (KafkafsError, OSError) as exc:
            log.error("%s: the partial last line left at the last close could not be appended, dropped: %s", self.name, exc)

    def release_now(self) -> bool:
        return not self.buffer.pending  # nothing to append: closed here

    def fsync(self) -> None:
        self.buffer.sync()
