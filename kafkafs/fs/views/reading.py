"""Reading a view's bytes from its pieces (the words: :mod:`.layout`).

* :func:`read_parts` gives bytes ``offset .. offset+size`` of a view made of parts (:class:`Part`: a
  layout's first pieces placed at a start byte), rendering the pieces it needs through a callback;
  :func:`read_cached` does the same from the pieces an open file's :class:`PieceCache` holds, or says
  it cannot (so the FUSE loop answers reads of rendered bytes itself, without a worker trip).
* :class:`PieceRenderer` renders pieces for reads: a read that needs a piece not rendered yet renders
  the span of pieces after it in the same pass (one read of the segment, up to
  :data:`READ_AHEAD_BYTES` of log) and keeps them in the open file's :class:`PieceCache`; the spans
  after the reader (up to :data:`AHEAD_PIECES` pieces) are rendered ahead on a prefill thread.
"""

from __future__ import annotations

import logging
import os
import threading
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

from ...errors import CorruptRecordError, SegmentClosedError
from ...storage.log import Log
from .layout import Layout
from .render import Renderer, SegmentBytes

__all__ = [
    "Bytes", "Part", "read_parts", "read_cached", "PieceCache", "PieceRenderer", "READ_AHEAD_BYTES", "SPAN_PIECES", "PIECES_KEPT",
    "AHEAD_PIECES",
]

log = logging.getLogger("kafkafs.fs")

#: A read that needs a piece not rendered yet renders the pieces after it too, up to this many bytes of
#: log (one read of the segment): the reads that follow are answered from memory, on the FUSE loop.
READ_AHEAD_BYTES = 512 * 1024
#: A span is at most this many pieces.
SPAN_PIECES = 8
#: A reader finds the pieces up to this many after the one it reads rendered, or being rendered, on a
#: prefill thread: two spans, so that the next one is ready while the reader's reply is sent.
AHEAD_PIECES = 2 * SPAN_PIECES
#: Pieces an open file keeps: the span being read, what is rendered ahead of it (up to a span past
#: AHEAD_PIECES), and one more span.
PIECES_KEPT = 5 * SPAN_PIECES

Bytes = bytes | memoryview


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
) -> Bytes:
    """Bytes ``offset .. offset+size`` of the view made of ``parts`` (``starts`` their start bytes).

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
            data = render(layout, i)
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
    if contiguous and run is not None and len(out) > 1 and isinstance(run[0], bytes):
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


# ---------------------------------------------------------------------------------------------- cache


class _Ahead:
    """Rendering ahead of the reader of one layout of an open file (see :class:`PieceRenderer`): every
    piece up to ``want`` should be rendered; ``next`` is the first piece after those rendered in order
    so far; ``running`` while a prefill thread is at it. Changed only under the cache's guard."""

    __slots__ = ("layout", "pinned", "next", "want", "running", "start")

    def __init__(
        self, layout: Layout, pinned: SegmentBytes | None, start: Callable[[_Ahead, PieceCache], None]
    ) -> None:
        self.layout = layout
        self.pinned = pinned
        self.next = 0
        self.want = -1
        self.running = False
        #: ``start(ahead, cache)`` hands the work to a prefill thread (it holds no cache: no cycle keeps
        #: a closed file's pieces alive)
        self.start = start


