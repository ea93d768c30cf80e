"""LogSegment: one ``.log`` file with its ``.index``, ``.timeindex`` and ``.txnindex`` (Kafka's LogSegment).

The ``.log`` is read with ``pread`` in bounded chunks (memory stays flat however large the segment),
the indexes are memory-mapped (:mod:`kafkafs.storage.index`). Nothing is opened until it is needed,
and the descriptors go back to the process-wide budget of :mod:`kafkafs.storage.handles` when too many
segments hold some. A segment opened read-only never changes a file, so it can read a directory that a
live broker owns; its size is re-read by :meth:`LogSegment.refresh`.

Threads: one writer (the owning :class:`~kafkafs.storage.log.Log` serialises appends, truncation, rolls
and recovery, and the segment takes its own lock for them too); reads take no lock and see a prefix of
the file. An append writes the bytes, then the index entries, then publishes the new size, then the
new tail state (next offset, max timestamp), each a single reference store.

Index entries follow Kafka's rule: before appending a batch, if more than ``index.interval.bytes``
were appended since the position of the last entry (or since the start of the segment), the batch gets
an offset index entry (its LAST offset, its position) and the time index gets the largest timestamp so
far with the last offset of the batch that first reached it. Kafka's append counts per append call
and resets its counter to 0 when a segment is reopened or truncated; here the count is per batch and is
re-derived exactly after a reopen or a truncation, so the indexes are always the ones Kafka's
``recover`` would rebuild from the ``.log``, byte for byte.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from ..errors import CorruptRecordError, InvalidInput, KafkafsError, ReadOnlyError
from ..format.batch import (
    DEFAULT_MAX_INFLATED_BYTES,
    LOG_OVERHEAD,
    BatchHeader,
    DecodedBatch,
    decode_batch,
    read_batch_header,
)
from ..format.index import MAX_POSITION, MAX_RELATIVE_OFFSET
from ..format.txnindex import TxnEvent, transaction_event
from .config import LogConfig
from .handles import BUDGET, FileHandle, HandleBudget
from .index import OffsetIndex, TimeIndex
from .safefiles import open_file
from .transactions import ProducerTransactions, TransactionIndex
from .validation import batch_problem

__all__ = ["LogSegment", "BatchView", "segment_file_name", "CHUNK_BYTES", "NO_TIMESTAMP"]

log = logging.getLogger("kafkafs.segment")

#: How much of a ``.log`` one ``pread`` asks for while scanning; a larger batch gets a read of its own.
CHUNK_BYTES = 256 * 1024
NO_TIMESTAMP = -1
#: Bytes of a batch header needed to know its magic and length (and so whether it is valid).
_MIN_HEADER = 17
_ZERO_PREFIX = bytes(LOG_OVERHEAD)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def segment_file_name(base_offset: int, suffix: str) -> str:
    """``00000000000000000042.log`` and friends: the base offset in 20 digits."""
    return f"{base_offset:020d}{suffix}"


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class BatchView(NamedTuple):
    """One batch found in a segment: its header (``header.position`` relative to ``buf``) and the
    buffer holding it, which starts at file position ``base``."""

    buf: bytes
    header: BatchHeader
    base: int

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
        try:
            return decode_batch(self.buf, self.header, validate=validate, max_inflated_bytes=max_inflated_bytes)
        except CorruptRecordError as exc:
            raise exc.at(file, self.base) from None

    def raw(self) -> bytes:
        """The batch's bytes, exactly as on disk."""
        return self.buf[self.header.position : self.header.end]


def _event_or_none(view: BatchView) -> TxnEvent | None:
    """The batch's transaction event; a marker whose record does not decode (its CRC matched) has none."""
    try:
        return transaction_event(view.buf, view.header)
    except CorruptRecordError:
        return None


class _Tail(NamedTuple):
    """What the end of a segment says; published whole (Kafka's nextOffset, maxTimestampAndOffsetSoFar
    and bytesSinceLastIndexEntry)."""

    next_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    bytes_since_index: int  # bytes from the last offset index entry's position (or 0) to the end


