"""Byte layouts of the JSON-lines views: which batch renders to which bytes.

A view (``records.jsonl``, a by-offset or by-time range) is a sequence of *pieces*, each a run of
whole batches of one segment (up to :data:`GROUP_BYTES` of log). Sizing a view renders every piece
once and keeps five numbers per piece in compact arrays (segment base offset, file position, size,
last offset, cumulative rendered end); a ``read(offset, size)`` then finds its first piece by binary
search and decodes only the batches it covers.

``records.jsonl`` is one :class:`SegmentLayout` per segment, laid end to end: a sealed segment's layout
never changes and is kept for the life of the mount, the active segment's grows as records arrive.
A range is one :class:`~kafkafs.fs.rangelayout.RangeLayout` (its own module), built on lookup and
extended while it still reaches the end.

A batch that does not decode keeps a placeholder piece (its raw size) marked bad: reads that touch
it fail (EIO upstairs) and the rest of the view stays readable.
"""

from __future__ import annotations

import threading
from array import array
from bisect import bisect_right
from collections.abc import Callable

from ..errors import CorruptRecordError
from ..storage.records import BatchView
from ..storage.segment import LogSegment
from .pieceread import Part, read_cached, read_parts
from .render import NO_FILTER, Filter, batch_length, render_raw
from .sizecache import CachedLayout
from .spans import SpanRuns, span_runs

__all__ = ["Pieces", "SegmentLayout", "Part", "Renderer", "read_parts", "read_cached", "GROUP_BYTES"]


#: A piece covers whole batches up to about this many bytes of log: the memory a layout takes grows with
#: the size of the segment, not with its number of batches (one-record batches are common).
GROUP_BYTES = 64 * 1024


class Renderer:
    """What rendering needs besides the batches: the partition's name, the values mode, the partition's
    decoder (None for ordinary topics), and where to report damage (once per place).

    Immutable once made: shared by every thread that sizes or reads the partition's views."""

    def __init__(
        self,
        topic: str,
        partition: int,
        mode: str,
        on_corrupt: Callable[[CorruptRecordError], None],
        decoder: object | None = None,
    ):
        self.topic = topic
        self.partition = partition
        self.mode = mode
        self.on_corrupt = on_corrupt
        self.decoder = decoder
        #: what names the decoder in the size cache's keys (its rendering changes the sizes)
        self.decoder_id = decoder_identity(decoder)

    def render_raw(self, segment: LogSegment, position: int, size: int, flt: Filter) -> bytes:
        """The records of the whole batches in ``size`` bytes at ``position`` that pass ``flt``."""
        return render_raw(self.topic, self.partition, segment, position, size, flt, self.mode, self.decoder)

    def length(self, view: BatchView, file: str, flt: Filter) -> int:
        """Bytes that one batch's records passing ``flt`` render to (without rendering them when the
        format layer can count)."""
        return batch_length(self.topic, self.partition, view, file, flt, self.mode, self.decoder)


def decoder_identity(decoder: object | None) -> str | None:
    if decoder is None:
        return None
    ident = getattr(decoder, "identity", None)
    if isinstance(ident, str):
        return ident
    cls = type(decoder)
    return f"{cls.__module__}.{cls.__qualname__}"


class Pieces:
    """Pieces of one view in order: piece ``i`` is the run of whole batches in ``sizes[i]`` bytes at
    ``positions[i]`` of segment ``bases[i]``, ending with offset ``last_offsets[i]``, and renders to bytes
    ``[ends[i-1], ends[i])``. Append-only: a reader holding a count sees a fixed prefix."""

    __slots__ = ("filter", "bases", "positions", "sizes", "ends", "last_offsets", "bad", "lock")

    def __init__(self, flt: Filter = NO_FILTER) -> None:
        self.filter = flt
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
        """The segment piece ``i`` was laid out from, when the pieces know it (None: the log's segment
        at its base)."""
        return None

    def memory(self) -> int:
        """Bytes held by the arrays (for the curious and the tests)."""
        return sum(
            a.itemsize * len(a)
            for a in (self.bases, self.positions, self.sizes, self.ends, self.last_offsets)
        )


class SegmentLayout(Pieces):
    """The part of ``records.jsonl`` that one segment renders to (records from ``lo`` on).

    Sized by the length-only pass (one batch at a time, nothing rendered when the format layer can
    count); a layout that covers the whole segment can be kept in the size cache
    (:meth:`cached` / :meth:`restore`).
    """

    __slots__ = ("segment", "scanned", "broken", "stored_key")

    def __init__(self, segment: LogSegment, lo: int) -> None:
        super().__init__(Filter(lo=lo) if lo > segment.base_offset else NO_FILTER)
        self.segment = segment
        self.scanned = 0  # file position up to which every batch belongs to a piece
        self.broken = False  # a header that does not parse: nothing after it can be found
        self.stored_key: object | None = None  # the size-cache key this layout was last stored or loaded as

    def segment_at(self, i: int) -> LogSegment:
        """A segment's own layout reads the segment it was laid out from, even after compaction swapped
        another in at its base (the old one stays readable until its files go)."""
        return self.segment

    @property
    def lo(self) -> int:
        return self.filter.lo if self.filter.lo is not None else self.segment.base_offset

    def current(self) -> bool:
        """Whether every byte of the segment (as far as its size is known) has been laid out."""
        return self.broken or self.scanned >= self.segment.size

    def cacheable(self) -> bool:
        """Whether this layout may go to the size cache: whole, undamaged, unfiltered."""
        return self.filter is NO_FILTER and not self.broken and not self.bad and self.scanned >= self.segment.size

    def uses_spans(self, renderer: Renderer) -> bool:
        """Whether the kernel's spans (:mod:`kafkafs.fs.spans`) may lay out this segment: the rule for
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

    def extend(self, renderer: Renderer, on_piece: Callable[[int], None] | None = None) -> int:
        """Lay out the batches written since the last call (all of them the first time); returns the
        bytes of log laid out. ``on_piece(nbytes)`` hears of each piece laid out (progress)."""
        with self.lock:
            size = self.segment.size
            start = self.scanned
            spans = self.uses_spans(renderer)
            while not self.broken and self.scanned < size:
                before = self.scanned
                if spans:  # the kernel walks the batches it takes; the loop below does one run of the others
                    self.take(span_runs(renderer, self.segment, self.scanned, size, GROUP_BYTES, on_piece))
                    if self.scanned >= size:
                        break
                self._extend_batches(renderer, on_piece, size, spans)
                if self.scanned == before:
                    break  # a batch still being written at the end: laid out when it is whole
            return max(self.scanned - start, 0)

    def take(self, found: SpanRuns) -> None:
        """Add runs laid out from ``scanned`` on (by :func:`~kafkafs.fs.spans.span_runs`)."""
        base = self.segment.base_offset
        for run in found.runs:
            self.add(base, run.position, run.size, run.length, run.last_offset)
        self.scanned = max(self.scanned, found.stop)

    def _extend_batches(self, renderer: Renderer, on_piece, size: int, until_plain: bool) -> None:
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
            for view in segment.batches(self.scanned, size):
                h = view.header
                if until_plain and not first and h.magic == 2 and not h.attributes & 0x07:
                    break
                first = False
                try:
                    n = renderer.length(view, file, flt)
                except CorruptRecordError as exc:
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
            renderer.on_corrupt(exc)
            last = self.last_offsets[-1] if len(self.last_offsets) else base
            self.add(base, self.scanned, max(size - self.scanned, 1), 1, last, exc)
            self.broken = True
