"""Byte positions inside a segment from its offset and time indexes, for planning a read.

An index that fails Kafka's cheap sanity check is not used (the segment is then scanned whole).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..errors import CorruptRecordError
from ..storage.segment import LogSegment

__all__ = ["indexes_usable", "end_position", "cut_points", "sealed_max_timestamp", "time_start", "micros_to_ms_ceil"]

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


def cut_points(segment: LogSegment, start: int, stop: int, max_bytes: int) -> list[int]:
    """Positions of index entries that cut ``start..stop`` into pieces of about ``max_bytes``."""
    index = segment.offset_index
    n = index.entries
    length = stop - start
    if length <= max_bytes or n == 0:
        return []
    parts = -(-length // max_bytes)
    cuts: list[int] = []
    for k in range(1, parts):
        target = start + length * k // parts

        def below(j: int, t: int = target) -> bool:
            return index.entry(j).position <= t

        i = _bisect(n, below) - 1
        if i < 0:
            continue
        pos = index.entry(i).position
        if start < pos < stop and (not cuts or pos > cuts[-1]):
            cuts.append(pos)
    return cuts


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
