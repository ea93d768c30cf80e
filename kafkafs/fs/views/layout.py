"""Layouts: which bytes of a JSON-lines view each piece of log renders to, and how a segment is laid out.

The words of the views (one meaning each, across ``fs/``):

*piece*
    A run of whole, contiguous batches of one segment, up to about :data:`GROUP_BYTES` of log, and the
    bytes its records render to (its filter's records only). The unit a read renders and caches.
*layout*
    The pieces of one view in order, with where each one's bytes end (:class:`Layout`): five numbers
    per piece in compact arrays (segment base offset, file position, size, last offset, cumulative
    rendered end), so a ``read(offset, size)`` finds its first piece by binary search and decodes only
    the batches it covers. ``records.jsonl`` is one :class:`SegmentLayout` per segment laid end to end
    (a :class:`~.partition.Composition`); a by-offset or by-time range is one
    :class:`~.ranges.RangeLayout`.
*span*
    Contiguous whole batches of one segment handled in one pass: one read of the segment, and one call
    of the kernel's ``render_span_jsonl`` for the batches it takes. Sizing lays a span out into pieces
    (:func:`lay_out_span`); reading renders a span of pieces from one read (:mod:`.reading`).
*composition*, *part*
    ``records.jsonl`` at one moment: its segments' layouts end to end (:mod:`.partition`), each one a
    part (:class:`~.reading.Part`: a layout's first ``count`` pieces placed at a start byte).
*generation*, *stream*
    One inode of ``records.jsonl``: an append-only stream of compositions (:mod:`.streams`).

Sizing a segment lays it out: the kernel walks every whole uncompressed v2 batch of a chunk of
:data:`CHUNK_BYTES` (:func:`lay_out_span`, no Python per batch, the GIL released, so a large segment is
sized on several threads at once, cut at offset-index positions by :func:`split_points`); the batches it
does not take (compressed, legacy, damaged) are laid out one by one, which also says what is wrong. A
sealed segment's layout never changes and is kept for the life of the mount (and in the layout cache,
:mod:`.layoutcache`); the active segment's grows as records arrive.

A batch that does not decode keeps a placeholder piece (its raw size) marked bad: reads that touch it
fail (EIO upstairs) and the rest of the view stays readable. So does a batch whose offsets are out of
order (SPEC §4: below the end of the batch before it, or running to the base offset of the batch after
it, or the next segment's): each batch is laid out once the base offset after it is seen (the kernel's
span looks 8 bytes past a batch; the per-batch path uses
:func:`~kafkafs.storage.validation.in_order`), or when it is the last of what the segment holds. A
batch appended later cannot make one laid out before it bad: appends are judged when they arrive.
"""

from __future__ import annotations

import threading
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from typing import NamedTuple

from ...errors import CorruptRecordError, UninflatableBatch
from ...format.jsonspan import cut_off
from ...format.jsonview import render_span_jsonl
from ...storage.segment import LogSegment
from ...storage.segments import is_sealed
from ...storage.validation import in_order
from .layoutcache import CachedLayout, LayoutKey
from .render import NO_FILTER, Filter, Renderer, UnreadableError, disk_error, read_segment, unreadable

__all__ = [
    "Layout", "SegmentLayout", "Piece", "SpanPieces", "lay_out_span", "split_points", "GROUP_BYTES", "CHUNK_BYTES",
]


#: A piece covers whole batches up to about this many bytes of log: the memory a layout takes grows with
#: the size of the segment, not with its number of batches (one-record batches are common).
GROUP_BYTES = 64 * 1024


