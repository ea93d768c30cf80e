"""Log: one partition folder, its segments in a skip list keyed by base offset (Kafka's UnifiedLog,
LocalLog and LogSegments, reduced to what a single-node file tool needs).

Reads take no lock: the skip list is safe for readers while the single writer inserts and removes, and
segments publish their size after their bytes. Appends, rolls, truncation and retention serialise on
one lock. ``wait_for_records`` lets a follower (``tail -f``, ``consume --follow``) sleep until new
records arrive, from this process or (read-only logs, via :meth:`refresh`) from another one.

Transactions: the Log knows which producers have a transaction in progress (built lazily, on the first
transactional append after an open, from the batch headers since the log start), so that an ABORT
marker adds its entry to the active segment's ``.txnindex`` as a broker's does.

Segments removed by retention are renamed ``.deleted`` and their files removed ``file.delete.delay.ms``
later (:meth:`Log.delete_expired_files`), so that readers still in them can finish; a writable open
removes whatever ``.deleted`` files a previous run left.

A writable Log does not take the log directory's ``.lock`` itself; :class:`~kafkafs.storage.logdir.LogDir`
does, and keeps the clean-shutdown marker and the checkpoints. Opened on its own, writable, a Log does
not know how the last writer stopped unless told (``clean_shutdown``), so it recovers from
``recovery_point`` (0 when unknown), as Kafka does after an unclean shutdown.
"""

from __future__ import annotations

import bisect
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from ..errors import (
    CorruptRecordError,
    InvalidInput,
    InvalidName,
    OffsetOutOfRange,
    ReadOnlyError,
    RecordTooLargeError,
    UnsafeFileError,
)
from ..format.batch import (
    BatchHeader,
    Codec,
    DecodedBatch,
    Record,
    encode_batch,
    read_batch_header,
    scan_batches,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_batch,
)
from ..format.checkpoint import parse_epoch_checkpoint
from ..format.jsonview import ProducerRecord
from ..format.txnindex import AbortedTxn, TxnEvent, collect_aborted_txns, transaction_event
from .config import LogConfig
from .handles import HandleBudget, raise_open_file_limit
from .safefiles import check_partition_folder, regular_files
from .segment import BatchView, LogSegment, segment_file_name
from .skiplist import SkipList
from .transactions import ProducerTransactions

__all__ = ["Log", "parse_partition_dir_name", "AppendResult", "fsync_directory"]

log = logging.getLogger("kafkafs.log")

TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_DIR_RE = re.compile(r"^(?P<topic>.+)-(?P<partition>0|[1-9][0-9]{0,9})$")
_SEGMENT_RE = re.compile(r"^(\d{20})\.(log|index|timeindex|txnindex)((?:\.deleted|\.cleaned|\.swap)?)$")

_CODECS = {"gzip": Codec.GZIP, "snappy": Codec.SNAPPY, "lz4": Codec.LZ4, "zstd": Codec.ZSTD}


def parse_partition_dir_name(name: str) -> tuple[str, int]:
    """``orders-3`` -> ``("orders", 3)``; :class:`InvalidName` for anything that is not a partition."""
    if name.endswith(("-delete", "-future", "-stray")):
        raise InvalidName(f"{name!r} is a folder being deleted or moved, not a partition")
    m = _DIR_RE.match(name)
    if not m:
        raise InvalidName(f"{name!r} is not <topic>-<partition>")
    topic = m.group("topic")
    if not TOPIC_RE.match(topic) or topic in (".", ".."):
        raise InvalidName(f"{topic!r} is not a valid topic name (1 to 249 of a-z A-Z 0-9 . _ -)")
    partition = int(m.group("partition"))
    if partition > 2**31 - 1:
        raise InvalidName(f"partition {partition} is out of range")
    return topic, partition


