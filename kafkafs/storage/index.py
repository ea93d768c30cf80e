"""Indexes over ``.index`` / ``.timeindex`` files, memory-mapped as Kafka keeps them (read-only: read).

``AbstractIndex`` owns the file, its memory map and their lifecycle; ``OffsetIndex``
(:mod:`kafkafs.storage.offset_index`) and ``TimeIndex`` (:mod:`kafkafs.storage.time_index`) only say
what an entry means. The byte layout and the searches live in ``kafkafs.format.index``.

Two modes:

- writable (the engine owns the log directory): the file is created preallocated to
  ``max_index_size`` rounded down to a whole entry, appended to through a shared writable map, trimmed
  to its entries on ``close``/``trim_to_valid_size`` (roll), grown back with ``resize``;
- read-only (``writable=False``, e.g. a directory a running broker owns): nothing is created,
  resized, truncated or written. The file may be an active, preallocated index that the broker is still
  appending to; ``refresh()`` re-derives the number of entries from the bytes (the rule is in
  ``kafkafs.format.index.live_entry_count``). Only the valid prefix is used (the broker trims the file
  when the segment rolls), and it is read with ``pread``, never mapped (SIGBUS: :mod:`.index_read`).
  A missing file reads as an empty index.

Threads: one writer at a time (appends, truncation, resize, close serialise on a lock); lookups take no
lock. Every change publishes a new immutable snapshot (map, entry count, last entry) with one
reference store, and a lookup works on the one snapshot it read. Appends write the entry's bytes before
publishing the count that covers them, so readers never see a half-written entry of ours. Maps that
are replaced (``resize``) are not closed, only dropped, so a reader still holding one keeps a valid
map (CPython frees it when the last reference goes). A reader that overlaps ``truncate_to`` may see
the dropped entries zeroed or overwritten; truncation belongs to recovery, when nobody should read.

Descriptors: none is kept open. The map holds its own duplicate of the descriptor, and ``resize`` and
``refresh`` open the file by its path (which follows ``rename``), so an open index costs one descriptor
and a released one (``release``, for the handle budget of :mod:`kafkafs.storage.handles`) none.

Where kafkafs differs from Kafka, knowingly:

- An existing file's entry count comes from ``live_entry_count`` rather than ``file size / entry
  size``, so an index left preallocated by a crash opens with its real entries instead of a full index
  of zeros. For trimmed files the two agree.
- ``truncate_to``/``truncate`` zero the dropped entries, so the file again looks like a fresh
  preallocation to any other reader (Kafka leaves stale bytes there, invisible to itself).
- Errors are kafkafs's: appending out of order, past a full index or past what a relative offset can
  hold raises ``InvalidInput``; writing to a read-only index ``ReadOnlyError``; a failed sanity check
  ``CorruptRecordError`` naming the file; using a closed or deleted index ``KafkafsError``. Operating
  system errors (a full disk, permissions) surface as ``OSError``.
"""

from __future__ import annotations

import logging
import mmap
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar, Generic, NamedTuple, TypeVar

from kafkafs.errors import (
    CorruptRecordError,
    InvalidInput,
    KafkafsError,
    ReadOnlyError,
    UnsafeFileError,
    doing,
)
from kafkafs.format import Buffer
from kafkafs.format.index import (
    MAX_RELATIVE_OFFSET,
    OFFSET_KEY,
    Field,
    IndexLayout,
    OffsetPosition,
    TimestampOffset,
    ceiling_slot,
    live_entry_count,
    round_down_to_entry,
)
from kafkafs.storage.file_copy import FileCopy, put_back
from kafkafs.storage.index_read import DISK_ERRNOS, read_entries
from kafkafs.storage.safefiles import open_file, reserve

__all__ = ["DEFAULT_MAX_INDEX_SIZE", "AbstractIndex", "IndexState"]

log = logging.getLogger("kafkafs.storage")

#: Kafka's ``segment.index.bytes`` default.
DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024

E = TypeVar("E", OffsetPosition, TimestampOffset)


class IndexState(NamedTuple, Generic[E]):
    """One published view of an open index; replaced whole, never changed."""

    mm: mmap.mmap | bytes | None  # covers at least ``entries`` entries (read-only: a copy); None when empty
    entries: int
    max_entries: int
    length: int  # the file's size in bytes when last seen
    last: E  # the last entry, or the empty-index answer