class Layout:
    """The pieces of one view in order: piece ``i`` is the run of whole batches in ``sizes[i]`` bytes at
    ``positions[i]`` of segment ``bases[i]``, ending with offset ``last_offsets[i]``, and renders to bytes
    ``[ends[i-1], ends[i])``. Append-only: a reader holding a count sees a fixed prefix.

    ``renderer``: what it was laid out with, and so what renders its pieces (None: the partition's
    :class:`~.reading.PieceRenderer`'s). A partition whose decoder changes (a schema registered while the
    mount runs) lays out new layouts with the new renderer, and a reader still holding an old layout
    gets its pieces rendered as they were laid out: the lengths it was shown."""

    __slots__ = ("filter", "bases", "positions", "sizes", "ends", "last_offsets", "bad", "lock", "renderer")

    def __init__(self, flt: Filter = NO_FILTER, renderer: Renderer | None = None) -> None:
        self.filter = flt
        self.renderer = renderer
        self.bases = array("q")
        self.positions = array("q")
        self.sizes = array("q")
        self.ends = array("q")
        self.last_offsets = array("q")
        self.bad: dict[int, CorruptRecordError] = {}
        self.lock = threading.RLock()

    def __len__(self) -> int:
        return len(self.ends)

    def total(self, count: int | None = None) -> int:
        n = len(self.ends) if count is None else count
        return self.ends[n - 1] if n else 0

    def add(
        self,
        base: int,
        position: int,
        size: int,
        length: int,
        last_offset: int,
        bad: CorruptRecordError | None = None,
    ) -> None:
        if length <= 0:
            return
        if bad is not None:
            self.bad[len(self.ends)] = bad
        self.bases.append(base)
        self.positions.append(position)
        self.sizes.append(size)
        self.last_offsets.append(last_offset)
        self.ends.append(self.total() + length)

    def start(self, i: int) -> int:
        return self.ends[i - 1] if i else 0

    def piece_at(self, rel: int, count: int) -> int:
        """The piece holding byte ``rel`` (``count`` if past the end)."""
        return bisect_right(self.ends, rel, 0, count)

    def segment_at(self, i: int) -> LogSegment | None:
        """The segment piece ``i`` was laid out from, when the layout knows it (None: the log's segment
        at its base)."""
        return None

    def first_offset(self) -> int:
        """The lowest offset this layout may hold, as far as it knows (-1 when it holds nothing)."""
        return self.last_offsets[0] if len(self.last_offsets) else -1

    def memory(self) -> int:
        """Bytes held by the arrays (for the curious and the tests)."""
        return sum(
            a.itemsize * len(a)
            for a in (self.bases, self.positions, self.sizes, self.ends, self.last_offsets)
        )


