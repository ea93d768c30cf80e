"""LogSegments: the segments of one log, by base offset (Kafka's ``LogSegments``).

A thin class around one :class:`~kafkafs.storage.skiplist.SkipList`, so that callers ask for what
they mean (the segment holding an offset, the ones from it on, the active one) instead of repeating
"floor, then items from its key".

Threads: every method may be called from any thread while the owning
:class:`~kafkafs.storage.log.Log`'s single writer adds and removes segments (the skip list's
contract): a reader sees each segment either present or absent, and an iteration sees the segments
present when it reaches them.
"""

from __future__ import annotations

from collections.abc import Iterator

from .records import BatchView
from .segment import LogSegment
from .skiplist import SkipList

__all__ = ["LogSegments", "is_sealed"]


def is_sealed(upper: int | None) -> bool:
    """Whether a segment is sealed, given ``upper``, the base offset of the segment after it in its log
    (:meth:`LogSegments.upper`, or the caller's copy of it; None: it is the last one). The one rule:
    a segment is sealed once a later segment follows it, as its writer rolled past it; it then ends with
    a whole batch, so bytes after its last whole batch are a torn or cut batch (damage), where at the end
    of the last (active) segment they are a batch still being written.

    Right beside a live writer too: a read-only log puts the next segment in only after it has read the
    rolled one to its end (:meth:`LocalLog.refresh <kafkafs.storage.local_log.LocalLog.refresh>`), a
    writable log only after it has sealed it (``roll``); and a scan judges a torn end only when it reads
    to the segment's size as it is then (:meth:`LogSegment.batches
    <kafkafs.storage.segment_files.SegmentFiles.batches>`), so a size read before the roll is never
    taken for a torn one. (``LogSegment.active`` is the writer's side: where appends go.)"""
    return upper is not None


class LogSegments:
    """Segments keyed by base offset; lookups return segments (None when there is none)."""

    __slots__ = ("_map",)

    def __init__(self) -> None:
        self._map: SkipList[LogSegment] = SkipList()

    def __len__(self) -> int:
        return len(self._map)

    def __bool__(self) -> bool:
        return bool(self._map)

    def __contains__(self, base_offset: object) -> bool:
        return base_offset in self._map

    def __iter__(self) -> Iterator[LogSegment]:
        return self._map.values()

    def __repr__(self) -> str:
        return f"<LogSegments {len(self._map)}>"

    # ------------------------------------------------------------------------------------------ changes

    def add(self, segment: LogSegment) -> LogSegment | None:
        """Add (or replace) the segment at its base offset; return the one it replaced."""
        return self._map.put(segment.base_offset, segment)

    def remove(self, base_offset: int) -> LogSegment | None:
        return self._map.remove(base_offset)

    def clear(self) -> None:
        self._map.clear()

    # ------------------------------------------------------------------------------------------ lookups

    def get(self, base_offset: int) -> LogSegment | None:
        return self._map.get(base_offset)

    def bases(self) -> list[int]:
        """The base offsets, in order."""
        return list(self._map.keys())

    def first(self) -> LogSegment | None:
        item = self._map.first()
        return item[1] if item else None

    def last(self) -> LogSegment | None:
        item = self._map.last()
        return item[1] if item else None

    def end_mark(self, empty: int) -> int | tuple[int, int]:
        """The log end offset (``empty`` without segments) when it is known without reading a segment,
        else what it follows from: the last segment's base and size (a refresh compares these, so that
        a segment deleted since the open is not read for an end nobody asked for)."""
        last = self.last()
        if last is None or last.size == 0:
            return empty if last is None else last.base_offset
        return last.next_offset if last.tail_known else (last.base_offset, last.size)

    @property
    def active(self) -> LogSegment | None:
        """The last segment: where appends go."""
        return self.last()

    def floor(self, offset: int) -> LogSegment | None:
        """The segment whose range may hold ``offset``: the last one with base offset <= it."""
        item = self._map.floor(offset)
        return item[1] if item else None

    def lower(self, base_offset: int) -> LogSegment | None:
        """The segment before the one at ``base_offset``."""
        item = self._map.lower(base_offset)
        return item[1] if item else None

    def higher(self, base_offset: int) -> LogSegment | None:
        """The segment after the one at ``base_offset``."""
        item = self._map.higher(base_offset)
        return item[1] if item else None

    def upper(self, base_offset: int) -> int | None:
        """The base offset of the segment after the one at ``base_offset``: no offset of that one may
        reach it (None for the last segment)."""
        item = self._map.higher(base_offset)
        return item[0] if item else None

    def is_sealed(self, base_offset: int) -> bool:
        """Whether the segment at ``base_offset`` is sealed: a later segment follows it (:func:`is_sealed`)."""
        return is_sealed(self.upper(base_offset))

    def find(self, offset: int, *, nowait: bool = False) -> tuple[LogSegment, BatchView] | None:
        """The segment and batch a lookup of ``offset`` finds: the floor segment's first batch whose
        last offset reaches it, or, past a gap at the end of that segment, the next segment's; judged
        between its neighbours (:meth:`LogSegment.find`). None when neither holds one."""
        segment = self.floor(offset)
        if segment is None:
            return None
        view = segment.find(offset, nowait=nowait, upper=self.upper(segment.base_offset))
        if view is None:  # in a gap at the end of the segment: the next one may start with it
            segment = self.higher(segment.base_offset)
            view = segment.find(offset, nowait=nowait, upper=self.upper(segment.base_offset)) if segment else None
        return None if view is None or segment is None else (segment, view)

    def from_offset(self, offset: int) -> Iterator[LogSegment]:
        """The segment that may hold ``offset`` (or the first, when ``offset`` is below it) and all after it."""
        item = self._map.floor(offset)
        return self._map.values(item[0] if item else None)

    def values(self, from_base: int | None = None, to_base: int | None = None) -> Iterator[LogSegment]:
        """Segments with ``from_base <= base offset < to_base`` (either bound may be None), in order."""
        return self._map.values(from_base, to_base, to_inclusive=False)

    def after(self, base_offset: int) -> Iterator[LogSegment]:
        """Segments whose base offset is above ``base_offset``."""
        return self._map.values(base_offset, from_inclusive=False)
