"""FileRecords: a ``.log`` file as a sequence of batches (Kafka's ``FileRecords``).

Batch views, chunked reads, positional reads and writes, truncation and the descriptor's life. The
file is read with ``pread`` in bounded chunks (memory stays flat however large the file), and its
descriptor is opened on first use and dropped when the handle budget asks (:mod:`.handles`).

Threads: reads take no lock and see a prefix of the file; the descriptor is opened under a lock, and
a reader holds the :class:`~kafkafs.storage.handles.FileHandle` it got for as long as it reads, so a
descriptor dropped meanwhile is closed only when that reader is done. Writes (append, truncate) come
from the single writer of the owning segment, which publishes the new size after the bytes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from ..errors import CorruptRecordError, SegmentClosedError, UnsafeFileError, WouldBlock, doing, tag_os_error
from ..format.batch import (
    DEFAULT_MAX_INFLATED_BYTES,
    LOG_OVERHEAD,
    BatchHeader,
    DecodedBatch,
    decode_batch,
    read_batch_header,
)
from .handles import FileHandle
from .names import DELETED
from .safefiles import open_file

__all__ = ["FileRecords", "BatchView", "CHUNK_BYTES", "TornBatchError"]

#: How much of a ``.log`` one ``pread`` asks for while scanning; a larger batch gets a read of its own.
CHUNK_BYTES = 256 * 1024
#: The first read of a scan: a lookup (the index's floor entry, at most one index interval and one batch
#: before the batch wanted) reads this much, not a whole chunk; later reads double up to CHUNK_BYTES.
FIRST_CHUNK_BYTES = 32 * 1024
#: Bytes of a batch header needed to know its magic and length (and so whether it is valid).
_MIN_HEADER = 17
_ZERO_PREFIX = bytes(LOG_OVERHEAD)
_RWF_NOWAIT = getattr(os, "RWF_NOWAIT", None)


def _pread(fd: int, size: int, position: int, nowait: bool) -> bytes:
    """``os.pread``; with ``nowait``, only what the page cache holds (``RWF_NOWAIT``): a read that would
    wait for the disk, or comes back short of what was asked, raises :class:`WouldBlock` (so does
    every ``nowait`` read where the system cannot say). ``size`` must not reach past the end of the data."""
    if not nowait:
        return os.pread(fd, size, position)
    if _RWF_NOWAIT is None:
        raise WouldBlock("the system cannot read without waiting")
    buf = bytearray(size)
    try:
        n = os.preadv(fd, [buf], position, _RWF_NOWAIT)
    except (BlockingIOError, OSError) as exc:
        raise WouldBlock(str(exc)) from None
    if n != size:
        raise WouldBlock(f"{n} of {size} bytes in the page cache")
    return bytes(buf)


def _pread_whole(fd: int, size: int, position: int, nowait: bool, path: str) -> bytes:
    """:func:`_pread` of ``size`` bytes that the file held when its size was taken: a read that comes
    back short is continued, so it is short only where the file ends now (cut by another process since).
    The kernel answers a read that meets a page the disk will not give with the bytes before it (a short
    read); the continuation starts at that page and raises its error (EIO): a disk error is never taken
    for the end of the data (review11 R11-3: the rest of an active segment was cut by recover and
    missing for readers, with success). An OS error names the file (``path``)."""
    try:
        chunk = _pread(fd, size, position, nowait)
        if len(chunk) >= size or not chunk:
            return chunk
        parts = [chunk]
        got = len(chunk)
        while got < size:
            more = _pread(fd, size - got, position + got, nowait)
            if not more:
                break
            parts.append(more)
            got += len(more)
    except OSError as exc:
        tag_os_error(exc, "read {path}", path)
        raise
    return b"".join(parts)


class BatchView(NamedTuple):
    """One batch found in a ``.log``: its header (``header.position`` relative to ``buf``) and the
    buffer holding it, which starts at file position ``base``. ``segment`` is the
    :class:`~kafkafs.storage.segment.LogSegment` holding it when the view came from
    :meth:`~kafkafs.storage.log.Log.locate` (None from a plain scan)."""

    buf: bytes
    header: BatchHeader
    base: int
    segment: Any = None

    @property
    def position(self) -> int:
        """The batch's position in the ``.log`` file."""
        return self.base + self.header.position

    @property
    def size(self) -> int:
        return self.header.size

    def decode(
        self, *, validate: bool = True, max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES, file: str | None = None
    ) -> DecodedBatch:
        """The batch decoded; damage is reported at ``file`` (default: the segment's ``.log``)."""
        if file is None and self.segment is not None:
            file = str(self.segment.log_path)
        try:
            return decode_batch(self.buf, self.header, validate=validate, max_inflated_bytes=max_inflated_bytes)
        except CorruptRecordError as exc:
            raise exc.at(file, self.base) from None

    def raw(self) -> bytes:
        """The batch's bytes, exactly as on disk."""
        return self.buf[self.header.position : self.header.end]


