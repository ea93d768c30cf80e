"""Planning a read in the driver: which partitions (:mod:`.discovery`), which segments, which byte ranges.

Everything here works from file names, file sizes and the memory-mapped indexes; no record data is
read, except where a ``startingTimestamp``/``endingTimestamp`` option must be turned into an offset
(Kafka's ``offsetsForTimes``: the time index, the offset index, then one batch decoded).

A read becomes :class:`Split` s (one Spark task each). A split holds :class:`Piece` s, each a byte range
of one segment that starts and ends at batch boundaries: a segment's start, an offset index entry's
position or the file size seen at planning. Segments larger than ``maxBytesPerPartition`` are cut at
index entries so one big partition keeps every core busy; small pieces are packed together so that a
directory of many small partitions does not become thousands of tiny tasks.

Pruning, with the bounds the options and the pushed-down filters give:

- partitions by topic and partition number;
- segments by base offset (a segment holds offsets from its base up to the next segment's base);
- segments by time: a sealed segment whose time index says its largest timestamp is below the lower
  time bound holds no row that can pass (the index gets the segment's maximum when it rolls), unless
  its last batch is cut (the tail after its last index entry is read to know): then it is read, so
  that its torn end meets ``onCorrupt``;
- inside a segment the scan starts at the offset index entry for the first offset, or at the entry
  the time index gives for the lower time bound, whichever is later, and stops at the first index
  entry past the last offset.

An index that fails Kafka's cheap sanity check is not used for that segment (it is scanned whole).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from contextlib import ExitStack
from typing import overload

from ..errors import InvalidInput
from ..storage.log import Log
from ..storage.logdir import LogDir
from ..storage.segments import is_sealed
from .dataloss import report_data_loss
from .discovery import discover_partitions
from .options import EARLIEST, LATEST, ReadOptions, check_assigned
from .positions import (
    Walked,
    balanced_groups,
    cut_points,
    end_position,
    indexes_usable,
    micros_to_ms_ceil,
    sealed_max_timestamp,
    start_position,
    time_start,
)
from .predicates import NO_PREDICATES, IntBounds, Predicates

__all__ = [
    "Piece",
    "Split",
    "ScanSpec",
    "PartitionRange",
    "Plan",
    "plan_read",
    "plan_ranges",
    "offset_for_timestamp",
    "stable_end",
]

log = logging.getLogger("kafkafs.spark")

@dataclasses.dataclass(frozen=True, slots=True)
class Piece:
    """Bytes ``start..end`` of one segment, and the offsets wanted from them (``end_offset`` exclusive)."""

    directory: str
    topic: str
    partition: int
    base_offset: int
    start: int
    end: int
    first_offset: int
    end_offset: int | None
    #: ``read_committed``: the aborted transactions of the partition's range, ``(producer id, first
    #: offset, last offset)`` from the ``.txnindex`` files (what a broker puts in a fetch response).
    aborted: tuple[tuple[int, int, int], ...] = ()
    #: The piece ends where its segment ends and a later segment follows: bytes there that are not a
    #: whole batch are a torn batch (damage, ``onCorrupt``), not a write in progress.
    sealed: bool = False

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclasses.dataclass(frozen=True, slots=True)
class ScanSpec:
    """What every piece of one read shares: the row predicates and how to treat damage."""

    offset_values: frozenset[int] | None = None
    timestamp: IntBounds = IntBounds()  # microseconds
    read_committed: bool = False
    on_corrupt: str = "fail"
    batch_rows: int = 32768
    include_headers: bool = False
    fail_on_data_loss: bool = True

    @classmethod
    def of(cls, options: ReadOptions, predicates: Predicates) -> ScanSpec:
        return cls(
            offset_values=predicates.offset.values,
            timestamp=predicates.timestamp,
            read_committed=options.isolation_level == "read_committed",
            on_corrupt=options.on_corrupt,
            batch_rows=options.batch_rows,
            include_headers=options.include_headers,
            fail_on_data_loss=options.fail_on_data_loss,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Split:
    """One Spark task's work."""

    pieces: tuple[Piece, ...]
    spec: ScanSpec

    @property
    def size(self) -> int:
        return sum(p.size for p in self.pieces)


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionRange:
    """One partition as planned: offsets ``start..end`` (end exclusive, None: to the end of the files)."""

    logdir: str
    topic: str
    partition: int
    directory: str
    start: int
    end: int | None
    log_start_offset: int


