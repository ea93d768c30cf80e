"""Reading a view's bytes from its pieces (the words: :mod:`.layout`).

* :func:`read_parts` gives bytes ``offset .. offset+size`` of a view made of parts (:class:`Part`: a
  layout's first pieces placed at a start byte), rendering the pieces it needs through a callback;
  :func:`read_cached` does the same from the pieces an open file's :class:`PieceCache` holds, or says
  it cannot (so the FUSE loop answers reads of rendered bytes itself, without a worker trip).
* :class:`PieceRenderer` renders pieces for reads: a read that needs a piece not rendered yet renders
  the span of pieces after it in the same pass (one read of the segment, up to
  :data:`READ_AHEAD_BYTES` of log) and keeps them in the open file's :class:`PieceCache`; the spans
  after the reader (up to :data:`AHEAD_PIECES` pieces) are rendered ahead on a prefill thread. A file
  about to be opened has its start rendered whole instead, at the kernel's pace
  (:meth:`PieceRenderer.render_file_start`, up to :data:`FILE_AHEAD_BYTES`).
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

from ...errors import CorruptRecordError, SegmentClosedError
from ...storage.log import Log
from .layout import Layout
from .piececache import (
    BLOCK_PIECES,
    KEPT,
    NOT_RENDERING,
    RUN_BUFFERS,
    SPAN_PIECES,
    Ahead,
    Bytes,
    PieceCache,
)
from .render import Renderer, SegmentBytes

__all__ = [
    "Bytes", "Part", "read_parts", "read_cached", "first_missing", "wake_when_rendered", "PieceCache", "PieceRenderer",
    "READ_AHEAD_BYTES",
]

log = logging.getLogger("kafkafs.fs")

#: A read that needs a piece not rendered yet renders the pieces after it too, up to this many bytes of
#: log (one read of the segment): the reads that follow are answered from memory, on the FUSE loop.
READ_AHEAD_BYTES = 512 * 1024


# ---------------------------------------------------------------------------------------------- parts


class Part(NamedTuple):
    """One layout as a reader sees it: its first ``pieces`` pieces, placed at byte ``start``."""

    layout: Layout
    pieces: int
    start: int


def read_parts(
    parts: Sequence[Part],
    starts: Sequence[int],
    offset: int,
    size: int,
    render: Callable[[Layout, int], Bytes],
    where: Callable[[Layout, int], int | None] | None = None,
    short_at_damage: bool = False,
) -> Bytes:
    """Bytes ``offset .. offset+size`` of the view made of ``parts`` (``starts`` their start bytes).

    ``short_at_damage``: a piece that cannot be rendered (damage, a disk error) after some pieces were
    read ends the bytes before it (whole lines: a short read), and the read that starts at it fails
    (SPEC §3: only the reads that need the damaged bytes fail; review23 R23-14). Only for a file read
    with direct I/O: through the page cache the kernel takes a short read for the end of the file.

    ``render(layout, i)`` returns piece ``i``'s bytes (the caller caches and checks them). ``where(layout,
    i)``: where a piece rendered as a slice of a larger buffer (a span: :class:`PieceCache`) starts in
    it (None: not known); bytes that lie end to end in one buffer are given as a memoryview of it, with
    no copy (a FUSE reply takes any buffer), else they are joined into new bytes. Functions over
    append-only layouts: safe from any thread.
    """
    out: list[Bytes] = []
    # (buffer, where the bytes start in it) while every chunk so far lies end to end in one buffer
    run: tuple[object, int] | None = None
    contiguous = where is not None
    want = size
    k = bisect_right(starts, offset) - 1
    if k < 0:
        k = 0
    pos = offset
    while want > 0 and k < len(parts):
        layout, count, start = parts[k]
        rel = pos - start
        if rel >= layout.total(count):
            k += 1
            continue
        i = layout.piece_at(rel, count)
        while want > 0 and i < count:
            piece_start = layout.start(i)
            try:
                data = render(layout, i)
            except (CorruptRecordError, OSError) as exc:
                if not (short_at_damage and out) or isinstance(exc, BlockingIOError):
                    raise
                return out[0] if len(out) == 1 else b"".join(out)
            lo = rel - piece_start
            chunk = (data if isinstance(data, memoryview) else memoryview(data))[lo : lo + want]  # no copy yet
            if contiguous:
                at = where(layout, i) if where is not None and isinstance(data, memoryview) else None
                if at is None or not isinstance(data, memoryview):
                    contiguous = False
                elif run is None:
                    run = (data.obj, at + lo)
                elif run[0] is not data.obj or run[1] + size - want != at + lo:
                    contiguous = False
            out.append(chunk)
            want -= len(chunk)
            pos += len(chunk)
            rel += len(chunk)
            i += 1
        k += 1
    if contiguous and run is not None and len(out) > 1 and isinstance(run[0], (bytes, bytearray)):
        first = run[1]
        return memoryview(run[0])[first : first + size - want]
    if len(out) == 1:
        return out[0]
    return b"".join(out)


class _NotRendered(Exception):
    pass


def read_cached(parts: Sequence[Part], starts: Sequence[int], offset: int, size: int, cache: PieceCache) -> Bytes | None:
    """:func:`read_parts` from the pieces ``cache`` holds; None if one it needs is missing, or was
    rendered from a segment that retention or compaction removed since (a worker then renders it, or
    says the segment is gone)."""
    k = bisect_right(starts, offset) - 1
    if k >= 0:  # the common case first: the bytes lie in one rendered span, given as a slice of it
        layout, count, start = parts[k]
        rel = offset - start
        if size > 0 and rel + size <= layout.total(count):
            i = layout.piece_at(rel, count)
            j = layout.piece_at(rel + size - 1, count)
            found = cache.span_of(layout, i, j)
            segment = layout.segment_at(i)
            if found is not None and (segment is None or segment.suffix != ".deleted"):
                buffer, at = found
                lo = at + rel - layout.start(i)
                cache.reached(layout, j)
                return memoryview(buffer)[lo : lo + size]
    used: list[tuple[Layout, int]] = []

    def cached(layout: Layout, i: int) -> Bytes:
        data = cache.get((layout, i))
        segment = layout.segment_at(i)
        if data is None or segment is not None and segment.suffix == ".deleted":
            raise _NotRendered
        used[:] = [(layout, i)]
        return data

    try:
        data = read_parts(parts, starts, offset, size, cached, cache.where)
    except _NotRendered:
        return None
    if used:
        cache.reached(*used[0])
    return data


def first_missing(parts: Sequence[Part], starts: Sequence[int], offset: int, size: int,
                  cache: PieceCache) -> tuple[Layout, int] | None:
    """The first piece that bytes ``offset .. offset+size`` of the view need and ``cache`` does not hold
    (None: it holds them all). Renders nothing."""
    k = max(bisect_right(starts, offset) - 1, 0)
    pos, end = offset, offset + size
    while pos < end and k < len(parts):
        layout, count, start = parts[k]
        rel = pos - start
        if rel < layout.total(count):
            i = layout.piece_at(rel, count)
            while i < count and start + layout.start(i) < end:
                if not cache.has((layout, i)):
                    return layout, i
                i += 1
        k += 1
        if k < len(parts):
            pos = max(pos, parts[k].start)
    return None


def wake_when_rendered(parts: Sequence[Part], starts: Sequence[int], offset: int, size: int, cache: PieceCache,
                       wake: Callable[[], object]) -> bool:
    """For the FUSE loop, after :func:`read_cached` said None: True when the first piece the read needs
    that ``cache`` does not hold is being rendered now, and ``wake()`` will be called once that is over
    (or has been called: it is kept now); False: a worker must render it."""
    key = first_missing(parts, starts, offset, size, cache)
    if key is None:
        return False  # a piece of a segment retention removed: the worker's read says what to do
    said = cache.wake_when_rendered(key, wake)
    if said == KEPT:
        wake()
    return said != NOT_RENDERING


# ---------------------------------------------------------------------------------------------- rendering

#: A file about to be opened (:meth:`PieceRenderer.render_file_start`) has up to this many bytes of its start
#: rendered ahead, whole (a partition of a broker's default 1 GiB segments renders far more than this: its
#: first 8 MiB then). Its memory: a few such files a mount (:data:`~kafkafs.fs.tree.partitions.SPARES_KEPT`).
FILE_AHEAD_BYTES = 8 << 20
#: ... in this many kernel calls at most, on as many threads at once (two cores).
FILE_RUNS = 2

#: Threads that render spans for readers (the kernel releases the GIL while it renders, so this overlaps
#: with the FUSE loop answering reads and with the reader): a span at a time, files taking turns; a few
#: more than :data:`RENDERS_AHEAD`, so that a span waiting for the disk holds up no other file.
PREFILL_THREADS = 4
_PREFILL = ThreadPoolExecutor(max_workers=PREFILL_THREADS, thread_name_prefix="kafkafs-prefill")


def _submit(fn: Callable[..., Any], *args: Any) -> None:
    try:
        _PREFILL.submit(fn, *args)
    except RuntimeError:  # the interpreter is shutting down: nothing to render ahead for
        pass


class PieceRenderer:
    """Renders the pieces of one partition's views from its log. Stateless besides what it is given:
    safe from any thread (a cache's claims keep two threads from rendering the same piece).

    Render ahead: every read tells the open file's cache which piece it reached (:meth:`PieceCache.reached`,
    from the FUSE loop as from a worker), and prefill threads render the spans after it, in order,
    up to :data:`RENDERS_AHEAD` at once, until the pieces up to :data:`AHEAD_PIECES` past the reader
    are rendered; so a reader going through the file finds it rendered, or being rendered (the FUSE
    loop then waits for it without a worker), and its requests are answered from memory while the
    next spans render (the kernel releases the GIL). Paced by the reader: a reader that stops, stops it."""

    def __init__(self, renderer: Renderer, log: Log, report: Callable[[CorruptRecordError], None]) -> None:
        #: renders the pieces of a layout that names no renderer of its own (:attr:`.layout.Layout.renderer`)
        self.renderer = renderer
        self.log = log
        self.report = report

    def renderer_of(self, layout: Layout) -> Renderer:
        """What renders ``layout``'s pieces: the renderer it was laid out with (its lengths are that
        renderer's, also after the partition's decoder changed), else this one's."""
        return layout.renderer if layout.renderer is not None else self.renderer

    def render(
        self, layout: Layout, i: int, cache: PieceCache | None = None, pinned: SegmentBytes | None = None
    ) -> Bytes:
        """Piece ``i`` of ``layout`` as bytes, exactly as long as when it was laid out. With a ``cache``,
        the pieces after it are rendered in the same pass (up to :data:`READ_AHEAD_BYTES` of log) and
        kept there, a read that needs a piece another thread is rendering waits for it, and the spans
        after it are rendered ahead, starting while this one renders. ``pinned``: the segment's
        ``.log`` held open by a reader (:mod:`.streams`), read instead of the segment (its files may be
        gone)."""
        if cache is None:
            return self._render_one(layout, i, pinned)
        key = (layout, i)  # the object, not its id: a freed layout's id may be reused
        while True:
            data = cache.get(key)
            if data is None:
                last = cache.claim(layout, i, self.span_end(layout, i))
                if last is not None:
                    break
                data = cache.wait_rendered(key)  # another thread renders it
                if data is None:
                    continue  # it did not keep it (its span did not render as laid out): claim it
            segment = layout.segment_at(i)
            if pinned is None and segment is not None and segment.suffix == ".deleted":
                self._segment_of(layout, i)  # rendered before retention removed it: ESTALE once its files go
            self._follow(layout, i, cache, pinned)
            return data
        self._follow(layout, i, cache, pinned)  # the spans after this one render meanwhile
        try:
            data = self._render_span(layout, i, last, cache, pinned) if last > i else None
            if data is None:
                data = self._render_one(layout, i, pinned)
                cache.put(key, data)
        finally:
            cache.settle(layout, i, last)
        return data

    def _follow(
        self, layout: Layout, i: int, cache: PieceCache, pinned: SegmentBytes | None, pieces: int | None = None
    ) -> None:
        """The reader of ``cache`` is at piece ``i``: render ahead of it."""
        ahead = cache.ahead
        if ahead is not None and ahead.layout is layout and ahead.pinned is pinned:
            cache.reached(layout, i, pieces)
        else:
            cache.follow(Ahead(layout, pinned, self), i, pieces)

    def render_start(self, layout: Layout, i: int, cache: PieceCache, then: int = 0) -> bool:
        """Before anyone reads (a file about to be opened: :meth:`~.streams.RecordsStream.prepare`):
        render the span from piece ``i`` of ``layout`` into ``cache`` (claimed first: a reader that
        comes meanwhile waits for it), follow that layout from there, and have the ``then`` pieces
        after piece ``i`` rendered on prefill threads, as a reader's read there would. True when the
        span is kept; False when it is damaged, kept or claimed already, or did not render as laid out
        (the reader renders it, and says what is wrong)."""
        if i >= len(layout) or i in layout.bad:
            return False
        last = cache.claim(layout, i, self.span_end(layout, i))
        if last is None:
            return False
        try:
            cache.follow(Ahead(layout, None, self), i, 0)
            kept = self._render_span(layout, i, last, cache) is not None
        except Exception as exc:  # the read that needs it renders it again and says what is wrong
            log.debug("rendering a file's start ahead failed: %r", exc)
            return False
        finally:
            cache.settle(layout, i, last)
        if kept and then:
            cache.reached(layout, i, then)
        return kept

    def render_file_start(self, layout: Layout, count: int, cache: PieceCache) -> bool:
        """Before anyone reads (as :meth:`render_start`): render the first pieces of ``layout`` (of its
        first ``count``), up to :data:`FILE_AHEAD_BYTES` of rendered bytes, in :data:`FILE_RUNS` kernel
        calls at most: the first here, the others on prefill threads at the same time (claimed here
        first: a reader that comes meanwhile waits for them). So the next file of a reader going
        through the partitions is rendered whole while the reader reads the one before, at the
        kernel's own pace, as the in-process kernel renders a partition a call, instead of span by
        span at the reader's pace. Stops before a damaged piece (its read says what is wrong). False
        when nothing was claimed (the caller then falls back to :meth:`render_start`)."""
        count = min(count, len(layout))
        if count <= 0 or 0 in layout.bad:
            return False
        first = layout.start(0)
        n = 1
        while n < count and layout.ends[n] - first <= FILE_AHEAD_BYTES:
            n += 1
        end_position = layout.positions[n - 1] + layout.sizes[n - 1]
        runs: list[tuple[int, int]] = []
        i = 0
        while i < n and len(runs) < FILE_RUNS:
            left = end_position - layout.positions[i]  # shared among the runs left, each a span at least
            run_bytes = max(READ_AHEAD_BYTES, -(-left // (FILE_RUNS - len(runs))))
            end = min(self.span_end(layout, i, run_bytes, n, blocks=False), n - 1)
            last = cache.claim(layout, i, end)
            if last is None:
                break
            runs.append((i, last))
            i = last + 1
            if i < n and (i in layout.bad or layout.bases[i] != layout.bases[0]):
                break
        if not runs:
            return False
        cache.follow(Ahead(layout, None, self), 0, 0)
        # the runs side by side in one buffer (of RUN_BUFFERS: used again, no new pages), so that the read
        # across two of them is one slice of it, not a 1 MiB join on the FUSE loop (issue 25)
        buffer = RUN_BUFFERS.take(layout.ends[runs[-1][1]] - first) \
            if self.renderer_of(layout).renders_into(layout.filter) else None
        for span in runs[1:]:
            _submit(self._render_claimed, layout, span, cache, buffer)
        self._render_claimed(layout, runs[0], cache, buffer)
        return True

    def _render_claimed(self, layout: Layout, span: tuple[int, int], cache: PieceCache,
                        buffer: bytearray | None = None) -> None:
        """Render the claimed ``span`` (first and last piece) into ``cache`` and settle it (into its
        place in ``buffer``, whose first byte is that of the layout's first piece, when given); a failure
        is left to the read that needs it (it renders the pieces again and says what is wrong)."""
        first, last = span
        try:
            if buffer is None or not self._render_run(layout, first, last, cache, buffer):
                self._render_span(layout, first, last, cache)
        except Exception as exc:
            log.debug("rendering a file's start ahead failed: %r", exc)
        finally:
            cache.settle(layout, first, last)

    def _render_run(self, layout: Layout, first: int, last: int, cache: PieceCache, buffer: bytearray) -> bool:
        """Pieces ``first..last`` (claimed) of an unfiltered view rendered by the kernel straight into their
        place in ``buffer`` (piece ``j`` at ``layout.start(j) - layout.start(0)``; the runs of a file's start
        side by side: :meth:`PieceCache.add_run`) and kept; False when that does not apply or they do not
        render to the lengths laid out (the caller renders them the usual way; their place is left as it
        was, and no piece is ever kept from it)."""
        renderer = self.renderer_of(layout)
        if not renderer.renders_into(layout.filter):
            return False
        segment = self._segment_of(layout, first)
        base = layout.start(0)
        position = layout.positions[first]
        whole = memoryview(buffer)
        try:
            fits = renderer.render_into(segment, position, layout.positions[last] + layout.sizes[last] - position,
                                        whole[layout.start(first) - base : layout.ends[last] - base])
        except CorruptRecordError:
            return False
        if not fits:
            return False
        cache.add_run(buffer, last - first + 1)
        for j in range(last, first - 1, -1):  # piece ``first`` goes in last: the least likely to be evicted
            lo = layout.start(j) - base
            cache.put((layout, j), whole[lo : layout.ends[j] - base], lo)
        return True

    def start_prefill(self, ahead: Ahead, cache: PieceCache, span: tuple[int, int]) -> None:
        """Render the claimed ``span`` (first and last piece) on a prefill thread, then the spans after it
        that ``ahead`` wants."""
        _submit(self._prefill, ahead, cache, span)

    def _prefill(self, ahead: Ahead, cache: PieceCache, span: tuple[int, int]) -> None:
        """On a prefill thread: render the claimed ``span``, then claim the next one the reader of
        ``ahead.layout`` wants and queue it behind the spans of other open files (a span that does not
        render as laid out is left to the read that needs it, piece by piece, which says which one is
        wrong)."""
        layout = ahead.layout
        first, last = span
        try:
            try:
                self._render_span(layout, first, last, cache, ahead.pinned)
            finally:
                cache.settle(layout, first, last)
        except Exception as exc:  # the read that needs it renders it again and says what is wrong
            cache.stop_ahead(ahead)
            log.debug("rendering ahead failed: %r", exc)
            return
        following = cache.claim_ahead(ahead)
        if following is not None:
            self.start_prefill(ahead, cache, following)

    def span_end(self, layout: Layout, i: int, max_bytes: int = READ_AHEAD_BYTES, max_pieces: int = SPAN_PIECES,
                 blocks: bool = True) -> int:
        """The last piece of the span from piece ``i`` that one read of its segment renders: contiguous
        undamaged pieces of the same segment, up to ``max_bytes`` of log and ``max_pieces`` pieces, in one
        block (:data:`~.piececache.BLOCK_PIECES`) unless ``blocks`` is False."""
        count = len(layout)
        base = layout.bases[i]
        end = layout.positions[i] + layout.sizes[i]
        last = i
        while last + 1 < count:
            j = last + 1
            if (layout.bases[j] != base or layout.positions[j] != end or j in layout.bad or j - i >= max_pieces
                    or end + layout.sizes[j] - layout.positions[i] > max_bytes or blocks and j % BLOCK_PIECES == 0):
                break
            end += layout.sizes[j]
            last = j
        return last

    def _render_span(
        self, layout: Layout, i: int, last: int, cache: PieceCache, pinned: SegmentBytes | None = None
    ) -> memoryview | None:
        """Pieces ``i..last`` rendered from one read, each kept in ``cache``; piece ``i``'s bytes, or None
        when the span does not render to the lengths laid out (the pieces are then rendered one by one,
        which says which one is wrong)."""
        if i in layout.bad:
            return None
        segment = self._segment_of(layout, i, pinned)
        position = layout.positions[i]
        size = layout.positions[last] + layout.sizes[last] - position
        first = layout.start(i)
        renderer = self.renderer_of(layout)
        placed = cache.block_for(layout, i, last) if renderer.renders_into(layout.filter) else None
        if placed is not None:  # into the block, beside the spans around it
            block, at = placed
            whole = memoryview(block.buffer)
            try:
                fits = renderer.render_into(segment, position, size, whole[at : at + layout.ends[last] - first])
            except CorruptRecordError:
                return None
            if fits:
                cache.rendered_into(block, i, last)
                for j in range(last, i - 1, -1):  # piece i goes in last: the least likely to be evicted
                    lo = at + layout.start(j) - first
                    cache.put((layout, j), whole[lo : at + layout.ends[j] - first], lo)
                return whole[at : at + layout.ends[i] - first]
        try:
            data = renderer.render(segment, position, size, layout.filter)
        except CorruptRecordError:
            return None
        if len(data) != layout.ends[last] - first:
            return None
        view = memoryview(data)
        for j in range(last, i - 1, -1):  # piece i goes in last: the least likely to be evicted
            cache.put((layout, j), view[layout.start(j) - first : layout.ends[j] - first], layout.start(j) - first)
        return view[: layout.ends[i] - first]

    def _segment_of(self, layout: Layout, i: int, pinned: SegmentBytes | None = None) -> SegmentBytes:
        if pinned is not None:
            return pinned
        base = layout.bases[i]
        if base < 0:  # what a detached stream let go of (streams.PASSED_BASE): its segments are gone
            raise SegmentClosedError(f"{self.log.dir}: records.jsonl read back where every open reader had "
                                     "passed, from segments removed since (retention or compaction)")
        segment = layout.segment_at(i) or self.log.segments.get(base)  # the one it was laid out from
        if segment is None or segment.suffix == ".deleted" and not os.path.exists(segment.log_path):
            # an open records.jsonl reading back past file.delete.delay.ms: ESTALE, not damage
            raise SegmentClosedError(
                f"{self.log.dir}/{base:020d}.log was deleted (retention or compaction) while it was being read"
            )
        return segment

    def _render_one(self, layout: Layout, i: int, pinned: SegmentBytes | None = None) -> bytes:
        bad = layout.bad.get(i)
        if bad is not None:
            raise bad
        segment = self._segment_of(layout, i, pinned)
        try:
            data = self.renderer_of(layout).render(segment, layout.positions[i], layout.sizes[i], layout.filter)
        except CorruptRecordError as exc:
            self.report(exc)
            raise
        if len(data) != layout.ends[i] - layout.start(i):
            changed = CorruptRecordError(
                "the batch renders differently than when it was laid out (did the file change?)",
                layout.positions[i],
                str(segment.log_path),
            )
            self.report(changed)
            raise changed
        return data