class PieceCache:
    """The last rendered pieces of one open file, so 128 KiB reads in a row decode each batch once, and
    most of them are answered from memory on the FUSE loop.

    Thread-safe: the kernel may send reads of one open file from several threads at once. ``rendering``
    is held while a span is rendered: a second read that needs it waits instead of rendering it again.
    What is rendered ahead of the reader (:class:`_Ahead`) changes under the cache's guard."""

    __slots__ = ("_items", "_at", "_guard", "capacity", "rendering", "ahead")

    def __init__(self, capacity: int = PIECES_KEPT) -> None:
        self._items: OrderedDict[tuple[Layout, int], Bytes] = OrderedDict()
        #: where a piece rendered in a span starts in the span's bytes (its memoryview's ``obj``)
        self._at: dict[tuple[Layout, int], int] = {}
        self._guard = threading.Lock()
        self.capacity = capacity
        self.rendering = threading.Lock()
        #: what is rendered ahead of the reader, for the layout it reads last (see :class:`PieceRenderer`)
        self.ahead: _Ahead | None = None

    def reached(self, layout: Layout, i: int) -> None:
        """A read used piece ``i`` of ``layout``: the pieces up to :data:`AHEAD_PIECES` after it are to
        be rendered ahead (a prefill thread starts on them if none is at it)."""
        with self._guard:
            ahead = self.ahead
            if ahead is None or ahead.layout is not layout:
                return  # this layout is not followed (yet): the read that renders it starts that
            ahead.want = i + AHEAD_PIECES
            if ahead.next <= i:
                ahead.next = i + 1
            go = not ahead.running and ahead.next <= ahead.want and ahead.next < len(layout)
            if go:
                ahead.running = True
        if go:
            ahead.start(ahead, self)

    def follow(self, ahead: _Ahead, i: int) -> None:
        """Render ahead of the reader of ``ahead.layout`` from now on (the reader is at piece ``i``),
        unless that layout is followed already."""
        with self._guard:
            current = self.ahead
            if current is None or current.layout is not ahead.layout or current.pinned is not ahead.pinned:
                self.ahead = ahead
        self.reached(ahead.layout, i)

    def next_to_render(self, ahead: _Ahead) -> int | None:
        """For the prefill thread at ``ahead``: the next piece to render ahead (skipping those already
        kept), or None when it is done for now (``running`` is then off)."""
        layout = ahead.layout
        with self._guard:
            while True:
                i = ahead.next
                if (self.ahead is not ahead or i > ahead.want or i >= len(layout) or i in layout.bad):
                    ahead.running = False
                    return None
                if (layout, i) not in self._items:
                    return i
                ahead.next = i + 1

    def rendered_ahead(self, ahead: _Ahead, last: int | None) -> None:
        """The prefill thread at ``ahead`` is done with the pieces up to ``last`` (None: it failed, and
        stops)."""
        with self._guard:
            if last is None:
                ahead.running = False
            elif last + 1 > ahead.next:
                ahead.next = last + 1

    def has(self, key: tuple[Layout, int]) -> bool:
        """Whether piece ``key`` is kept (without making it recently used)."""
        with self._guard:
            return key in self._items

    def get(self, key: tuple[Layout, int]) -> Bytes | None:
        with self._guard:
            data = self._items.get(key)
            if data is not None:
                self._items.move_to_end(key)  # least recently used goes first
            return data

    def put(self, key: tuple[Layout, int], data: Bytes, at: int | None = None) -> None:
        """Keep piece ``key``; ``at``: where it starts in the buffer it is a memoryview of (a span's)."""
        with self._guard:
            self._items[key] = data
            if at is None:
                self._at.pop(key, None)
            else:
                self._at[key] = at
            while len(self._items) > self.capacity:
                gone, _ = self._items.popitem(last=False)
                self._at.pop(gone, None)

    def where(self, layout: Layout, i: int) -> int | None:
        """Where piece ``i`` starts in the span it was rendered in (None: not kept, or not from a span)."""
        return self._at.get((layout, i))


# ---------------------------------------------------------------------------------------------- rendering

#: Threads that render the next span while the reader reads the current one (the kernel releases the
#: GIL while it renders, so this overlaps with the FUSE loop answering reads and with the reader).
_PREFILL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="kafkafs-prefill")


def _submit(fn: Callable[..., Any], *args: Any) -> None:
    try:
        _PREFILL.submit(fn, *args)
    except RuntimeError:  # the interpreter is shutting down: nothing to render ahead for
        pass