@dataclasses.dataclass
class Plan:
    splits: list[Split]
    partitions: list[PartitionRange]
    segments_total: int = 0
    segments_pruned: int = 0

    @property
    def pieces(self) -> list[Piece]:
        return [p for s in self.splits for p in s.pieces]


def offset_for_timestamp(log_: Log, ts_ms: int, committed: bool = False) -> int | None:
    """The first offset whose record has a timestamp >= ``ts_ms`` (the engine's ``offsetsForTimes``), or
    None. As Kafka's ListOffsets, which Spark's Kafka source asks: -2 is the log start offset, -1 the latest
    offset (``committed``: the last stable offset); another negative time finds nothing."""
    if ts_ms == EARLIEST:
        return log_.log_start_offset
    if ts_ms == LATEST:
        return stable_end(log_, log_.log_end_offset) if committed else log_.log_end_offset
    if ts_ms < 0:
        return None
    found = log_.offset_for_timestamp(ts_ms)
    return None if found is None else found[0]


# ---------------------------------------------------------------------------------------------- planning


@dataclasses.dataclass
class _Counter:
    total: int = 0
    pruned: int = 0


def _pieces_for(
    log_: Log,
    topic: str,
    partition: int,
    first: int,
    end: int | None,
    ts_lo_ms: int | None,
    max_bytes: int,
    counter: _Counter,
    aborted: tuple[tuple[int, int, int], ...] = (),
    max_parts: int | None = None,
    walked: Walked | None = None,
) -> list[Piece]:
    items = list(log_.segments)
    out: list[Piece] = []
    directory = str(log_.dir)
    for i, segment in enumerate(items):
        base = segment.base_offset
        size = segment.size
        if size == 0:
            continue
        counter.total += 1
        next_base = items[i + 1].base_offset if i + 1 < len(items) else None
        if (end is not None and base >= end) or (next_base is not None and next_base <= first):
            counter.pruned += 1
            continue
        bounded_end = end is not None and (next_base is None or next_base > end)
        needs_index = ts_lo_ms is not None or first > base or bounded_end or size > max_bytes
        usable = needs_index and indexes_usable(segment)  # the index files stay closed otherwise
        if ts_lo_ms is not None and is_sealed(next_base) and usable:
            top = sealed_max_timestamp(segment)
            if top is not None and top < ts_lo_ms and segment.ends_whole():  # a cut end is read: onCorrupt
                counter.pruned += 1
                continue
        start, stop = 0, size
        if usable:
            if first > base:
                start = start_position(segment, first)
            if ts_lo_ms is not None:
                start = max(start, time_start(segment, ts_lo_ms))
            if bounded_end:
                stop = end_position(segment, end, size)  # type: ignore[arg-type]  # bounded_end: end is set
        start = min(start, size)
        if start >= stop:
            counter.pruned += 1
            continue
        cuts = cut_points(segment, start, stop, max_bytes, use_index=usable, max_parts=max_parts, walked=walked)
        bounds = [start, *cuts, stop]
        for a, b in zip(bounds, bounds[1:], strict=False):
            out.append(Piece(directory, topic, partition, base, a, b, first, end, aborted,
                             sealed=is_sealed(next_base) and b == size))
    return out


def _pack(pieces: list[Piece], spec: ScanSpec, max_bytes: int) -> list[Split]:
    splits: list[Split] = []
    current: list[Piece] = []
    size = 0
    for piece in pieces:
        if current and size + piece.size > max_bytes:
            splits.append(Split(tuple(current), spec))
            current, size = [], 0
        current.append(piece)
        size += piece.size
    if current:
        splits.append(Split(tuple(current), spec))
    return splits


def _pack_into(pieces: list[Piece], spec: ScanSpec, count: int) -> list[Split]:
    """``count`` splits (fewer only with fewer pieces) of consecutive pieces, of about equal bytes."""
    starts = [0, *balanced_groups([p.size for p in pieces], count), len(pieces)]
    return [Split(tuple(pieces[a:b]), spec) for a, b in zip(starts, starts[1:], strict=False) if b > a]


Resolver = Callable[[Log, str, int], "tuple[int, int | None] | None"]


def _aborted(log_: Log, first: int, end: int | None) -> tuple[tuple[int, int, int], ...]:
    """The aborted transactions overlapping ``first..end``: the engine's (its ``.txnindex`` files, and
    for a segment without its offset index file the entries a broker's recovery would write)."""
    upper = log_.log_end_offset if end is None else end
    txns = log_.aborted_transactions(first, upper)
    return tuple(sorted({(t.producer_id, t.first_offset, t.last_offset) for t in txns}, key=lambda t: t[1]))


