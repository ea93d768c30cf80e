"""Log: one partition (Kafka's UnifiedLog over :class:`~kafkafs.storage.local_log.LocalLog`, reduced to
what a single-node file tool needs): loading, appends and transactions.

Appends serialise on the log's lock: validate, assign offsets, roll if one of Kafka's four conditions
holds (checked before each batch when one append holds several, as Kafka checks each of a producer's
batches), write, update the transaction state, flush when due, tell the followers.

Transactions: the Log knows which producers have a transaction in progress (built lazily, on the first
transactional append after an open, from the producer state: the latest snapshot, then the batches after
it, or without one from the first segment's start, below the log start too), so that an ABORT
marker adds its entry to the active segment's ``.txnindex`` as a broker's does.

A writable Log does not take the log directory's ``.lock`` itself; :class:`~kafkafs.storage.logdir.LogDir`
does, and keeps the clean-shutdown marker and the checkpoints. Opened on its own, writable, a Log does
not know how the last writer stopped unless told (``clean_shutdown``), so it recovers from
``recovery_point`` (0 when unknown), as Kafka does after an unclean shutdown.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import CorruptRecordError, InvalidInput
from ..format.batch import (
    NO_TIMESTAMP,
    BatchHeader,
    batch_groups,
    batch_header_at,
    encode_batch,
    scan_batches,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_batch,
)
from ..format.compression import codec_by_name
from ..format.lineencode import encode_lines
from ..format.txnindex import AbortedTxn, TxnEvent, collect_aborted_txns, transaction_event
from .append_rules import RecordRefused, check_appendable, check_batch_sizes
from .config import LogConfig
from .handles import HandleBudget, raise_open_file_limit
from .local_log import LocalLog, _now_ms, fsync_directory
from .recovery import load_segments
from .safefiles import check_partition_folder
from .segment import LogSegment
from .state_files import StateFiles
from .transactions import ProducerTransactions, segment_aborted

if TYPE_CHECKING:  # an annotation only: the line parser (and orjson) is not needed to read a log
    from ..format.jsonview import ProducerRecord

#: A record to append: (timestamp or None for now, key, value, headers).
_NewRecord = tuple[int | None, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]

__all__ = ["Log", "AppendResult", "fsync_directory"]

log = logging.getLogger("kafkafs.log")


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


class Log(LocalLog):
    """One partition: open it with :meth:`open`; it reads lazily and appends when writable.

    Threads: safe to share; appends serialise on the log's lock, reads take none (:class:`LocalLog`).
    """

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
        recover_all: bool = False,
        clock: Callable[[], int] = _now_ms,
        budget: HandleBudget | None = None,
    ) -> Log:
        """Load a partition folder, recovering it first when writable and the shutdown was unclean.

        Writable: ``.cleaned`` files are deleted, ``.swap`` files completed, ``.deleted`` files removed,
        segments from the recovery point on (all of them when unknown) re-validated with their tails cut,
        and missing or corrupt indexes rebuilt. ``clean_shutdown`` None (unknown) counts as unclean;
        ``recover_all``: recover from the recovery point on even after a clean stop (``kafkafs recover``:
        what it finds is then judged knowing how the writer stopped).
        Read-only: nothing changes on disk; leftovers are ignored, but for a committed ``.swap``, read
        in place of the segments it replaces as a recovery completes it (:meth:`LocalLog._take_swaps`),
        and damage is reported when a read meets it.
        """
        raise_open_file_limit()
        if writable:
            check_partition_folder(directory)  # never write through a link (safefiles)
        log_ = cls(directory, config, writable=writable, clock=clock, budget=budget)
        log_._load(log_start_offset, recovery_point, bool(clean_shutdown), recover_all)
        return log_

    def _load(self, log_start_offset: int | None, recovery_point: int | None, clean_shutdown: bool,
              recover_all: bool = False) -> None:
        loaded = load_segments(
            self.dir,
            self.config,
            self._new_segment,
            writable=self.writable,
            recovery_point=recovery_point,
            clean_shutdown=clean_shutdown,
            recover_all=recover_all,
            mtime_before=self._take_mtime_at_open(),
        )
        self.last_recovery = loaded.report
        for segment in loaded.segments:
            self.segments.add(segment)
        if not self.writable and loaded.swaps:
            self._take_swaps_at_load(loaded.swaps)
        if loaded.transactions is not None:
            self._txn = loaded.transactions
        self._dir_dirty = self._dir_dirty or loaded.dir_dirty
        last = self.segments.last()
        if last is not None:
            last.become_active()
        elif self.writable:
            self._add_segment(log_start_offset or 0)
        first = self.segments.first()
        base = first.base_offset if first else (log_start_offset or 0)
        wanted = max(base, log_start_offset or 0)
        if not self.writable:
            # the log end (a scan of the active segment's tail) only when the checkpoint says the log
            # starts past the first segment; the state files only matter to appends (read on first use)
            self._log_start_offset = wanted if wanted == base else min(wanted, max(self.log_end_offset, base))
            self.recovery_point = recovery_point or 0
            return
        end = self.log_end_offset
        self._log_start_offset = min(wanted, max(end, base))
        if clean_shutdown:
            self.recovery_point = end
        else:
            # advanced only by a flush: the recovered bytes may not be on disk yet (Kafka does the same)
            self.recovery_point = min(recovery_point or 0, end)
        self.state_files.on_load()

    def advance_log_start(self, offset: int) -> bool:
        """Read-only logs: another process checkpointed a log start of ``offset`` (a broker after
        kafka-delete-records, or retention inside a segment): raise the log start to it as a load would
        (never lower it, nor past the log end) and tell the listeners; True when it moved."""
        if self.writable or self._closed:
            return False
        with self._lock:
            first = self.segments.first()
            base = first.base_offset if first is not None else offset
            start = min(max(base, offset), max(self.log_end_offset, base))
            if start <= self._log_start_offset:
                return False
            self._log_start_offset = start
        self._notify()
        return True

    # ------------------------------------------------------------------------------------------ state files
    # Kafka's UnifiedLog keeps the leader epoch cache and the producer state in step with the segments;
    # these overrides call the hook of each event (see state_files.py).

    @property
    def state_files(self) -> StateFiles:
        """``leader-epoch-checkpoint``, producer snapshots and ``partition.metadata`` of this partition."""
        files = self.__dict__.get("_state_files")
        if files is None:
            files = self.__dict__["_state_files"] = StateFiles(self)
        return files

    def set_leader_epoch(self, epoch: int) -> None:
        """Write the next batches as leader epoch ``epoch`` (a new leader's term); it starts at the log
        end offset in ``leader-epoch-checkpoint`` with the first of them. Epochs never go back."""
        if epoch < self.leader_epoch or epoch > 2**31 - 1:
            raise InvalidInput(f"leader epoch {epoch} is below the partition's current epoch {self.leader_epoch}"
                               if epoch < self.leader_epoch else f"leader epoch {epoch} is out of range")
        self.leader_epoch = epoch

    def roll(self, next_offset: int | None = None) -> LogSegment:
        with self._lock, self._writing():
            before = self.active_segment
            segment = super().roll(next_offset)
            if segment is not before:
                self.state_files.on_roll(segment.base_offset)
            return segment

    def truncate_to(self, offset: int) -> bool:
        with self._lock, self._writing():
            cut = super().truncate_to(offset)
            if cut:  # whole batches go: the log may now end below ``offset``
                self.state_files.on_truncate(self.log_end_offset)
            return cut

    def truncate_fully_and_start_at(self, offset: int) -> None:
        with self._lock, self._writing():
            super().truncate_fully_and_start_at(offset)
            self.state_files.on_truncate_fully(offset)

    def delete_segments(self, segments: list[LogSegment], reason: str = "") -> None:
        with self._lock, self._writing():
            super().delete_segments(segments, reason)
            self.state_files.on_segments_deleted([s.base_offset for s in segments], self.log_start_offset)

    def replace_segments(self, new: LogSegment, old: Sequence[LogSegment]) -> bool:
        with self._lock, self._writing():
            swapped = super().replace_segments(new, old)
            if swapped:  # the snapshots named by segments merged away go too (Kafka's deletedNotReplaced)
                gone = [s.base_offset for s in old if s.base_offset != new.base_offset]
                self.state_files.on_segments_deleted(gone, self.log_start_offset)
            return swapped

    def close(self) -> None:
        with self._lock:
            try:
                if not self._closed and self.writable:
                    self.delete_expired_files()
                    self.flush()
                    self.state_files.on_close()
            finally:
                super().close()

    def append_records(
        self, records: Sequence[ProducerRecord | _NewRecord], *, flush: bool | None = None
    ) -> AppendResult:
        """Append records (offsets assigned here; timestamps None become now) as one batch, or, when one
        batch could not stay within ``max.message.bytes``, as several appended together (all or
        nothing); a single record too large for a batch raises ``RecordTooLargeError``."""
        self._require_writable()
        if not records:
            end = self.log_end_offset
            return AppendResult(end, end - 1, True, 0)
        now = self.clock()
        rows = [(now if r[0] is None else r[0], r[1], r[2], tuple(r[3])) for r in records]
        codec = codec_by_name(self.config.compression_type)
        data = b"".join(
            encode_batch(group, compression=codec, partition_leader_epoch=self.leader_epoch)
            for group in batch_groups(rows, self.config.max_message_bytes)
        )
        return self.append_batches(data, flush=flush)

    def append_lines(
        self, data: bytes, *, first_number: int = 1, flush: bool | None = None
    ) -> tuple[AppendResult, int]:
        """Append the lines of ``data`` (split at ``\\n``; SPEC §3's ``append`` rules: a record object or a
        plain value each) as one batch, or several when one could not stay within ``max_batch_bytes``
        (``max.message.bytes``, or the segment size when smaller: a client's append), all or nothing; timestamps None become now. Returns the result and how many lines were taken. A
        bad line raises ``InvalidInput`` naming it (numbered from ``first_number``) and appends nothing."""
        self._require_writable()
        group = encode_lines(data, now=self.clock(), codec=codec_by_name(self.config.compression_type),
                             max_message_bytes=self.config.max_batch_bytes, leader_epoch=self.leader_epoch,
                             first_number=first_number)
        try:
            return self.append_batches(group.data, flush=flush, client=True), group.taken
        except RecordRefused as exc:  # one line is one record
            raise exc.at_line(first_number) from None

    @contextlib.contextmanager
    def appending_now(self, records: int) -> Iterator[bool]:
        """For a caller that must not wait (the mount's FUSE loop): holds the writer's lock for the block
        and yields True when that takes no waiting, that is, no other thread holds it and an append of
        up to ``records`` records would not fsync (``flush.messages`` / ``flush.ms``); else yields False
        at once, the lock not taken. Appends in the block (by this thread) then never wait for another
        thread; they still write to the page cache and may roll a segment."""
        if not self._lock.acquire(blocking=False):
            yield False
            return
        try:
            due = (self._unflushed_messages + records >= self.config.flush_messages
                   or self.clock() - self._last_flush_ms >= self.config.flush_ms)
            yield not due and self.writable and not self._closed
        finally:
            self._lock.release()

    def append_batches(
        self, data: bytes | bytearray, *, flush: bool | None = None, client: bool = False
    ) -> AppendResult:
        """Append whole v2 batches as a producer sends them: each is validated (sizes, CRC, offset
        range), given its offsets and the leader epoch (outside the CRC), and LogAppendTime when the
        topic says so. A record a Kafka broker refuses (a keyless record on a compacted topic, a
        timestamp out of ``message.timestamp.*.max.ms``) raises :class:`~.append_rules.RecordRefused`,
        nothing appended (:mod:`~kafkafs.storage.append_rules`).

        A batch keeps its ``lastOffsetDelta``: one with gaps (compacted, copied from another log) takes
        ``lastOffsetDelta + 1`` offsets. ``flush`` True fsyncs before returning (the result is then
        ``durable``); None follows ``flush.messages`` / ``flush.ms``; False never flushes.

        Every batch must stay within ``max.message.bytes``; with ``client`` True (what a producer sends:
        ``kafkafs produce``, the mount's ``append``, Spark's writes) within ``LogConfig.max_batch_bytes``,
        that is also within the segment size, as Kafka's UnifiedLog.append requires of a produce request
        (RECORD_LIST_TOO_LARGE). The engine's own appends (and tests' tiny segments) keep the first rule.
        """
        self._require_writable()
        buf = bytearray(data)
        headers = self._validated_headers(buf, client)
        check_appendable(buf, headers, self.config, self.name, self.clock())
        with self._lock, self._writing():
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
            headers = [batch_header_at(buf, h.position) for h in headers]
            events = _transaction_events(buf, headers)
            state = self._transactions_locked() if events else None
            self._append_runs(buf, headers, events, state, first, now)
            self._unflushed_messages += sum(max(h.record_count, 0) for h in headers)
            durable = False
            if flush or (flush is None and self._flush_due(now)):
                self.flush()
                durable = True
        self._notify()
        return AppendResult(first, next_offset - 1, durable, len(headers))

    def _append_runs(self, buf: bytearray, headers: list[BatchHeader], events: list[TxnEvent],
                     state: ProducerTransactions | None, first: int, now: int) -> None:
        """Write ``headers`` (offsets assigned) in runs, each after its own roll check, as Kafka sees a
        producer's batches: one append each, each checked against the active segment (``shouldRoll``), so
        that no segment grows past ``segment.bytes`` because one write held several batches (review19
        R19-6). A run is the rest of the batches when they all fit the active segment, else one batch.

        All or nothing in this process: every batch was validated and refused or taken before this
        starts, and an OS error part-way truncates the log back to ``first`` (best effort; the log is
        marked :attr:`write_failed` either way) before it is raised. After a crash, whole batches of a
        write may survive without the rest, as they may within one segment; Kafka's format has no
        atomicity across batches short of a transaction, and a broker's recovery keeps every valid one."""
        n = len(headers)
        latest = [0] * n  # the largest timestamp of batches i.. (what a run of the rest would roll by)
        top = NO_TIMESTAMP
        for k in range(n - 1, -1, -1):
            top = latest[k] = max(top, headers[k].max_timestamp)
        i = e = 0
        try:
            while i < n:
                segment = self.active_segment
                assert segment is not None
                whole = segment.size > 0 and segment.should_roll(
                    messages_size=headers[-1].end - headers[i].position, max_timestamp=latest[i],
                    max_offset=headers[-1].last_offset, batches=n - i, now=now,
                ) is None
                run = headers[i:] if whole else headers[i:i + 1]
                if not whole:
                    segment = self._maybe_roll(run, run[0].size, now)
                start = run[0].position
                segment.append(memoryview(buf)[start:run[-1].end], [h._replace(position=h.position - start) for h in run])
                self.state_files.on_append(buf, run)
                high = run[-1].last_offset
                done = e
                while done < len(events) and events[done].offset <= high:
                    done += 1
                if state is not None and done > e:
                    self._complete_transactions(segment, state, events[e:done])
                e = done
                i += len(run)
        except OSError:
            if i > 0 or self.log_end_offset > first:
                with contextlib.suppress(OSError):
                    self.truncate_to(first)
            raise

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
            state = self._txn = ProducerTransactions(self.state_files.ongoing_transactions())
        return state

    def transactions(self) -> ProducerTransactions:
        """The undecided transactions at the log end (built on first use from the producer state: the
        latest snapshot, then the batches after it, or from the first segment's start; kept up to date
        by appends). A copy: the caller may keep it. A first offset may lie below the log start."""
        with self._lock:
            return self._transactions_locked().copy()

    def active_producers(self, now_ms: int, expiration_ms: int) -> dict[int, tuple[int, int]]:
        """producer id -> (last data offset or -1, epoch) of the producers still active: not idle for
        ``expiration_ms`` (``producer.id.expiration.ms``) or with a transaction open (Kafka's
        ``lastRecordsOfActiveProducers``, what compaction keeps at least an empty batch for)."""
        with self._lock:
            entries = list(self.state_files.producers().entries.values())
        return {
            e.producer_id: (e.last_offset, e.epoch)
            for e in entries
            if e.current_txn_first_offset >= 0 or now_ms - e.timestamp < expiration_ms
        }

    def first_undecided_offset(self) -> int | None:
        """Kafka's first unstable offset (what the last stable offset stops at): the first offset of the
        earliest transaction in progress, raised to the log start offset (a transaction begun below a log
        start that kafka-delete-records moved stays in progress: review10 R10-10), or None."""
        first = self.transactions().first_undecided_offset()
        return None if first is None else max(first, self.log_start_offset)

    def aborted_transactions(self, from_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions that overlap ``[from_offset, upper_bound_offset)``, from the
        ``.txnindex`` files of the segments from the one holding ``from_offset`` on (Kafka's
        ``collectAbortedTransactions``, what a ``read_committed`` fetch needs); for a segment without
        its offset index file, the entries a broker's recovery writes (:func:`.transactions.segment_aborted`)."""
        out: list[AbortedTxn] = []
        first = self.segments.floor(from_offset)
        start = first.base_offset if first is not None else -1
        for segment, entries in segment_aborted(list(self.segments)):
            if segment.base_offset < start:
                continue
            found, complete = collect_aborted_txns(entries, from_offset, upper_bound_offset)
            out.extend(found)
            if complete:
                break
        return out

    def _validated_headers(self, buf: bytearray, client: bool = False) -> list[BatchHeader]:
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
        check_batch_sizes(headers, self.config, client=client)
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

    # ------------------------------------------------------------------------------------------ followers

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

    def describe(self) -> dict[str, Any]:
        """Topic, partition, offsets and segments, for ``partition.json`` and ``verify``."""
        segments = []
        for segment in self.segments:
            segments.append(
                {
                    "baseOffset": segment.base_offset,
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
            **self.state_files.describe(),
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