def _header_in(chunk: bytes, rel: int, end: int, max_batch: int, path: str, base: int) -> BatchHeader | None:
    """The header at ``rel`` of a chunk read from file position ``base``; damage is reported with the
    file and its absolute position."""
    try:
        return read_batch_header(chunk, rel, end, max_batch)
    except CorruptRecordError as exc:
        raise exc.at(path, base) from None


class _ScanIndex:
    """An in-memory sparse index for a read-only segment that has no usable ``.index`` (a broker's
    preallocated files were not kept, or the index is empty): built once by scanning batch headers,
    one entry every ``index.interval.bytes``, and extended as the file grows. Each entry is a batch's
    position, its base offset and the largest timestamp of the batches before it, so offset and time
    lookups start their scan near the target instead of at position 0."""

    __slots__ = ("positions", "bases", "max_before", "covered", "running_max", "last_entry")

    def __init__(self) -> None:
        self.positions = array("q", [0])
        self.bases = array("q", [-1])
        self.max_before = array("q", [-1])
        self.covered = 0  # end of the last batch scanned
        self.running_max = -1
        self.last_entry = 0

    def extend(self, views: Iterator[BatchView], interval: int) -> None:
        try:
            for view in views:
                h = view.header
                position = view.position
                if position - self.last_entry >= interval:
                    self.positions.append(position)
                    self.bases.append(h.base_offset)
                    self.max_before.append(self.running_max)
                    self.last_entry = position
                if h.max_timestamp > self.running_max:
                    self.running_max = h.max_timestamp
                self.covered = position + h.size
        except CorruptRecordError:
            pass  # reads that need the damaged part will meet it themselves

    def position_for_offset(self, offset: int) -> int:
        """Position of the last entry whose batch starts at or below ``offset``."""
        return self.positions[max(bisect_right(self.bases, offset) - 1, 0)]

    def position_for_timestamp(self, timestamp: int) -> int:
        """Position of the last entry before which no batch reaches ``timestamp``."""
        return self.positions[max(bisect_left(self.max_before, timestamp) - 1, 0)]


