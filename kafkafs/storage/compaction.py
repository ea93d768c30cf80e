"""Compaction of one log in bounded memory (Kafka's ``Cleaner``, reduced).

A round, as Kafka's ``doClean`` runs it:

1. The *dirty* section runs from the first dirty offset (the ``cleaner-offset-checkpoint``, or the log
   start) to the first uncleanable offset: the active segment's base, the first offset of a transaction
   still undecided, and the first segment holding a record younger than ``min.compaction.lag.ms``.
2. The :class:`~kafkafs.storage.offset_map.OffsetMap` takes the keys of the dirty section in offset
   order (control batches and aborted transactions left out) until it is full; the round ends where it
   stopped (``latest_offset + 1``). A log with more keys than the map holds is cleaned in several rounds.
3. Every segment from the log start to that end, in groups of at most ``segment.bytes`` (and an index's
   worth of entries and 2^31 offsets), is copied into one ``.cleaned`` segment, batch by batch as
   :mod:`.compaction_filter` says (Kafka's record filter): the latest record per key, no records
   without a key, no records of aborted transactions, tombstones and transaction markers until their
   delete horizon has passed. The transaction state (:class:`CleanedTransactions`) runs through the
   whole round. Batches are read in bounded chunks and written through a buffer of
   ``log.cleaner.io.buffer.size``.
4. The ``.cleaned`` segment gets the ``.txnindex`` entries of the ABORT markers it keeps because their
   transaction's batches were only now removed; it is flushed and swapped in for the group through
   ``.swap`` (:meth:`Log.replace_segments`); the originals are renamed ``.deleted``.

Tombstones, markers and KIP-534: a batch that keeps a tombstone, or a transaction marker whose
transaction has no batch left, and has no delete horizon yet is rewritten with one: attribute bit 6 set
and the base timestamp ``now + delete.retention.ms`` (record timestamps stay what they were; they are
stored as deltas from the base). A later round drops that batch's tombstones, or the marker, once
``now`` has reached the horizon. So an aborted transaction goes in three cleanings: its records (the
marker and its index entry stay), then the marker gets its horizon (the entry goes), then the marker.
Legacy (magic 0/1) messages are judged record by record too (:func:`clean_legacy`), their tombstones
by Kafka's ``legacyDeleteHorizonMs`` (segment modification times; a cleaned segment keeps the last
modification time of the group it replaces, as Kafka sets it). As Kafka (its ``RETAIN_EMPTY`` cases),
the header of a batch whose records all go is kept, as an empty batch, only when it is the last batch
of the round or an active producer's last batch; any other emptied batch goes, also at the end of a
group, so a segment emptied whole is a 0-byte file. A cleaned segment may so end before the offsets
of the segments it replaces; a crash between its swap and the renames is completed as Kafka's
LogLoader completes it (the segments overlapping the swap's own offsets are replaced).

Threads: a compaction runs in one thread (the cleaner's, or the ``clean`` command's). It reads sealed
segments without any lock (appends never touch them) and takes the log's writer lock only inside
:meth:`Log.replace_segments`, which refuses the swap when retention removed a segment meanwhile.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..format.batch import BatchHeader, batch_header_at
from ..format.txnindex import AbortedTxn
from .compaction_filter import DELETE_HORIZON_FLAG, CleanStats, GroupResult, clean_batch, clean_legacy
from .names import CLEANED, LOG, SEGMENT_EXTENSIONS, segment_file_name
from .offset_map import OffsetMap
from .records import BatchView
from .segment import LogSegment
from .transactions import CleanedTransactions

if TYPE_CHECKING:
    from .log import Log

__all__ = [
    "CleanStats",
    "DELETE_HORIZON_FLAG",
    "LogToClean",
    "PlannedSegment",
    "clean_log",
    "cleanable_segments",
    "first_uncleanable_offset",
    "log_to_clean",
]

_INT32_MAX = 2**31 - 1
#: Kafka's ``producer.id.expiration.ms`` default: a producer idle that long (and with no transaction
#: open) is no longer active, and compaction need not keep its last batch.
PRODUCER_ID_EXPIRATION_MS = 86_400_000


@dataclass
class LogToClean:
    """A log's cleanable state (Kafka's ``LogToClean``): ``first_dirty..upper`` is the dirty section.
    A snapshot, taken without locks; compaction checks again under the writer lock before it swaps."""

    first_dirty: int
    upper: int
    clean_bytes: int
    dirty_bytes: int
    first_dirty_timestamp: int
    segments: list[LogSegment] = field(default_factory=list)

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


@dataclass(frozen=True)
class PlannedSegment:
    """What a dry run's compaction says a group of segments would become: the cleaned segment's base,
    next offset, size, newest timestamp (-1 when empty) and modification time (the group's last
    segment's, as the real run sets it), so that the retention the real run applies next can be
    judged on it (:func:`.retention.retention_doomed`)."""

    base_offset: int
    next_offset: int
    size: int
    max_timestamp: int
    modified_ms: int | None
    log_path: Path

    def last_modified_ms(self) -> int | None:
        return self.modified_ms


def first_uncleanable_offset(target: Log, now_ms: int) -> int:
    """The first offset compaction may not touch: the active segment's base, the first undecided
    transaction's first offset, the base of the first segment with a record younger than
    ``min.compaction.lag.ms`` (Kafka's ``cleanableOffsets``)."""
    active = target.active_segment
    upper = active.base_offset if active is not None else target.log_start_offset
    undecided = target.first_undecided_offset()
    if undecided is not None:
        upper = min(upper, undecided)
    floor = target.segments.floor(upper)
    if floor is not None:
        upper = floor.base_offset  # whole segments only: the one holding an undecided offset stays as it is
    lag = target.config.min_compaction_lag_ms
    if lag > 0:
        for segment in target.segments.values(None, upper):
            base = segment.base_offset
            if base >= upper:
                break
            if segment.max_timestamp > now_ms - lag:
                upper = min(upper, base)
                break
    return upper


def cleanable_segments(target: Log, now_ms: int) -> list[LogSegment]:
    """The sealed segments wholly below the first uncleanable offset."""
    upper = first_uncleanable_offset(target, now_ms)
    return [s for s in target.segments if s.next_offset <= upper and s is not target.active_segment]


def _first_batch_timestamp(segment: LogSegment) -> int:
    for view in segment.batches(0):
        return view.header.max_timestamp
    return -1


def log_to_clean(target: Log, now_ms: int, checkpoint: int | None) -> LogToClean:
    """Where the dirty section of ``target`` starts and ends, and how dirty it is. A checkpoint below the
    log start or past the log end counts as none (Kafka resets it the same way)."""
    start = target.log_start_offset
    first_dirty = checkpoint if checkpoint is not None and start <= checkpoint <= target.log_end_offset else start
    upper = first_uncleanable_offset(target, now_ms)
    first_dirty = min(first_dirty, upper)
    clean = dirty = 0
    first_ts = -1
    segments = []
    for segment in target.segments:
        if segment.base_offset >= upper:
            break
        segments.append(segment)
        if segment.next_offset <= first_dirty:
            clean += segment.size
        else:
            if first_ts < 0 and dirty == 0:
                first_ts = _first_batch_timestamp(segment)
            dirty += segment.size
    return LogToClean(first_dirty, upper, clean, dirty, first_ts, segments)


def _views(segment: LogSegment, stats: CleanStats, start_position: int = 0) -> Iterator[BatchView]:
    tick = stats.tick
    for view in segment.batches(start_position):
        yield view
        if tick is not None:
            tick()


def _overlapping(entries: list[AbortedTxn], start: int, upper: int) -> list[AbortedTxn]:
    """The aborted transactions that overlap ``[start, upper)`` (what Kafka's
    ``collectAbortedTransactions`` finds, from every segment's ``.txnindex`` read once a round)."""
    return [e for e in entries if e.last_offset >= start and e.first_offset < upper]


def _build_offset_map(segments: list[LogSegment], start: int, upper: int, omap: OffsetMap,
                      aborted: list[AbortedTxn], stats: CleanStats) -> None:
    """Fill ``omap`` from the dirty section ``start..upper`` until it is full (Kafka's ``buildOffsetMap``):
    the keys of data batches, not those of aborted transactions (the ``.txnindex`` entries that
    overlap the section, followed as :class:`CleanedTransactions` does)."""
    omap.clear()
    txns = CleanedTransactions()
    txns.add_aborted(_overlapping(aborted, start, upper))
    dirty = [s for s in segments if s.next_offset > start and s.base_offset < upper]
    for i, segment in enumerate(dirty):
        position = segment.position_of(start) if segment.base_offset < start else 0
        for view in _views(segment, stats, position):
            h = view.header
            if h.base_offset >= upper:
                break
            if h.last_offset >= start:
                stats.map_bytes_read += h.size
            if h.magic == 2 and h.is_control:
                batch = view.decode(file=str(segment.log_path))
                txns.on_control(h, batch.keys[0] if len(batch) else None, not len(batch))
            elif not txns.on_batch(h) and h.last_offset >= start:
                batch = view.decode(file=str(segment.log_path))
                keys, offsets = batch.keys, batch.offsets
                if h.base_offset < start:
                    keep = [j for j, o in enumerate(offsets) if o >= start]
                    keys, offsets = [keys[j] for j in keep], [offsets[j] for j in keep]
                taken = omap.put_many(keys, offsets)
                if taken < len(offsets):
                    return  # full: the round ends at the last offset the map took
            if h.last_offset >= start:
                omap.latest_offset = max(omap.latest_offset, min(h.last_offset, upper - 1))
        following = dirty[i + 1].base_offset if i + 1 < len(dirty) else upper
        omap.latest_offset = max(omap.latest_offset, following - 1)  # a gap after the segment


def group_segments(segments: list[LogSegment], max_size: int, max_index_size: int, upper: int) -> list[list[LogSegment]]:
    """Consecutive segments merged while the group stays within ``segment.bytes``, an index's size and
    2^31 offsets (Kafka's ``groupSegmentsBySize``)."""
    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        size = segments[i].size
        entries = segments[i].offset_index.entries
        time_entries = segments[i].time_index.entries
        i += 1
        while i < len(segments):
            nxt = segments[i]
            last = segments[i + 1].base_offset - 1 if i + 1 < len(segments) else upper - 1
            if (
                size + nxt.size > max_size
                or (entries + nxt.offset_index.entries) * 8 > max_index_size
                or (time_entries + nxt.time_index.entries) * 12 > max_index_size
                or (nxt.size and last - group[0].base_offset > _INT32_MAX)
            ):
                break
            group.append(nxt)
            size += nxt.size
            entries += nxt.offset_index.entries
            time_entries += nxt.time_index.entries
            i += 1
        groups.append(group)
    return groups


class _Writer:
    """Batches into a ``.cleaned`` segment through a buffer of ``io_buffer`` bytes (or nowhere, for a
    dry run: only the size, the next offset and the newest timestamp of what would be written count)."""

    def __init__(self, segment: LogSegment | None, io_buffer: int, stats: CleanStats, base_offset: int) -> None:
        self.segment = segment
        self.io_buffer = io_buffer
        self.stats = stats
        self.buf = bytearray()
        self.headers: list[BatchHeader] = []
        self.size = 0
        self.next_offset = base_offset
        self.max_timestamp = -1

    def write(self, data: bytes | bytearray) -> None:
        self.stats.bytes_written += len(data)
        if self.segment is None:
            h = batch_header_at(data, 0)
            self.size += len(data)
            self.next_offset = max(self.next_offset, h.next_offset)
            self.max_timestamp = max(self.max_timestamp, h.max_timestamp)
            return
        pos = len(self.buf)
        self.buf += data
        self.headers.append(batch_header_at(self.buf, pos))
        if len(self.buf) >= self.io_buffer:
            self.drain()

    def drain(self) -> None:
        if self.segment is not None and self.buf:
            self.segment.append(self.buf, self.headers)
        self.buf = bytearray()
        self.headers = []


def _last_modified(segment: LogSegment) -> int:
    """Kafka's ``LogSegment.lastModified``: the ``.log``'s modification time, in ms (0 when it is gone)."""
    modified = segment.last_modified_ms()
    return 0 if modified is None else modified


def legacy_delete_horizon(segments: list[LogSegment], first_dirty: int, delete_retention_ms: int) -> int:
    """Kafka's ``legacyDeleteHorizonMs``: the last cleaned segment's modification time less
    ``delete.retention.ms`` (0 when nothing is cleaned yet); a magic 0/1 tombstone in a segment modified
    no later than that goes."""
    clean = [s for s in segments if s.base_offset < first_dirty]
    return _last_modified(clean[-1]) - delete_retention_ms if clean else 0


def _clean_group(target: Log, group: list[LogSegment], omap: OffsetMap, now_ms: int, txns: CleanedTransactions,
                 aborted: list[AbortedTxn], stats: CleanStats, io_buffer: int, dry_run: bool,
                 active: dict[int, tuple[int, int]], legacy_horizon: int = 0, round_upper: int = -1,
                 planned: list[LogSegment | PlannedSegment] | None = None) -> GroupResult:
    """Copy ``group`` into one ``.cleaned`` segment and swap it in (Kafka's ``cleanSegments``). A dry
    run writes nothing and adds to ``planned`` what the group would become."""
    result = GroupResult()
    base = group[0].base_offset
    cleaned = None
    if not dry_run:
        for ext in SEGMENT_EXTENSIONS:  # an earlier attempt that failed
            try:
                os.unlink(target.dir / segment_file_name(base, ext, CLEANED))
            except FileNotFoundError:
                pass
        cleaned = LogSegment(target.dir, base, target.config, writable=True, suffix=CLEANED)
    writer = _Writer(cleaned, io_buffer, stats, base)
    retention = target.config.delete_retention_ms
    txns.cleaned = []
    try:
        for k, segment in enumerate(group):
            # the entries overlapping the segment, as Kafka collects them (the index is rebuilt from them)
            upper = group[k + 1].base_offset if k + 1 < len(group) else segment.next_offset
            txns.add_aborted(_overlapping(aborted, segment.base_offset, upper))
            file = str(segment.log_path)
            retain_legacy_deletes = _last_modified(segment) > legacy_horizon
            for view in _views(segment, stats):
                h = view.header
                stats.bytes_read += h.size
                data: bytes | bytearray | None
                if h.magic != 2:
                    data = clean_legacy(view, file, omap, txns, retain_legacy_deletes, now_ms, retention, result,
                                        stats)
                else:
                    data = clean_batch(view, file, omap, txns, active, now_ms, retention, result, stats,
                                       round_upper)
                if data is not None:
                    writer.write(data)
        writer.drain()
        if cleaned is None:
            if planned is not None:
                if not result.changed and len(group) == 1:
                    planned.append(group[0])  # the real run keeps the segment as it is
                else:
                    planned.append(PlannedSegment(base, writer.next_offset, writer.size, writer.max_timestamp,
                                                  group[-1].last_modified_ms(), target.dir / segment_file_name(base, LOG)))
            return result
        if not result.changed and len(group) == 1:
            cleaned.delete()
            return result
        # only the aborted transactions whose ABORT marker stayed because their batches were just removed
        cleaned.txn_index.write_entries(txns.cleaned)
        cleaned.on_become_inactive()
        cleaned.flush()
        modified = group[-1].log_path.stat().st_mtime_ns  # as Kafka: the cleaned segment keeps the last one's
        os.utime(cleaned.log_path, ns=(modified, modified))
    except BaseException:
        if cleaned is not None:
            cleaned.delete()
        raise
    if not target.replace_segments(cleaned, group):
        result = GroupResult()  # retention got there first
    return result


def _describe(target: Log, group: list[LogSegment], result: GroupResult, dry_run: bool) -> str:
    name = group[0].log_path.name if not group[0].suffix else segment_file_name(group[0].base_offset, LOG)
    if len(group) > 1:
        name += f" (+{len(group) - 1} segment(s) merged)"
    what = f"{result.removed} superseded record(s) removed"
    if result.aborted:
        what += f", {result.aborted} record(s) of aborted transactions"
    if result.keyless:
        what += f", {result.keyless} record(s) without a key"
    if result.markers:
        what += f", {result.markers} transaction marker(s)"
    if result.horizons:
        what += f", delete horizon set on {result.horizons} batch(es)"
    return f"{target.name}: {'would compact' if dry_run else 'compacted'} {name}: {what}"


def clean_log(target: Log, now_ms: int, omap: OffsetMap, *, checkpoint: int | None = None, io_buffer: int = 512 * 1024,
              dry_run: bool = False, stats: CleanStats | None = None,
              on_round: Callable[[int], None] | None = None,
              should_stop: Callable[[], bool] | None = None,
              producer_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
              on_line: Callable[[str], None] | None = None,
              layout: list[LogSegment | PlannedSegment] | None = None) -> tuple[list[str], int | None]:
    """Compact ``target`` round after round until its dirty section is clean; return a line per
    rewritten group and the offset it is clean up to (None when nothing was cleanable).
    ``on_round(end)`` is called after each round (to checkpoint it); ``on_line(line)`` with each line as
    its group is swapped in (so that a failure later still leaves what was done said). ``layout`` (a
    dry run): filled with the segments the log would have once compacted, oldest first, each group
    cleaned as a :class:`PlannedSegment` (a later round's group stands for the earlier ones it covers;
    each round of a dry run reads the segments as they are, so a log compacted in several rounds is
    foreseen from its last round's map only)."""
    stats = stats if stats is not None else CleanStats()
    if not target.config.compact:
        return [], None
    lines: list[str] = []
    cleaned_to: int | None = None
    state = log_to_clean(target, now_ms, checkpoint)
    start = state.first_dirty
    becomes: dict[int, LogSegment | PlannedSegment] = {}  # a dry run's: a segment's base -> what it becomes
    while start < state.upper:
        if should_stop is not None and should_stop():
            break
        segments = [s for s in target.segments.values(None, state.upper) if s is not target.active_segment]
        if not segments:
            break
        aborted = [e for s in target.segments for e in s.txn_index.entries()]
        _build_offset_map(segments, start, state.upper, omap, aborted, stats)
        end = min(max(omap.latest_offset + 1, start + 1), state.upper)
        stats.rounds += 1
        to_clean = [s for s in segments if s.base_offset < end]
        txns = CleanedTransactions()  # one per round, carried from group to group (as Kafka's doClean)
        legacy_horizon = legacy_delete_horizon(segments, start, target.config.delete_retention_ms)
        # the producers still active, once a round (Kafka's lastRecordsOfActiveProducers in doClean)
        active = target.active_producers(now_ms, producer_expiration_ms) if hasattr(target, "active_producers") else {}
        for group in group_segments(to_clean, target.config.segment_size, target.config.segment_index_bytes, end):
            if should_stop is not None and should_stop():
                return lines, cleaned_to
            planned: list[LogSegment | PlannedSegment] = []
            result = _clean_group(target, group, omap, now_ms, txns, aborted, stats, io_buffer, dry_run,
                                  active, legacy_horizon, state.upper, planned if dry_run else None)
            for segment in group:
                if planned:
                    becomes[segment.base_offset] = planned[0]
            if result.changed or len(group) > 1:
                lines.append(_describe(target, group, result, dry_run))
                if on_line is not None:
                    on_line(lines[-1])
        cleaned_to = end
        if on_round is not None and not dry_run:
            on_round(end)
        start = end
    if layout is not None:
        for segment in target.segments:
            planned_segment = becomes.get(segment.base_offset, segment)
            if not layout or layout[-1] is not planned_segment:
                layout.append(planned_segment)
    return lines, cleaned_to


def now_ms() -> int:
    return time.time_ns() // 1_000_000