class SegmentLayout(Layout):
    """The part of ``records.jsonl`` that one segment renders to (records from ``lo`` on).

    Sized by the length-only pass (one batch at a time, nothing rendered when the format layer can
    count); a layout that covers the whole segment can be kept in the layout cache
    (:meth:`cached` / :meth:`restore`).
    """

    __slots__ = ("segment", "upper", "scanned", "broken", "stored_key", "next_offset")

    def __init__(
        self, segment: LogSegment, lo: int, upper: int | None = None, renderer: Renderer | None = None
    ) -> None:
        super().__init__(Filter(lo=lo) if lo > segment.base_offset else NO_FILTER, renderer)
        self.segment = segment
        self.upper = upper  # the next segment's base offset (None: none, or not known)
        self.scanned = 0  # file position up to which every batch belongs to a piece
        self.broken = False  # a header that does not parse: nothing after it can be found
        self.stored_key: LayoutKey | None = None  # the layout cache key it was last stored or loaded as
        #: one past the last offset of the batch that ends at ``scanned`` (None: no batch laid out yet)
        self.next_offset: int | None = None

    def segment_at(self, i: int) -> LogSegment:
        """A segment's own layout reads the segment it was laid out from, even after compaction swapped
        another in at its base (the old one stays readable until its files go)."""
        return self.segment

    @property
    def lo(self) -> int:
        return self.filter.lo if self.filter.lo is not None else self.segment.base_offset

    def first_offset(self) -> int:
        return self.lo

    def current(self) -> bool:
        """Whether every byte of the segment (as far as its size is known) has been laid out."""
        return self.broken or self.scanned >= self.segment.size

    def cacheable(self) -> bool:
        """Whether this layout may go to the layout cache: whole, undamaged, unfiltered."""
        return self.filter is NO_FILTER and not self.broken and not self.bad and self.scanned >= self.segment.size

    def uses_spans(self, renderer: Renderer) -> bool:
        """Whether the kernel's spans (:func:`lay_out_span`) may lay out this segment: the rule for
        :meth:`extend` and for cutting a segment into parts sized on several threads. Only a layout of
        the whole segment (unfiltered) of a partition without a decoder: a span renders every record
        of its batches with the generic rendering."""
        return self.filter is NO_FILTER and renderer.decoder is None

    def cached(self) -> CachedLayout:
        with self.lock:
            return CachedLayout(
                array("q", self.positions), array("q", self.sizes), array("q", self.last_offsets),
                array("q", self.ends), self.scanned,
            )

    def restore(self, found: CachedLayout) -> None:
        """Take the pieces of a (verified) cache entry instead of sizing the segment."""
        with self.lock:
            count = len(found.ends)
            self.bases = array("q", [self.segment.base_offset]) * count
            self.positions = found.positions
            self.sizes = found.sizes
            self.last_offsets = found.last_offsets
            self.ends = found.ends
            self.scanned = found.scanned
            self.bad = {}
            self.next_offset = found.last_offsets[-1] + 1 if count else None

    def extend(self, renderer: Renderer, on_piece: Callable[[int], None] | None = None) -> int:
        """Lay out the batches written since the last call (all of them the first time); returns the
        bytes of log laid out. ``on_piece(nbytes)`` hears of each piece laid out (progress)."""
        with self.lock:
            size = self.segment.size
            start = self.scanned
            spans = self.uses_spans(renderer)
            while not self.broken and self.scanned < size:
                before = self.scanned
                try:
                    if spans:  # the kernel walks the batches it takes; the loop below does one run of the others
                        self.take(lay_out_span(renderer, self.segment, self.scanned, size, GROUP_BYTES, on_piece,
                                               min_offset=self._min_offset(), upper=self.upper))
                        if self.scanned >= size:
                            break
                    self._extend_batches(renderer, on_piece, size, spans)
                except UnreadableError as exc:  # the disk would not give the rest: one bad piece for it
                    self._broken_from(renderer, exc, size)
                    break
                if self.scanned == before:
                    break  # a batch still being written at the end: laid out when it is whole
            return max(self.scanned - start, 0)

    def _broken_from(self, renderer: Renderer, exc: CorruptRecordError, size: int) -> None:
        """Nothing from ``scanned`` to ``size`` can be laid out: one bad piece holds it (reads of it are
        EIO, the pieces before and the segments after stay readable)."""
        renderer.on_corrupt(exc)
        last = self.last_offsets[-1] if len(self.last_offsets) else self.segment.base_offset
        self.add(self.segment.base_offset, self.scanned, max(size - self.scanned, 1), 1, last, exc)
        self.broken = True

    def _min_offset(self) -> int:
        """The least base offset the next batch may have: past the batch before it, in the segment."""
        return self.segment.base_offset if self.next_offset is None else self.next_offset

    def take(self, found: SpanPieces) -> None:
        """Add the pieces of a span laid out from ``scanned`` on (by :func:`lay_out_span`)."""
        base = self.segment.base_offset
        for piece in found.pieces:
            self.add(base, piece.position, piece.size, piece.length, piece.last_offset)
            self.next_offset = piece.last_offset + 1
        self.scanned = max(self.scanned, found.stop)

    def _extend_batches(
        self, renderer: Renderer, on_piece: Callable[[int], None] | None, size: int, until_plain: bool
    ) -> None:
        """Lay out batches one by one from ``scanned``; with ``until_plain``, stop before the first
        uncompressed v2 batch after the first one (the kernel's span takes those)."""
        segment = self.segment
        base = segment.base_offset
        file = str(segment.log_path)
        flt = self.filter
        run_pos = run_size = run_len = 0
        run_last = -1

        def close() -> None:
            if run_size:
                self.add(base, run_pos, run_size, run_len, run_last)
                self.scanned = run_pos + run_size
                if on_piece is not None:
                    on_piece(run_size)

        try:
            first = True
            # each batch judged between its neighbours: the last one of what the segment holds against
            # the next segment's base (when there is one; an active segment's last batch stands alone)
            # a sealed segment (one follows it) ends with a whole batch: anything else is a torn batch,
            # damage (a bad piece), never a quiet end as the active segment's batch still being written
            views = segment.batches(self.scanned, size, sealed=is_sealed(self.upper))
            for view, order in in_order(views, next_offset=self._min_offset(),
                                        upper=self.upper, segment_base=base):
                h = view.header
                if until_plain and not first and h.magic == 2 and not h.attributes & 0x07:
                    break
                first = False
                expected = self._min_offset()  # (a legacy wrapper's header lacks its first offset: this)
                self.next_offset = h.next_offset
                try:
                    if order is not None:
                        raise CorruptRecordError(order, view.position, file)
                    n = renderer.length(view, file, flt)
                except CorruptRecordError as exc:
                    if isinstance(exc, UninflatableBatch):  # its offsets as verify and consume say them
                        exc = exc.starting_at(min(expected, h.last_offset))
                    close()
                    run_size = 0
                    renderer.on_corrupt(exc)
                    self.add(base, view.position, h.size, h.size, h.last_offset, exc)
                    self.scanned = view.position + h.size
                    continue
                if not run_size:
                    run_pos, run_len = view.position, 0
                run_size += h.size
                run_len += n
                run_last = h.last_offset
                if run_size >= GROUP_BYTES:
                    close()
                    run_size = 0
            close()
        except CorruptRecordError as exc:
            # The header at the end of the batches read does not parse: the rest of this segment
            # cannot be walked. Keep what was read, mark the rest.
            close()
            self._broken_from(renderer, exc, size)
        except OSError as exc:  # the disk would not give them: the same, said once for the file
            if not disk_error(exc):
                raise
            close()
            self._broken_from(renderer, unreadable(exc, file, self.scanned), size)


