"""LogSegment: one ``.log`` file with its ``.index`` and ``.timeindex`` (Kafka's LogSegment).

The ``.log`` is read with ``pread`` in bounded chunks (memory stays flat however large the segment),
the indexes are memory-mapped (:mod:`kafkafs.storage.index`). A segment opened read-only never changes
a file, so it can read a directory that a live broker owns; its size is re-read on demand.

Threads: one writer (the owning :class:`~kafkafs.storage.log.Log` serialises appends, truncation and
rolls); reads take no lock and see a prefix of the file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from ..errors import CorruptRecordError, InvalidInput, ReadOnlyError
from ..format.batch import (
    DEFAULT_MAX_INFLATED_BYTES,
    LOG_OVERHEAD,
    BatchHeader,
    DecodedBatch,
    decode_batch,
    read_batch_header,
    validate_batch,
)
from .config import LogConfig
from .index import OffsetIndex, TimeIndex

__all__ = ["LogSegment", "BatchView", "segment_file_name", "CHUNK_BYTES"]

#: How much of a ``.log`` one ``pread`` asks for while scanning; a larger batch gets a read of its own.
CHUNK_BYTES = 256 * 1024
NO_TIMESTAMP = -1


def segment_file_name(base_offset: int, suffix: str) -> str:
    """``00000000000000000042.log`` and friends: the base offset in 20 digits."""
    return f"{base_offset:020d}{suffix}"


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

    def decode(self, *, validate: bool = True, max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
               file: str | None = None) -> DecodedBatch:
        try:
            return decode_batch(self.buf, self.header, validate=validate, max_inflated_bytes=max_inflated_bytes)
        except CorruptRecordError as exc:
            raise exc.at(file, self.base) from None

    def raw(self) -> bytes:
        """The batch's bytes, exactly as on disk."""
        return self.buf[self.header.position : self.header.end]