def _header_in(chunk: bytes, rel: int, end: int, max_batch: int, path: str, base: int) -> BatchHeader | None:
    """The header at ``rel`` of a chunk read from file position ``base``; damage is reported with the
    file and its absolute position."""
    try:
        return read_batch_header(chunk, rel, end, max_batch)
    except CorruptRecordError as exc:
        raise exc.at(path, base) from None


class TornBatchError(CorruptRecordError):
    """Bytes at the end of a sealed segment that are not a whole batch (a torn or cut batch)."""


def _not_whole(count: int, path: str, position: int) -> TornBatchError:
    return TornBatchError(
        f"{count} bytes after the last whole batch of a sealed segment (a torn or cut batch)", position, path
    )


class FileRecords:
    """The batches of one ``.log`` file (``path`` follows :meth:`rename`).

    Nothing is opened until it is needed. The owner knows how much of the file is data (its own
    writes, or the size it last saw of a file someone else appends to) and passes that end to reads.
    ``on_open`` is called whenever a descriptor gets opened (the owning segment tells its handle budget).
    """

    def __init__(
        self, path: Path, *, writable: bool, max_batch_size: int, on_open: Callable[[], None] | None = None
    ) -> None:
        self.path = path
        self.writable = writable
        self.max_batch_size = max_batch_size
        self._on_open = on_open
        self._lock = threading.Lock()
        self._handle: FileHandle | None = None
        self._closed = False
        #: the file's inode number, from its first open: a later open of the path that finds another
        #: file (another process's compaction put it there) is refused
        self.file_id: int | None = None
        #: read-only: the name another process is about to give the file (a swap's ``.swap`` file takes
        #: its plain name): an open that finds :attr:`path` gone opens it there, when it is the same file
        self.next_path: Path | None = None

    def open(self, *, create: bool) -> int:
        """Open the file now (created if ``create`` and writable); return its size."""
        handle = self._open_handle(create=create)  # held while its number is used (see read_at)
        return os.fstat(handle.fd).st_size

    # ------------------------------------------------------------------------------------------ handle

    def handle(self) -> FileHandle:
        """The descriptor, opened on first use; hold the returned object while using it."""
        handle = self._handle
        return handle if handle is not None else self._open_handle(create=False)

    def _open_handle(self, *, create: bool) -> FileHandle:
        with self._lock:
            if self._closed:
                raise SegmentClosedError(f"{self.path}: segment is closed (removed or replaced since it was found)")
            if self._handle is not None:
                return self._handle
            flags = (os.O_RDWR | (os.O_CREAT if create else 0)) if self.writable else os.O_RDONLY
            try:
                fd = open_file(self.path, flags, 0o644)
            except FileNotFoundError:
                fd = self._open_renamed()
            file_id = os.fstat(fd).st_ino
            if self.file_id is None:
                self.file_id = file_id
            elif file_id != self.file_id:
                os.close(fd)
                raise SegmentClosedError(f"{self.path}: replaced by another file since it was opened")
            handle = self._handle = FileHandle(fd)
        if self._on_open is not None:
            self._on_open()
        return handle

    def _open_renamed(self) -> int:
        """The file, found gone from :attr:`path`: opened at :attr:`next_path` (it took that name since it
        was found: same inode), which becomes :attr:`path`; read-only, also under its name renamed
        ``.deleted`` (another process's retention or cleaner removed it: Kafka renames a removed segment's
        files so and deletes them ``file.delete.delay.ms`` later), the same inode, read there without taking
        that name. Gone from both, read-only: :class:`SegmentClosedError` (removed under the reader, as
        retention does: not damage, fix62's lagging reader got EIO); writable (our own files, renamed only by
        us): :class:`CorruptRecordError` "missing"."""
        later = [] if self.next_path is None else [self.next_path]
        if not self.writable:
            later.append(self.path.with_name(self.path.name + DELETED))
        for path in later if self.file_id is not None else ():
            try:
                fd = open_file(path, os.O_RDONLY)
            except (OSError, UnsafeFileError):
                continue
            if os.fstat(fd).st_ino == self.file_id:
                if path == self.next_path:
                    self.path, self.next_path = self.next_path, None
                return fd
            os.close(fd)
        if not self.writable and self.file_id is not None:
            raise SegmentClosedError(f"{self.path}: removed (retention or compaction) and no longer on disk")
        raise CorruptRecordError("segment file is missing", file=str(self.path)) from None

    def hold(self, size: int, suffixes: Sequence[str] = ()) -> FileHandle:
        """The descriptor of the file this object read, for a reader that goes on reading it after its
        owner let it go (closed, or released by the handle budget): the one held, else the file opened
        again at :attr:`path` or at :attr:`path` plus one of ``suffixes`` (where another process renamed
        it), when it is the same file (its inode) and holds at least ``size`` bytes. The caller keeps the
        returned object for as long as it reads. :class:`SegmentClosedError` when the file is gone (or
        was never opened: nothing says which file it was)."""
        handle = self._handle
        if handle is not None:
            return handle
        if self.file_id is not None:
            later = () if self.next_path is None else (self.next_path,)
            for path in (self.path, *later, *(self.path.with_name(self.path.name + suffix) for suffix in suffixes)):
                try:
                    fd = open_file(path, os.O_RDONLY)
                except (OSError, UnsafeFileError):
                    continue
                try:
                    st = os.fstat(fd)
                except OSError:
                    os.close(fd)
                    continue
                if st.st_ino == self.file_id and st.st_size >= size:
                    return FileHandle(fd)
                os.close(fd)
        raise SegmentClosedError(f"{self.path}: removed (retention or compaction) and no longer on disk")

    def release(self) -> None:
        """Drop the descriptor (lock-free; it closes once no reader holds it); the next use reopens."""
        self._handle = None

    def close(self) -> None:
        """Drop the descriptor for good (readers holding it finish first)."""
        with self._lock:
            self._closed = True
            self._handle = None

    # ------------------------------------------------------------------------------------------ reading

    def stat_size(self) -> int:
        """The file's size as the file system sees it now."""
        handle = self.handle()  # held while used: see read_at
        return os.fstat(handle.fd).st_size

    def read_at(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``position`` (short at the end). The handle is held in a local for
        the whole read: ``os.pread(self.handle().fd, ...)`` drops it before the read, and a release or
        close in another thread then closes the descriptor under it (EBADF), or lets another file take
        its number (another file's bytes: issue 20)."""
        handle = self.handle()
        return os.pread(handle.fd, size, position)

    def batch_starts(self, start_position: int, end: int) -> Iterator[int]:
        """The position of every batch from ``start_position`` (a batch boundary) up to ``end``, found from
        each batch's length field alone (17 bytes read a batch, never its records): where to cut a
        segment that has no index entry to cut at. Stops quietly at what :meth:`batches` would stop or
        fail at (a partial batch, zeros, a length or magic no batch has): the reader meets it there."""
        handle = self.handle()
        fd = handle.fd
        path = str(self.path)
        pos = start_position
        while pos + _MIN_HEADER <= end:
            head = _pread_whole(fd, _MIN_HEADER, pos, False, path)
            if len(head) < _MIN_HEADER or head[:LOG_OVERHEAD] == _ZERO_PREFIX:
                return
            length = int.from_bytes(head[8:12], "big", signed=True)
            if length < _MIN_HEADER - LOG_OVERHEAD or length + LOG_OVERHEAD > self.max_batch_size or head[16] > 127:
                return
            if pos + LOG_OVERHEAD + length > end:
                return
            yield pos
            pos += LOG_OVERHEAD + length

    def batches(
        self,
        start_position: int,
        end: int,
        *,
        nowait: bool = False,
        first_read: int | None = None,
        whole: bool = False,
    ) -> Iterator[BatchView]:
        """Every whole batch from ``start_position`` (a batch boundary) to ``end``; ``nowait``: raise
        :class:`~kafkafs.errors.WouldBlock` rather than wait for the disk (see :func:`_pread`).
        ``first_read``: the size of the first read, when the caller knows what it needs (a lookup
        bounded by the offset index); :data:`FIRST_CHUNK_BYTES` otherwise.

        Reads in chunks of :data:`CHUNK_BYTES` (the first ones smaller: most scans are lookups); stops quietly at a partial batch at the end of the file
        (a writer may be appending) and at zero bytes where a batch should start (a preallocated or
        zero-extended file: no batch has length 0). Corruption raises :class:`CorruptRecordError` with
        the file and the absolute position, after the good batches before it were yielded.
        ``whole``: the file is sealed (a later segment follows it; its writer finished it before it
        rolled), so bytes before ``end`` that are not a whole batch are a torn or cut batch: damage,
        raised where it starts, not a quiet end (SPEC §3: never records gone with success).
        """
        handle = self.handle()  # held for the whole scan: see handles.FileHandle
        fd = handle.fd
        max_batch = self.max_batch_size
        path = str(self.path)
        pos = start_position
        step = FIRST_CHUNK_BYTES if first_read is None else max(_MIN_HEADER, min(first_read, CHUNK_BYTES))
        while pos < end:
            chunk = _pread_whole(fd, min(step, end - pos), pos, nowait, path)
            step = min(2 * step, CHUNK_BYTES)
            if not chunk:
                return
            n = len(chunk)
            rel = 0
            while rel < n:
                if chunk[rel : rel + LOG_OVERHEAD] == _ZERO_PREFIX:
                    if whole:
                        raise _not_whole(end - pos - rel, path, pos + rel)
                    return
                header = _header_in(chunk, rel, n, max_batch, path, pos)
                if header is None:
                    break
                yield BatchView(chunk, header, pos)
                rel = header.end
            if rel == 0:
                # no whole batch in the chunk: a partial header at the end, or a batch larger than a chunk
                if n < _MIN_HEADER:
                    if whole:
                        raise _not_whole(end - pos, path, pos)
                    return
                want = int.from_bytes(chunk[8:12], "big", signed=True) + LOG_OVERHEAD  # checked above
                if pos + want > end:
                    if whole:
                        raise _not_whole(end - pos, path, pos)
                    return
                chunk = _pread_whole(fd, want, pos, nowait, path)
                header = _header_in(chunk, 0, len(chunk), max_batch, path, pos)
                if header is None:
                    if whole:
                        raise _not_whole(end - pos, path, pos)
                    return
                yield BatchView(chunk, header, pos)
                rel = header.end
            pos += rel

    # ------------------------------------------------------------------------------------------ writing

    def write_at(self, data: bytes | bytearray | memoryview, position: int) -> None:
        """Append ``data`` at ``position``, the end of the file (the caller publishes the new size); on an
        error the file is cut back to ``position``."""
        handle = self.handle()  # held for the whole write (see read_at)
        fd = handle.fd
        view = memoryview(data)
        start = position
        try:
            while view:
                written = os.pwrite(fd, view, position)
                if written <= 0:
                    raise OSError(f"{self.path}: short write at position {position}")
                view = view[written:]
                position += written
        except OSError as exc:
            tag_os_error(exc, "write {path}", self.path)
            # a full disk (ENOSPC) or an I/O error: take back what part of the batch did reach the file,
            # so that it ends where the segment says (shrinking needs no space); recovery would cut it
            # anyway, but a clean close must not leave it behind
            try:
                os.ftruncate(fd, start)
            except OSError:
                pass
            raise

    def truncate(self, size: int) -> None:
        handle = self.handle()
        with doing("truncate {path}", self.path):
            os.ftruncate(handle.fd, size)

    def fsync(self) -> None:
        handle = self.handle()
        with doing("write {path}", self.path):  # a write-back error (EIO, ENOSPC) surfaces here
            os.fsync(handle.fd)

    def rename(self, path: Path) -> None:
        """Move the file; the open descriptor stays valid."""
        os.replace(self.path, path)
        self.path = path