def fsync_directory(path: str | os.PathLike[str]) -> None:
    """fsync a folder, so that files created, renamed or deleted in it stay so after a power loss."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class AppendResult:
    """Where an append landed: ``first_offset..last_offset``, and whether it is on disk (fsynced)."""

    __slots__ = ("first_offset", "last_offset", "durable", "batches")

    def __init__(self, first_offset: int, last_offset: int, durable: bool, batches: int) -> None:
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.durable = durable
        self.batches = batches

    def __repr__(self) -> str:
        return f"AppendResult({self.first_offset}..{self.last_offset}, durable={self.durable})"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Log:
    """One partition: open it with :meth:`open`; it reads lazily and appends when writable."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        config: LogConfig | None = None,
        *,
        writable: bool = False,
        clock: Callable[[], int] = _now_ms,
        budget: HandleBudget | None = None,
    ) -> None:
        self.dir = Path(directory)
        self.topic, self.partition = parse_partition_dir_name(self.dir.name)
        self.config = config or LogConfig()
        self.writable = writable
        #: Milliseconds since the epoch: timestamps of records without one, LogAppendTime, ``segment.ms``
        #: and ``flush.ms``.
        self.clock = clock
        self.budget = budget
        self.segments: SkipList[LogSegment] = SkipList()
        self._lock = threading.RLock()
        self._appended = threading.Condition(threading.Lock())
        self._log_start_offset = 0
        self._unflushed_messages = 0
        self._last_flush_ms = clock()
        self._dir_dirty = False  # files created or removed since the folder was last fsynced
        self.recovery_point = 0
        self.leader_epoch = 0
        self.last_recovery = None  # the RecoveryReport of the load
        self._listeners: list[Callable[[Log], None]] = []
        self._closed = False
        #: Undecided transactions (producer id -> first offset); None until first needed after an open.
        self._txn: ProducerTransactions | None = None
        #: Segments renamed ``.deleted``, with the clock's time of the rename, waiting for their files to go.
        self._pending_deletion: list[tuple[int, LogSegment]] = []

    # ------------------------------------------------------------------------------------------ open

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        config: LogConfig | None = None,
        *,
        writable: bool = False,
        log_start_offset: int | None = None,
        recovery_point: int | None = None,
        clean_shutdown: bool | None = None,
        clock: Callable[[], int] = _now_ms,
        budget: HandleBudget | None = None,
    ) -> Log:
        """Load a partition folder, recovering it first when writable and the shutdown was unclean.

        Writable: ``.cleaned`` files are deleted, ``.swap`` files completed, ``.deleted`` files removed,
        segments from the recovery point on (all of them when unknown) re-validated with their tails cut,
        and missing or corrupt indexes rebuilt. ``clean_shutdown`` None (unknown) counts as unclean.
        Read-only: nothing changes on disk; leftovers are ignored and damage is reported when a read
        meets it.
        """
        raise_open_file_limit()
        if writable:
            check_partition_folder(directory)  # never write through a link (safefiles)
        log_ = cls(directory, config, writable=writable, clock=clock, budget=budget)
        log_._load(log_start_offset, recovery_point, bool(clean_shutdown))
        return log_

    def _load(self, log_start_offset: int | None, recovery_point: int | None, clean_shutdown: bool) -> None:
        from .recovery import load_segments

        self.last_recovery = load_segments(self, recovery_point=recovery_point, clean_shutdown=clean_shutdown)
        last = self.segments.last()
        if last is not None:
            last[1].become_active()
        elif self.writable:
            self._add_segment(log_start_offset or 0)
        first = self.segments.first()
        base = first[0] if first else (log_start_offset or 0)
        end = self.log_end_offset
        self._log_start_offset = min(max(base, log_start_offset or 0), max(end, base))
        if not self.writable:
            self.recovery_point = recovery_point or 0
        elif clean_shutdown:
            self.recovery_point = end
        else:
            # advanced only by a flush: the recovered bytes may not be on disk yet (Kafka does the same)
            self.recovery_point = min(recovery_point or 0, end)
        self._load_leader_epoch()

    def _load_leader_epoch(self) -> None:
        path = self.dir / "leader-epoch-checkpoint"
        try:
            entries = parse_epoch_checkpoint(path.read_bytes())
            if entries:
                self.leader_epoch = max(e[0] for e in entries)
        except (OSError, CorruptRecordError):
            pass

    def _new_segment(self, base_offset: int, **kwargs) -> LogSegment:
        return LogSegment(
            self.dir, base_offset, self.config, writable=self.writable, clock=self.clock, budget=self.budget, **kwargs
        )

    def _add_segment(self, base_offset: int) -> LogSegment:
        """A new, empty active segment (writable logs; stale index files at that base are removed)."""
        for ext in (".index", ".timeindex", ".txnindex"):
            try:
                os.unlink(self.dir / segment_file_name(base_offset, ext))
            except FileNotFoundError:
                pass
        segment = self._new_segment(base_offset)
        segment.become_active()
        self.segments.put(base_offset, segment)
        self._dir_dirty = True
        return segment

    # ------------------------------------------------------------------------------------------ offsets

    @property
    def name(self) -> str:
        return self.dir.name

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @log_start_offset.setter
    def log_start_offset(self, value: int) -> None:
        self._log_start_offset = value

    @property
    def active_segment(self) -> LogSegment | None:
        last = self.segments.last()
        return last[1] if last else None

    @property
    def log_end_offset(self) -> int:
        """The next offset to be written (Kafka's LEO)."""
        last = self.segments.last()
        if last is None:
            return self._log_start_offset
        segment = last[1]
        if segment.size == 0:
            return segment.base_offset
        return segment.next_offset

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments.values())

    # ------------------------------------------------------------------------------------------ reading

    def refresh(self) -> bool:
        """Notice what another process appended (new segments, a longer active segment); return True
        if the log end offset moved. Writable logs know their own appends."""
        if self.writable or self._closed:
            return False
        before = self.log_end_offset
        with self._lock:
            try:
                names = regular_files(self.dir)
            except FileNotFoundError:
                return False
            previous = self.segments.last()
            bases = sorted(b for n in names if n.endswith(".log") and _SEGMENT_RE.match(n)
                           and (b := int(n[:20])) <= 2**63 - 1)
            known = set(self.segments.keys())
            for base in bases:
                if base not in known:
                    try:
                        self.segments.put(base, self._new_segment(base))
                    except (CorruptRecordError, UnsafeFileError):  # gone again already, or replaced by a link
                        continue
            for base in known - set(bases):
                seg = self.segments.remove(base)
                if seg is not None:
                    seg.close_handlers()
            last = self.segments.last()
            if previous is not None and (last is None or previous[0] != last[0]):
                previous[1].active = False
                previous[1].refresh()  # it grew before the writer rolled
            if last is not None:
                last[1].active = True
                last[1].refresh()
            first = self.segments.first()
            if first is not None and first[0] > self._log_start_offset:
                self._log_start_offset = first[0]
        after = self.log_end_offset
        if after != before:
            self._notify()
            return True
        return False

    def segment_for(self, offset: int) -> LogSegment | None:
        """The segment whose range holds ``offset`` (skip list floor), or None below the first."""
        floor = self.segments.floor(offset)
        return floor[1] if floor else None

    def batches(
        self, from_offset: int | None = None, to_offset: int | None = None
    ) -> Iterator[tuple[LogSegment, BatchView]]:
        """Every batch holding an offset in ``from_offset..to_offset`` (inclusive), oldest first, with
        its segment. Batches are not decoded."""
        if from_offset is None or from_offset < self._log_start_offset:
            from_offset = self._log_start_offset
        floor = self.segments.floor(from_offset)
        start_key = floor[0] if floor else None
        first = True
        for base, segment in self.segments.items(start_key):
            if to_offset is not None and base > to_offset:
                return
            views = segment.read_from(from_offset) if first else segment.batches(0)
            first = False
            for view in views:
                h = view.header
                if to_offset is not None and h.base_offset > to_offset:
                    return
                if h.last_offset < from_offset:
                    continue
                yield segment, view
                if to_offset is not None and h.last_offset >= to_offset:
                    return  # done: whatever follows (maybe damage) is not read

    def read(
        self, from_offset: int | None = None, to_offset: int | None = None, *, validate: bool = True
    ) -> Iterator[DecodedBatch]:
        """Decoded batches from ``from_offset``, the first and last trimmed to the bounds.

        ``OffsetOutOfRange`` past the log end offset; an offset below the log start reads from there.
        """
        if from_offset is not None and from_offset > self.log_end_offset:
            raise OffsetOutOfRange(f"offset {from_offset} is past the log end offset {self.log_end_offset}")
        lo = self._log_start_offset if from_offset is None else max(from_offset, self._log_start_offset)
        for segment, view in self.batches(lo, to_offset):
            batch = view.decode(validate=validate, file=str(segment.log_path))
            if batch.offsets and (batch.offsets[0] < lo or (to_offset is not None and batch.offsets[-1] > to_offset)):
                batch = _trim(batch, lo, to_offset)
            yield batch

    def records(self, from_offset: int | None = None, to_offset: int | None = None) -> Iterator[Record]:
        """Every record as (offset, timestamp, key, value, headers): convenient, not the hot path."""
        for batch in self.read(from_offset, to_offset):
            yield from batch

    def read_offset(self, offset: int) -> tuple[DecodedBatch, int] | None:
        """The batch holding ``offset`` and the record's index in it, or None when the offset is not
        in the log (below the start, past the end, or compacted away)."""
        if offset < self._log_start_offset or offset >= self.log_end_offset:
            return None
        segment = self.segment_for(offset)
        if segment is None:
            return None
        view = segment.find(offset)
        if view is None:  # in a gap at the end of the segment: the next one may start with it
            higher = self.segments.higher(segment.base_offset)
            if higher is None:
                return None
            segment = higher[1]
            view = segment.find(offset)
            if view is None:
                return None
        if view.header.base_offset > offset and view.header.magic == 2:
            return None
        batch = view.decode(file=str(segment.log_path))
        offsets = batch.offsets
        i = bisect.bisect_left(offsets, offset)
        return (batch, i) if i < len(offsets) and offsets[i] == offset else None

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or past the log start whose timestamp is >=
        ``timestamp`` (Kafka's ``offsetsForTimes``), or None when every record is older.

        Segments are tried in order; the first whose largest timestamp reaches the target is searched
        through its time index (SPEC §2).
        """
        start = self._log_start_offset
        floor = self.segments.floor(start)
        for _base, segment in self.segments.items(floor[0] if floor else None):
            if segment.size == 0 or segment.max_timestamp < timestamp:
                continue
            found = segment.find_offset_by_timestamp(timestamp, start)
            if found is not None:
                return found
        return None

    # ------------------------------------------------------------------------------------------ writing

    def _require_writable(self) -> None:
        if not self.writable:
            raise ReadOnlyError(f"{self.dir} is open read-only")
        if self._closed:
            raise ReadOnlyError(f"{self.dir} is closed")

    def append_records(
        self, records: Sequence[ProducerRecord | tuple], *, flush: bool | None = None
    ) -> AppendResult:
        """Append records as one batch (offsets assigned here); timestamps None become now."""
        self._require_writable()
        if not records:
            end = self.log_end_offset
            return AppendResult(end, end - 1, True, 0)
        now = self.clock()
        rows = [(now if r[0] is None else r[0], r[1], r[2], tuple(r[3])) for r in records]
        codec = _CODECS.get(self.config.compression_type, Codec.NONE)
        data = encode_batch(rows, compression=codec, partition_leader_epoch=self.leader_epoch)
        return self.append_batches(data, flush=flush)

    def append_batches(self, data: bytes | bytearray, *, flush: bool | None = None) -> AppendResult:
        """Append whole v2 batches as a producer sends them: each is validated (sizes, CRC, offset
        range), given its offsets and the leader epoch (outside the CRC), and LogAppendTime when the
        topic says so.

        A batch keeps its ``lastOffsetDelta``: one with gaps (compacted, copied from another log) takes
        ``lastOffsetDelta + 1`` offsets. ``flush`` True fsyncs before returning (the result is then
        ``durable``); None follows ``flush.messages`` / ``flush.ms``; False never flushes.
        """
        self._require_writable()
        buf = bytearray(data)
        headers = self._validated_headers(buf)
        with self._lock:
            self._require_writable()
            next_offset = self.log_end_offset
            first = next_offset
            now = self.clock()
            for h in headers:
                set_base_offset(buf, h.position, next_offset)
                set_partition_leader_epoch(buf, h.position, self.leader_epoch)
                if self.config.log_append_time:
                    set_log_append_time(buf, h.position, now)
                next_offset += h.last_offset_delta + 1
            headers = [read_batch_header(buf, h.position) for h in headers]
            events = _transaction_events(buf, headers)
            state = self._transactions_locked() if events else None
            segment = self._maybe_roll(headers, len(buf), now)
            segment.append(buf, headers)
            if state is not None:
                self._complete_transactions(segment, state, events)
            self._unflushed_messages += sum(max(h.record_count, 0) for h in headers)
            durable = False
            if flush or (flush is None and self._flush_due(now)):
                self.flush()
                durable = True
        self._notify()
        return AppendResult(first, next_offset - 1, durable, len(headers))

    def _complete_transactions(self, segment: LogSegment, state: ProducerTransactions, events: list[TxnEvent]) -> None:
        """Start and end transactions as the appended batches say; an ABORT adds its entry to the
        segment's ``.txnindex`` (Kafka's ``updateTxnIndex``)."""
        for entry in state.apply(events):
            created = not segment.txn_index.exists()
            segment.txn_index.append(entry)
            if created:
                self._dir_dirty = True

    def _transactions_locked(self) -> ProducerTransactions:
        state = self._txn
        if state is None:
            state = self._txn = ProducerTransactions.scan(self.segments.values())
        return state

    def transactions(self) -> ProducerTransactions:
        """The undecided transactions at the log end (built on first use from the batch headers since the
        log start; kept up to date by appends). A copy: the caller may keep it."""
        with self._lock:
            return self._transactions_locked().copy()

    def first_undecided_offset(self) -> int | None:
        """The first offset of the earliest transaction in progress (what the last stable offset stops at)."""
        return self.transactions().first_undecided_offset()

    def aborted_transactions(self, from_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions that overlap ``[from_offset, upper_bound_offset)``, from the
        ``.txnindex`` files of the segments from the one holding ``from_offset`` on (Kafka's
        ``collectAbortedTransactions``, what a ``read_committed`` fetch needs)."""
        floor = self.segments.floor(from_offset)
        out: list[AbortedTxn] = []
        for _base, segment in self.segments.items(floor[0] if floor else None):
            found, complete = collect_aborted_txns(segment.txn_index.entries(), from_offset, upper_bound_offset)
            out.extend(found)
            if complete:
                break
        return out

    def _validated_headers(self, buf: bytearray) -> list[BatchHeader]:
        headers: list[BatchHeader] = []
        try:
            for h in scan_batches(buf):
                if h.magic != 2:
                    raise InvalidInput("only magic 2 record batches can be appended")
                validate_batch(buf, h)
                if h.last_offset_delta < 0 or h.record_count < 0 or h.record_count - 1 > h.last_offset_delta:
                    raise InvalidInput(
                        f"batch at {h.position}: {h.record_count} records do not fit lastOffsetDelta {h.last_offset_delta}"
                    )
                headers.append(h)
        except CorruptRecordError as exc:
            raise InvalidInput(f"invalid batch: {exc}") from None
        if not headers or headers[-1].end != len(buf):
            raise InvalidInput("the data is not a whole number of record batches")
        for h in headers:
            if h.size > self.config.max_message_bytes:
                raise RecordTooLargeError(
                    f"batch of {h.size} bytes is larger than max.message.bytes={self.config.max_message_bytes}"
                )
        return headers

    def _flush_due(self, now: int) -> bool:
        return (
            self._unflushed_messages >= self.config.flush_messages
            or now - self._last_flush_ms >= self.config.flush_ms
        )

    def _maybe_roll(self, headers: Sequence[BatchHeader], size: int, now: int) -> LogSegment:
        """The segment to append to, after a roll if any of Kafka's four conditions holds."""
        segment = self.active_segment
        assert segment is not None
        reason = segment.should_roll(
            messages_size=size,
            max_timestamp=max(h.max_timestamp for h in headers),
            max_offset=headers[-1].last_offset,
            batches=len(headers),
            now=now,
        )
        if reason is None:
            return segment
        log.debug("%s: rolling segment %d (%s)", self.name, segment.base_offset, reason)
        return self.roll(headers[0].base_offset)

    def roll(self, next_offset: int | None = None) -> LogSegment:
        """Seal the active segment and start a new one at ``max(next_offset, log end offset)`` (Kafka's
        ``roll``); an empty active segment already there is kept as it is."""
        self._require_writable()
        with self._lock:
            base = max(next_offset or 0, self.log_end_offset)
            active = self.active_segment
            if active is not None:
                if active.base_offset == base and active.size == 0:
                    return active
                if base < active.base_offset or self.segments.get(base) is not None:
                    raise InvalidInput(f"cannot roll to {base}: the active segment starts at {active.base_offset}")
                active.on_become_inactive()  # fsynced by the next flush, which starts at the recovery point
            return self._add_segment(base)

    def flush(self) -> None:
        """fsync everything from the recovery point on (and the folder, if files came or went); the
        recovery point becomes the log end offset."""
        with self._lock:
            if not self.writable or self._closed:
                return
            floor = self.segments.floor(self.recovery_point)
            for segment in self.segments.values(floor[0] if floor else None):
                segment.flush()
            if self._dir_dirty:
                fsync_directory(self.dir)
                self._dir_dirty = False
            self.recovery_point = self.log_end_offset
            self._unflushed_messages = 0
            self._last_flush_ms = self.clock()

    def truncate_to(self, offset: int) -> bool:
        """Drop every record at or past ``offset`` (whole batches, as Kafka does: the batch holding
        ``offset`` goes too); False when there was nothing past it (Kafka's ``truncateTo``)."""
        self._require_writable()
        if offset < 0:
            raise InvalidInput(f"cannot truncate to a negative offset {offset}")
        with self._lock:
            if offset >= self.log_end_offset:
                return False
            first = self.segments.first()
            if first is None or first[0] > offset:
                self.truncate_fully_and_start_at(offset)
                return True
            for base, segment in list(self.segments.items(offset, from_inclusive=False)):
                self.segments.remove(base)
                segment.delete()
            active = self.active_segment
            assert active is not None
            active.truncate_to(offset)
            active.active = True
            self._dir_dirty = True
            self._txn = None  # rebuilt from the log when next needed
            self._log_start_offset = min(offset, self._log_start_offset)
            self.recovery_point = min(self.recovery_point, self.log_end_offset)
            return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start empty at ``offset`` (Kafka's ``truncateFullyAndStartAt``)."""
        self._require_writable()
        with self._lock:
            for base, segment in list(self.segments.items()):
                self.segments.remove(base)
                segment.delete()
            self._add_segment(offset)
            self._log_start_offset = offset
            self.recovery_point = min(self.recovery_point, offset)
            self._txn = ProducerTransactions()

    def delete_segments(self, segments: list[LogSegment], reason: str = "") -> None:
        """Remove whole segments (retention): their files are renamed ``.deleted`` and removed
        ``file.delete.delay.ms`` later (:meth:`delete_expired_files`); the log start offset moves past
        them. The active segment is never removed: a new empty one replaces it."""
        self._require_writable()
        with self._lock:
            for segment in segments:
                if segment is self.active_segment:
                    self.roll()
                end = segment.next_offset
                self.segments.remove(segment.base_offset)
                self._log_start_offset = max(self._log_start_offset, end)
                self.schedule_deletion(segment)
                if reason:
                    log.info("%s: segment %d marked for deletion (%s)", self.name, segment.base_offset, reason)
            first = self.segments.first()
            if first is not None:
                self._log_start_offset = max(self._log_start_offset, first[0])
        self.delete_expired_files()

    def schedule_deletion(self, segment: LogSegment) -> None:
        """Rename a segment that is no longer part of the log ``.deleted``; its files go once
        ``file.delete.delay.ms`` has passed (Kafka's asynchronous delete)."""
        self._require_writable()
        with self._lock:
            segment.change_suffix(".deleted")
            self._dir_dirty = True
            self._pending_deletion.append((self.clock(), segment))

    def pending_deletions(self) -> list[LogSegment]:
        """The segments renamed ``.deleted`` whose files are still there."""
        with self._lock:
            return [segment for _ts, segment in self._pending_deletion]

    def delete_expired_files(self, now_ms: int | None = None) -> list[str]:
        """Remove the files of the ``.deleted`` segments renamed at least ``file.delete.delay.ms`` before
        ``now_ms`` (default: the log's clock); return the ``.log`` names removed."""
        if not self._pending_deletion:
            return []
        with self._lock:
            now = self.clock() if now_ms is None else now_ms
            delay = self.config.file_delete_delay_ms
            due = [(ts, seg) for ts, seg in self._pending_deletion if now - ts >= delay]
            if not due:
                return []
            self._pending_deletion = [(ts, seg) for ts, seg in self._pending_deletion if now - ts < delay]
            names = []
            for _ts, segment in due:
                names.append(segment.log_path.name)
                segment.delete()
            self._dir_dirty = True
            return names

    # ------------------------------------------------------------------------------------------ followers

    def add_listener(self, callback: Callable[[Log], None]) -> None:
        """Call ``callback(log)`` after every append (from the appending thread)."""
        self._listeners.append(callback)

    def _notify(self) -> None:
        with self._appended:
            self._appended.notify_all()
        for callback in list(self._listeners):
            callback(self)

    def wait_for_records(self, after_offset: int, timeout: float | None = None, poll_interval: float = 0.2) -> bool:
        """Block until an offset past ``after_offset`` (the last one a follower has seen; -1 for none)
        may have been written, i.e. the log end offset is past ``after_offset + 1`` (True), or until
        ``timeout`` seconds pass (False).

        Read-only logs poll the files (another process is writing) every ``poll_interval`` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self.log_end_offset > after_offset + 1:
                return True
            if not self.writable:
                self.refresh()
                if self.log_end_offset > after_offset + 1:
                    return True
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            wait = poll_interval if remaining is None else min(poll_interval, remaining)
            with self._appended:
                self._appended.wait(wait)

    # ------------------------------------------------------------------------------------------ close

    def close(self) -> None:
        """Flush (writable) and close every segment; the active one is sealed (final time index entry,
        trimmed indexes), as a broker leaves it at a clean shutdown."""
        with self._lock:
            if self._closed:
                return
            try:
                if self.writable:
                    self.delete_expired_files()
                    self.flush()
                active = self.active_segment
                for segment in self.segments.values():
                    segment.close(seal=self.writable and segment is active)
                for _ts, segment in self._pending_deletion:  # their files stay until the next writable open
                    segment.close_handlers()
                self._pending_deletion = []
                if self.writable and self._dir_dirty:
                    fsync_directory(self.dir)
            finally:
                self._closed = True

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def describe(self) -> dict:
        """Topic, partition, offsets and segments, for ``partition.json`` and ``verify``."""
        segments = []
        for base, segment in self.segments.items():
            segments.append(
                {
                    "baseOffset": base,
                    "nextOffset": segment.next_offset,
                    "sizeBytes": segment.size,
                    "maxTimestamp": segment.max_timestamp,
                    "file": segment.log_path.name,
                    "offsetIndexEntries": segment.offset_index.entries,
                    "timeIndexEntries": segment.time_index.entries,
                }
            )
        return {
            "topic": self.topic,
            "partition": self.partition,
            "logStartOffset": self.log_start_offset,
            "logEndOffset": self.log_end_offset,
            "sizeBytes": sum(s["sizeBytes"] for s in segments),
            "config": self.config.as_dict(),
            "segments": segments,
        }


def _transaction_events(buf: bytearray, headers: Sequence[BatchHeader]) -> list[TxnEvent]:
    """The transaction events of batches about to be appended; InvalidInput for a marker that does not
    decode."""
    events = []
    for h in headers:
        if h.producer_id >= 0 and (h.is_transactional or h.is_control):
            try:
                event = transaction_event(buf, h)
            except CorruptRecordError as exc:
                raise InvalidInput(f"invalid control batch: {exc}") from None
            if event is not None:
                events.append(event)
    return events


def _trim(batch: DecodedBatch, lo: int, hi: int | None) -> DecodedBatch:
    offsets = batch.offsets
    i = bisect.bisect_left(offsets, lo)
    j = len(offsets) if hi is None else bisect.bisect_right(offsets, hi, lo=i)
    return DecodedBatch(
        batch.header, offsets[i:j], batch.timestamps[i:j], batch.keys[i:j], batch.values[i:j], batch.headers[i:j]
    )
