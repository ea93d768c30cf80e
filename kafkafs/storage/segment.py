"""LogSegment: one ``.log`` file with its ``.index``, ``.timeindex`` and ``.txnindex`` (Kafka's LogSegment).

The files and their life are :class:`~kafkafs.storage.segment_files.SegmentFiles`'; this module says
what the batches mean: lookups, the tail, appends with the index rule, rolls and recovery. A segment
opened read-only never changes a file, so it can read a directory that a live broker owns; its size is
re-read by :meth:`LogSegment.refresh`.

Threads: one writer (the owning :class:`~kafkafs.storage.log.Log` serialises appends, truncation, rolls
and recovery, and the segment takes its own lock for them too); reads take no lock and see a prefix of
the file. An append writes the bytes, then the index entries, then publishes the new size, then the
new tail state (next offset, max timestamp), each a single reference store.

Index entries follow Kafka's rule: before appending a batch, if more than ``index.interval.bytes``
were appended since the position of the last entry (or since the start of the segment), the batch gets
an offset index entry (its LAST offset, its position) and the time index gets the largest timestamp so
far with the last offset of the batch that first reached it. As Kafka's append path (3.9 and 4.x,
``LogSegment.append``), the count goes batch by batch within one append, and starts again at 0 when a
segment is opened (recovered or not) or truncated: appends after a reopen index as a restarted broker's
would (``recover`` rebuilds the same entries only for a segment written in one go).
"""

from __future__ import annotations

import errno
import logging
import os
import random
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

from ..errors import CorruptRecordError, InvalidInput, KafkafsError
from ..format.batch import BatchHeader, validate_batch
from ..format.index import MAX_POSITION, MAX_RELATIVE_OFFSET
from ..format.txnindex import TxnEvent, transaction_event
from .config import LogConfig
from .records import BatchView
from .recovery_walk import KafkaDiscardsSegment, RecoveryWalk
from .segment_files import SegmentFiles
from .transactions import ProducerTransactions
from .validation import checked_order

__all__ = ["LogSegment", "NO_TIMESTAMP", "read_denied_as_unreadable"]

log = logging.getLogger("kafkafs.segment")

NO_TIMESTAMP = -1


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _event_or_none(view: BatchView) -> TxnEvent | None:
    """The batch's transaction event; a marker whose record does not decode (its CRC matched) has none."""
    try:
        return transaction_event(view.buf, view.header)
    except CorruptRecordError:
        return None


#: The errno values a read-only segment's tail scan takes as bytes it cannot read (the reads that need
#: them fail and say so; a writer stops). One frozenset in a list, replaced whole: safe from any thread.
_unreadable_errnos = [frozenset({errno.EIO, errno.EUCLEAN, errno.EBADMSG, errno.ENODATA})]


def read_denied_as_unreadable() -> None:
    """From now on, in this process, a segment a reader may not open or read (EACCES/EPERM: its mode) is
    taken as one the disk will not give (review22 R22-4): the mount's reads that need it fail, the rest
    of its partition stays readable (SPEC §3). The CLI's readers keep their one-line error instead.
    Called once by the read-only mount before it opens the log directory."""
    _unreadable_errnos[0] = _unreadable_errnos[0] | {errno.EACCES, errno.EPERM}


class _Tail(NamedTuple):
    """What the end of a segment says; published whole (Kafka's nextOffset, maxTimestampAndOffsetSoFar
    and bytesSinceLastIndexEntry)."""

    next_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    bytes_since_index: int  # bytes appended since the last offset index entry, or the open or truncation
    #: (position, reason) of bytes after the last whole batch the open's scan met, or None
    torn: tuple[int, str] | None = None
    #: whether every batch whose header the max timestamp was read from holds its CRC (maxTimestamp is
    #: inside it: a damaged one may lie, so a lookup by time must not pass over the segment by it)
    max_timestamp_sure: bool = True


