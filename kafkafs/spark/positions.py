"""Byte positions inside a segment from its offset and time indexes, for planning a read.

An index that fails Kafka's cheap sanity check is not used (the segment is then scanned whole).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from ..errors import CorruptRecordError
from ..storage.segment import LogSegment

__all__ = ["indexes_usable", "end_position", "cut_points", "balanced_groups", "sealed_max_timestamp", "time_start",
           "micros_to_ms_ceil"]

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


def end_position(segment: LogSegment, end_offset: int, size: int) -> int:
    """The first indexed position from which every batch holds only offsets >= ``end_offset``.

    The batch at entry ``k``'s position starts after entry ``k-1``'s offset (the last offset of an
    earlier batch), so entry ``k`` qualifies once entry ``k-1``'s offset is >= ``end_offset - 1``.
    """
    index = segment.offset_index
    n = index.entries
    i = _bisect(n, lambda k: index.entry(k).offset < end_offset - 1)
    if i + 1 < n:
        return min(index.entry(i + 1).position, size)
    return size


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
        pos = index.entry(i).position
        if start < pos < stop and (not cuts or pos > cuts[-1]):
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


def sealed_max_timestamp(segment: LogSegment) -> int | None:
    """The largest timestamp of a sealed segment from its time index (None when the index is empty)."""
    if segment.time_index.entries == 0:
        return None
    return segment.time_index.last_entry.timestamp


def time_start(segment: LogSegment, ts_ms: int) -> int:
    """A position before which every record is older than ``ts_ms`` (time index, then offset index)."""
    entry = segment.time_index.lookup(ts_ms)
    if entry.timestamp < 0:
        return 0
    return segment.offset_index.lookup(entry.offset).position


def micros_to_ms_ceil(us: int) -> int:
    return -((-us) // 1000)
