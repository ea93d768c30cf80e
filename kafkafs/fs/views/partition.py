"""One partition as the mount sees it: its Log, the layouts of its views, small caches, change events
(the words: :mod:`.layout`).

Everything here blocks (files, decoding) and is called from worker threads; the state it keeps is
guarded by locks and safe to share between them. Nothing here knows FUSE or the tree.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, NamedTuple

from ...errors import CorruptRecordError, SegmentClosedError
from ...storage.cachedir import FileKey
from ...storage.local_log import LocalLog
from ...storage.log import Log
from ...storage.records import BatchView
from ...storage.segment import LogSegment
from .layout import Layout, SegmentLayout
from .layoutcache import LayoutCache, LayoutKey
from .ranges import RangeLayout
from .reading import Bytes, Part, PieceCache, PieceRenderer, read_cached, read_parts
from .record import RecordFinder
from .render import Filter, Renderer, SegmentBytes, UnreadableError, decoder_identity, disk_error, unreadable
from .sizing import Progress, SizingJob, load_cached, log_progress, size_layouts, store_layout

if TYPE_CHECKING:
    from ...format.decoders import Decoder

__all__ = ["PartitionState", "Composition", "Shape", "OffsetRun", "SegmentRange"]

log = logging.getLogger("kafkafs.fs")

#: A read-only log is re-read at most this often when a file that grows is looked at.
REFRESH_INTERVAL = 0.05
#: How many times records.jsonl is laid out when segments go while it is (:meth:`PartitionState.composition`).
COMPOSE_TRIES = 4
#: A partition whose active segment was written this recently is live (:meth:`PartitionState.live`).
LIVE_SECONDS = 300

class Shape(NamedTuple):
    """A cheap fingerprint of what the views depend on: it changes whenever they might."""

    segments: int
    first_base: int | None
    last_base: int | None
    last_size: int
    #: the size of the segment before the last: the one the writer rolled last may be read to its final
    #: size after the new one is listed, and a composition laid out to its old size must not be served
    rolled_size: int
    log_start_offset: int
    generation: int  # the log's compaction swaps (a swap changes no other field)
    decoding: int  # the decoders the partition has had (:meth:`PartitionState.use_decoder`)


class Composition(NamedTuple):
    r"""``records.jsonl`` at one moment: the segment layouts end to end (:class:`~.reading.Part`\ s)."""

    shape: Shape
    parts: list[Part]
    starts: list[int]
    total: int


class OffsetRun(NamedTuple):
    """Offsets for a ``by-offset/`` listing: ``first..last`` when ``offsets`` is None, else exactly those."""

    first: int
    last: int
    offsets: list[int] | None
    max_timestamp: int
    #: the batch holding them as read (None: not read), for the sizes of their files (:meth:`RecordFinder.sizes`)
    view: BatchView | None = None


class SegmentRange(NamedTuple):
    """A ``by-offset/<first>-<last>.jsonl`` listed for one segment of a partition past the list limit."""

    first: int
    last: int


class _Counted(NamedTuple):
    """``by-offset/``'s record count past the list limit, and what it was counted over."""

    key: tuple[int, int, tuple[tuple[int, int], ...]]
    end: int
    active_size: int
    records: int


def _renderer(layout: Layout) -> Renderer:
    """The renderer ``layout`` was laid out with (every layout a :class:`PartitionState` makes names one)."""
    assert layout.renderer is not None
    return layout.renderer