class LogSegment(SegmentFiles):
    """A ``.log`` with its offset and time index; created empty or opened from existing files
    (:class:`~kafkafs.storage.segment_files.SegmentFiles`). ``clock`` gives milliseconds, for the
    creation time that ``segment.ms`` counts from while the segment has no timestamp.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        base_offset: int,
        config: LogConfig,
        *,
        clock: Callable[[], int] = _wall_clock_ms,
        **files: Any,
    ) -> None:
        """``files``: :class:`SegmentFiles`' keywords (``writable``, ``suffix``, ``size``, ``budget``)."""
        self._clock = clock
        self._tail: _Tail | None = None
        self._rolling_timestamp: int | None = None
        self.created_ms = clock()
        jitter = config.segment_jitter_ms
        #: Kafka's per-segment ``rollJitterMs``: random in [0, min(segment.jitter.ms, segment.ms)).
        self.roll_jitter_ms = random.randrange(min(jitter, config.segment_ms)) if jitter > 0 else 0
        super().__init__(directory, base_offset, config, **files)

    def __repr__(self) -> str:
        return f"<LogSegment {self.log_path.name} size={self._size}>"

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
            size = self.records.stat_size()
        except (CorruptRecordError, KafkafsError, OSError):
            return self._size
        if size != self._size:
            if size < self._size:
                self._rolling_timestamp = None
                self._scan_index = None
            self._size = size
            self._tail = None
        return size

    def find(self, offset: int, *, nowait: bool = False, upper: int | None = None) -> BatchView | None:
        """The first batch whose last offset is >= ``offset``, or None if there is none here; judged between
        its neighbours (:meth:`read_from` ``ordered``; ``upper``: the next segment's base offset).
        ``nowait``: :class:`~kafkafs.errors.WouldBlock` rather than wait for the disk."""
        return next(self.read_from(offset, nowait=nowait, ordered=True, upper=upper), None)

    def read_from(
        self, offset: int, *, nowait: bool = False, ordered: bool = False, upper: int | None = None,
        check_passed: bool | None = None,
    ) -> Iterator[BatchView]:
        """Batches from the first one whose last offset is >= ``offset`` (the one holding it, or the
        next one after a gap) to the end, every one after it included. ``ordered``: for a reader, every
        batch of the scan is judged between its neighbours (:func:`~kafkafs.storage.validation.in_order`;
        ``upper``: the next segment's base offset; this one is then sealed), and offsets out of order
        (or a torn batch of a sealed segment) raise :class:`~kafkafs.errors.CorruptRecordError`.
        ``check_passed`` (default: ``ordered``): a batch passed over whose CRC fails raises too, when it may
        hold ``offset`` (the next batch starts past it, or none follows)."""
        start, first_read, expect = self.scan_start(offset, nowait)
        views = self._scan(start, nowait, first_read, sealed=upper is not None, expect=expect)
        if ordered:
            views = checked_order(views, str(self.log_path), next_offset=None, upper=upper,
                                  segment_base=self.base_offset)
        found = False
        # ordered (a reader): a batch passed over by its lastOffsetDelta (inside the CRC) whose CRC fails
        # may hold ``offset``, unless the next batch starts at or below it (review23 R23-12/R23-13)
        passed: CorruptRecordError | None = None
        for view in views:
            if found or view.header.last_offset >= offset:
                if passed is not None and view.header.base_offset > offset:
                    raise passed
                found, passed = True, None
                yield view
            elif check_passed or (check_passed is None and ordered):
                passed = self.damage_of(view)
        if passed is not None:
            raise passed

    def damage_of(self, view: BatchView) -> CorruptRecordError | None:
        """Why ``view``'s CRC fails (placed in this ``.log``), or None when it holds: for a batch a reader's
        lookup passes over by header fields inside the CRC (lastOffsetDelta, maxTimestamp), which a
        damaged batch may lie in (never a quiet gap: review23 R23-12/R23-13). One CRC per batch passed
        over, only between where the index points and what the lookup finds."""
        try:
            validate_batch(view.buf, view.header)
        except CorruptRecordError as exc:
            return exc.at(str(self.log_path), view.base)
        return None

    def ordered_batches(self, next_offset: int | None, upper: int | None) -> Iterator[BatchView]:
        """Every batch from the start, for a reader: offsets out of order raise (see :meth:`read_from`);
        ``next_offset``: one past the last offset of the segment before (None: not known)."""
        return checked_order(self.batches(0, sealed=upper is not None), str(self.log_path),
                             next_offset=next_offset, upper=upper, segment_base=self.base_offset)

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int = 0, *, use_indexes: bool = True, sealed: bool = False
    ) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or past ``starting_offset`` whose timestamp is
        >= ``timestamp``, or None if there is none in this segment. The scan starts where the indexes
        point, or at the start with ``use_indexes=False`` (indexes that failed a check); ``sealed``: see batches.
        A time index entry that the batches contradict (review15 R15-4: the batch holding its offset does
        not hold its timestamp, or a batch before it reaches the target) makes the segment's indexes untrusted
        (:meth:`distrust_index`) and the lookup starts again without them."""
        start, expect, check = self._time_start(timestamp, starting_offset) if use_indexes else (0, None, None)
        for view in self._scan(start, sealed=sealed, expect=expect):
            h = view.header
            if check is not None and (h.last_offset >= check[1] or h.max_timestamp >= timestamp):
                if h.last_offset < check[1] or h.base_offset > check[1] or h.max_timestamp != check[0]:
                    self.distrust_index(f"its time entry ({check[0]}, {check[1]}) is not what the batch of offsets "
                                        f"{h.base_offset}..{h.last_offset} holds (max timestamp {h.max_timestamp})")
                    return self.find_offset_by_timestamp(timestamp, starting_offset, sealed=sealed)
                check = None
            if h.max_timestamp < timestamp or h.last_offset < starting_offset:
                damage = self.damage_of(view)
                if damage is not None:  # its records may reach the timestamp: the answer cannot be known
                    raise damage
                continue
            batch = view.decode(file=str(self.log_path))
            for off, ts in zip(batch.offsets, batch.timestamps, strict=True):
                if ts >= timestamp and off >= starting_offset:
                    return off, ts
        if check is not None:  # the entry names an offset past every batch here
            self.distrust_index(f"its time entry ({check[0]}, {check[1]}) names no batch's last offset")
            return self.find_offset_by_timestamp(timestamp, starting_offset, sealed=sealed)
        return None

    def _tail_state(self) -> _Tail:
        tail = self._tail
        if tail is None:
            with self._lock:  # scanned once: a second caller finds it done
                tail = self._tail = self._tail or self._scan_tail()
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
        torn: list[tuple[int, str]] = []
        damaged: list[int] = []
        next_offset, max_ts, max_offset, seen, unreadable = self._scan_from(start, max_ts, max_offset, torn, damaged)
        if not seen and start > 0:  # nothing whole where the index points: trust the log, not the index
            torn.clear()
            damaged.clear()
            next_offset, max_ts, max_offset, _, unreadable = self._scan_from(0, NO_TIMESTAMP, self.base_offset, torn,
                                                                             damaged)
        if unreadable:
            # bytes the disk will not give are not the end of the segment (review11 R11-3): past them,
            # the offset index's last entry is read from (where Kafka starts its scan of the tail), and
            # the indexes' last entries (a batch's last offset each) bound the next offset from below
            if self.offset_index.entries and last_index.position > start:
                after, max_ts, max_offset, _, _ = self._scan_from(last_index.position, max_ts, max_offset,
                                                                  damaged=damaged)
                next_offset = max(next_offset, after)
            if self.offset_index.entries:
                next_offset = max(next_offset, last_index.offset + 1)
            if self.time_index.entries:
                next_offset = max(next_offset, last_time.offset + 1)
        # Kafka counts afresh from an open
        return _Tail(next_offset, max_ts, max_offset, 0, torn[0] if torn else None, not damaged)

    def _scan_from(self, start: int, max_ts: int, max_offset: int, torn: list[tuple[int, str]] | None = None,
                   damaged: list[int] | None = None) -> tuple[int, int, int, bool, bool]:
        """(next offset, max timestamp, its offset, whether a batch was seen, whether the disk would not
        give some bytes) of the batches from ``start``; where bytes after the last whole batch start
        (and why they are no batch) is added to ``torn``, the position of a batch whose CRC fails to
        ``damaged`` (its maxTimestamp, read as Kafka's ``loadLargestTimestamp`` reads it, may lie)."""
        next_offset = self.base_offset
        seen = unreadable = False
        try:
            for view in self._scan(start):
                h = view.header
                seen = True
                next_offset = max(next_offset, h.next_offset)
                if damaged is not None and self.damage_of(view) is not None:
                    damaged.append(view.position)
                if h.max_timestamp > max_ts:
                    max_ts, max_offset = h.max_timestamp, h.last_offset
        except CorruptRecordError as exc:
            log.warning("%s: %s; the segment's end is taken to be before it", self.log_path, exc.reason)
            if torn is not None:
                torn.append((exc.position if exc.position is not None else start, exc.reason))
        except OSError as exc:  # a disk that will not give the bytes: a reader goes on, a writer stops
            if self.writable or exc.errno not in _unreadable_errnos[0]:
                raise
            log.debug("%s: cannot read it (%s); the segment's end is taken to be before it", self.log_path,
                      exc.strerror or exc)
            seen = unreadable = True  # no second scan from 0; the reads that need these bytes fail and say so
        return next_offset, max_ts, max_offset, seen, unreadable

    @property
    def next_offset(self) -> int:
        """One past the last offset in this segment (the base offset when empty)."""
        return self._tail_state().next_offset

    @property
    def torn_tail(self) -> tuple[int, str] | None:
        """(position, reason) of bytes after this segment's last whole batch found when its end was
        first read (opening it), or None: a writer must not append after them."""
        return self._tail_state().torn

    @property
    def tail_known(self) -> bool:  # whether next_offset is known without reading the segment's tail
        return self._tail is not None

    @property
    def max_timestamp(self) -> int:
        """The largest timestamp of any batch here (-1 when empty; Kafka's ``largestTimestamp``)."""
        return self._tail_state().max_timestamp

    @property
    def max_timestamp_sure(self) -> bool:
        """Whether :attr:`max_timestamp` was read from batches whose CRC holds only (the time index's
        last entry and the batches after it): a lookup by time passes over a segment by its largest
        timestamp only then (fix60: a damaged batch's maxTimestamp made a lookup skip the segment that
        may hold its answer, and answer from the next one)."""
        return self._tail_state().max_timestamp_sure

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

    def should_roll(
        self, *, messages_size: int, max_timestamp: int, max_offset: int, batches: int = 1, now: int
    ) -> str | None:
        """Which of Kafka's four roll conditions holds before appending ``batches`` batches of
        ``messages_size`` bytes, the last offset ``max_offset``: ``"segment.bytes"`` (or
        ``internal.segment.bytes``), ``"segment.ms"``,
        ``"index full"``, ``"offset overflow"``, or None (Kafka's ``shouldRoll``)."""
        config = self.config
        size = self._size
        if size > config.segment_size - messages_size or (size and size + messages_size > MAX_POSITION):
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
            offset_index, time_index = self.offset_index, self.time_index
            entries = offset_index.entries, time_index.entries
            self.records.write_at(data, start)
            self._dirty = True
            interval = self.config.index_interval_bytes
            max_ts, max_offset, since = tail.max_timestamp, tail.offset_of_max_timestamp, tail.bytes_since_index
            try:
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
            except BaseException:
                # an index entry could not be written (ENOSPC reserving its page): the append did not
                # happen, so that the next one, once there is room, finds the segment as it was
                offset_index._truncate_to_entries(entries[0])
                time_index._truncate_to_entries(entries[1])
                self.records.truncate(start)
                raise
            if start == 0:
                self._rolling_timestamp = first.max_timestamp
            self._size = start + len(data)
            self._tail = _Tail(max(tail.next_offset, last.next_offset), max_ts, max_offset, since,
                               max_timestamp_sure=tail.max_timestamp_sure)

    def flush(self) -> None:
        """fsync the ``.log`` and sync the index maps (Kafka's ``LogSegment.flush``)."""
        if not self.writable or self._closed:
            return
        with self._lock:
            self.records.fsync()
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
            view = next(self.read_from(offset), None)  # the writer's cut: offsets as they are
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

    def recover(
        self,
        *,
        transactions: ProducerTransactions | Callable[[bool], ProducerTransactions | None] | None = None,
        upper: int | None = None,
        undecodable: list[tuple[int, str]] | None = None,
    ) -> int:
        """Re-validate every batch, rebuild the three indexes, cut the invalid tail; return the bytes cut
        (Kafka's ``LogSegment.recover``). The cut is where Kafka's recovery cuts (:mod:`.recovery_walk`):
        the first batch whose size or CRC does not hold, or whose offsets neither follow the batch before
        it nor fit the segment's relative offsets (a base offset gone wrong); everything from there on is
        truncated. A batch whose CRC holds but that readers refuse (:func:`~.validation.kept_problem`, or
        offsets that go backwards, overlap or jump) is kept, as Kafka keeps it, and listed in
        ``undecodable`` as (position, reason); where Kafka would discard the whole segment for it (an index
        entry not past the last one), the cut starts at the first batch whose offsets do not follow
        instead. The indexes end trimmed, the time index with its final entry. A batch whose offsets
        follow but do not fit the relative offsets (Kafka would split the
        segment) is kept, unindexed. The ``.txnindex`` is rebuilt from the markers, which needs the
        undecided transactions at this segment's base offset: ``transactions`` is that state (updated in
        place to the segment's end), or a function that returns it, called only if the segment holds
        transactional batches, with True when it holds an ABORT marker (None: no index needed). With None
        the ``.txnindex`` is kept as it is, less the entries whose marker was cut. A recovery that fails
        (an OS error reading the ``.log``, a full disk) leaves the three index files as they were
        (:meth:`~.segment_files.SegmentFiles.rebuilding_indexes`)."""
        self._require_writable()
        with self._lock, self.rebuilding_indexes():  # a failure leaves the index files as they were
            events: list[TxnEvent] = []
            cut = self._recover(events, upper, [] if undecodable is None else undecodable)
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

    def _recover(self, events: list[TxnEvent], upper: int | None, undecodable: list[tuple[int, str]]) -> int:
        try:
            walk = self._recover_walk(RecoveryWalk(self.base_offset, upper, self.config.index_interval_bytes),
                                      events, undecodable)
        except KafkaDiscardsSegment as exc:
            # Kafka's recovery would empty this segment and delete every later one (recovery_walk): cut
            # from the first batch whose offsets do not follow instead
            log.warning("%s: %s: Kafka's recovery would discard this segment and every later one; cutting from "
                        "the first batch whose offsets do not follow instead", self.log_path, exc.why)
            del events[:]
            walk = self._recover_walk(RecoveryWalk(self.base_offset, upper, self.config.index_interval_bytes,
                                                   strict=True), events, undecodable)
        if walk.rejected is not None:
            log.warning("%s: %s; cutting from there", self.log_path, walk.rejected)
        cut = self._size - walk.valid
        if cut:
            self._truncate_file(walk.valid)
        self.offset_index.trim_to_valid_size()
        self.time_index.maybe_append(walk.max_ts, walk.max_offset, skip_full_check=True)
        self.time_index.trim_to_valid_size()
        self._dirty = True
        self._rolling_timestamp = walk.first_ts
        self._tail = _Tail(walk.next_offset, walk.max_ts, walk.max_offset, 0)  # as a freshly opened (recovered) segment
        return cut

    def _recover_walk(self, walk: RecoveryWalk, events: list[TxnEvent], undecodable: list[tuple[int, str]]) -> RecoveryWalk:
        """Rebuild the offset and time indexes by ``walk`` (:mod:`.recovery_walk`); collect the transaction
        events and the batches kept although readers refuse them. :class:`KafkaDiscardsSegment` from the walk."""
        offset_index, time_index = self.offset_index, self.time_index
        offset_index.reset()
        time_index.reset()
        kept: list[tuple[int, str]] = []
        for step in walk.steps(self.batches(0)):
            h = step.view.header
            if step.kept is not None:  # kept, as Kafka keeps it
                kept.append((step.view.position, step.kept))
            if step.indexed:
                if not offset_index.is_full():
                    offset_index.append(h.last_offset, walk.valid)
                if not time_index.is_full():
                    time_index.maybe_append(walk.max_ts, walk.max_offset)
            if h.producer_id >= 0 and h.magic == 2 and (h.is_transactional or h.is_control):
                event = _event_or_none(step.view)
                if event is not None:
                    events.append(event)
        walk.finish()
        for position, why in kept:
            log.warning("%s: position %d: %s; kept (its CRC holds, as Kafka's recovery keeps it)", self.log_path,
                        position, why)
        undecodable.extend(kept)
        return walk

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
