"""One partition as the mount sees it: its Log, the layouts of its views, small caches, change events.

Everything here blocks (files, decoding) and is called from worker threads; the state it keeps is
guarded by locks and safe to share between them. Nothing here knows FUSE.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple

from ..errors import CorruptRecordError, WouldBlock
from ..format.jsonview import render_raw_record_pretty
from ..storage.log import Log
from ..storage.segment import LogSegment
from .caches import LRU, PieceCache
from .handleview import handle_view, layout_after
from .layout import Part, Pieces, Renderer, SegmentLayout, read_cached, read_parts
from .piecerender import PieceRenderer
from .rangelayout import RangeLayout
from .render import Filter
from .sizecache import SizeCache
from .sizing import Progress, SizingJob, load_cached, log_progress, size_layouts, store_layout

__all__ = [
    "PartitionState", "Deferred", "INLINE_BATCH_BYTES", "Composition", "RenderedRecord", "OffsetRun", "SegmentRange", "PieceCache", "report_corrupt",
]

log = logging.getLogger("kafkafs.fs")

#: Decoded batches kept per partition (offset lookups in a row mostly hit the same batch).
BATCH_CACHE = 16
#: Pretty-printed records kept per partition (``stat`` then ``cat`` of one ``N.json`` renders once).
RECORD_CACHE = 512
#: A read-only log is re-read at most this often when a file that grows is looked at.
REFRESH_INTERVAL = 0.05
#: A lookup may decode a batch on the FUSE loop itself (no worker thread) when it is uncompressed,
#: of an ordinary topic and at most this long: about 50 µs of work, where a trip to a worker costs more.
INLINE_BATCH_BYTES = 256 * 1024


class Deferred(Exception):
    """The work asked for on the loop is longer than the loop should do: ask a worker thread."""


_reported: set[tuple[str | None, int | None]] = set()
_report_lock = threading.Lock()


def report_corrupt(exc: CorruptRecordError) -> None:
    """Log damage once per (file, position): the segment and where in it."""
    key = (exc.file, exc.position)
    with _report_lock:
        if key in _reported:
            return
        _reported.add(key)
    log.error("corrupt batch in %s at position %s: %s", exc.file, exc.position, exc.reason)


class Composition(NamedTuple):
    """``records.jsonl`` at one moment: the segment layouts end to end."""

    shape: tuple
    parts: list[Part]
    starts: list[int]
    total: int


class RenderedRecord(NamedTuple):
    data: bytes
    timestamp: int


class OffsetRun(NamedTuple):
    """Offsets for a ``by-offset/`` listing: ``first..last`` when ``offsets`` is None, else exactly those."""

    first: int
    last: int
    offsets: list[int] | None
    max_timestamp: int


class SegmentRange(NamedTuple):
    """A ``by-offset/<first>-<last>.jsonl`` listed for one segment of a partition past the list limit."""

    first: int
    last: int


class PartitionState:
    """A partition folder of the mount; ``index`` is its number for the mount's lifetime.

    ``cache`` keeps segment layouts across mounts (see :mod:`kafkafs.fs.sizecache`); ``decoder`` renders
    an internal topic's records (None for ordinary topics)."""

    def __init__(
        self,
        name: str,
        index: int,
        log_: Log,
        mode: str,
        *,
        cache: SizeCache | None = None,
        decoder: object | None = None,
    ) -> None:
        self.name = name
        self.index = index
        self.log = log_
        self.mode = mode
        self.topic = log_.topic
        self.partition = log_.partition
        self.cache = cache if cache is not None else SizeCache(None)
        self.renderer = Renderer(self.topic, self.partition, mode, self._report_corrupt, decoder)
        self._pieces = PieceRenderer(self.renderer, log_, self._report_corrupt)
        self._layouts: dict[int, SegmentLayout] = {}
        self._compose_lock = threading.Lock()
        self._composition: Composition | None = None
        self._batches = LRU(BATCH_CACHE)
        self._records = LRU(RECORD_CACHE)
        self._refresh_lock = threading.Lock()
        self._last_refresh = 0.0
        self._counted: tuple[tuple, int, int, int] | None = None
        self._listeners: list[Callable[[PartitionState], None]] = []
        self.last_change_ns = time.time_ns()
        #: changes that were not only growth (segments removed, a compaction swap, a truncation)
        self.rewrites = 0
        self.prev_active_base = self._active_base()
        self._last_shape = self.shape()
        log_.add_listener(self._on_log_change)

    # ------------------------------------------------------------------------------------------ changes

    def add_listener(self, callback: Callable[[PartitionState], None]) -> None:
        """``callback(state)`` after records arrive or segments change (from the thread that saw it)."""
        self._listeners.append(callback)

    def _active_base(self) -> int | None:
        last = self.log.segments.last()
        return last.base_offset if last else None

    def shape(self) -> tuple:
        """A cheap fingerprint of what the views depend on: it changes whenever they might."""
        segments = self.log.segments
        first = segments.first()
        last = segments.last()
        return (
            len(segments),
            first.base_offset if first else None,
            last.base_offset if last else None,
            last.size if last else 0,
            self.log.log_start_offset,
            getattr(self.log, "generation", 0),  # a compaction swap changes no other field
        )

    def _on_log_change(self, _log: Log) -> None:
        self._changed()

    def _changed(self) -> None:
        shape = self.shape()
        if shape == self._last_shape:
            return
        old = self._last_shape
        if shape[0] < old[0] or shape[1] != old[1] or (shape[2] == old[2] and shape[3] < old[3]) or shape[5:] != old[5:]:
            # segments went away or the active one was cut: offsets may now hold other records
            self._batches.clear_all()
            self._records.clear_all()
            self.rewrites += 1
        self._last_shape = shape
        self.last_change_ns = time.time_ns()
        for callback in list(self._listeners):
            try:
                callback(self)
            except Exception:  # a listener must never break an append
                log.exception("change listener failed")
        self.prev_active_base = self._active_base()

    def refresh(self, *, force: bool = False) -> bool:
        """Notice records another process appended (read-only logs); True when something changed.

        Rate-limited to one look every :data:`REFRESH_INTERVAL` unless ``force``.
        """
        if self.log.writable:
            return False
        now = time.monotonic()
        if not force and now - self._last_refresh < REFRESH_INTERVAL:
            return False
        if not self._refresh_lock.acquire(blocking=False):
            return False
        try:
            self._last_refresh = now
            before = self._last_shape
            self.log.refresh()
            self._changed()  # segments may go without the log end moving
            return self._last_shape != before
        finally:
            self._refresh_lock.release()

    # ------------------------------------------------------------------------------------------ damage

    def _report_corrupt(self, exc: CorruptRecordError) -> None:
        report_corrupt(exc)

    # ------------------------------------------------------------------------------------------ records.jsonl

    def _layout(self, base: int, segment: LogSegment) -> SegmentLayout:
        """The segment's layout (callers hold ``_compose_lock``): kept, else from the size cache, else new."""
        layout = self._layouts.get(base)
        lo = max(self.log.log_start_offset, base)
        if (
            layout is None
            or layout.segment is not segment
            or layout.lo != lo
            or layout.scanned > segment.size
        ):
            layout = SegmentLayout(segment, lo)  # new, or the file was truncated: lay it out afresh
            load_cached(layout, self.renderer, self.cache)
            self._layouts[base] = layout
        return layout

    def listed_segments(self) -> list[tuple[int, LogSegment]]:
        start = self.log.log_start_offset
        active = self.log.active_segment
        return [
            (segment.base_offset, segment)
            for segment in self.log.segments
            if segment.next_offset > start or segment is active
        ]

    def sizing_jobs(self) -> list[SizingJob]:
        """The segments of ``records.jsonl`` not laid out yet (after asking the size cache)."""
        with self._compose_lock:
            jobs = []
            for base, segment in self.listed_segments():
                layout = self._layout(base, segment)
                if not layout.current():
                    jobs.append(SizingJob(layout, self.renderer, self.name))
            return jobs

    def _store_now(self, job: SizingJob) -> bool:
        # sealed segments at once; the active one only when first laid out (later: at close)
        return job.layout.segment is not self.log.active_segment or job.layout.stored_key is None

    def composition(self) -> Composition:
        """The current layout of ``records.jsonl`` (every segment laid out; cached until a change)."""
        shape = self.shape()
        current = self._composition
        if current is not None and current.shape == shape:
            return current
        with self._compose_lock:
            shape = self.shape()
            current = self._composition
            if current is not None and current.shape == shape:
                return current
            listed = self.listed_segments()
            layouts = [(base, self._layout(base, segment)) for base, segment in listed]
            jobs = [SizingJob(layout, self.renderer, self.name) for _base, layout in layouts if not layout.current()]
            if jobs:
                total = sum(max(job.layout.segment.size - job.layout.scanned, 0) for job in jobs)
                progress = Progress(len(jobs), total, log_progress(self.name))
                size_layouts(jobs, self.cache, progress, store=self._store_now)
            parts: list[Part] = []
            starts: list[int] = []
            total = 0
            for _base, layout in layouts:
                count = len(layout)
                if count:
                    parts.append(Part(layout, count, total))
                    starts.append(total)
                    total += layout.total(count)
            seen = {base for base, _layout in layouts}
            for base in [b for b in self._layouts if b not in seen]:
                del self._layouts[base]
            self._composition = Composition(shape, parts, starts, total)
            return self._composition

    def view_for(self, prev: Composition | None, current: Composition | None = None) -> Composition:
        """What a ``records.jsonl`` stream that last showed ``prev`` shows now that the partition's
        composition is ``current`` (default: the current one; see :mod:`.handleview`)."""
        cur = self.composition() if current is None else current
        return handle_view(prev, cur, lambda p, lo: layout_after(self.renderer, p, lo))

    def read_view(self, view: Composition, offset: int, size: int, cache: PieceCache) -> bytes:
        return read_parts(view.parts, view.starts, offset, size, lambda p, i: self.render_piece(p, i, cache))

    def read_view_now(self, view: Composition, offset: int, size: int, cache: PieceCache) -> bytes | None:
        """:meth:`read_view` from rendered pieces alone (safe on the FUSE loop); None when a piece it
        needs is not rendered yet."""
        return read_cached(view.parts, view.starts, offset, size, cache)

    def save_layouts(self) -> int:
        """Store the layouts the cache does not hold yet (the active segment's, at unmount)."""
        with self._compose_lock:
            layouts = list(self._layouts.values())
        stored = 0
        for layout in layouts:
            if layout.current() and store_layout(layout, self.renderer, self.cache):
                stored += 1
        return stored

    def records_size(self) -> int:
        return self.composition().total

    def cached_records_size(self) -> int | None:
        """The size of ``records.jsonl`` if it is known without rendering anything new."""
        current = self.cached_composition()
        return current.total if current is not None else None

    def cached_composition(self) -> Composition | None:
        """The current composition if it is known without rendering anything new."""
        current = self._composition
        if current is not None and current.shape == self.shape():
            return current
        return None

    def read_records(self, offset: int, size: int, cache: PieceCache) -> bytes:
        comp = self.composition()
        return read_parts(comp.parts, comp.starts, offset, size, lambda p, i: self.render_piece(p, i, cache))

    def layout_of(self, base: int) -> tuple[SegmentLayout, int] | None:
        """A segment's layout as far as it has been built, or as the size cache holds it (for ranges
        to reuse), or None."""
        layout = self._layouts.get(base)
        if layout is None and self.cache.enabled:
            segment = self.log.segments.get(base)
            if segment is not None and segment is not self.log.active_segment:
                with self._compose_lock:
                    layout = self._layout(base, segment)
        if layout is None or not len(layout):
            return None
        return layout, len(layout)

    # ------------------------------------------------------------------------------------------ pieces

    def render_piece(
        self, pieces: Pieces, i: int, cache: PieceCache | None = None, pinned: object | None = None
    ) -> bytes | memoryview:
        """Piece ``i`` of ``pieces`` as bytes (see :class:`~kafkafs.fs.piecerender.PieceRenderer`);
        ``pinned``: the segment's ``.log`` held open by a reader (:mod:`.generations`), read instead."""
        return self._pieces.render(pieces, i, cache, pinned)

    def offset_range(self, first: int, last: int) -> RangeLayout:
        return RangeLayout(Filter(lo=max(first, self.log.log_start_offset), hi=last))

    def time_range(self, ts1: int, ts2: int) -> RangeLayout:
        layout = RangeLayout(Filter(lo=self.log.log_start_offset, ts_lo=ts1, ts_hi=ts2))
        if ts1 >= ts2:
            layout.complete = True
        return layout

    def extend_range(self, layout: RangeLayout) -> None:
        layout.extend(self.log, self.renderer, self.layout_of)

    def read_range(self, layout: RangeLayout, offset: int, size: int, cache: PieceCache) -> bytes:
        count = len(layout)
        return read_parts(
            [Part(layout, count, 0)], [0], offset, size, lambda p, i: self.render_piece(p, i, cache)
        )

    def read_range_now(self, layout: RangeLayout, offset: int, size: int, cache: PieceCache) -> bytes | None:
        """:meth:`read_range` from rendered pieces alone (safe on the FUSE loop), else None."""
        return read_cached([Part(layout, len(layout), 0)], [0], offset, size, cache)

    # ------------------------------------------------------------------------------------------ one record

    def record(self, offset: int, *, inline: bool = False) -> RenderedRecord | None:
        """``by-offset/<offset>.json``: the record pretty-printed, or None if there is no such offset.

        ``inline``: called on the FUSE loop; raises :class:`Deferred` rather than render from a batch
        that is compressed, long, of an internal topic or not in the page cache (a worker thread does that)."""
        found = self._records.get_item(offset)
        if found is not None:
            return found
        if inline and self.renderer.decoder is not None:
            raise Deferred(offset)
        held = self._batch_holding(offset, inline)
        if held is None:
            return None
        file, position, raw = held
        try:
            rendered = render_raw_record_pretty(
                self.topic, self.partition, raw, offset, self.mode, decoder=self.renderer.decoder
            )
        except CorruptRecordError as exc:
            exc = exc.at(file, position)
            self._report_corrupt(exc)
            raise exc from None
        if rendered is None:
            return None
        found = RenderedRecord(*rendered)
        self._records.put(offset, found)
        return found

    def cached_record(self, offset: int) -> RenderedRecord | None:
        """``record(offset)`` if it is in memory (nothing read, nothing decoded), else None."""
        return self._records.get_item(offset)

    def _batch_holding(self, offset: int, inline: bool = False) -> tuple[str, int, bytes] | None:
        """The batch that may hold ``offset`` (its ``.log``, position and bytes) if any batch can: a
        recently read one, else the one the engine locates, kept for the lookups that follow (a whole
        batch of ``by-offset/`` names read in a row). Raw bytes are kept, not decoded records: one
        object to free, so an eviction costs nothing."""
        log_ = self.log
        if offset < log_.log_start_offset or offset >= log_.log_end_offset:
            return None
        with self._batches.guard:
            for first, last, held in self._batches.values():
                if first <= offset <= last:
                    return held
        try:
            view = log_.locate(offset, nowait=inline)
        except WouldBlock:  # on the FUSE loop, the batch is not in the page cache: a worker reads it
            raise Deferred(offset) from None
        except CorruptRecordError as exc:
            self._report_corrupt(exc)
            raise
        if view is None:
            return None
        header = view.header
        if inline and (header.attributes & 0x07 or header.size > INLINE_BATCH_BYTES):
            raise Deferred(offset)
        held = (str(view.segment.log_path), view.position, view.raw())
        self._batches.put((view.segment.base_offset, view.position), (header.base_offset, header.last_offset, held))
        return held

    # ------------------------------------------------------------------------------------------ listing

    def offset_runs(self, start: int) -> Iterator[OffsetRun]:
        """The offsets present from ``start`` on, a batch at a time, reading headers only where the
        batch has no gaps. A batch that cannot be read is skipped (and logged)."""
        log_ = self.log
        pos = max(start, log_.log_start_offset)
        while pos < log_.log_end_offset:
            try:
                for segment, view in log_.batches(pos):
                    h = view.header
                    if h.magic == 2 and h.record_count == h.last_offset_delta + 1:
                        first = max(h.base_offset, pos)
                        if first <= h.last_offset:
                            yield OffsetRun(first, h.last_offset, None, h.max_timestamp)
                    else:
                        try:
                            batch = view.decode(validate=False, file=str(segment.log_path))
                        except CorruptRecordError as exc:
                            self._report_corrupt(exc)
                            batch = None
                        if batch is not None:
                            offsets = [o for o in batch.offsets if o >= pos]
                            if offsets:
                                yield OffsetRun(offsets[0], offsets[-1], offsets, h.max_timestamp)
                    pos = max(pos, h.last_offset + 1)
                return
            except CorruptRecordError as exc:
                self._report_corrupt(exc)
                floor = log_.segments.floor(pos)
                higher = log_.segments.higher(floor.base_offset) if floor else None
                if higher is None:
                    return
                pos = higher.base_offset

    def listed_records(self, limit: int | None = None) -> int:
        """How many names ``by-offset/`` lists: the offsets from log start to end while at most ``limit``;
        past it, the records (a compacted log has gaps) counted from the batches up to ``limit + 1``,
        kept while the sealed segments and log start hold (over the limit: also while the end grows)."""
        log_ = self.log
        end = log_.log_end_offset
        if limit is None or end - log_.log_start_offset <= limit:
            return max(end - log_.log_start_offset, 0)
        listed = self.listed_segments()
        key = (limit, log_.log_start_offset, tuple((b, s.size) for b, s in listed[:-1]))
        size = listed[-1][1].size if listed else 0
        c = self._counted  # one tuple, replaced whole: safe across threads
        if c is not None and c[0] == key and ((c[3] > limit and end >= c[1]) or (end, size) == c[1:3]):
            return c[3]
        count = 0
        for run in self.offset_runs(log_.log_start_offset):
            count += run.last - run.first + 1 if run.offsets is None else len(run.offsets)
            if count > limit:
                break
        self._counted = (key, end, size, count)
        return count

    def segment_ranges(self, start: int) -> Iterator[SegmentRange]:
        """One range per segment holding offsets >= ``start``, from the segments' bases alone: a sealed
        segment ends before the next one's base, the active one at the log end."""
        log_ = self.log
        lo = log_.log_start_offset
        end = log_.log_end_offset
        listed = self.listed_segments()
        for k, (base, _segment) in enumerate(listed):
            first = max(base, lo)
            last = (listed[k + 1][0] if k + 1 < len(listed) else end) - 1
            last = min(last, end - 1)
            if first <= last and last >= start:
                yield SegmentRange(first, last)