def _plan(options: ReadOptions, predicates: Predicates, targets: list[tuple[str, str, int]], resolve: Resolver) -> Plan:
    spec = ScanSpec.of(options, predicates)
    ranges: list[PartitionRange] = []
    counter = _Counter()
    ts_lo_ms = None if predicates.timestamp.lo is None else micros_to_ms_ceil(predicates.timestamp.lo)
    if predicates.never:
        return Plan([], [], 0, 0)
    max_bytes = options.max_bytes_per_partition
    with ExitStack() as stack:
        dirs: dict[str, LogDir] = {}
        wanted: list[tuple[Log, str, int, int, int | None, tuple[tuple[int, int, int], ...]]] = []
        for logdir, topic, partition in targets:
            ld = dirs.get(logdir)
            if ld is None:
                ld = dirs[logdir] = stack.enter_context(LogDir(logdir))
            log_ = ld.log(f"{topic}-{partition}")
            bounds = resolve(log_, topic, partition)
            if bounds is None:
                continue
            first, end = bounds
            first = max(first, log_.log_start_offset)
            if predicates.offset.lo is not None:
                first = max(first, predicates.offset.lo)
            if predicates.offset.hi is not None:
                end = predicates.offset.hi + 1 if end is None else min(end, predicates.offset.hi + 1)
            ranges.append(PartitionRange(logdir, topic, partition, str(log_.dir), first, end, log_.log_start_offset))
            if end is not None and end <= first:
                continue
            aborted = _aborted(log_, first, end) if spec.read_committed else ()
            wanted.append((log_, topic, partition, first, end, aborted))

        walked: Walked = {}

        def cut(limit: int, max_parts: int | None = None) -> list[Piece]:
            counter.total = counter.pruned = 0
            out: list[Piece] = []
            for log_, topic, partition, first, end, aborted in wanted:
                out.extend(_pieces_for(log_, topic, partition, first, end, ts_lo_ms, limit, counter, aborted,
                                       max_parts, walked))
            return out

        pieces = cut(max_bytes)
        splits = _pack(pieces, spec, max_bytes)
        wanted_splits = options.min_partitions or 0
        if len(splits) < wanted_splits:
            # minPartitions: cut at batch boundaries (index entries, else the batches' starts) into
            # pieces of about total / minPartitions bytes, finer while some segment has too few
            # batches for its share, then pack them into minPartitions splits (fewer only when the
            # data has fewer batches)
            total = sum(p.size for p in pieces)
            max_bytes = max(1, -(-total // wanted_splits))
            pieces = cut(max_bytes, wanted_splits)
            while len(pieces) < wanted_splits and max_bytes > 1:
                max_bytes //= 2
                pieces = cut(max_bytes, wanted_splits)
            splits = _pack_into(pieces, spec, wanted_splits)
    return Plan(splits, ranges, counter.total, counter.pruned)


def _batch_resolver(options: ReadOptions) -> Resolver:
    def resolve(log_: Log, topic: str, partition: int) -> tuple[int, int | None] | None:
        name = f"{topic}-{partition}"
        first: int | None
        ts = options.starting_timestamp.for_partition(topic, partition) if options.starting_timestamp else None
        if ts is not None:
            first = offset_for_timestamp(log_, ts, options.isolation_level == "read_committed")
            if first is None:
                if options.starting_by_timestamp_strategy == "latest":
                    return None
                raise InvalidInput(
                    f"No offset matched from request of topic-partition {name} and timestamp {ts}. "
                    "(option startingOffsetsByTimestampStrategy=latest reads nothing from such partitions)"
                )
        else:
            first = options.starting.for_partition(topic, partition)
            if first == EARLIEST:
                first = log_.log_start_offset
            elif first == LATEST:
                return None  # a batch read starting at the end reads nothing
            elif first < 0:
                raise InvalidInput(f"startingOffsets: {first} for {name} is not an offset, -2 or -1")
            elif first < log_.log_start_offset:
                report_data_loss(options.fail_on_data_loss,
                                 f"Could not read records in offset [{first}, {log_.log_start_offset}) for topic partition {name}: "
                                 f"the log starts at {log_.log_start_offset}.")
        end: int | None
        ts = options.ending_timestamp.for_partition(topic, partition) if options.ending_timestamp else None
        if ts is not None:
            end = offset_for_timestamp(log_, ts, options.isolation_level == "read_committed")
        else:
            end = options.ending.for_partition(topic, partition)
            if end == LATEST:
                end = None
            elif end < 0:
                raise InvalidInput(f"endingOffsets: {end} for {name} is not an offset or -1 (latest)")
            else:
                _check_end(log_, name, first, end, options)
        if options.isolation_level == "read_committed":
            end = stable_end(log_, end)
        resolved = log_.log_end_offset if end is None else end
        if first > resolved:  # Spark's KafkaSourceRDD checks this in every task (its message, one line)
            raise InvalidInput(
                f"The resolved start offset {first} is greater than the resolved end offset {resolved} for topic "
                f"{topic} partition {partition}. Please investigate in this order: 1. Check whether start offset "
                "is set beyond the end offset or the latest available offset after resolution. Possible inputs "
                "are: (a) Start offset is set to a timestamp, and the end offset is set to an index of offset. "
                "(b) Start offset is set to an index of offset, and the end offset is set to a timestamp. "
                "(c) Start offset is set, and the end offset is set to latest. 2. Check whether the Kafka "
                "topic-partition is deleted and re-created."
            )
        return first, end

    return resolve


def _check_end(log_: Log, name: str, first: int, end: int, options: ReadOptions) -> None:
    """An ``endingOffsets`` offset past the latest offset (the log end offset; ``read_committed``: the
    last stable offset) is data loss, as in Spark's Kafka source: its task reads up to the latest
    offset, finds nothing there and reports ``[latest, end)`` (KAFKA_DATA_LOSS.COULD_NOT_READ_OFFSET_RANGE;
    ``failOnDataLoss=false``: logged, the read stops at the latest offset). The files a read sees are
    fixed while it plans, so the check is made here."""
    latest = log_.log_end_offset
    what = "the log ends at"
    if options.isolation_level == "read_committed":
        lso = stable_end(log_, latest)
        if lso < latest:
            latest, what = lso, "its last stable offset is"
    if end > latest:
        report_data_loss(options.fail_on_data_loss,
                         f"Could not read records in offset [{max(first, latest)}, {end}) for topic partition {name}: "
                         f"{what} {latest}.")


@overload
def stable_end(log_: Log, end: int) -> int: ...
@overload
def stable_end(log_: Log, end: int | None) -> int | None: ...
def stable_end(log_: Log, end: int | None) -> int | None:
    """``end`` capped at the last stable offset, as a ``read_committed`` consumer sees the log: nothing
    from the first offset of the earliest transaction still in progress on (its outcome is not known
    yet; a streaming query reads it once it is). Found from batch headers, decoding only markers."""
    lso = log_.first_undecided_offset()
    if lso is None:
        return end
    return lso if end is None else min(end, lso)


def plan_read(options: ReadOptions, predicates: Predicates = NO_PREDICATES) -> Plan:
    """The plan of a batch read (``spark.read.format("kafkalog")``): callable without Spark."""
    found = discover_partitions(options)  # every partition read, before the filters (Spark's "assigned")
    missing = sorted(options.topics - {t for _d, t, _p in found}) if options.topics else []
    if missing:  # Spark's Kafka source fails when it asks the cluster for a subscribed topic's partitions
        raise InvalidInput(
            f"UnknownTopicOrPartitionException: This server does not host this topic-partition: no topic "
            f"{', '.join(missing)} in {', '.join(options.paths)}"
        )
    check_assigned(options, ((t, p) for _d, t, p in found))
    targets = [x for x in found if predicates.accepts_partition(x[1], x[2])]
    return _plan(options, predicates, targets, _batch_resolver(options))


def plan_ranges(
    options: ReadOptions, ranges: dict[tuple[str, int], tuple[str, int, int]], predicates: Predicates = NO_PREDICATES
) -> Plan:
    """The plan for known offsets: ``{(topic, partition): (logdir, start, end)}`` (a streaming micro-batch)."""
    targets = sorted(((d, t, p) for (t, p), (d, _s, _e) in ranges.items()), key=lambda x: (x[1], x[2]))

    def resolve(log_: Log, topic: str, partition: int) -> tuple[int, int | None] | None:
        _d, start, end = ranges[(topic, partition)]
        if end <= start:
            return None
        return start, end

    return _plan(options, predicates, targets, resolve)