class PieceRenderer:
    """Renders the pieces of one partition's views from its log. Stateless besides what it is given:
    safe from any thread (a cache serialises the spans rendered into it).

    Render ahead: every read tells the open file's cache which piece it reached (:meth:`PieceCache.reached`,
    from the FUSE loop as from a worker), and a prefill thread renders the spans after it, in order,
    until the pieces up to :data:`AHEAD_PIECES` past the reader are rendered; so a reader going through
    the file finds it rendered, and its requests are answered from memory while the next spans render
    (the kernel releases the GIL). Paced by the reader: a reader that stops, stops it."""

    def __init__(self, renderer: Renderer, log: Log, report: Callable[[CorruptRecordError], None]) -> None:
        self.renderer = renderer
        self.log = log
        self.report = report

    def render(
        self, layout: Layout, i: int, cache: PieceCache | None = None, pinned: SegmentBytes | None = None
    ) -> Bytes:
        """Piece ``i`` of ``layout`` as bytes, exactly as long as when it was laid out. With a ``cache``,
        the pieces after it are rendered in the same pass (up to :data:`READ_AHEAD_BYTES` of log) and
        kept there, a read that needs the span another thread is rendering waits for it, and the spans
        after it are rendered ahead. ``pinned``: the segment's ``.log`` held open by a reader
        (:mod:`.streams`), read instead of the segment (its files may be gone)."""
        if cache is None:
            return self._render_one(layout, i, pinned)
        key = (layout, i)  # the object, not its id: a freed layout's id may be reused
        data = cache.get(key)
        if data is not None:
            segment = layout.segment_at(i)
            if pinned is None and segment is not None and segment.suffix == ".deleted":
                self._segment_of(layout, i)  # rendered before retention removed it: ESTALE once its files go
            self._follow(layout, i, cache, pinned)
            return data
        with cache.rendering:
            data = cache.get(key)
            if data is None:
                last = self._span_end(layout, i)
                if last > i:
                    data = self._render_span(layout, i, last, cache, pinned)
                if data is None:
                    data = self._render_one(layout, i, pinned)
                    cache.put(key, data)
        self._follow(layout, i, cache, pinned)
        return data

    def _follow(self, layout: Layout, i: int, cache: PieceCache, pinned: SegmentBytes | None) -> None:
        """The reader of ``cache`` is at piece ``i``: render ahead of it."""
        ahead = cache.ahead
        if ahead is not None and ahead.layout is layout and ahead.pinned is pinned:
            cache.reached(layout, i)
        else:
            cache.follow(_Ahead(layout, pinned, self._start_prefill), i)

    def _start_prefill(self, ahead: _Ahead, cache: PieceCache) -> None:
        _submit(self._prefill, ahead, cache)

    def _prefill(self, ahead: _Ahead, cache: PieceCache) -> None:
        """On a prefill thread: render spans after the reader of ``ahead.layout`` until it has enough."""
        layout = ahead.layout
        try:
            while (start := cache.next_to_render(ahead)) is not None:
                with cache.rendering:
                    last = start
                    if not cache.has((layout, start)):  # else a read rendered it meanwhile
                        # a span that does not render as laid out is left to the read that needs it
                        # (piece by piece, saying which one is wrong)
                        last = self._span_end(layout, start)
                        self._render_span(layout, start, last, cache, ahead.pinned)
                cache.rendered_ahead(ahead, last)
        except Exception as exc:  # the read that needs it renders it again and says what is wrong
            cache.rendered_ahead(ahead, None)
            log.debug("rendering ahead failed: %r", exc)

    def _span_end(self, layout: Layout, i: int) -> int:
        """The last piece of the span from piece ``i`` that one read of its segment renders: contiguous
        undamaged pieces of the same segment, up to READ_AHEAD_BYTES of log and SPAN_PIECES pieces."""
        count = len(layout)
        base = layout.bases[i]
        end = layout.positions[i] + layout.sizes[i]
        last = i
        while last + 1 < count:
            j = last + 1
            if (layout.bases[j] != base or layout.positions[j] != end or j in layout.bad or j - i >= SPAN_PIECES
                    or end + layout.sizes[j] - layout.positions[i] > READ_AHEAD_BYTES):
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
        try:
            data = self.renderer.render(segment, position, size, layout.filter)
        except CorruptRecordError:
            return None
        first = layout.start(i)
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
            data = self.renderer.render(segment, layout.positions[i], layout.sizes[i], layout.filter)
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