class LogSegment:
    """A ``.log`` with its offset and time index; created empty or opened from existing files."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        base_offset: int,
        config: LogConfig,
        *,
        writable: bool = False,
        suffix: str = "",
        size: int | None = None,
    ) -> None:
        self.dir = Path(directory)
        self.base_offset = base_offset
        self.config = config
        self.writable = writable
        self._suffix = suffix
        self.log_path = self.dir / (segment_file_name(base_offset, ".log") + suffix)
        self.offset_index = OffsetIndex(
            self.dir / (segment_file_name(base_offset, ".index") + suffix),
            base_offset,
            max_index_size=config.segment_index_bytes,
            writable=writable,
        )
        self.time_index = TimeIndex(
            self.dir / (segment_file_name(base_offset, ".timeindex") + suffix),
            base_offset,
            max_index_size=config.segment_index_bytes,
            writable=writable,
        )
        self._fd_value: int | None = None
        if writable:
            self._fd_value = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
            self._size = os.fstat(self._fd_value).st_size
        elif size is not None:
            self._size = size  # from a directory listing: the file is opened on first read
        else:
            self._size = self._fd and os.fstat(self._fd).st_size
        # Writer state (Kafka's bytesSinceLastIndexEntry, maxTimestampAndOffsetSoFar), loaded lazily.
        self._bytes_since_index: int | None = None
        self._max_ts: tuple[int, int] | None = None
        self._next_offset: int | None = None
        self._rolling_timestamp: int | None = None
        self._closed = False

    @property
    def _fd(self) -> int:
        """The ``.log``'s descriptor, opened on first use (a partition may have thousands of segments)."""
        fd = self._fd_value
        if fd is None:
            try:
                fd = os.open(self.log_path, os.O_RDONLY)
            except FileNotFoundError:
                raise CorruptRecordError("segment file is missing", file=str(self.log_path)) from None
            self._fd_value = fd
        return fd

    def __repr__(self) -> str:
        return f"<LogSegment {self.log_path.name} size={self._size}>"

    # ------------------------------------------------------------------------------------------ size

    @property
    def size(self) -> int:
        """Bytes in the ``.log`` (read-only segments: as of the last :meth:`refresh`)."""
        return self._size

    def refresh(self) -> int:
        """Re-read the file's size (another process may be appending); return it."""
        if not self.writable and not self._closed:
            try:
                size = os.fstat(self._fd).st_size
            except CorruptRecordError:
                return self._size
            if size != self._size:
                self._size = size
                self._next_offset = None
                self._max_ts = None
            self.offset_index.refresh()
            self.time_index.refresh()
        return self._size

    # ------------------------------------------------------------------------------------------ reading

    def read_at(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes of the ``.log`` from ``position`` (short at the end)."""
        return os.pread(self._fd, size, position)

    def batches(self, start_position: int = 0, end_position: int | None = None) -> Iterator[BatchView]:
        """Every whole batch from ``start_position`` (a batch boundary) to ``end_position``.

        Reads in chunks of :data:`CHUNK_BYTES`; stops quietly at a partial batch at the end of the file
        (a writer may be appending). Corruption raises :class:`CorruptRecordError` with the file and
        the absolute position, after the good batches before it were yielded.
        """
        end = self._size if end_position is None else min(end_position, self._size)
        max_batch = max(self.config.max_message_bytes, 1) * 4 + LOG_OVERHEAD + (1 << 20)
        pos = start_position
        path = str(self.log_path)
        while pos < end:
            chunk = os.pread(self._fd, min(CHUNK_BYTES, end - pos), pos)
            if not chunk:
                return
            rel = 0
            n = len(chunk)
            while True:
                try:
                    header = read_batch_header(chunk, rel, n, max_batch)
                except CorruptRecordError as exc:
                    raise exc.at(path, pos) from None
                if header is None:
                    break
                yield BatchView(chunk, header, pos)
                rel = header.end
            if rel == 0:
                # the batch at pos is larger than the chunk: read it whole, if it is all there
                prefix = os.pread(self._fd, LOG_OVERHEAD, pos)
                if len(prefix) < LOG_OVERHEAD:
                    return
                length = int.from_bytes(prefix[8:12], "big", signed=True)
                want = length + LOG_OVERHEAD
                if pos + want > end:
                    return
                chunk = os.pread(self._fd, want, pos)
                try:
                    header = read_batch_header(chunk, 0, len(chunk), max_batch)
                except CorruptRecordError as exc:
                    raise exc.at(path, pos) from None
                if header is None:
                    return
                yield BatchView(chunk, header, pos)
                rel = header.end
            pos += rel

    def position_of(self, offset: int) -> int:
        """Position from which to scan for ``offset``: the offset index's floor entry (Kafka's
        ``translateOffset`` starts there)."""
        return self.offset_index.lookup(offset).position

    def find(self, offset: int) -> BatchView | None:
        """The first batch whose last offset is >= ``offset``, or None if there is none here."""
        for view in self.batches(self.position_of(offset)):
            if view.header.last_offset >= offset:
                return view
        return None

    def read_from(self, offset: int) -> Iterator[BatchView]:
        """Batches from the one holding ``offset`` (or the next one after a gap) to the end."""
        start = self.position_of(offset)
        for view in self.batches(start):
            if view.header.last_offset >= offset:
                yield view

    def find_by_timestamp(self, timestamp: int) -> BatchView | None:
        """The first batch whose max timestamp is >= ``timestamp`` (Kafka's ``findOffsetByTimestamp``:
        the time index, then the offset index, then a short scan). The caller picks the record."""
        entry = self.time_index.lookup(timestamp)
        start = self.offset_index.lookup(entry.offset).position
        for view in self.batches(start):
            if view.header.max_timestamp >= timestamp:
                return view
        return None

    def _scan_tail(self) -> None:
        """Find the next offset and the max timestamp by scanning past the last index entries."""
        last_time = self.time_index.last_entry
        max_ts = (last_time.timestamp, last_time.offset)
        start = self.offset_index.lookup(max(self.offset_index.last_offset, last_time.offset)).position
        start = min(start, self.offset_index.lookup(last_time.offset).position)
        next_offset = self.base_offset
        last_position = 0
        last_size = 0
        for view in self.batches(start):
            h = view.header
            next_offset = max(next_offset, h.next_offset)
            if h.max_timestamp > max_ts[0]:
                max_ts = (h.max_timestamp, h.last_offset)
            last_position, last_size = view.position, h.size
        if next_offset == self.base_offset and start > 0:
            # nothing after the indexed position: the indexed batch is the last one
            next_offset = self.offset_index.last_offset + 1
        self._next_offset = next_offset
        self._max_ts = max_ts
        if self._bytes_since_index is None:
            indexed = self.offset_index.last_entry.position if self.offset_index.entries else 0
            self._bytes_since_index = max(0, last_position + last_size - indexed) if last_size else 0
            if self.offset_index.entries:
                # bytes since the start of the indexed batch, as Kafka counts them
                self._bytes_since_index = self._size - indexed

    @property
    def next_offset(self) -> int:
        """One past the last offset in this segment (the base offset when empty)."""
        if self._next_offset is None:
            self._scan_tail()
        return self._next_offset  # type: ignore[return-value]

    @property
    def max_timestamp(self) -> int:
        """The largest timestamp of any batch here (-1 when empty)."""
        if self._max_ts is None:
            self._scan_tail()
        return self._max_ts[0]  # type: ignore[index]

    @property
    def offset_of_max_timestamp(self) -> int:
        if self._max_ts is None:
            self._scan_tail()
        return self._max_ts[1]  # type: ignore[index]

    def rolling_timestamp(self) -> int | None:
        """The first batch's max timestamp: what ``segment.ms`` is measured from (Kafka's
        ``rollingBasedTimestamp``); None when empty."""
        if self._rolling_timestamp is None and self._size:
            for view in self.batches(0):
                self._rolling_timestamp = view.header.max_timestamp
                break
        return self._rolling_timestamp

    # ------------------------------------------------------------------------------------------ writing

    def _require_writable(self) -> None:
        if not self.writable:
            raise ReadOnlyError(f"{self.log_path} is open read-only")

    def append(self, data: bytes, headers: list[BatchHeader]) -> None:
        """Append whole batches (``headers`` describe ``data``, positions relative to it).

        Adds an offset index entry (the batch's last offset, its position) and a time index entry (the
        max timestamp so far and the last offset of the batch holding it) whenever more than
        ``index.interval.bytes`` were appended since the last entry, as Kafka does.
        """
        self._require_writable()
        if not headers:
            return
        if self._next_offset is None:
            self._scan_tail()
        if headers[0].base_offset < self.base_offset or not self.offset_index.can_append_offset(headers[-1].last_offset):
            raise InvalidInput(f"offsets {headers[0].base_offset}..{headers[-1].last_offset} do not fit segment {self.base_offset}")
        start = self._size
        written = os.pwrite(self._fd, data, start)
        if written != len(data):
            raise OSError(f"short write to {self.log_path}: {written} of {len(data)} bytes")
        interval = self.config.index_interval_bytes
        for h in headers:
            position = start + h.position
            if h.max_timestamp > self._max_ts[0]:  # type: ignore[index]
                self._max_ts = (h.max_timestamp, h.last_offset)
            if self._bytes_since_index > interval:  # type: ignore[operator]
                self.offset_index.append(h.last_offset, position)
                self.time_index.maybe_append(*self._max_ts)  # type: ignore[misc]
                self._bytes_since_index = 0
            self._bytes_since_index += h.size  # type: ignore[operator]
            if self._rolling_timestamp is None:
                self._rolling_timestamp = h.max_timestamp
        self._size = start + len(data)
        self._next_offset = headers[-1].next_offset

    def flush(self) -> None:
        """fsync the ``.log`` and the indexes."""
        if self.writable and not self._closed:
            os.fsync(self._fd)
            self.offset_index.flush()
            self.time_index.flush()

    def on_become_inactive(self) -> None:
        """Seal at roll: the final time index entry, then indexes trimmed to their entries (Kafka's
        ``onBecomeInactiveSegment``)."""
        if not self.writable:
            return
        if self._max_ts is None:
            self._scan_tail()
        if self._size and self._max_ts[0] >= 0:  # type: ignore[index]
            self.time_index.maybe_append(*self._max_ts, skip_full_check=True)  # type: ignore[misc]
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose last offset is >= ``offset`` (so the batch holding ``offset`` goes
        whole, as in Kafka) and their index entries; return the bytes cut."""
        self._require_writable()
        view = self.find(offset)
        if view is None:
            return 0
        return self._truncate_at(view.position, view.header.base_offset)

    def _truncate_at(self, position: int, offset: int) -> int:
        cut = self._size - position
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        os.ftruncate(self._fd, position)
        self._size = position
        self._next_offset = None
        self._max_ts = None
        self._bytes_since_index = None
        if position == 0:
            self._rolling_timestamp = None
        self._scan_tail()
        return cut

    def recover(self, *, max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES) -> int:
        """Re-validate every batch, rebuild both indexes, cut the invalid tail; return the bytes cut.

        A batch is invalid when its header does not parse, its CRC does not match, or its offsets go
        backwards; everything from the first invalid byte on is truncated (Kafka's ``recover``).
        """
        self._require_writable()
        self.offset_index.reset()
        self.time_index.reset()
        interval = self.config.index_interval_bytes
        valid = 0
        since_index = 0
        max_ts = (NO_TIMESTAMP, self.base_offset)
        next_offset = self.base_offset
        first_ts = None
        try:
            for view in self.batches(0):
                h = view.header
                try:
                    validate_batch(view.buf, h)
                except CorruptRecordError:
                    break
                if h.base_offset < next_offset or h.last_offset < h.base_offset:
                    break
                if h.last_offset - self.base_offset > 0xFFFFFFFF:
                    break
                if h.max_timestamp > max_ts[0]:
                    max_ts = (h.max_timestamp, h.last_offset)
                if since_index > interval:
                    self.offset_index.append(h.last_offset, view.position)
                    self.time_index.maybe_append(*max_ts)
                    since_index = 0
                since_index += h.size
                valid = view.position + h.size
                next_offset = h.next_offset
                if first_ts is None:
                    first_ts = h.max_timestamp
        except CorruptRecordError:
            pass
        cut = self._size - valid
        if cut:
            os.ftruncate(self._fd, valid)
            self._size = valid
        self._next_offset = next_offset
        self._max_ts = max_ts
        self._bytes_since_index = since_index
        self._rolling_timestamp = first_ts
        return cut

    def rebuild_indexes(self) -> None:
        """Rebuild the offset and time index from the ``.log`` (keeps the data as it is)."""
        self.recover_cut = self.recover()

    # ------------------------------------------------------------------------------------------ files

    def sanity_check(self) -> None:
        """Kafka's index sanity check (``CorruptRecordError`` naming the file when it fails)."""
        self.offset_index.sanity_check(log_size=self._size)
        self.time_index.sanity_check()
        last_time = self.time_index.last_entry
        if self.time_index.entries and last_time.offset < self.offset_index.last_offset and False:
            raise CorruptRecordError("time index lags the offset index", file=str(self.time_index.path))

    def indexes_missing(self) -> bool:
        return not self.offset_index.path.exists() or not self.time_index.path.exists()

    def change_suffix(self, suffix: str) -> None:
        """Rename the three files to carry ``suffix`` (``.deleted``, ``.cleaned``, ``.swap`` or ``""``)."""
        self._require_writable()
        new_log = self.dir / (segment_file_name(self.base_offset, ".log") + suffix)
        os.replace(self.log_path, new_log)
        self.log_path = new_log
        for index, ext in ((self.offset_index, ".index"), (self.time_index, ".timeindex")):
            target = self.dir / (segment_file_name(self.base_offset, ext) + suffix)
            if index.path.exists():
                index.rename(target)
            else:
                index.rename(target)
        self._suffix = suffix

    @property
    def suffix(self) -> str:
        return self._suffix

    def close(self) -> None:
        """Close the file and the indexes (a writable segment is sealed first: trimmed indexes)."""
        if self._closed:
            return
        if self.writable:
            self.on_become_inactive()
            self.flush()
        self.offset_index.close()
        self.time_index.close()
        self._close_fd()

    def _close_fd(self) -> None:
        if self._fd_value is not None:
            os.close(self._fd_value)
            self._fd_value = None
        self._closed = True

    def close_handlers(self) -> None:
        """Close without sealing (crash simulation, or after the files were deleted)."""
        if self._closed:
            return
        self.offset_index.close_handler()
        self.time_index.close_handler()
        self._close_fd()

    def delete(self) -> None:
        """Remove the three files."""
        self.close_handlers()
        for path in (self.log_path, self.offset_index.path, self.time_index.path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
