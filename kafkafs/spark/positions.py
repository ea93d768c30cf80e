"""Byte positions inside a segment from its offset and time indexes, for planning a read.

An index that fails Kafka's cheap sanity check is not used (the segment is then scanned whole). One that
passes it may still lie (review15 R15-4: entries that name offsets the batch at their position does not
end at, positions where no batch starts, timestamps the batches do not hold): every position taken from
an index goes through the storage engine's own lookups, which check the entry against the batch they
read there and, when it does not fit, stop trusting the segment's index (logged once) and answer from
the ``.log`` (:meth:`~kafkafs.storage.segment.LogSegment.position_of`,
:meth:`~kafkafs.storage.segment.LogSegment.find_offset_by_timestamp`,
:meth:`~kafkafs.storage.segment.LogSegment.entry_fits`). Damage met while planning narrows nothing: the
piece is read whole and the read meets it (``onCorrupt``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from ..errors import CorruptRecordError
from ..storage.segment import LogSegment

__all__ = ["indexes_usable", "start_position", "end_position", "cut_points", "balanced_groups", "sealed_max_timestamp",
           "time_start", "indexed_batch_start", "micros_to_ms_ceil"]

log = logging.getLogger("kafkafs.spark")



def indexes_usable(segment: LogSegment) -> bool:
    try:
        segment.offset_index.sanity_check(full=False)
        segment.time_index.sanity_check(full=False)
    except (CorruptRecordError, OSError) as exc:
        log.warning("%s: index not used (%s); scanning the segment whole", segment.log_path, exc)
        return False
    return True


def _bisect(count: int, below: Callable[[int], bool]) -> int:
    """The first ``k`` in ``0..count`` for which ``below(k)`` is False (``below`` is monotone)."""
    lo, hi = 0, count
    while lo < hi:
        mid = (lo + hi) // 2
        if below(mid):
            lo = mid + 1
        else:
            hi = mid
    return lo


def start_position(segment: LogSegment, offset: int) -> int:
    """A batch start from which a read meets every record at or past ``offset`` (the engine's checked
    lookup); 0 when damage stops the lookup."""
    try:
        return segment.position_of(offset)
    except CorruptRecordError:
        return 0


def end_position(segment: LogSegment, end_offset: int, size: int) -> int:
    """A batch start from which every batch holds only offsets >= ``end_offset`` (``size`` when none
    does): after the first batch that reaches ``end_offset`` when it also holds offsets below it, else at
    it, as the engine's checked lookup finds it (a legacy batch counts as holding offsets below: its
    header does not say its first one)."""
    try:
        view = next(segment.read_from(end_offset), None)
    except CorruptRecordError:
        return size
    if view is None:
        return size
    h = view.header
    if h.magic == 2 and h.base_offset >= end_offset:
        return min(view.position, size)
    return min(view.position + h.size, size)


def balanced_groups(sizes: Sequence[int], groups: int) -> list[int]:
    """Where ``min(groups, len(sizes))`` runs of consecutive items of about equal total size start: the
    indexes of the first item of every run but the first. Every run holds at least one item, so the
    count is exact however unevenly the sizes fall."""
    count = min(groups, len(sizes))
    total = sum(sizes)
    starts: list[int] = []
    acc = 0
    for i, size in enumerate(sizes[:-1]):
        acc += size
        left = count - 1 - len(starts)  # runs still to start
        if left == 0:
            break
        # the next run starts after this item once the runs so far hold their share, or when every
        # item left must start a run of its own
        if acc * count >= total * (len(starts) + 1) or len(sizes) - 1 - i == left:
            starts.append(i + 1)
    return starts


#: Batch starts already walked, by (segment file, start, stop): a plan may cut a segment more than once.
Walked = dict[tuple[str, int, int], list[int]]


def cut_points(
    segment: LogSegment,
    start: int,
    stop: int,
    max_bytes: int,
    *,
    use_index: bool = True,
    max_parts: int | None = None,
    walked: Walked | None = None,
) -> list[int]:
    """Batch boundaries that cut ``start..stop`` into pieces of about ``max_bytes`` (at most
    ``max_parts`` pieces): offset index entries where they serve (``use_index``), else the batches'
    own starts, read from their length fields (:meth:`~kafkafs.storage.segment.LogSegment.batch_starts`,
    kept in ``walked``), so that a segment without index files (or whose index holds too few entries)
    is cut as finely as its batches allow."""
    length = stop - start
    if length <= max_bytes:
        return []
    parts = -(-length // max_bytes)
    if max_parts is not None:
        parts = min(parts, max_parts)
    if parts <= 1:
        return []
    cuts: list[int] = []
    index = segment.offset_index
    n = index.entries if use_index else 0
    for k in range(1, parts if n else 0):
        target = start + length * k // parts

        def below(j: int, t: int = target) -> bool:
            return index.entry(j).position <= t

        i = _bisect(n, below) - 1
        if i < 0:
            continue
        entry = index.entry(i)
        pos = entry.position
        if start < pos < stop and (not cuts or pos > cuts[-1]):
            if not _fits(segment, entry.offset, pos):  # the index lies: cut at the batches' own starts
                cuts = []
                break
            cuts.append(pos)
    if len(cuts) >= parts - 1:
        return cuts
    # too few index entries: cut at batch starts, in runs of about equal bytes
    key = (str(segment.log_path), start, stop)
    starts = walked.get(key) if walked is not None else None
    if starts is None:
        starts = list(segment.batch_starts(start, stop))
        if walked is not None:
            walked[key] = starts
    if len(starts) <= len(cuts) + 1:
        return cuts
    ends = [*starts[1:], stop]
    sizes = [b - a for a, b in zip(starts, ends, strict=True)]
    return [starts[i] for i in balanced_groups(sizes, parts)]


def _fits(segment: LogSegment, offset: int, position: int) -> bool:
    """Whether the offset index entry ``(offset, position)`` is a batch start that fits it (the engine's
    check; a mismatch distrusts the segment's index); False when damage is met there."""
    try:
        return segment.entry_fits(position, offset)
    except CorruptRecordError:
        return False


def indexed_batch_start(segment: LogSegment, after: int, end: int) -> int | None:
    """The first offset index position past ``after`` and before ``end`` that is a batch start fitting its
    entry (the next boundary the index knows, to resume at after damage); None when there is none or the
    index is not trusted."""
    try:
        for entry in segment.offset_index:
            if after < entry.position < end:
                return entry.position if _fits(segment, entry.offset, entry.position) else None
    except (CorruptRecordError, OSError):
        return None
    return None


def sealed_max_timestamp(segment: LogSegment) -> int | None:
    """The largest timestamp of a sealed segment, as the engine's lookup by time takes it (Kafka's
    ``largestTimestamp``: the time index's last entry and the batches from it); None when empty,
    unreadable, or read from a batch whose CRC fails (:attr:`~kafkafs.storage.segment.LogSegment.
    max_timestamp_sure`: a damaged maxTimestamp must not prune the segment)."""
    try:
        top = segment.max_timestamp
        sure = segment.max_timestamp_sure
    except (CorruptRecordError, OSError):
        return None
    return top if top >= 0 and sure else None


def time_start(segment: LogSegment, ts_ms: int) -> int:
    """A batch start before which every record is older than ``ts_ms``: that of the batch holding the
    first record that reaches it (the engine's checked lookup by time), or, when no whole batch does, of
    the last one the offset index knows (a torn end after it is still read); 0 when damage stops it."""
    try:
        found = segment.find_offset_by_timestamp(ts_ms)
        return segment.position_of(found[0] if found is not None else segment.next_offset)
    except CorruptRecordError:
        return 0


def micros_to_ms_ceil(us: int) -> int:
    return -((-us) // 1000)