class AbstractIndex(Generic[E]):
    """What the offset and time indexes share: the file, the map, the count, the binary search."""

    layout: ClassVar[IndexLayout]
    #: The column holding the offset, which ``truncate_to`` searches.
    _offset_field: ClassVar[Field] = OFFSET_KEY

    def __init__(
        self,
        path: str | os.PathLike[str],
        base_offset: int,
        *,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
        writable: bool = True,
        on_open: Callable[[], None] | None = None,
    ) -> None:
        """Nothing is opened here; the file is opened (and, writable, created) on first use.

        ``on_open`` is called after the file gets mapped (the owning segment tells its handle budget).
        """
        self._path = Path(path)
        self._base_offset = base_offset
        self._max_index_size = max_index_size
        self._writable = writable
        self._on_open = on_open
        self._lock = threading.RLock()
        self._state: IndexState[E] | None = None
        self._closed = False
        #: Read-only: the disk error that made the file unreadable (the index then reads as empty).
        self._unreadable: OSError | None = None

    # -- what an entry means (subclasses) --------------------------------------------------------------

    def _parse(self, buf: Buffer | None, slot: int) -> E:
        """Entry ``slot`` of ``buf``, absolute (``buf`` is only None when there are no entries)."""
        raise NotImplementedError

    def _empty_last(self) -> E:
        raise NotImplementedError

    def _check(self, buf: Buffer, entries: int, log_size: int | None) -> str | None:
        raise NotImplementedError

    # -- properties ------------------------------------------------------------------------------------

    @property
    def path(self) -> Path:
        """The file, following renames."""
        return self._path

    @property
    def base_offset(self) -> int:
        return self._base_offset

    @property
    def writable(self) -> bool:
        return self._writable

    @property
    def max_index_size(self) -> int:
        return self._max_index_size

    @property
    def entry_size(self) -> int:
        return self.layout.entry_size

    @property
    def entries(self) -> int:
        """The number of entries (read-only: as of the last open or ``refresh``)."""
        return self._snapshot().entries

    @property
    def max_entries(self) -> int:
        """How many entries the file has room for at its current size."""
        return self._snapshot().max_entries

    @property
    def length(self) -> int:
        """The file's size in bytes (read-only: as last seen)."""
        return self._snapshot().length

    @property
    def size_in_bytes(self) -> int:
        """The bytes the entries use."""
        return self._snapshot().entries * self.layout.entry_size

    def is_full(self) -> bool:
        """No room for another entry."""
        st = self._snapshot()
        return st.entries >= st.max_entries

    @property
    def last_entry(self) -> E:
        """The last entry, or what a lookup below the first entry returns when the index is empty."""
        return self._snapshot().last

    def entry(self, n: int) -> E:
        """The ``n``-th entry, absolute."""
        st = self._snapshot()
        if not 0 <= n < st.entries:
            raise InvalidInput(f"{self._path}: no entry {n} in an index of {st.entries} entries")
        return self._parse(st.mm, n)

    def __iter__(self) -> Iterator[E]:
        """Every entry, absolute, from one snapshot."""
        st = self._snapshot()
        for n in range(st.entries):
            yield self._parse(st.mm, n)

    def __repr__(self) -> str:
        mode = "rw" if self._writable else "ro"
        count = "unopened" if self._state is None else f"{self._state.entries} entries"
        return f"{type(self).__name__}({str(self._path)!r}, base_offset={self._base_offset}, {mode}, {count})"

    # -- offsets ---------------------------------------------------------------------------------------

    def can_append_offset(self, offset: int) -> bool:
        """Whether ``offset`` fits this index as a relative offset (if not, the segment must roll)."""
        return 0 <= offset - self._base_offset <= MAX_RELATIVE_OFFSET

    def relative_offset(self, offset: int) -> int:
        """``offset`` relative to the base offset; ``InvalidInput`` when it does not fit."""
        rel = offset - self._base_offset
        if not 0 <= rel <= MAX_RELATIVE_OFFSET:
            raise InvalidInput(
                f"{self._path}: offset {offset} does not fit an index based at {self._base_offset}"
            )
        return rel

    # -- opening ---------------------------------------------------------------------------------------

    def _snapshot(self) -> IndexState[E]:
        st = self._state
        return st if st is not None else self._open()

    def _open(self) -> IndexState[E]:
        with self._lock:
            st = self._state
            if st is not None:
                return st
            if self._closed:
                raise KafkafsError(f"{self._path}: index is closed")
            st = self._open_writable() if self._writable else self._read_file(None)
            self._state = st
        if st.mm is not None and self._on_open is not None:
            self._on_open()
        return st

    def _open_writable(self) -> IndexState[E]:
        size = self.layout.entry_size
        preallocate = round_down_to_entry(self._max_index_size, size)
        flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = open_file(self._path, flags | os.O_CREAT | os.O_EXCL, 0o644)
            created = True
        except FileExistsError:
            fd = open_file(self._path, flags)
            created = False
        try:
            if created:
                if preallocate < size:
                    raise InvalidInput(f"{self._path}: invalid max index size {self._max_index_size}")
                os.ftruncate(fd, preallocate)
            length = os.fstat(fd).st_size
            mm = mmap.mmap(fd, length, access=mmap.ACCESS_WRITE) if length >= size else None
            entries = 0
            if mm is not None and not created:  # a new file is all zeros: no need to look
                # counted with preads, not through the map: past its entries a preallocated index is a
                # hole, and a read fault there takes a page the disk may not have (tmpfs allocates one:
                # SIGBUS on a full one, review12 R12-5); a pread of a hole allocates nothing
                entries = live_entry_count(length // size, lambda slot: os.pread(fd, size, slot * size), self.layout)
        except BaseException:
            if created:
                self._path.unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)  # the map keeps its own duplicate of the descriptor
        self._reserved = entries * size  # blocks reserved so far (written pages have theirs: reserve())
        return self._make_state(mm, entries, length // size, length)

    def _read_file(self, old: IndexState[E] | None) -> IndexState[E]:
        """A read-only index's state from its file as it is now, what ``old`` read kept
        (:func:`.index_read.read_entries`); ``old`` (None: an empty index) when no file is there (a
        link counts as none: never followed). A file the disk cannot read reads as empty: an index
        only says where to start reading the log, so lookups in this segment scan its log from the
        start instead (the right answer, slower), and :meth:`sanity_check` reports the file. Logged
        once per open."""
        try:
            fd = open_file(self._path, os.O_RDONLY)
        except (FileNotFoundError, UnsafeFileError):
            return old if old is not None else self._make_state(None, 0, 0, 0)
        try:
            got = read_entries(fd, self.layout, 0 if old is None else old.entries, None if old is None else old.mm)
        except OSError as exc:
            if exc.errno not in DISK_ERRNOS:
                raise
            if self._unreadable is None:
                log.error("cannot read %s (%s); lookups in its segment read the log from its start instead",
                          self._path, exc.strerror or exc)
            self._unreadable = exc
            return self._make_state(None, 0, 0, 0)
        finally:
            os.close(fd)
        self._unreadable = None
        return self._make_state(got.data, got.entries, got.max_entries, got.length)

    def _make_state(self, mm: mmap.mmap | bytes | None, entries: int, max_entries: int,
                    length: int) -> IndexState[E]:
        last = self._parse(mm, entries - 1) if entries else self._empty_last()
        return IndexState(mm, entries, max_entries, length, last)

    def refresh(self) -> int:
        """Re-read how many entries the file holds (read-only; writable indexes know) and return it.

        Cheap when nothing changed: an ``open``, an ``fstat`` and a read or two. A file that went away
        (renamed ``.deleted`` by its owner) keeps the entries last seen.
        """
        with self._lock:
            st = self._snapshot()
            if self._writable:
                return st.entries
            self._state = new = self._read_file(st)  # the file gone: the entries last seen stay
            return new.entries

    # -- writing ---------------------------------------------------------------------------------------

    def _writable_state(self) -> IndexState[E]:
        st = self._snapshot()
        if not self._writable:
            raise ReadOnlyError(f"{self._path}: index is open read-only")
        return st

    def _write_entry(self, st: IndexState[E], packed: bytes, last: E) -> None:
        if st.entries >= st.max_entries or not isinstance(st.mm, mmap.mmap):  # a writable state's is a map
            raise InvalidInput(f"{self._path}: no room for another entry ({st.entries} entries)")
        at = st.entries * self.layout.entry_size
        if at + len(packed) > self._reserved:  # a sparse page written through the map: SIGBUS if no room
            self._reserved = reserve(self._path, self._reserved, at + len(packed), st.length)
        st.mm[at : at + len(packed)] = packed
        self._state = st._replace(entries=st.entries + 1, last=last)

    def _truncate_to_entries(self, entries: int) -> None:
        with self._lock:
            st = self._writable_state()
            if entries >= st.entries:
                return
            size = self.layout.entry_size
            new = self._make_state(st.mm, entries, st.max_entries, st.length)
            self._state = new
            if isinstance(st.mm, mmap.mmap):  # a writable state's map (None when empty)
                st.mm[entries * size : st.entries * size] = bytes((st.entries - entries) * size)

    def truncate(self) -> None:
        """Remove every entry."""
        self._truncate_to_entries(0)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``; an offset past the last changes nothing."""
        with self._lock:
            st = self._writable_state()
            rel = offset - self._base_offset
            if rel <= 0:
                keep = 0
            elif rel > MAX_RELATIVE_OFFSET:
                keep = st.entries
            else:
                slot = ceiling_slot(st.mm or b"", st.entries, rel, self._offset_field)
                keep = st.entries if slot < 0 else slot
            self._truncate_to_entries(keep)

    def resize(self, new_size: int) -> bool:
        """Set the file (and map) to ``new_size`` rounded down to whole entries; False if already so.

        Used to trim on roll or close, and to grow an index back to ``max_index_size`` when its segment
        becomes active again.
        """
        with self._lock:
            st = self._writable_state()
            size = self.layout.entry_size
            rounded = round_down_to_entry(new_size, size)
            if rounded == st.length:
                return False
            if rounded < st.entries * size:
                raise InvalidInput(f"{self._path}: cannot resize {st.entries} entries into {rounded} bytes")
            fd = open_file(self._path, os.O_RDWR)
            try:
                os.ftruncate(fd, rounded)
                self._reserved = min(self._reserved, rounded)
                mm = mmap.mmap(fd, rounded, access=mmap.ACCESS_WRITE) if rounded else None
            finally:
                os.close(fd)
            # the old map is dropped, not closed: a reader may still hold it (module docstring)
            self._state = st._replace(mm=mm, max_entries=rounded // size, length=rounded)
            return True

    def trim_to_valid_size(self) -> None:
        """Shrink the file to exactly its entries (on roll and close)."""
        with self._lock:
            st = self._writable_state()
            self.resize(st.entries * self.layout.entry_size)

    def reset(self) -> None:
        """Remove every entry and grow the file back to ``max_index_size``."""
        with self._lock:
            self.truncate()
            self.resize(self._max_index_size)

    def flush(self) -> None:
        """Write the map's dirty pages to the file (``msync``, Kafka's ``mmap.force``); no-op read-only."""
        with self._lock:
            st = self._state
            if st is None or not self._writable:
                return
            if isinstance(st.mm, mmap.mmap):  # a writable state's map (None when empty)
                with doing("write {path}", self._path):  # a write-back error (EIO) names the index
                    st.mm.flush()

    # -- lifecycle -------------------------------------------------------------------------------------

    def close_handler(self) -> None:
        """Drop the map; the next use opens the file again."""
        with self._lock:
            self._state = None

    def release(self) -> None:
        """Drop the map without taking the lock (the handle budget calls this from any thread).

        Safe against a concurrent writer: the map is shared with the file, so whatever state the writer
        publishes afterwards is still true of the file, and a reopen re-derives the same entries.
        """
        self._state = None

    def close(self) -> None:
        """Trim a writable index to its entries, release the file; the index cannot be used again."""
        with self._lock:
            if self._closed:
                return
            try:
                if self._writable and self._state is not None:
                    with doing("write {path}", self._path):
                        self.trim_to_valid_size()
            finally:
                self.close_handler()
                self._closed = True

    def put_back(self, copy: FileCopy) -> None:
        """After a rebuild that failed: drop the map and make the file hold what ``copy`` kept
        (:func:`~.file_copy.put_back`: its bytes and length, or no file); the next use opens it again."""
        with self._lock:
            self._state = None  # dropped, not closed (module docstring); never trimmed by a close
            put_back(copy)

    def delete(self) -> bool:
        """Release and delete the file; True if it existed. The index cannot be used again."""
        with self._lock:
            self.close_handler()
            self._closed = True
            try:
                self._path.unlink()
            except FileNotFoundError:
                return False
            return True

    def rename(self, new_path: str | os.PathLike[str]) -> None:
        """Rename the file (``.deleted``, ``.cleaned``, ``.swap`` ...); the map stays valid.

        A file that does not exist (never created, as with Kafka's lazy index) is not an error.
        """
        target = Path(new_path)
        with self._lock:
            try:
                os.replace(self._path, target)
            except FileNotFoundError:
                if self._path.exists():
                    raise
            finally:
                self._path = target

    def __enter__(self) -> AbstractIndex[E]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sanity ----------------------------------------------------------------------------------------

    def sanity_check(self, *, full: bool = True, log_size: int | None = None) -> None:
        """Raise ``CorruptRecordError`` (naming the file) if the index is visibly broken.

        ``full=False`` is Kafka's O(1) ``sanityCheck`` (size a whole number of entries, last entry not
        below the first); ``full=True`` checks every entry's order as ``kafka-dump-log
        --verify-index-only`` would, and with ``log_size`` that offset index positions lie in the log.
        """
        st = self._snapshot()
        size = self.layout.entry_size
        if self._unreadable is not None:
            raise CorruptRecordError(f"the disk cannot read it ({self._unreadable.strerror or self._unreadable})",
                                     file=str(self._path))
        if st.length % size:
            raise CorruptRecordError(
                f"{self.layout.name} size {st.length} is not a multiple of {size}", file=str(self._path)
            )
        if st.mm is None or st.entries == 0:
            return
        if full:
            reason = self._check(st.mm, st.entries, log_size)
        else:
            edge = bytes(st.mm[:size]) + bytes(st.mm[(st.entries - 1) * size : st.entries * size])
            reason = self._check(edge, 1 if st.entries == 1 else 2, log_size)
        if reason is not None:
            raise CorruptRecordError(f"{self.layout.name}: {reason}", file=str(self._path))