class LogSegment:
    """A ``.log`` with its offset and time index; created empty or opened from existing files.

    ``size`` (known from a directory listing) lets an existing segment open without touching the file.
    A writable segment without ``size`` is created if missing. ``clock`` gives milliseconds, for the
    creation time that ``segment.ms`` counts from while the segment has no timestamp.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        base_offset: int,
        config: LogConfig,
        *,
        writable: bool = False,
        suffix: str = "",
        size: int | None = None,
        clock: Callable[[], int] = _wall_clock_ms,
        budget: HandleBudget | None = None,
    ) -> None:
        # Paths and index objects are made on first use: a partition may have many thousands of
        # segments, and pathlib is slow enough to dominate opening it.
        self.dir = directory if isinstance(directory, Path) else Path(directory)
        self.base_offset = base_offset
        self.config = config
        self.writable = writable
        self._suffix = suffix
        self._clock = clock
        self._budget = budget if budget is not None else BUDGET
        self._log_path: Path | None = None
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        self._txn_index: TransactionIndex | None = None
        self._lock = threading.RLock()
        self._handle: FileHandle | None = None
        self._registered = False
        self._closed = False
        self._dirty = False  # written since the last flush
        #: The segment appends go to (set by the owning Log); a writable active segment keeps its handles.
        self.active = False
        self._tail: _Tail | None = None
        self._rolling_timestamp: int | None = None
        self._scan_index: _ScanIndex | None = None
        self.created_ms = clock()
        jitter = config.segment_jitter_ms
        #: Kafka's per-segment ``rollJitterMs``: random in [0, min(segment.jitter.ms, segment.ms)).
        self.roll_jitter_ms = random.randrange(min(jitter, config.segment_ms)) if jitter > 0 else 0
        if size is None:
            handle = self._open_handle(create=writable)
            size = os.fstat(handle.fd).st_size
        self._size = size

    def _path_for(self, extension: str, suffix: str) -> Path:
        return self.dir / (segment_file_name(self.base_offset, extension) + suffix)

    @property
    def log_path(self) -> Path:
        """The ``.log`` file, following renames (``change_suffix``)."""
        path = self._log_path
        if path is None:
            path = self._log_path = self._path_for(".log", self._suffix)
        return path

    @property
    def offset_index(self) -> OffsetIndex:
        """The ``.index`` (an object made on first use; the file is opened when it is first read)."""
        index = self._offset_index
        return index if index is not None else self._make_index("_offset_index", OffsetIndex, ".index")

    @property
    def time_index(self) -> TimeIndex:
        """The ``.timeindex`` (an object made on first use, like the offset index)."""
        index = self._time_index
        return index if index is not None else self._make_index("_time_index", TimeIndex, ".timeindex")

    def _make_index(self, attribute: str, index_class: type[OffsetIndex | TimeIndex], extension: str):
        """The index held in ``attribute``, made under the lock unless another thread made it first."""
        with self._lock:
            index = getattr(self, attribute)
            if index is None:
                index = index_class(
                    self._path_for(extension, self._suffix),
                    self.base_offset,
                    max_index_size=self.config.segment_index_bytes,
                    writable=self.writable,
                    on_open=self._note_open,
                )
                setattr(self, attribute, index)
            return index

    def _made_indexes(self) -> list[OffsetIndex | TimeIndex]:
        return [i for i in (self._offset_index, self._time_index) if i is not None]

    def _index_path(self, extension: str) -> Path:
        index = self._offset_index if extension == ".index" else self._time_index
        return index.path if index is not None else self._path_for(extension, self._suffix)

    @property
    def txn_index(self) -> TransactionIndex:
        """The ``.txnindex`` (aborted transactions whose ABORT marker is here); the file exists once the
        segment has an entry."""
        index = self._txn_index
        if index is None:
            with self._lock:
                if self._txn_index is None:
                    self._txn_index = TransactionIndex(self._path_for(".txnindex", self._suffix), self.base_offset)
                index = self._txn_index
        return index

    def __repr__(self) -> str:
        return f"<LogSegment {self.log_path.name} size={self._size}>"

    # ------------------------------------------------------------------------------------------ handles

    @property
    def pinned(self) -> bool:
        """The handle budget never releases the active segment of a writable log."""
        return self.writable and self.active and not self._closed

    def _note_open(self) -> None:
        if not self._registered and not self._closed:
            self._registered = True
            self._budget.opened(self)

    def release_handles(self) -> None:
        """Give the descriptors and maps back (lock-free; readers holding them finish first)."""
        self._registered = False
        self._handle = None
        for index in self._made_indexes():
            index.release()

    def _log_handle(self) -> FileHandle:
        """The ``.log``'s descriptor, opened on first use; hold the returned object while using it."""
        handle = self._handle
        return handle if handle is not None else self._open_handle(create=False)

    def _open_handle(self, *, create: bool) -> FileHandle:
        with self._lock:
            handle = self._handle
            if handle is not None:
                return handle
            if self._closed:
                raise KafkafsError(f"{self.log_path}: segment is closed")
            if self.writable:
                flags = os.O_RDWR | (os.O_CREAT if create else 0)
            else:
                flags = os.O_RDONLY
            try:
                fd = open_file(self.log_path, flags, 0o644)
            except FileNotFoundError:
                raise CorruptRecordError("segment file is missing", file=str(self.log_path)) from None
            handle = self._handle = FileHandle(fd)
        self._note_open()
        return handle

    # ------------------------------------------------------------------------------------------ size

    @property
    def size(self) -> int:
        """Bytes in the ``.log`` (read-only segments: as of the last :meth:`refresh`)."""
        return self._size

    def refresh(self) -> int:
        """Re-read the file's size and the indexes (another process may be appending); return the size.

        The indexes go first: the writer appends to the ``.log`` before its index, so a size read after
        them covers every batch they point to.
        """
        if self.writable or self._closed:
            return self._size
        try:
            self.offset_index.refresh()
            self.time_index.refresh()
            size = os.fstat(self._log_handle().fd).st_size
        except (CorruptRecordError, KafkafsError, OSError):
            return self._size
        if size != self._size:
            if size < self._size:
                self._rolling_timestamp = None
                self._scan_index = None
            self._size = size
            self._tail = None
        return size

    # ------------------------------------------------------------------------------------------ reading

    def read_at(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes of the ``.log`` from ``position`` (short at the end)."""
        handle = self._log_handle()
        return os.pread(handle.fd, size, position)

    def _max_batch_size(self) -> int:
        """A batch larger than this is corruption, not data (bounds what one read may load)."""
        return max(DEFAULT_MAX_INFLATED_BYTES, 2 * self.config.max_message_bytes + LOG_OVERHEAD)

    def batches(self, start_position: int = 0, end_position: int | None = None) -> Iterator[BatchView]:
        """Every whole batch from ``start_position`` (a batch boundary) to ``end_position``.

        Reads in chunks of :data:`CHUNK_BYTES`; stops quietly at a partial batch at the end of the file
        (a writer may be appending) and at zero bytes where a batch should start (a preallocated or
        zero-extended file: no batch has length 0). Corruption raises :class:`CorruptRecordError` with
        the file and the absolute position, after the good batches before it were yielded.
        """
        handle = self._log_handle()  # held for the whole scan: see handles.FileHandle
        fd = handle.fd
        end = self._size if end_position is None else min(end_position, self._size)
        max_batch = self._max_batch_size()
        path = str(self.log_path)
        pos = start_position
        while pos < end:
            chunk = os.pread(fd, min(CHUNK_BYTES, end - pos), pos)
            if not chunk:
                return
            n = len(chunk)
            rel = 0
            while rel < n:
                if chunk[rel : rel + LOG_OVERHEAD] == _ZERO_PREFIX:
                    return
                header = _header_in(chunk, rel, n, max_batch, path, pos)
                if header is None:
                    break
                yield BatchView(chunk, header, pos)
                rel = header.end
            if rel == 0:
                # no whole batch in the chunk: a partial header at the end, or a batch larger than a chunk
                if n < _MIN_HEADER:
                    return
                want = int.from_bytes(chunk[8:12], "big", signed=True) + LOG_OVERHEAD  # checked above
                if pos + want > end:
                    return
                chunk = os.pread(fd, want, pos)
                header = _header_in(chunk, 0, len(chunk), max_batch, path, pos)
                if header is None:
                    return
                yield BatchView(chunk, header, pos)
                rel = header.end
            pos += rel

    def _scan(self, start: int) -> Iterator[BatchView]:
        """``batches(start)`` for a position taken from an index, which may be wrong: an entry past the
        data, or one where no batch starts, is not trusted and the scan starts over from 0."""
        if start >= self._size:
            start = 0
        if start == 0:
            yield from self.batches(0)
            return
        views = self.batches(start)
        try:
            first = next(views, None)
        except CorruptRecordError as exc:
            if exc.position != start:
                raise
            log.warning("%s: no batch starts at position %d, where the index points; scanning from 0",
                        self.log_path, start)
            yield from self.batches(0)
            return
        if first is not None:
            yield first
            yield from views

    def position_of(self, offset: int) -> int:
        """Position from which to scan for ``offset``: the offset index's floor entry (Kafka's
        ``translateOffset`` starts there), or the in-memory scan index's when there is no index."""
        fallback = self._fallback_index()
        if fallback is not None:
            return fallback.position_for_offset(offset)
        return self.offset_index.lookup(offset).position

    def _time_start(self, timestamp: int, starting_offset: int) -> int:
        """Where a scan for the first batch reaching ``timestamp`` (at or past ``starting_offset``)
        may start: the time index, then the offset index (or the in-memory scan index)."""
        fallback = self._fallback_index()
        if fallback is not None:
            return max(fallback.position_for_timestamp(timestamp), fallback.position_for_offset(starting_offset))
        entry = self.time_index.lookup(timestamp)
        return self.offset_index.lookup(max(entry.offset, starting_offset)).position

    def _fallback_index(self) -> _ScanIndex | None:
        """The in-memory index of a read-only segment without a usable offset index, brought up to the
        segment's current size; None when the real index serves (or the segment is small)."""
        if self.writable or self._size <= 2 * max(self.config.index_interval_bytes, 4096):
            return None
        if self._scan_index is None and self.offset_index.entries > 0:
            return None
        with self._lock:
            index = self._scan_index
            if index is None:
                index = _ScanIndex()
            if index.covered < self._size:
                index.extend(self._scan(index.covered), max(self.config.index_interval_bytes, 4096))
            self._scan_index = index
            return index

    def find(self, offset: int) -> BatchView | None:
        """The first batch whose last offset is >= ``offset``, or None if there is none here."""
        return next(self.read_from(offset), None)

    def read_from(self, offset: int) -> Iterator[BatchView]:
        """Batches from the one holding ``offset`` (or the next one after a gap) to the end."""
        for view in self._scan(self.position_of(offset)):
            if view.header.last_offset >= offset:
                yield view

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int = 0, *, use_indexes: bool = True
    ) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or past ``starting_offset`` whose timestamp is
        >= ``timestamp``, or None if there is none in this segment. The scan starts where the indexes
        point, or at the segment's start with ``use_indexes=False`` (indexes that failed a check)."""
        start = self._time_start(timestamp, starting_offset) if use_indexes else 0
        for view in self._scan(start):
            h = view.header
            if h.max_timestamp < timestamp or h.last_offset < starting_offset:
                continue
            batch = view.decode(file=str(self.log_path))
            for off, ts in zip(batch.offsets, batch.timestamps, strict=True):
                if ts >= timestamp and off >= starting_offset:
                    return off, ts
        return None

    # ------------------------------------------------------------------------------------------ the tail

    def _tail_state(self) -> _Tail:
        tail = self._tail
        return tail if tail is not None else self._load_tail()

    def _load_tail(self) -> _Tail:
        with self._lock:
            tail = self._tail
            if tail is None:
                tail = self._tail = self._scan_tail()
            return tail

    def _scan_tail(self) -> _Tail:
        """Next offset and max timestamp, from the indexes' last entries and a scan of what follows them
        (Kafka's ``readNextOffset`` and ``loadLargestTimestamp``)."""
        last_time = self.time_index.last_entry
        last_index = self.offset_index.last_entry
        max_ts, max_offset = last_time.timestamp, last_time.offset
        if self.time_index.entries:
            start = min(self.offset_index.lookup(last_time.offset).position, last_index.position)
        else:
            start = 0  # the largest timestamp can be anywhere
        next_offset, max_ts, max_offset, seen = self._scan_from(start, max_ts, max_offset)
        if not seen and start > 0:  # nothing whole where the index points: trust the log, not the index
            next_offset, max_ts, max_offset, _ = self._scan_from(0, NO_TIMESTAMP, self.base_offset)
        since = self._size - (last_index.position if self.offset_index.entries else 0)
        return _Tail(next_offset, max_ts, max_offset, max(0, since))

    def _scan_from(self, start: int, max_ts: int, max_offset: int) -> tuple[int, int, int, bool]:
        next_offset = self.base_offset
        seen = False
        try:
            for view in self._scan(start):
                h = view.header
                seen = True
                next_offset = max(next_offset, h.next_offset)
                if h.max_timestamp > max_ts:
                    max_ts, max_offset = h.max_timestamp, h.last_offset
        except CorruptRecordError as exc:
            log.warning("%s: %s; the segment's end is taken to be before it", self.log_path, exc.reason)
        return next_offset, max_ts, max_offset, seen

    @property
    def next_offset(self) -> int:
        """One past the last offset in this segment (the base offset when empty)."""
        return self._tail_state().next_offset

    @property
    def max_timestamp(self) -> int:
        """The largest timestamp of any batch here (-1 when empty; Kafka's ``largestTimestamp``)."""
        return self._tail_state().max_timestamp

    @property
    def offset_of_max_timestamp(self) -> int:
        """The last offset of the first batch that holds :attr:`max_timestamp`."""
        return self._tail_state().offset_of_max_timestamp

    def rolling_timestamp(self) -> int | None:
        """The first batch's max timestamp: what ``segment.ms`` is measured from (Kafka's
        ``rollingBasedTimestamp``); None when empty."""
        if self._rolling_timestamp is None and self._size:
            for view in self.batches(0):
                self._rolling_timestamp = view.header.max_timestamp
                break
        return self._rolling_timestamp

    def time_waited_for_roll(self, now: int, message_timestamp: int) -> int:
        """Kafka's ``timeWaitedForRoll``: from the first batch's timestamp to the new messages' one, or,
        while the segment has no timestamp, from its creation to ``now``."""
        first = self.rolling_timestamp()
        if first is not None and first >= 0:
            return message_timestamp - first
        return now - self.created_ms

    # ------------------------------------------------------------------------------------------ writing

    def _require_writable(self) -> None:
        if not self.writable:
            raise ReadOnlyError(f"{self.log_path} is open read-only")
        if self._closed:
            raise ReadOnlyError(f"{self.log_path} is closed")

    def should_roll(
        self, *, messages_size: int, max_timestamp: int, max_offset: int, batches: int = 1, now: int
    ) -> str | None:
        """Which of Kafka's four roll conditions holds before appending ``batches`` batches of
        ``messages_size`` bytes, the last offset ``max_offset``: ``"segment.bytes"``, ``"segment.ms"``,
        ``"index full"``, ``"offset overflow"``, or None (Kafka's ``shouldRoll``)."""
        config = self.config
        size = self._size
        if size > config.segment_bytes - messages_size or (size and size + messages_size > MAX_POSITION):
            return "segment.bytes"
        if size > 0 and self.time_waited_for_roll(now, max_timestamp) > config.segment_ms - self.roll_jitter_ms:
            return "segment.ms"
        if not self._index_has_room(batches):
            return "index full"
        if not self.offset_index.can_append_offset(max_offset):
            return "offset overflow"
        return None

    def _index_has_room(self, batches: int) -> bool:
        """Room for an entry per batch (Kafka checks ``isFull``, the same for a single batch); the time
        index keeps its last slot for the roll entry."""
        off, tim = self.offset_index, self.time_index
        return off.entries + batches <= off.max_entries and tim.entries + batches <= tim.max_entries - 1

    def append(self, data: bytes | bytearray | memoryview, headers: Sequence[BatchHeader]) -> None:
        """Append whole batches (``headers`` describe ``data``, positions relative to it), with index
        entries per Kafka's rule (module docstring).

        ``InvalidInput`` when an offset does not fit the segment (Kafka's
        ``LogSegmentOffsetOverflowException``): before anything is written.
        """
        self._require_writable()
        if not headers:
            return
        first, last = headers[0], headers[-1]
        if first.base_offset < self.base_offset or last.last_offset - self.base_offset > MAX_RELATIVE_OFFSET:
            raise InvalidInput(
                f"offsets {first.base_offset}..{last.last_offset} do not fit segment {self.base_offset}"
            )
        with self._lock:
            tail = self._tail_state()
            start = self._size
            if start + len(data) > MAX_POSITION + 1:
                raise InvalidInput(f"{self.log_path}: {len(data)} more bytes would not fit an index position")
            self._write_at(data, start)
            self._dirty = True
            interval = self.config.index_interval_bytes
            max_ts, max_offset, since = tail.max_timestamp, tail.offset_of_max_timestamp, tail.bytes_since_index
            offset_index, time_index = self.offset_index, self.time_index
            for h in headers:
                if h.max_timestamp > max_ts:
                    max_ts, max_offset = h.max_timestamp, h.last_offset
                if since > interval:
                    if not offset_index.is_full():  # full only if a roll could not help (should_roll)
                        offset_index.append(h.last_offset, start + h.position)
                    if not time_index.is_full():
                        time_index.maybe_append(max_ts, max_offset)
                    since = 0
                since += h.size
            if start == 0:
                self._rolling_timestamp = first.max_timestamp
            self._size = start + len(data)
            self._tail = _Tail(max(tail.next_offset, last.next_offset), max_ts, max_offset, since)

    def _write_at(self, data: bytes | bytearray | memoryview, position: int) -> None:
        handle = self._log_handle()
        view = memoryview(data)
        while view:
            written = os.pwrite(handle.fd, view, position)
            if written <= 0:
                raise OSError(f"{self.log_path}: short write at position {position}")
            view = view[written:]
            position += written

    def flush(self) -> None:
        """fsync the ``.log`` and sync the index maps (Kafka's ``LogSegment.flush``)."""
        if not self.writable or self._closed:
            return
        with self._lock:
            os.fsync(self._log_handle().fd)
            self.offset_index.flush()
            self.time_index.flush()
            self.txn_index.flush()
            self._dirty = False

    def become_active(self) -> None:
        """Appends go here from now on: the indexes grow back to ``segment.index.bytes`` (Kafka's
        ``resizeIndexes`` on load, so a trimmed index does not force a roll)."""
        with self._lock:
            self.active = True
            if self.writable and not self._closed:
                self._grow_indexes()
                self._note_open()

    def _grow_indexes(self) -> None:
        """Both indexes back to ``segment.index.bytes``, or to their entries if they hold more (the
        setting was lowered): a full index then rolls the segment at the next append."""
        for index in (self.offset_index, self.time_index):
            index.resize(max(self.config.segment_index_bytes, index.size_in_bytes))

    def on_become_inactive(self) -> None:
        """Seal at roll: the final time index entry (the largest timestamp and its offset), then the
        indexes trimmed to their entries (Kafka's ``onBecomeInactiveSegment``)."""
        if not self.writable or self._closed:
            self.active = False
            return
        with self._lock:
            tail = self._tail_state()
            if self.offset_index.can_append_offset(tail.offset_of_max_timestamp):
                self.time_index.maybe_append(tail.max_timestamp, tail.offset_of_max_timestamp, skip_full_check=True)
            self.offset_index.trim_to_valid_size()
            self.time_index.trim_to_valid_size()
            self._dirty = True
            self.active = False

    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose last offset is >= ``offset`` (so the batch holding ``offset`` goes
        whole, as in Kafka) and their index entries; the indexes grow back to their active size, as the
        segment is the log's active one afterwards. Return the bytes cut."""
        self._require_writable()
        with self._lock:
            view = self.find(offset)
            self.offset_index.truncate_to(offset)
            self.time_index.truncate_to(offset)
            self.txn_index.truncate_to(offset)
            self._grow_indexes()
            cut = 0
            if view is not None:
                cut = self._size - view.position
                self._truncate_file(view.position)
            if self._size == 0:
                self.created_ms = self._clock()
                self._rolling_timestamp = None
            self._tail = None
            self._tail = self._scan_tail()
            return cut

    def _truncate_file(self, size: int) -> None:
        os.ftruncate(self._log_handle().fd, size)
        self._size = size
        self._dirty = True

    def recover(
        self,
        *,
        transactions: ProducerTransactions | Callable[[bool], ProducerTransactions | None] | None = None,
        upper: int | None = None,
    ) -> int:
        """Re-validate every batch, rebuild the three indexes, cut the invalid tail; return the bytes cut
        (Kafka's ``LogSegment.recover``).

        A batch is invalid when :func:`~kafkafs.storage.validation.batch_problem` says so, the rule
        ``verify`` reports by (header, CRC, offsets that go backwards or reach ``upper``, the next
        segment's base offset, records that do not decode); everything from the first invalid byte on
        is truncated. The indexes end trimmed, the
        time index with its final entry, as a segment closed cleanly has them. A batch whose offsets do
        not fit the segment's relative offsets (Kafka would split the segment) is kept, unindexed.

        The ``.txnindex`` is rebuilt from the transaction markers here, which needs the partition's
        undecided transactions at this segment's base offset: ``transactions`` is that state (updated
        in place to the segment's end), or a function that returns it, called only if the segment holds
        transactional batches, with True when it holds an ABORT marker (so it may return None, and the
        index stays empty, when there is none). With None the ``.txnindex`` is kept as it is, less the
        entries whose marker was cut.
        """
        self._require_writable()
        with self._lock:
            events: list[TxnEvent] = []
            cut = self._recover(events, upper)
            self._rebuild_txn_index(events, transactions)
            return cut

    def _rebuild_txn_index(
        self,
        events: list[TxnEvent],
        transactions: ProducerTransactions | Callable[[bool], ProducerTransactions | None] | None,
    ) -> None:
        index = self.txn_index
        if transactions is None:
            index.truncate_to(self._tail_state().next_offset)
            return
        index.reset()
        if not events:
            return
        state: ProducerTransactions | None
        if isinstance(transactions, ProducerTransactions):
            state = transactions
        else:
            state = transactions(any(e.kind == "ABORT" for e in events))
        if state is None:
            return
        for event in events:
            for entry in state.apply((event,)):
                index.append(entry)

    def _recover(self, events: list[TxnEvent], upper: int | None = None) -> int:
        offset_index, time_index = self.offset_index, self.time_index
        offset_index.reset()
        time_index.reset()
        interval = self.config.index_interval_bytes
        valid = last_entry = 0
        max_ts, max_offset = NO_TIMESTAMP, self.base_offset
        next_offset = self.base_offset
        first_ts: int | None = None
        try:
            for view in self.batches(0):
                h = view.header
                problem = batch_problem(
                    view.buf, h, next_offset=next_offset, segment_base=self.base_offset, upper=upper
                )
                if problem is not None:
                    log.warning("%s: position %d: %s; cutting from there", self.log_path, view.position, problem)
                    break
                fits = h.last_offset - self.base_offset <= MAX_RELATIVE_OFFSET
                if h.max_timestamp > max_ts and fits:
                    max_ts, max_offset = h.max_timestamp, h.last_offset
                if valid - last_entry > interval and fits:
                    if not offset_index.is_full():
                        offset_index.append(h.last_offset, valid)
                    if not time_index.is_full():
                        time_index.maybe_append(max_ts, max_offset)
                    last_entry = valid
                valid += h.size
                next_offset = h.next_offset
                if h.producer_id >= 0 and h.magic == 2 and (h.is_transactional or h.is_control):
                    event = _event_or_none(view)
                    if event is not None:
                        events.append(event)
                if first_ts is None:
                    first_ts = h.max_timestamp
        except CorruptRecordError:
            pass
        cut = self._size - valid
        if cut:
            self._truncate_file(valid)
        offset_index.trim_to_valid_size()
        time_index.maybe_append(max_ts, max_offset, skip_full_check=True)
        time_index.trim_to_valid_size()
        self._dirty = True
        self._rolling_timestamp = first_ts
        self._tail = _Tail(next_offset, max_ts, max_offset, valid - last_entry)
        return cut

    # ------------------------------------------------------------------------------------------ files

    def sanity_check(self) -> None:
        """Kafka's index sanity checks, and ``kafka-dump-log --verify-index-only``'s order rules
        (``CorruptRecordError`` naming the file when they fail)."""
        self.offset_index.sanity_check(log_size=self._size)
        self.time_index.sanity_check()

    def change_suffix(self, suffix: str) -> None:
        """Rename the files to carry ``suffix`` (``.deleted``, ``.cleaned``, ``.swap`` or ``""``); the
        open descriptors and maps stay valid."""
        self._require_writable()
        with self._lock:
            new_log = self._path_for(".log", suffix)
            os.replace(self.log_path, new_log)
            self._log_path = new_log
            self.offset_index.rename(self._path_for(".index", suffix))
            self.time_index.rename(self._path_for(".timeindex", suffix))
            self.txn_index.rename(self._path_for(".txnindex", suffix))
            self._suffix = suffix

    @property
    def suffix(self) -> str:
        return self._suffix

    def close(self, *, seal: bool | None = None) -> None:
        """Close the file and the indexes. A writable segment is sealed first (final time index entry,
        trimmed indexes) when ``seal`` says so, by default when it is the active one; whatever was
        written is fsynced."""
        if self._closed:
            return
        try:
            if self.writable:
                if self.active if seal is None else seal:
                    self.on_become_inactive()
                if self._dirty:
                    self.flush()
            for index in self._made_indexes():
                index.close()
        finally:
            self._drop_handle()

    def _drop_handle(self) -> None:
        """Forget the ``.log`` descriptor; it closes once no reader holds it (handles.FileHandle), so a
        reader left suspended in :meth:`batches` never reads a descriptor number reused by another file."""
        with self._lock:
            self._closed = True
            self._handle = None
        self._budget.forget(self)

    def close_handlers(self) -> None:
        """Close without sealing or syncing (crash simulation, or the files are being deleted)."""
        if self._closed:
            return
        for index in self._made_indexes():
            index.close_handler()
        self._drop_handle()

    def delete(self) -> None:
        """Remove the files (readers that hold the ``.log`` open finish reading it)."""
        self.close_handlers()
        for path in (self.log_path, self._index_path(".index"), self._index_path(".timeindex")):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        self.txn_index.delete()