# ---------------------------------------------------------------------------------------------- spans

#: Bytes of log read and handed to the kernel per call while sizing.
CHUNK_BYTES = 1 << 20


class Piece(NamedTuple):
    """One piece as it is laid out: whole batches in ``size`` bytes at ``position``, rendering to
    ``length`` bytes, the last of them ending with offset ``last_offset``."""

    position: int
    size: int
    length: int
    last_offset: int


class SpanPieces(NamedTuple):
    """What :func:`lay_out_span` laid out, and where it stopped (``stop == end``: everything)."""

    pieces: list[Piece]
    stop: int


def lay_out_span(
    renderer: Renderer,
    segment: LogSegment,
    start: int,
    end: int,
    group_bytes: int,
    on_piece: Callable[[int], None] | None = None,
    *,
    min_offset: int | None = None,
    upper: int | None = None,
) -> SpanPieces:
    """Lay out the batches between byte ``start`` (a batch boundary) and ``end`` of ``segment`` in pieces
    of about ``group_bytes`` of log, until the first batch the kernel does not take; ``on_piece(nbytes)``
    hears of each piece (progress). Partitions with a decoder never come here. Safe from any thread.

    Each batch is taken once the base offset of the one after it is seen (8 bytes past each read are
    read too, when the segment holds them); the last batch of the segment when it ends below ``upper``,
    the next segment's base offset (None: there is none). ``min_offset``: the least base offset of the
    first batch (None: not known, a part of a segment sized on its own thread)."""
    pieces: list[Piece] = []
    pos = start
    want = CHUNK_BYTES
    size = segment.size
    while pos < end:
        n = min(want, end - pos)
        peek = 8 if pos + n < size else 0  # the base offset after the chunk, where the segment holds one
        buf = read_segment(segment, pos, n + peek)
        if len(buf) < n + peek:
            peek = max(len(buf) - n, 0)
            n = len(buf) - peek
        if not n:
            break
        result = render_span_jsonl(renderer.topic, renderer.partition, buf, renderer.mode, lengths=True,
                                   min_offset=min_offset, final=pos + n >= size, upper=upper)
        ends, lines, lasts = result.batch_ends, result.line_ends, result.last_offsets
        k, prev_end, prev_line = 0, 0, 0
        while k < len(ends):
            j = min(bisect_left(ends, prev_end + group_bytes, k), len(ends) - 1)
            piece = Piece(pos + prev_end, ends[j] - prev_end, lines[j] - prev_line, lasts[j])
            pieces.append(piece)
            if on_piece is not None:
                on_piece(piece.size)
            prev_end, prev_line, k = ends[j], lines[j], j + 1
        pos += result.consumed
        if len(ends):
            min_offset = lasts[-1] + 1
        if result.consumed < n:
            need = cut_off(memoryview(buf)[:n], result.consumed)
            if not need or (result.consumed == 0 and want >= need):
                break  # a batch it does not take, or a partial one at the end: the per-batch path decides
            want = max(CHUNK_BYTES, need)
        else:
            want = CHUNK_BYTES
    return SpanPieces(pieces, pos)


def split_points(segment: LogSegment, parts: int) -> list[int]:
    """Up to ``parts - 1`` batch boundaries that cut the segment into parts of similar size, from its
    offset index (sorted, without repeats, none at 0)."""
    base = segment.base_offset
    count = segment.next_offset - base
    points = set()
    for k in range(1, parts):
        position = segment.position_of(base + count * k // parts)
        if 0 < position < segment.size:
            points.add(position)
    return sorted(points)