class PartitionState:
    """A partition folder of the mount; ``index`` is its number for the mount's lifetime.

    ``cache`` keeps segment layouts across mounts (see :mod:`.layoutcache`); ``decoder`` renders
    an internal topic's records (None for ordinary topics)."""

    def __init__(
        self,
        name: str,
        index: int,
        log_: Log,
        mode: str,
        *,
        cache: LayoutCache | None = None,
        decoder: Decoder | None = None,
    ) -> None:
        self.name = name
        self.index = index
        self.log = log_
        self.cache = cache if cache is not None else LayoutCache(None)
        #: the topic, partition, values mode and decoder its views render with
        self.renderer = Renderer(log_.topic, log_.partition, mode, decoder=decoder)
        self._pieces = PieceRenderer(self.renderer, log_, self.renderer.on_corrupt)
        #: how many times the decoder changed (:meth:`use_decoder`): part of the :class:`Shape`
        self.decoding = 0
        self._layouts: dict[int, SegmentLayout] = {}
        self._replaced: list[SegmentLayout] = []  # layouts replaced by another file's (under _compose_lock)
        #: ``on_segment_gone(key)``: a segment whose layout was stored as ``key`` left the log (the mount
        #: drops its key index there); called from the thread that noticed, never under a lock of this state
        self.on_segment_gone: Callable[[LayoutKey], None] | None = None
        self._compose_lock = threading.Lock()
        self._decoder_lock = threading.Lock()  # one use_decoder at a time (it never waits for a composition)
        self._composition: Composition | None = None
        #: ``by-offset/<offset>.json``: one record from the batch that holds it
        self.record_finder = RecordFinder(log_, self.renderer, catch_up=None if log_.writable else self.catch_up)
        self._refresh_lock = threading.Lock()
        self._last_refresh = time.monotonic()  # the log was just read: the first look is due after the interval
        self._counted: _Counted | None = None
        self._listeners: list[Callable[[PartitionState], None]] = []
        self.last_change_ns = time.time_ns()
        #: changes that were not only growth (segments removed, a compaction swap, a truncation)
        self.rewrites = 0
        #: True once the partition changed after it was first looked at (records arrived): see :meth:`live`
        self.grew = False
        #: True while the mount's inotify watch reports this folder's changes (:mod:`kafkafs.fs.watching`):
        #: the mount then refreshes it on events and need not look again at each ``stat``
        self.watched = False
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

    def shape(self) -> Shape:
        """A cheap fingerprint of what the views depend on: it changes whenever they might."""
        segments = self.log.segments
        first = segments.first()
        last = segments.last()
        rolled = segments.lower(last.base_offset) if last else None
        return Shape(
            len(segments),
            first.base_offset if first else None,
            last.base_offset if last else None,
            last.size if last else 0,
            rolled.size if rolled else 0,
            self.log.log_start_offset,
            self.log.generation,
            self.decoding,
        )

    def _on_log_change(self, _log: LocalLog) -> None:
        self._changed()

    def _changed(self) -> None:
        shape = self.shape()
        if shape == self._last_shape:
            return
        old = self._last_shape
        if (
            shape.segments < old.segments
            or shape.first_base != old.first_base
            or (shape.last_base == old.last_base and shape.last_size < old.last_size)
            or shape.generation != old.generation
            or shape.log_start_offset != old.log_start_offset  # a checkpointed log start (review8 R8-5)
        ):
            # segments went away or the active one was cut: offsets may now hold other records
            self.record_finder.clear()
            self.rewrites += 1
            self._drop_gone()
        self._last_shape = shape
        self.grew = True
        self.last_change_ns = time.time_ns()
        for callback in list(self._listeners):
            try:
                callback(self)
            except Exception:  # a listener must never break an append
                log.exception("change listener failed")
        self.prev_active_base = self._active_base()

    def use_decoder(self, decoder: Decoder | None) -> bool:
        """Render with ``decoder`` from now on (a Schema Registry's schemas changed: records framed with a
        new id decode, a hard-deleted one's go back to bytes); False when it renders as the one in use
        (the same :func:`~.render.decoder_identity`), and nothing changes.

        The same bytes then render to other lengths, so this is a rewrite, as compaction is: every
        layout is laid out again with the new renderer (sizes, pieces, the layout cache's keys: they
        name the decoder), ``records.jsonl`` gets a new generation, kept records go, and the listeners
        hear of it (the kernel drops what it cached). A reader holding an old layout keeps it, and its
        pieces keep rendering with the renderer it was laid out with (:attr:`.layout.Layout.renderer`):
        whole lines of the lengths it was shown. Safe from any thread (the mount's poll loop and its
        watcher call it), and quick: it never waits for a composition being laid out (one laid out
        meanwhile is of the shape before, so never taken as current, and its layouts of the old renderer
        are not kept: :meth:`_layout`)."""
        with self._decoder_lock:
            old = self.renderer
            if decoder_identity(decoder) == old.decoder_id:
                return False
            renderer = Renderer(old.topic, old.partition, old.mode, old.on_corrupt, decoder)
            self.renderer = renderer
            self._pieces.renderer = renderer  # (for layouts that name none: every one of this state names its own)
            self.record_finder = RecordFinder(self.log, renderer, catch_up=self.record_finder.catch_up)
            self._layouts = {}
            self._composition = None
            self.decoding += 1
            self.rewrites += 1  # (here, not in _changed: a refresh on another thread may tell the listeners first)
        log.debug("%s: the schemas changed: its records render again", self.name)
        self._changed()
        return True

    def live(self) -> bool:
        """Whether records may arrive while a file of this partition is open: a writable log (a ``--rw``
        mount), one that changed since it was first looked at, or one whose active segment was written
        in the last :data:`LIVE_SECONDS` (a broker's). Files that grow are then opened with direct I/O
        (issue 20): a read that ends at the end of the file makes the kernel zero the rest of its last
        page, and when the file grows the kernel shows the new size before it drops that page, so a
        reader in between would get NUL bytes. Without the page cache, no page is kept."""
        if self.log.writable or self.grew:
            return True
        active = self.log.active_segment
        written = active.last_modified_ms() if active is not None else None
        return written is not None and time.time() * 1000 - written < LIVE_SECONDS * 1000

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

    def catch_up(self) -> bool:
        """A lookup past the partition's known end (``by-offset/N.json``, a range, ``by-time/TS.json``):
        read the log again once before the answer is ENOENT or short, so that what another process
        appended a moment ago resolves (SPEC §3 "Live"; a watched partition's refresh may lag its
        events under load). Waits for a refresh already running instead of skipping it, and does not
        refresh again when one started after this call did (concurrent lookups share one). True when
        the partition changed."""
        if self.log.writable:
            return False
        asked = time.monotonic()
        before = self._last_shape
        with self._refresh_lock:
            if self._last_refresh < asked:  # no refresh began since the question was asked: one now
                self._last_refresh = time.monotonic()
                self.log.refresh()
                self._changed()
        return self._last_shape != before

    # ------------------------------------------------------------------------------------------ records.jsonl

    def _layout(self, base: int, segment: LogSegment) -> SegmentLayout:
        """The segment's layout (callers hold ``_compose_lock``): kept, else from the layout cache, else new."""
        layout = self._layouts.get(base)
        lo = max(self.log.log_start_offset, base)
        higher = self.log.segments.higher(base)
        upper = higher.base_offset if higher is not None else None
        if (
            layout is None
            or layout.segment is not segment
            or layout.lo != lo
            or layout.scanned > segment.size
            or layout.renderer is not self.renderer  # laid out before the decoder changed (use_decoder)
        ):
            # new, or the file was truncated: lay it out afresh (upper: its last batch is judged against
            # the next segment's base offset, SPEC §4)
            if layout is not None and layout.segment is not segment and layout.stored_key is not None:
                self._replaced.append(layout)  # another file at this base now (a compaction swap)
            layout = SegmentLayout(segment, lo, upper, self.renderer)
            load_cached(layout, self.renderer, self.cache)
            self._layouts[base] = layout
        elif layout.upper is None and upper is not None:
            layout.upper = upper  # the segment rolled: batches laid out from now on know what follows
        return layout

    def listed_segments(self) -> list[LogSegment]:
        """The segments the views show: those holding offsets past the log start, and the active one."""
        start = self.log.log_start_offset
        active = self.log.active_segment
        # next_offset scans a segment's tail: only asked of segments that start at or below the log start
        return [segment for segment in self.log.segments
                if segment is active or segment.base_offset > start or segment.next_offset > start]

    def sizing_jobs(self) -> list[SizingJob]:
        """The segments of ``records.jsonl`` not laid out yet (after asking the layout cache)."""
        with self._compose_lock:
            jobs = []
            for segment in self.listed_segments():
                layout = self._layout(segment.base_offset, segment)
                if not layout.current():
                    jobs.append(SizingJob(layout, _renderer(layout), self.name))
            return jobs

    def _store_now(self, job: SizingJob) -> bool:
        # sealed segments at once; the active one only when first laid out (later: at close)
        return job.layout.segment is not self.log.active_segment or job.layout.stored_key is None

    def composition(self) -> Composition:
        """The current layout of ``records.jsonl`` (every segment laid out; cached until a change). A
        segment that another process's compaction or retention removed while it was being laid out (the
        log noticed and closed it: :class:`~kafkafs.errors.SegmentClosedError`) is left out: the
        segments are listed again (review8 R8-4: ``tail -f``'s read got ESTALE)."""
        shape = self.shape()
        current = self._composition
        if current is not None and current.shape == shape:
            return current
        for attempt in range(COMPOSE_TRIES):
            try:
                return self._compose()
            except SegmentClosedError:
                if attempt == COMPOSE_TRIES - 1 or self.shape() == shape:
                    raise  # the log has not changed: it is not a segment that went meanwhile
                shape = self.shape()
        raise AssertionError("unreachable")

    def _compose(self) -> Composition:
        with self._compose_lock:
            shape = self.shape()
            current = self._composition
            if current is not None and current.shape == shape:
                return current
            layouts = [self._layout(segment.base_offset, segment) for segment in self.listed_segments()]
            jobs = [SizingJob(layout, _renderer(layout), self.name) for layout in layouts if not layout.current()]
            if jobs:
                total = sum(max(job.layout.segment.size - job.layout.scanned, 0) for job in jobs)
                progress = Progress(len(jobs), total, log_progress(self.name))
                size_layouts(jobs, self.cache, progress, store=self._store_now)
            parts: list[Part] = []
            starts: list[int] = []
            total = 0
            for layout in layouts:
                count = len(layout)
                if count:
                    parts.append(Part(layout, count, total))
                    starts.append(total)
                    total += layout.total(count)
            seen = {layout.segment.base_offset for layout in layouts}
            gone = [self._layouts.pop(b) for b in [b for b in self._layouts if b not in seen]]
            composition = self._composition = Composition(shape, parts, starts, total)
            gone += self._replaced
            self._replaced = []
        self._segments_gone(gone)
        return composition

    def _drop_gone(self) -> None:
        """Let go of the layouts of segments that left the log (retention, compaction), of their cache
        entries, and of the composition laid out before (it shows them: review15 R15-5, the memory of a
        partition nobody reads again held every segment it had), without waiting for a composition
        being built (it drops them itself)."""
        if not self._compose_lock.acquire(blocking=False):
            return
        try:
            bases = {segment.base_offset for segment in self.log.segments}
            gone = [self._layouts.pop(b) for b in [b for b in self._layouts if b not in bases]]
            gone += self._replaced
            self._replaced = []
            current = self._composition
            if current is not None and current.shape != self.shape():
                self._composition = None
        finally:
            self._compose_lock.release()
        self._segments_gone(gone)

    def _segments_gone(self, layouts: list[SegmentLayout]) -> None:
        """Remove the cache entries (layout, key index) of segments no longer in the views whose file is
        gone (:meth:`LayoutCache.discard` keeps those still on disk). Never fails the caller."""
        for layout in layouts:
            key = layout.stored_key
            if key is None:
                continue
            try:
                self.cache.discard(key)
                if self.on_segment_gone is not None:
                    self.on_segment_gone(key)
            except Exception:  # the cache is an optimisation
                log.exception("could not drop the cache entries of %s", layout.segment.log_path)

    def cached_composition(self) -> Composition | None:
        """The current composition if it is known without rendering anything new."""
        current = self._composition
        if current is not None and current.shape == self.shape():
            return current
        return None

    def read_composition_now(self, view: Composition, offset: int, size: int, cache: PieceCache) -> Bytes | None:
        """Bytes of ``view`` from the pieces ``cache`` holds alone (safe on the FUSE loop); None when a
        piece it needs is not rendered yet."""
        return read_cached(view.parts, view.starts, offset, size, cache)

    def measured(self, files: dict[str, FileKey], renderer: Renderer | None = None) -> tuple[int, str | None] | None:
        """``records.jsonl``'s size and the active segment's file name, when its current composition is
        laid out over exactly the segment files ``files`` (name -> identity, as they are now: every
        listed segment laid out to its file's size, undamaged) and, given a ``renderer``, with it (not a
        decoder that came after: :meth:`use_decoder`); else None. For the size summary (:mod:`.summary`),
        which keeps the size for as long as those files stay as they are."""
        with self._compose_lock:
            if renderer is not None and renderer is not self.renderer:
                return None
            current = self._composition
            if current is not None and renderer is not None and any(
                    part.layout.renderer is not renderer for part in current.parts):
                return None
            if current is None or current.shape != self.shape():
                return None
            segments = list(self.log.segments)
            if {s.log_path.name for s in segments} != {n for n in files if n.endswith(".log")}:
                return None
            for segment in self.listed_segments():
                layout = self._layouts.get(segment.base_offset)
                key = files.get(segment.log_path.name)
                if (layout is None or layout.segment is not segment or key is None or layout.broken or layout.bad
                        or layout.scanned != key.size or segment.size != key.size):
                    return None
            for part in current.parts:
                laid = part.layout
                if not isinstance(laid, SegmentLayout) or self._layouts.get(laid.segment.base_offset) is not laid \
                        or part.pieces != len(laid):
                    return None
            active = self.log.active_segment
            return current.total, active.log_path.name if active is not None else None

    def save_layouts(self) -> int:
        """Store the layouts the cache does not hold yet (the active segment's, at unmount)."""
        with self._compose_lock:
            layouts = list(self._layouts.values())
        stored = 0
        for layout in layouts:
            if layout.current() and store_layout(layout, _renderer(layout), self.cache):
                stored += 1
        return stored

    def layout_of(self, base: int) -> SegmentLayout | None:
        """A segment's layout as far as it has been built, or as the layout cache holds it (for ranges
        to reuse); None when there is none with a piece."""
        layout = self._layouts.get(base)
        if layout is None and self.cache.enabled:
            segment = self.log.segments.get(base)
            if segment is not None and segment is not self.log.active_segment:
                with self._compose_lock:
                    layout = self._layout(base, segment)
        if layout is None or not len(layout):
            return None
        return layout

    # ------------------------------------------------------------------------------------------ pieces

    def render_piece(
        self, layout: Layout, i: int, cache: PieceCache | None = None, pinned: SegmentBytes | None = None
    ) -> bytes | memoryview:
        """Piece ``i`` of ``layout`` as bytes (see :class:`~.reading.PieceRenderer`); ``pinned``: the
        segment's ``.log`` held open by a reader (:mod:`.streams`), read instead."""
        return self._pieces.render(layout, i, cache, pinned)

    @property
    def piece_renderer(self) -> PieceRenderer:
        """What renders this partition's pieces (an open file's cache renders its spans through it)."""
        return self._pieces

    def offset_range(self, first: int, last: int) -> RangeLayout:
        return RangeLayout(Filter(lo=max(first, self.log.log_start_offset), hi=last), self.renderer)

    def time_range(self, ts1: int, ts2: int) -> RangeLayout:
        layout = RangeLayout(Filter(lo=self.log.log_start_offset, ts_lo=ts1, ts_hi=ts2), self.renderer)
        if ts1 >= ts2:
            layout.complete = True
        return layout

    def extend_range(self, layout: RangeLayout) -> None:
        layout.extend(self.log, _renderer(layout), self.layout_of)

    def read_range(self, layout: RangeLayout, offset: int, size: int, cache: PieceCache, short: bool = False) -> Bytes:
        """Bytes of the range ``layout``; ``short``: a short read before a piece that cannot be read
        (:func:`~.reading.read_parts` ``short_at_damage``: a file read with direct I/O)."""
        count = len(layout)
        return read_parts([Part(layout, count, 0)], [0], offset, size, lambda p, i: self.render_piece(p, i, cache),
                          short_at_damage=short)

    def read_range_now(self, layout: RangeLayout, offset: int, size: int, cache: PieceCache) -> Bytes | None:
        """:meth:`read_range` from rendered pieces alone (safe on the FUSE loop), else None."""
        return read_cached([Part(layout, len(layout), 0)], [0], offset, size, cache)

    # ------------------------------------------------------------------------------------------ listing

    def offset_runs(self, start: int) -> Iterator[OffsetRun]:
        """The offsets present from ``start`` on, a batch at a time, reading headers only where the
        batch has no gaps. A batch that cannot be read is skipped (and logged). A sealed segment the disk
        will not give (EIO) is never left out: the rest of its offsets, up to the next segment's base, are
        listed as they are counted (:meth:`listed_records`), and their reads answer EIO (review11 R11-7)."""
        log_ = self.log
        pos = max(start, log_.log_start_offset)
        while pos < log_.log_end_offset:
            try:
                for segment, view in log_.batches(pos):
                    h = view.header
                    if h.magic == 2 and h.record_count == h.last_offset_delta + 1:
                        first = max(h.base_offset, pos)
                        if first <= h.last_offset:
                            yield OffsetRun(first, h.last_offset, None, h.max_timestamp, view)
                    else:
                        try:
                            batch = view.decode(validate=False, file=str(segment.log_path))
                        except CorruptRecordError as exc:
                            self.renderer.on_corrupt(exc)
                            batch = None
                        if batch is not None:
                            offsets = [o for o in batch.offsets if o >= pos]
                            if offsets:
                                yield OffsetRun(offsets[0], offsets[-1], offsets, h.max_timestamp, view)
                    pos = max(pos, h.last_offset + 1)
                return
            except (CorruptRecordError, OSError) as exc:
                floor = log_.segments.floor(pos)
                if isinstance(exc, OSError):  # a disk that will not give a segment: skipped, as damage is
                    if not disk_error(exc):
                        raise
                    exc = unreadable(exc, str(floor.log_path) if floor else None, None)
                self.renderer.on_corrupt(exc)
                higher = log_.segments.higher(floor.base_offset) if floor else None
                if higher is None:
                    return
                if isinstance(exc, UnreadableError) and pos < higher.base_offset:
                    yield OffsetRun(pos, higher.base_offset - 1, None, -1)
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
        key = (limit, log_.log_start_offset, tuple((s.base_offset, s.size) for s in listed[:-1]))
        size = listed[-1].size if listed else 0
        c = self._counted  # one tuple, replaced whole: safe across threads
        if c is not None and c.key == key and ((c.records > limit and end >= c.end) or (end, size) == (c.end, c.active_size)):
            return c.records
        count = 0
        for run in self.offset_runs(log_.log_start_offset):
            count += run.last - run.first + 1 if run.offsets is None else len(run.offsets)
            if count > limit:
                break
        self._counted = _Counted(key, end, size, count)
        return count

    def segment_ranges(self, start: int) -> Iterator[SegmentRange]:
        """One range per segment holding offsets >= ``start``, from the segments' bases alone: a sealed
        segment ends before the next one's base, the active one at the log end."""
        log_ = self.log
        lo = log_.log_start_offset
        end = log_.log_end_offset
        listed = self.listed_segments()
        for k, segment in enumerate(listed):
            first = max(segment.base_offset, lo)
            last = (listed[k + 1].base_offset if k + 1 < len(listed) else end) - 1
            last = min(last, end - 1)
            if first <= last and last >= start:
                yield SegmentRange(first, last)
