"""The layouts of ``by-offset/<first>-<last>.jsonl`` and ``by-time/<ts1>..<ts2>.jsonl``: a range's pieces.

A range is a :class:`~.layout.Layout` of the batches between its bounds, built on lookup and
extended while it still reaches the log end. Where a segment's own layout (``records.jsonl``'s) is
already built, the range takes its pieces from it instead of reading the segment again.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...errors import CorruptRecordError
from ...storage.segment import LogSegment
from ...storage.segments import is_sealed
from ...storage.validation import in_order
from . import layout as _layout  # GROUP_BYTES read at call time (tests make pieces smaller)
from .layout import Layout, SegmentLayout
from .render import Filter, Renderer, disk_error, header_skips, unreadable

if TYPE_CHECKING:
    from ...storage.log import Log

__all__ = ["RangeLayout"]


class _NextPiece:
    """Whole contiguous batches of one segment gathered into the next piece: their bytes of log and
    the bytes their records render to."""

    __slots__ = ("base", "position", "size", "length", "last_offset")

    def __init__(self, base: int, position: int) -> None:
        self.base = base
        self.position = position
        self.size = 0
        self.length = 0
        self.last_offset = -1

    def add(self, size: int, length: int, last_offset: int) -> None:
        self.size += size
        self.length += length
        self.last_offset = last_offset



class RangeLayout(Layout):
    """A by-offset or by-time range: pieces of the batches between its bounds, built on lookup.

    ``next_offset`` is where the next :meth:`extend` continues; ``complete`` once the range can no
    longer grow (an offset range whose last offset was reached, an empty time range).

    A by-time range ``ts1..ts2`` holds every record with ``ts1 <= timestamp < ts2``, in offset order.
    It starts at Kafka's ``offsetsForTimes(ts1)`` (the first record with a timestamp >= ts1: every
    record before it is older than ts1), and has no end offset: under CreateTime a record older than
    ts2 may follow any number of newer ones, and may still be appended. So it reaches the log end and
    keeps growing. What that costs: sizing it decodes every batch from its start to the log end,
    except those that cannot hold a record >= ts1 (whole sealed segments by their largest timestamp,
    v2 batches by their header's), once per range node; reads then decode only the pieces that hold
    records of the range.
    """

    __slots__ = ("next_offset", "complete", "started", "piece_segments", "_segment")

    def __init__(self, flt: Filter, renderer: Renderer | None = None) -> None:
        super().__init__(flt, renderer)
        self.next_offset = flt.lo if flt.lo is not None else 0
        self.complete = False
        self.started = flt.ts_lo is None  # a by-time range finds its first offset on the first extend
        #: the segment each piece was laid out from: after a compaction swap another one holds its base
        self.piece_segments: list[LogSegment] = []
        self._segment: LogSegment | None = None  # the segment being laid out (set before its pieces are added)

    def segment_at(self, i: int) -> LogSegment | None:
        # a reader may see a piece an instant before its segment is listed (add appends it after)
        segments = self.piece_segments
        return segments[i] if i < len(segments) else None

    def add(self, base: int, position: int, size: int, length: int, last_offset: int,
            bad: CorruptRecordError | None = None) -> None:
        count = len(self.ends)
        super().add(base, position, size, length, last_offset, bad)
        if len(self.ends) > count:
            assert self._segment is not None  # extend names the segment before it adds its pieces
            self.piece_segments.append(self._segment)

    def extend(
        self,
        log: Log,
        renderer: Renderer,
        layout_of: Callable[[int], SegmentLayout | None],
    ) -> None:
        """Add the batches from ``next_offset`` up to the log end (or the range's end).

        ``layout_of(base)`` returns a segment's layout when it is already built (with some pieces):
        its pieces wholly inside an offset range are taken as they are, so a range over laid-out
        segments costs two renders (its ends), not one per batch.
        """
        with self.lock:
            if self.complete:
                return
            flt = self.filter
            if not self.started:
                assert flt.ts_lo is not None  # only a by-time range starts unstarted
                found = log.offset_for_timestamp(flt.ts_lo)
                self.next_offset = found[0] if found is not None else log.log_end_offset
                self.started = True
            start = max(self.next_offset, log.log_start_offset)
            if flt.hi is not None and start > flt.hi:
                self.complete = True
                return
            if start >= log.log_end_offset:
                return
            floor = log.segments.floor(start)
            for segment in log.segments.from_offset(start):
                base = segment.base_offset
                self._segment = segment
                if flt.hi is not None and base > flt.hi:
                    break
                first_segment = segment is floor
                upper = log.segments.upper(base)
                if (
                    flt.ts_lo is not None
                    and is_sealed(upper)
                    and segment.size
                    and segment.max_timestamp < flt.ts_lo
                    and segment.max_timestamp_sure
                    and segment.ends_whole()
                ):
                    # a sealed segment whose largest timestamp is below the range: nothing to read (one
                    # whose end is torn is read: its torn batch is a bad piece, as offset_for_timestamp says)
                    self.next_offset = max(self.next_offset, segment.next_offset)
                elif not self._from_layout(segment, layout_of, renderer, start):
                    self._scan(log, segment, upper, renderer, start if first_segment else None)
                if self.complete:
                    return
                start = max(start, self.next_offset)
            if flt.hi is not None and self.next_offset > flt.hi:
                self.complete = True

    def _from_layout(
        self, segment: LogSegment, layout_of: Callable[[int], SegmentLayout | None], renderer: Renderer, start: int
    ) -> bool:
        """Take this segment's pieces from its built layout; False when that cannot be done."""
        flt = self.filter
        if flt.ts_lo is not None or flt.ts_hi is not None:
            return False
        layout = layout_of(segment.base_offset)
        if layout is None or layout.renderer is not None and layout.renderer is not renderer:
            return False  # (none yet, or laid out with another decoder: its lengths are not this range's)
        count = len(layout)
        if layout.segment is not segment or not layout.current() or count != len(layout):
            return False  # (laid out from a segment that compaction swapped out since, or not whole)
        lo = flt.lo if flt.lo is not None else 0
        hi = flt.hi
        first = bisect_left(layout.last_offsets, start, 0, count)
        if first < count:
            first_possible = layout.last_offsets[first - 1] + 1 if first else segment.base_offset
            if first_possible < start and start > lo:
                return False  # the piece began in an earlier extend: only a scan can start mid-piece
        for i in range(first, count):
            first_possible = layout.last_offsets[i - 1] + 1 if i else segment.base_offset
            last = layout.last_offsets[i]
            position, size = layout.positions[i], layout.sizes[i]
            bad = layout.bad.get(i)
            if bad is not None:
                self.add(segment.base_offset, position, size, 1, last, bad)
            elif first_possible >= max(lo, layout.lo) and (hi is None or last <= hi):
                self.add(segment.base_offset, position, size, layout.ends[i] - layout.start(i), last)
            else:
                self._render(segment, renderer, position, size, last)
            self.next_offset = last + 1
            if hi is not None and last >= hi:
                self.complete = True
                return True
        self.next_offset = max(self.next_offset, segment.next_offset)
        return True

    def _render(self, segment: LogSegment, renderer: Renderer, position: int, size: int, last: int) -> None:
        try:
            data = renderer.render(segment, position, size, self.filter)
        except CorruptRecordError as exc:
            renderer.on_corrupt(exc)
            self.add(segment.base_offset, position, size, 1, last, exc)
            return
        self.add(segment.base_offset, position, size, len(data), last)

    def _scan(self, log: Log, segment: LogSegment, upper: int | None, renderer: Renderer, start: int | None) -> None:
        """Gather this segment's batches from the one holding ``start`` (None: the first) into pieces;
        ``upper``: the next segment's base offset (None: it is the last segment).

        A v2 batch whose header shows no record can reach a by-time range's lower bound is not decoded
        (it ends the current piece instead: a piece is a run of contiguous batches)."""
        flt = self.filter
        base = segment.base_offset
        file = str(segment.log_path)
        run: _NextPiece | None = None

        def close() -> None:
            if run is None or not run.size:
                return
            self.add(base, run.position, run.size, run.length, run.last_offset)
            self.next_offset = max(self.next_offset, run.last_offset + 1)

        try:  # a sealed segment's torn batch raises (SPEC §3: damage, never a quiet gap)
            views = segment.read_from(start, upper=upper, check_passed=True) if start is not None else segment.batches(
                0, sealed=is_sealed(upper))
            # offsets out of order are damage (SPEC §4): such a batch is a bad piece, as one that does not
            # decode (read_from starts at the batch holding start: nothing before it is known)
            for view, order in in_order(views, next_offset=None, upper=upper,
                                        segment_base=base):
                h = view.header
                if flt.hi is not None and h.base_offset > flt.hi and h.magic == 2 and order is None:
                    break
                if start is not None and h.last_offset < start and order is None:
                    continue
                if header_skips(h, flt) and order is None and segment.damage_of(view) is None:
                    # (a damaged batch is not passed over by its maxTimestamp: its damage is said below)
                    close()
                    run = None
                    self.next_offset = max(self.next_offset, h.last_offset + 1)
                    continue
                try:
                    if order is not None:
                        raise CorruptRecordError(order, view.position, file)
                    n = renderer.length(view, file, flt)
                except CorruptRecordError as exc:
                    close()
                    run = None
                    renderer.on_corrupt(exc)
                    self.add(base, view.position, h.size, 1, h.last_offset, exc)
                    if order is None:  # offsets out of order say nothing of where the range goes on
                        self.next_offset = max(self.next_offset, h.last_offset + 1)
                    continue
                if run is None:
                    run = _NextPiece(base, view.position)
                run.add(h.size, n, h.last_offset)
                if run.size >= _layout.GROUP_BYTES or (flt.hi is not None and h.last_offset >= flt.hi):
                    close()
                    run = None
                if flt.hi is not None and h.last_offset >= flt.hi:
                    self.complete = True
                    return
            close()
        except (CorruptRecordError, OSError) as exc:
            # a header that does not parse, or a disk that will not give the bytes: the rest of this
            # segment cannot be walked
            if isinstance(exc, OSError):
                if not disk_error(exc):
                    raise
                exc = unreadable(exc, file, None)
            close()
            renderer.on_corrupt(exc)
            where = exc.position if exc.position is not None else 0
            self.add(base, where, 1, 1, self.next_offset, exc)
            higher = log.segments.higher(base)
            if higher is None:
                self.complete = True  # nothing can be found after it
            else:
                self.next_offset = max(self.next_offset, higher.base_offset)
