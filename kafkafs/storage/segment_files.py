"""SegmentFiles: the files of one segment and their life (the part of Kafka's LogSegment that owns them).

A segment is a ``.log`` (:class:`~kafkafs.storage.records.FileRecords`) with its ``.index`` and
``.timeindex`` (memory-mapped, :mod:`kafkafs.storage.offset_index` and :mod:`kafkafs.storage.time_index`)
and its ``.txnindex`` (:mod:`kafkafs.storage.txnindex`). Nothing is opened until it is needed, and the
descriptors go back to the process-wide budget of :mod:`kafkafs.storage.handles` when too many
segments hold some. A read-only segment without a usable offset index gets an in-memory one
(:mod:`kafkafs.storage.scan_index`), so lookups still start near their target. What the batches mean
(appends, the tail, rolls, recovery) is :class:`~kafkafs.storage.segment.LogSegment`'s.

Threads: the objects are made under the segment's lock unless another thread made them first; reads
take no lock; changes (truncation, renames, closing) come from the single writer.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TypeVar

from ..errors import CorruptRecordError, SegmentClosedError, UnsafeFileError, WouldBlock, describe_os_error
from ..format.batch import DEFAULT_MAX_INFLATED_BYTES, LOG_OVERHEAD, validate_batch
from ..format.batchheader import V2_HEADER_SIZE
from .config import LogConfig
from .file_copy import copy_file
from .handles import BUDGET, FDS_PER_SEGMENT, FileHandle, HandleBudget
from .names import DELETED, INDEX, LOG, TIME_INDEX, TXN_INDEX, segment_file_name
from .offset_index import OffsetIndex
from .records import BatchView, FileRecords, TornBatchError
from .safefiles import require_writable
from .scan_index import ScanIndex
from .time_index import TimeIndex
from .txnindex import TransactionIndex

_Index = TypeVar("_Index", OffsetIndex, TimeIndex)

__all__ = ["SegmentFiles"]

log = logging.getLogger("kafkafs.segment")


class SegmentFiles:
    """A segment's ``.log`` and index files, opened lazily; ``size`` (known from a directory listing)
    lets an existing segment open without touching the file, and a writable segment without ``size``
    is created if missing."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        base_offset: int,
        config: LogConfig,
        *,
        writable: bool = False,
        suffix: str = "",
        size: int | None = None,
        budget: HandleBudget | None = None,
    ) -> None:
        # Paths and index objects are made on first use: a partition may have many thousands of
        # segments, and pathlib is slow enough to dominate opening it.
        self.dir = directory if isinstance(directory, Path) else Path(directory)
        self.base_offset = base_offset
        self.config = config
        self.writable = writable
        self._suffix = suffix
        self._budget = budget if budget is not None else BUDGET
        self._records: FileRecords | None = None
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        self._txn_index: TransactionIndex | None = None
        self._scan_index: ScanIndex | None = None
        self._lock = threading.RLock()
        self._registered = False
        self._closed = False
        self._dirty = False  # written since the last flush
        #: The segment appends go to (set by the owning Log).
        self.active = False
        self._whole_at: int | None = None  # the size at which check_whole last found the end whole
        #: an index entry was found not to say what the ``.log`` holds: neither index serves this segment's
        #: lookups any more (the in-memory scan index does, or a scan from the start)
        self.index_untrusted = False
        if size is None:
            size = self.records.open(create=writable)
        self._size = size

    def _path_for(self, extension: str, suffix: str) -> Path:
        return self.dir / segment_file_name(self.base_offset, extension, suffix)

    @property
    def records(self) -> FileRecords:
        """The ``.log`` as batches (an object made on first use; the file is opened when first read)."""
        records = self._records
        if records is None:
            with self._lock:
                records = self._records
                if records is None:
                    records = self._records = FileRecords(
                        self._path_for(LOG, self._suffix),
                        writable=self.writable,
                        max_batch_size=self._max_batch_size(),
                        on_open=self._note_open,
                    )
        return records

    @property
    def log_path(self) -> Path:
        """The ``.log`` file, following renames (``change_suffix``)."""
        return self.records.path

    @property
    def offset_index(self) -> OffsetIndex:
        """The ``.index`` (an object made on first use; the file is opened when it is first read)."""
        index = self._offset_index
        return index if index is not None else self._make_index("_offset_index", OffsetIndex, INDEX)

    @property
    def time_index(self) -> TimeIndex:
        """The ``.timeindex`` (an object made on first use, like the offset index)."""
        index = self._time_index
        return index if index is not None else self._make_index("_time_index", TimeIndex, TIME_INDEX)

    def _make_index(self, attribute: str, index_class: type[_Index], extension: str) -> _Index:
        """The index held in ``attribute``, made under the lock unless another thread made it first."""
        with self._lock:
            index: _Index | None = getattr(self, attribute)
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
        index = self._offset_index if extension == INDEX else self._time_index
        return index.path if index is not None else self._path_for(extension, self._suffix)

    @property
    def txn_index(self) -> TransactionIndex:
        """The ``.txnindex`` (aborted transactions whose ABORT marker is here); the file exists once the
        segment has an entry."""
        index = self._txn_index
        if index is None:
            with self._lock:
                if self._txn_index is None:
                    self._txn_index = TransactionIndex(self._path_for(TXN_INDEX, self._suffix), self.base_offset)
                index = self._txn_index
        return index

    @property
    def pinned(self) -> bool:
        """Never: the active segment of a writable log gives its files back too (review24 R24-6: a
        ``--rw`` mount's cleaner opens every partition, and thousands of active segments kept open
        took every descriptor). Its next append, read or flush opens them again (the ``.log`` by
        path, the index maps re-derive their entries from the file: see ``AbstractIndex.release``);
        an append under way keeps the descriptor and map it took until it is done."""
        return False

    def _note_open(self) -> None:
        if not self._registered and not self._closed:
            self._registered = True
            self._budget.opened(self, FDS_PER_SEGMENT if self.writable else 1)

    def release_handles(self) -> None:
        """Give the descriptors and maps back (lock-free; readers holding them finish first)."""
        self._registered = False
        if self._records is not None:
            self._records.release()
        for index in self._made_indexes():
            index.release()

    @property
    def size(self) -> int:
        """Bytes in the ``.log`` (read-only segments: as of the last :meth:`refresh`)."""
        return self._size

    def last_modified_ms(self) -> int | None:
        """The ``.log``'s modification time in ms (Kafka's ``LogSegment.lastModified``); None when the
        file is gone or cannot be read (each caller says what that means for it)."""
        try:
            return os.stat(self.log_path).st_mtime_ns // 1_000_000
        except OSError:
            return None

    def read_at(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes of the ``.log`` from ``position`` (short at the end). A reader that found
        the segment before the log let it go (a file laid out at its open: ``table.jsonl``, a key's
        history, a part of ``records.jsonl`` no reader held) reads on while the file is there (:meth:`hold`),
        opening it for each read; :class:`~kafkafs.errors.SegmentClosedError` once it is gone."""
        try:
            return self.records.read_at(position, size)
        except SegmentClosedError:
            handle = self.hold()
        return os.pread(handle.fd, size, position)

    def _max_batch_size(self) -> int:
        """A batch larger than this is corruption, not data (bounds what one read may load)."""
        return max(DEFAULT_MAX_INFLATED_BYTES, 2 * self.config.max_message_bytes + LOG_OVERHEAD)

    def batches(
        self,
        start_position: int = 0,
        end_position: int | None = None,
        *,
        nowait: bool = False,
        first_read: int | None = None,
        sealed: bool = False,
    ) -> Iterator[BatchView]:
        """Every whole batch from ``start_position`` (a batch boundary) to ``end_position`` (default: the
        segment's size); see :meth:`FileRecords.batches <kafkafs.storage.records.FileRecords.batches>`.
        ``sealed``: a later segment follows this one, so a scan to its end that meets bytes that are not
        a whole batch raises :class:`~kafkafs.errors.CorruptRecordError` (a torn batch) rather than
        stopping quietly as it does at the end of the active segment (a write in progress)."""
        end = self._size if end_position is None else min(end_position, self._size)
        return self.records.batches(start_position, end, nowait=nowait, first_read=first_read,
                                    whole=sealed and end >= self._size)

    def check_whole(self) -> None:
        """For a sealed segment: raise :class:`~kafkafs.storage.records.TornBatchError` when its bytes do
        not end with a whole batch (a lookup that passes over the segment without reading it, by its
        largest timestamp, must not skip a torn batch). Reads from the last offset index entry; an
        answer that found the end whole is kept while the size stays."""
        size = self._size
        if self._whole_at == size:
            return
        entries = self.offset_index.entries and not self.index_untrusted
        last = self.offset_index.last_entry if entries else None
        start = last.position if last is not None and last.position < size else 0
        try:  # the entry's batch must fit its offset (review15 R15-4: a misaligned entry read as a torn batch)
            for _view in self._scan(start, sealed=True, expect=last.offset if start and last is not None else None):
                pass
        except TornBatchError:
            raise
        except CorruptRecordError:  # another damage: the reads that need those bytes say it
            return
        self._whole_at = size

    def ends_whole(self) -> bool:
        """Whether this sealed segment ends with a whole batch (:meth:`check_whole`): a reader that would
        pass over it by its largest timestamp reads it instead when it does not, as its cut last
        batch's timestamps are not known (and its torn end is damage for that reader)."""
        try:
            self.check_whole()
        except TornBatchError:
            return False
        return True

    def batch_starts(self, start_position: int = 0, end_position: int | None = None) -> Iterator[int]:
        """The position of every whole batch from ``start_position`` (a batch boundary) to ``end_position``
        (default: the segment's size), read from the batches' length fields alone (see
        :meth:`FileRecords.batch_starts <kafkafs.storage.records.FileRecords.batch_starts>`)."""
        end = self._size if end_position is None else min(end_position, self._size)
        return self.records.batch_starts(start_position, end)

    def _scan(
        self,
        start: int,
        nowait: bool = False,
        first_read: int | None = None,
        sealed: bool = False,
        expect: int | None = None,
    ) -> Generator[BatchView, None, None]:
        """``batches(start)`` for a position taken from an index, which may be wrong: an entry past the
        data, or one where no batch starts, is not trusted and the scan starts over from 0.
        ``first_read``: how many bytes the first read takes (see :meth:`scan_start`); ``sealed``: see
        :meth:`batches`; ``expect``: the offset index entry's offset when ``start`` is its position (a batch
        must start there, at or below that offset, else the index is not trusted: :meth:`distrust_index`)."""
        if start >= self._size:
            start = 0
            first_read = None
        if start == 0:
            yield from self.batches(0, nowait=nowait, first_read=first_read, sealed=sealed)
            return
        views = self.batches(start, nowait=nowait, first_read=first_read, sealed=sealed)
        try:
            first = next(views, None)
        except CorruptRecordError as exc:
            if exc.position != start or (isinstance(exc, TornBatchError) and expect is None):
                raise
            # a read-only segment whose files another process's compaction replaced or removed read the
            # new file's index (opened by name, after the swap): no damage, said only when debugging
            moved = not self.writable and self._moved_on_disk()
            if expect is not None:
                self.distrust_index(f"no batch starts at position {start}, where its entry for offset {expect} "
                                    "points", quiet=moved)
            else:
                say = log.debug if moved else log.warning
                say("%s: no batch starts at position %d, where the index points; scanning from 0", self.log_path,
                    start)
            yield from self.batches(0, nowait=nowait, sealed=sealed)
            return
        if first is not None and expect is not None and first.header.base_offset > expect:
            # review15 R15-4: an entry moved down made a lookup start past the offset it asked for. An entry
            # names the last offset of the batch at its position (Kafka 3.7 on), or of the last batch of the
            # append that wrote it there (a follower's appends before): an offset the scan from there cannot
            # miss either way. One below that batch's first offset is a lie that skips records.
            self.distrust_index(f"its entry for offset {expect} points at position {start}, where the batch holds "
                                f"offsets {first.header.base_offset}..{first.header.last_offset}",
                                quiet=not self.writable and self._moved_on_disk())
            yield from self.batches(0, nowait=nowait, sealed=sealed)
            return
        if first is not None:
            yield first
            yield from views

    def distrust_index(self, why: str, *, quiet: bool = False) -> None:
        """An index entry does not say what the ``.log`` holds (``why``): from now on this segment's
        lookups do not use its index files (SPEC §1: a corrupt index is rebuilt from the ``.log``; here, in
        memory, by :meth:`_fallback_index`, or a scan from the start for a small or writable segment).
        Said once for the segment; ``quiet``: not damage (the files were replaced since they were opened),
        said only when debugging."""
        if self.index_untrusted:
            return
        self.index_untrusted = True
        say = log.debug if quiet else log.warning
        say("%s: the index does not match the log (%s); its lookups scan the log instead", self.log_path, why)

    def scan_start(self, offset: int, nowait: bool = False) -> tuple[int, int | None, int | None]:
        """:meth:`position_of`, how much a lookup of ``offset`` needs to read from there when the
        offset index bounds it (None: it does not say): a cold lookup reads one or two batches from the
        disk, not a whole first chunk; and the offset the index entry names for that position (None: the
        position is not an entry's), which the batch there must reach (:meth:`_scan` ``expect``)."""
        fallback = self._fallback_index(nowait)
        if fallback is not None:
            return fallback.position_for_offset(offset), None, None
        if self.index_untrusted:
            return 0, None, None
        floor, bound = self.offset_index.lookup_bounded(offset)
        expect = floor.offset if floor.position else None
        if bound is None or bound <= floor.position:
            return floor.position, None, expect
        return floor.position, bound - floor.position, expect

    def position_of(self, offset: int, nowait: bool = False) -> int:
        """Position from which to scan for ``offset``: the offset index's floor entry (Kafka's
        ``translateOffset`` starts there) once the batch there is seen to fit the entry's offset, or
        the in-memory scan index's when there is no index (or it is not trusted; ``nowait``:
        :class:`~kafkafs.errors.WouldBlock` when that index must first read the file)."""
        start, _, expect = self.scan_start(offset, nowait)
        if expect is not None and start < self._size and not self.entry_fits(start, expect, nowait):
            if self.index_untrusted:
                return self.position_of(offset, nowait)
            return 0
        return start

    def entry_fits(self, position: int, offset: int, nowait: bool = False) -> bool:
        """Whether the offset index entry ``(offset, position)`` says what the ``.log`` holds: a batch starts
        at ``position`` (inside the data), at or below ``offset`` (see :meth:`_scan` ``expect``). When one
        does not, the segment's index is not trusted from now on (:meth:`distrust_index`); False also once
        it is not. For a reader that takes positions from the index itself (a plan cut at its entries)."""
        if self.index_untrusted:
            return False
        if position == 0:
            return True
        if position >= self._size:
            return False
        with contextlib.closing(self._scan(position, nowait, V2_HEADER_SIZE, sealed=False, expect=offset)) as views:
            first = next(views, None)  # the first read takes a header: the batch's own length says the rest
        return first is not None and not self.index_untrusted

    def _time_start(self, timestamp: int, starting_offset: int) -> tuple[int, int | None, tuple[int, int] | None]:
        """Where a scan for the first batch reaching ``timestamp`` (at or past ``starting_offset``)
        may start: the time index, then the offset index (or the in-memory scan index); the offset index
        entry's offset there (see :meth:`scan_start`); and the time index entry (timestamp, offset) when
        it is past ``starting_offset``: the batch that holds that offset must hold that timestamp, and no
        batch before it may reach ``timestamp`` (see :meth:`find_offset_by_timestamp`)."""
        fallback = self._fallback_index()
        if fallback is not None:
            start = max(fallback.position_for_timestamp(timestamp), fallback.position_for_offset(starting_offset))
            return self._crc_checked_before(fallback, start), None, None
        if self.index_untrusted:
            return 0, None, None
        entry = self.time_index.lookup(timestamp)
        floor = self.offset_index.lookup(max(entry.offset, starting_offset))
        check = (entry.timestamp, entry.offset) if entry.timestamp >= 0 and entry.offset >= starting_offset else None
        return floor.position, floor.offset if floor.position else None, check

    def _crc_checked_before(self, index: ScanIndex, position: int) -> int:
        """``position`` (a time lookup's start from the in-memory index), or the position of a batch before it
        whose CRC fails: the index passed over the batches before ``position`` by their maxTimestamp, which
        is inside the CRC; a damaged batch among them may hold the answer, so the lookup starts there and
        meets its damage (review27 R27-5, the rule of :meth:`LogSegment.find_offset_by_timestamp
        <kafkafs.storage.segment.LogSegment.find_offset_by_timestamp>`). The batches' CRCs are checked once
        per segment, as far as lookups need (:attr:`ScanIndex.crc_checked`)."""
        if index.crc_failed_at is not None:
            return min(position, index.crc_failed_at)
        if index.crc_checked >= position:
            return position
        with self._lock:
            if index.crc_failed_at is None and index.crc_checked < position:
                # (the index's entries start batches; bytes that are no batch raise: the lookup meets them)
                for view in self.batches(index.crc_checked, position):
                    try:
                        validate_batch(view.buf, view.header)
                    except CorruptRecordError:
                        index.crc_failed_at = view.position
                        break
                    index.crc_checked = view.position + view.header.size
            if index.crc_failed_at is not None:
                return min(position, index.crc_failed_at)
            return position

    def _fallback_index(self, nowait: bool = False) -> ScanIndex | None:
        """The in-memory index of a read-only segment without a usable offset index, brought up to the
        segment's current size; None when the real index serves (or the segment is small)."""
        if self.writable or self._size <= 2 * max(self.config.index_interval_bytes, 4096):
            return None
        if self._scan_index is None and self.offset_index.entries > 0 and not self.index_untrusted:
            return None
        if nowait and (self._scan_index is None or self._scan_index.covered < self._size):
            raise WouldBlock(f"{self.log_path}: the in-memory index is not built yet")
        with self._lock:
            index = self._scan_index
            if index is None:
                index = ScanIndex()
            if index.covered < self._size and index.unreadable_at != self._size:
                index.extend(self._scan(index.covered), max(self.config.index_interval_bytes, 4096), self._size)
            self._scan_index = index
            return index

    def _require_writable(self) -> None:
        require_writable(self.log_path, self.writable, self._closed)

    def _grow_indexes(self) -> None:
        """Both indexes back to ``segment.index.bytes``, or to their entries if they hold more (the
        setting was lowered): a full index then rolls the segment at the next append."""
        for index in (self.offset_index, self.time_index):
            index.resize(max(self.config.segment_index_bytes, index.size_in_bytes))

    @contextlib.contextmanager
    def rebuilding_indexes(self) -> Iterator[None]:
        """Around a rebuild of the index files in place (recovery empties them, grows the offset and time
        indexes to ``segment.index.bytes`` and writes them as it reads the ``.log``): the ``.log`` is opened
        for writing first, so a log the process may not open fails before any index is touched; and when
        the rebuild fails (a disk error, a full disk), each index file holds again exactly what it held
        before (:mod:`.file_copy`; a file that was not there is removed), never a sealed segment's index
        left preallocated with zeros (review23 R23-1). A file that cannot be put back is said, and the
        rebuild's own error goes on."""
        self.records.handle()
        indexes: tuple[OffsetIndex | TimeIndex | TransactionIndex, ...] = (self.offset_index, self.time_index,
                                                                          self.txn_index)
        kept = [copy_file(index.path) for index in indexes]
        try:
            yield
        except BaseException:
            for index, copy in zip(indexes, kept, strict=True):
                try:
                    index.put_back(copy)
                except OSError as exc:
                    log.error("%s", describe_os_error(exc) + " (putting back what it held before a failed rebuild)")
                except UnsafeFileError as exc:
                    log.error("%s: %s (putting back what it held before a failed rebuild)", index.path, exc)
            raise

    def _truncate_file(self, size: int) -> None:
        self.records.truncate(size)
        self._size = size
        self._dirty = True

    def sanity_check(self) -> None:
        """Kafka's index sanity checks, and ``kafka-dump-log --verify-index-only``'s order rules
        (``CorruptRecordError`` naming the file when they fail)."""
        self.offset_index.sanity_check(log_size=self._size)
        self.time_index.sanity_check()

    def index_state(self) -> dict[str, object]:
        """What each index file holds (whether it exists, its entries, its length), by file name, so a
        caller can tell which files a rebuild changed without reading them twice or hashing them."""
        out: dict[str, object] = {}
        for index in (self.offset_index, self.time_index):
            exists = os.path.lexists(index.path)  # asked first: opening a writable index creates it
            out[index.path.name] = (exists, tuple(index), index.length) if exists else (False,)
        txn = self.txn_index
        try:
            aborted: tuple[object, ...] | None = tuple(txn.entries())
        except CorruptRecordError:
            aborted = None
        out[txn.path.name] = (txn.exists(), aborted)
        return out

    def change_suffix(self, suffix: str) -> None:
        """Rename the files to carry ``suffix`` (``.deleted``, ``.cleaned``, ``.swap`` or ``""``); the
        open descriptors and maps stay valid."""
        self._require_writable()
        with self._lock:
            self.records.rename(self._path_for(LOG, suffix))
            self.offset_index.rename(self._path_for(INDEX, suffix))
            self.time_index.rename(self._path_for(TIME_INDEX, suffix))
            self.txn_index.rename(self._path_for(TXN_INDEX, suffix))
            self._suffix = suffix

    @property
    def suffix(self) -> str:
        return self._suffix

    def follow_suffix(self, suffix: str) -> None:
        """Read-only: another process renamed this segment's files to carry ``suffix`` (a broker finished a
        swap: ``.swap`` -> plain). The ``.log`` path follows (the descriptor held is the same file); the
        index objects are made again under the new names on their next use (an index not renamed yet
        reads as empty: lookups scan the log)."""
        with self._lock:
            self.records.path, self.records.next_path = self._path_for(LOG, suffix), None
            self._offset_index = self._time_index = None
            self._txn_index = None
            self._suffix = suffix

    def replaced_on_disk(self) -> bool:
        """Whether the ``.log`` path now holds another file than the one this segment read (another
        process's compaction swapped one in): by inode once the file was opened, else by size."""
        try:
            st = os.stat(self.log_path)
        except FileNotFoundError:
            return False
        file_id = self.records.file_id
        return st.st_ino != file_id if file_id is not None else st.st_size != self._size

    def hold(self) -> FileHandle:
        """The ``.log`` this segment read, held open for a reader that goes on reading it after the log let
        the segment go (another process's compaction or retention removed it; the handle budget may have
        closed its descriptor before): the descriptor it holds, else its file opened again under its name
        or under its name renamed ``.deleted`` (Kafka's cleaner and retention rename a removed segment's
        files so and delete them ``file.delete.delay.ms`` later), when it is the same file (inode).
        Works on a closed segment. :class:`~kafkafs.errors.SegmentClosedError` when it is gone."""
        return self.records.hold(self._size, (DELETED,))

    def _moved_on_disk(self) -> bool:
        """Whether the ``.log`` name no longer holds the file this segment read (renamed or replaced)."""
        try:
            return os.stat(self.log_path).st_ino != self.records.file_id
        except OSError:
            return True

    def _drop_handle(self) -> None:
        """Forget the ``.log`` descriptor; it closes once no reader holds it (handles.FileHandle), so a
        reader left suspended in :meth:`batches` never reads a descriptor number reused by another file."""
        with self._lock:
            self._closed = True
            if self._records is not None:
                self._records.close()
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
        for path in (self.log_path, self._index_path(INDEX), self._index_path(TIME_INDEX)):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        self.txn_index.delete()
