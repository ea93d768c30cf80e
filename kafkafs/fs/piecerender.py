"""Rendering the pieces of a view, for reads: one piece, or a span of them ahead of the reader.

A read that needs a piece not rendered yet renders the pieces after it in the same pass (one read of
the segment, up to :data:`READ_AHEAD_BYTES` of log) and keeps them in the open file's
:class:`~kafkafs.fs.caches.PieceCache`: the reads that follow are answered from memory on the FUSE loop.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from ..errors import CorruptRecordError, SegmentClosedError
from ..storage.log import Log
from ..storage.segment import LogSegment
from .caches import SPAN_PIECES, PieceCache
from .layout import Pieces, Renderer, SegmentLayout

__all__ = ["PieceRenderer", "READ_AHEAD_BYTES"]

#: A read that needs a piece not rendered yet renders the pieces after it too, up to this many bytes of
#: log (one read of the segment): the reads that follow are answered from memory, on the FUSE loop.
READ_AHEAD_BYTES = 512 * 1024

log = logging.getLogger("kafkafs.fs")

#: Threads that render the next span while the reader reads the current one (the kernel releases the
#: GIL while it renders, so this overlaps with the FUSE loop answering reads and with the reader).
_PREFILL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="kafkafs-prefill")


def _submit(fn, *args) -> None:
    try:
        _PREFILL.submit(fn, *args)
    except RuntimeError:  # the interpreter is shutting down: nothing to render ahead for
        pass


class PieceRenderer:
    """Renders the pieces of one partition's views from its log. Stateless besides what it is given:
    safe from any thread (a cache serialises the spans rendered into it).

    Render ahead: once a reader reads from a span, the next span of the same layout is rendered on a
    prefill thread (:meth:`_ahead`), so a reader going through the file finds it rendered; one span
    ahead at most, paced by the reader (the cache holds two spans and more)."""

    def __init__(self, renderer: Renderer, log: Log, report: Callable[[CorruptRecordError], None]) -> None:
        self.renderer = renderer
        self.log = log
        self.report = report

    def render(
        self, pieces: Pieces, i: int, cache: PieceCache | None = None, pinned: object | None = None
    ) -> bytes | memoryview:
        """Piece ``i`` of ``pieces`` as bytes, exactly as long as when it was laid out. With a ``cache``,
        the pieces after it are rendered in the same pass (up to :data:`READ_AHEAD_BYTES` of log) and
        kept there, and a read that needs the span another thread is rendering waits for it.
        ``pinned``: the segment's ``.log`` held open by a reader (:mod:`.generations`), read instead of
        the segment (its files may be gone)."""
        if cache is None:
            return self._render_one(pieces, i, pinned)
        key = (pieces, i)  # the object, not its id: a freed layout's id may be reused
        data = cache.get(key)
        if data is not None:
            if pinned is None and isinstance(pieces, SegmentLayout) and pieces.segment.suffix == ".deleted":
                self._segment_of(pieces, i)  # rendered before retention removed it: ESTALE once its files go
            return data
        with cache.rendering:
            data = cache.get(key)
            if data is not None:
                return data
            last = self._span_end(pieces, i)
            if last > i:
                data = self._render_span(pieces, i, last, cache, pinned)
                if data is not None:
                    self._ahead(pieces, last + 1, cache, pinned)
                    return data
            data = self._render_one(pieces, i, pinned)
            cache.put(key, data)
            return data

    def _ahead(
        self, pieces: Pieces, start: int, cache: PieceCache, pinned: object | None, *, after: int | None = None
    ) -> None:
        """Have the span from piece ``start`` rendered on a prefill thread: at once, or (``after``) once
        a read reaches piece ``after`` (the first of the span rendered ahead before it)."""
        if start >= len(pieces) or start in pieces.bad:
            return
        if after is None:
            _submit(self._prefill, pieces, start, cache, pinned)
        else:
            cache.ahead = (pieces, after, lambda: _submit(self._prefill, pieces, start, cache, pinned))

    def _prefill(self, pieces: Pieces, start: int, cache: PieceCache, pinned: object | None) -> None:
        try:
            with cache.rendering:
                if cache.was_rendered(pieces, start):
                    return  # by the read that needed it (this prefill ran late) or ahead: not again
                last = self._span_end(pieces, start)
                if self._render_span(pieces, start, last, cache, pinned) is not None:
                    self._ahead(pieces, last + 1, cache, pinned, after=start)
        except Exception as exc:  # the read that needs it renders it again and says what is wrong
            log.debug("rendering ahead failed: %r", exc)

    def _span_end(self, pieces: Pieces, i: int) -> int:
        """The last piece of the span from piece ``i`` that one read of its segment renders: contiguous
        undamaged pieces of the same segment, up to READ_AHEAD_BYTES of log and SPAN_PIECES pieces."""
        count = len(pieces)
        base = pieces.bases[i]
        end = pieces.positions[i] + pieces.sizes[i]
        last = i
        while last + 1 < count:
            j = last + 1
            if (pieces.bases[j] != base or pieces.positions[j] != end or j in pieces.bad or j - i >= SPAN_PIECES
                    or end + pieces.sizes[j] - pieces.positions[i] > READ_AHEAD_BYTES):
                break
            end += pieces.sizes[j]
            last = j
        return last

    def _render_span(
        self, pieces: Pieces, i: int, last: int, cache: PieceCache, pinned: object | None = None
    ) -> memoryview | None:
        """Pieces ``i..last`` rendered from one read, each kept in ``cache``; piece ``i``'s bytes, or None
        when the span does not render to the lengths laid out (the pieces are then rendered one by one,
        which says which one is wrong)."""
        if i in pieces.bad:
            return None
        segment = self._segment_of(pieces, i, pinned)
        position = pieces.positions[i]
        size = pieces.positions[last] + pieces.sizes[last] - position
        try:
            data = self.renderer.render_raw(segment, position, size, pieces.filter)
        except CorruptRecordError:
            return None
        first = pieces.start(i)
        if len(data) != pieces.ends[last] - first:
            return None
        view = memoryview(data)
        for j in range(last, i - 1, -1):  # piece i goes in last: the least likely to be evicted
            cache.put((pieces, j), view[pieces.start(j) - first : pieces.ends[j] - first])
        cache.span_rendered(pieces, i)
        return view[: pieces.ends[i] - first]

    def _segment_of(self, pieces: Pieces, i: int, pinned: object | None = None) -> LogSegment:
        if pinned is not None:
            return pinned  # type: ignore[return-value]
        base = pieces.bases[i]
        segment = pieces.segment_at(i) or self.log.segments.get(base)  # the one it was laid out from
        if segment is None or segment.suffix == ".deleted" and not os.path.exists(segment.log_path):
            # an open records.jsonl reading back past file.delete.delay.ms: ESTALE, not damage
            raise SegmentClosedError(
                f"{self.log.dir}/{base:020d}.log was deleted (retention or compaction) while it was being read"
            )
        return segment

    def _render_one(self, pieces: Pieces, i: int, pinned: object | None = None) -> bytes:
        bad = pieces.bad.get(i)
        if bad is not None:
            raise bad
        segment = self._segment_of(pieces, i, pinned)
        try:
            data = self.renderer.render_raw(segment, pieces.positions[i], pieces.sizes[i], pieces.filter)
        except CorruptRecordError as exc:
            self.report(exc)
            raise
        if len(data) != pieces.ends[i] - pieces.start(i):
            exc = CorruptRecordError(
                "the batch renders differently than when it was laid out (did the file change?)",
                pieces.positions[i],
                str(segment.log_path),
            )
            self.report(exc)
            raise exc
        return data

    # ------------------------------------------------------------------------------------------ ranges
