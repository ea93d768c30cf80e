"""Sizing segments for ``records.jsonl``: from the layout cache when it knows them, else by the
length-only pass spread over worker threads, with progress logged when it takes more than a second.

Used by the mount (the first ``stat`` of a partition) and by ``kafkafs index`` (ahead of time).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from ...errors import KafkafsError
from ...storage.cachedir import segment_path
from ...storage.segment import LogSegment
from . import layout as layout_module  # GROUP_BYTES read at call time (tests make pieces smaller)
from .layout import SegmentLayout, SpanPieces, lay_out_span, split_points
from .layoutcache import LayoutCache, LayoutKey, stat_key
from .render import Renderer

__all__ = ["SizingJob", "Progress", "size_layouts", "load_cached", "store_layout", "log_progress", "SIZING_THREADS"]

log = logging.getLogger("kafkafs.fs")

#: Worker threads for a first sizing. Reads release the GIL, and so does the compiled kernel's pass:
#: more threads than cores keep the disk busy while others count.
SIZING_THREADS = max(2, min(8, 2 * (os.cpu_count() or 1)))
#: A segment laid out for the first time is cut into parts of at least this many bytes, sized at once.
SPLIT_BYTES = 16 * 1024 * 1024
#: Progress is reported for sizings that take longer than this (seconds), then every this often.
PROGRESS_AFTER = 1.0


class SizingJob(NamedTuple):
    """One segment's layout to size, for the partition ``label`` names."""

    layout: SegmentLayout
    renderer: Renderer
    label: str


class Progress:
    """Segments and bytes of log sized so far. ``report(progress)`` is called at most once every
    ``every`` seconds once ``after`` seconds have passed, and once at the end if it was called before.

    Thread-safe: :meth:`advance` may be called from any number of threads."""

    def __init__(
        self,
        segments: int,
        total_bytes: int,
        report: Callable[[Progress], None],
        *,
        after: float = PROGRESS_AFTER,
        every: float = PROGRESS_AFTER,
    ) -> None:
        self.segments = segments
        self.total_bytes = total_bytes
        self.done_segments = 0
        self.done_bytes = 0
        self.started = time.monotonic()
        self._report = report
        self._after = after
        self._every = every
        self._last: float | None = None
        self.reported = False
        self.finished = False
        self._guard = threading.Lock()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def mb_per_s(self) -> float:
        return self.done_bytes / 1e6 / max(self.elapsed, 1e-9)

    def advance(self, segments: int, nbytes: int) -> None:
        with self._guard:
            self.done_segments += segments
            self.done_bytes += nbytes
            now = time.monotonic()
            due = now - self.started >= self._after and (self._last is None or now - self._last >= self._every)
            if due:
                self._last = now
                self.reported = True
        if due:
            self._report(self)

    def finish(self) -> None:
        with self._guard:
            self.finished = True
            due = self.reported or self.elapsed >= self._after
        if due:
            self._report(self)


def load_cached(layout: SegmentLayout, renderer: Renderer, cache: LayoutCache) -> bool:
    """Fill a new, unfiltered layout from the layout cache when its entry matches the segment exactly."""
    if not cache.enabled or layout.filter.lo is not None or len(layout):
        return False
    segment = layout.segment
    key = _key(layout, renderer)
    if key is None or key.size != segment.size:
        return False
    found = cache.load(key)
    if found is None:
        return False
    layout.restore(found)
    layout.stored_key = key
    return True


def store_layout(
    layout: SegmentLayout, renderer: Renderer, cache: LayoutCache, before: LayoutKey | None = None
) -> bool:
    """Keep a whole, undamaged layout in the cache, when the segment is still what was laid out
    (``before``: its key when sizing started) and the entry does not already hold it."""
    if not cache.enabled or not layout.cacheable():
        return False
    key = _key(layout, renderer)
    if key is None or key.size != layout.segment.size or (before is not None and key != before):
        return False
    if key == layout.stored_key:
        return False
    if cache.store(key, layout.cached(), segment_path(layout.segment.log_path)):
        layout.stored_key = key
        return True
    return False


def _read_ahead(segment: LogSegment, start: int, end: int | None = None) -> None:
    """Have the kernel read bytes ``start .. end`` of the segment (to its end: None) into the page cache
    now: the length pass reads them a MiB at a time, and its disk reads then overlap the counting
    instead of waiting between chunks. Changes no byte; a file that cannot be opened is left to the
    pass, which says what is wrong."""
    try:
        handle = segment.records.handle()  # held while used (see FileRecords.read_at)
        os.posix_fadvise(handle.fd, start, 0 if end is None else end - start, os.POSIX_FADV_WILLNEED)
    except (OSError, KafkafsError):
        pass


def _key(layout: SegmentLayout, renderer: Renderer) -> LayoutKey | None:
    return stat_key(layout.segment.log_path, renderer.topic, renderer.partition, renderer.mode, renderer.decoder_id)


def size_layouts(
    jobs: Sequence[SizingJob],
    cache: LayoutCache,
    progress: Progress | None = None,
    *,
    threads: int = SIZING_THREADS,
    store: Callable[[SizingJob], bool] | None = None,
) -> None:
    """Lay out every job's segment (the length-only pass), over up to ``threads`` threads; layouts
    that cover a segment unchanged while it was sized go to the cache (``store(job)`` decides which,
    default all). A large segment laid out for the first time is cut at offset-index positions and its
    parts sized on several threads (the kernel releases the GIL). Exceptions of a job propagate once
    the others are done."""
    advance = (lambda nbytes: progress.advance(0, nbytes)) if progress is not None else None
    parts = _parts(jobs, threads)
    # the file as it was before sizing began (a layout only stored if it still is): taken here for the
    # jobs cut into parts (their layout grows before run), in run itself (on the pool) for the others
    before = {id(job): _key(job.layout, job.renderer) for job in jobs if id(job) in parts}

    def run(job: SizingJob) -> None:
        layout = job.layout
        key = before[id(job)] if id(job) in before else _key(layout, job.renderer) if not len(layout) else None
        if layout.scanned < layout.segment.size:
            _read_ahead(layout.segment, layout.scanned)
        layout.extend(job.renderer, advance)
        if store is None or store(job):
            store_layout(layout, job.renderer, cache, key)
        if progress is not None:
            progress.advance(1, 0)

    def size_part(job: SizingJob, start: int, end: int) -> SpanPieces:
        _read_ahead(job.layout.segment, start, end)
        return lay_out_span(job.renderer, job.layout.segment, start, end, layout_module.GROUP_BYTES, advance,
                            min_offset=job.layout.segment.base_offset if start == 0 else None,
                            upper=job.layout.upper)

    if len(jobs) + sum(len(p) - 1 for p in parts.values()) <= 1 or threads <= 1:
        for job in jobs:
            run(job)
    else:
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="kafkafs-size") as pool:
            found = {
                id(job): [pool.submit(size_part, job, a, b) for a, b in parts[id(job)]]
                for job in jobs if id(job) in parts
            }
            futures = [pool.submit(run, job) for job in jobs if id(job) not in parts]
            for job in jobs:
                if id(job) in found:
                    _take(job.layout, parts[id(job)], [f.result() for f in found[id(job)]])
                    futures.append(pool.submit(run, job))  # what the parts did not take, and the cache
            for future in futures:
                future.result()
    if progress is not None:
        progress.finish()


def _parts(jobs: Sequence[SizingJob], threads: int) -> dict[int, list[tuple[int, int]]]:
    """For each job worth cutting (a new unfiltered layout of a large segment of an ordinary topic): the
    byte ranges of its parts, cut at offset-index positions."""
    out = {}
    for job in jobs:
        layout, segment = job.layout, job.layout.segment
        count = min(threads, segment.size // SPLIT_BYTES)
        if count < 2 or len(layout) or layout.scanned or not layout.uses_spans(job.renderer):
            continue
        try:
            points = split_points(segment, count)
        except Exception:  # an index that cannot say: the segment is sized in one pass
            continue
        if points:
            bounds = [0, *points, segment.size]
            out[id(job)] = list(zip(bounds, bounds[1:], strict=False))
    return out


def _take(layout: SegmentLayout, bounds: list[tuple[int, int]], parts: list[SpanPieces]) -> None:
    """Lay the parts' pieces end to end, up to the first part that stopped before its end (the rest is
    laid out from there, in one pass)."""
    with layout.lock:
        for (start, end), found in zip(bounds, parts, strict=True):
            if layout.scanned != start:
                return
            layout.take(found)
            if found.stop != end:
                return


def log_progress(name: str) -> Callable[[Progress], None]:
    """A ``report`` for :class:`Progress` that logs one line (the mount's first sizing)."""

    def report(p: Progress) -> None:
        word = "sized" if p.finished else "sizing"
        log.info(
            "%s: %s %d/%d segments (%.0f of %.0f MB) in %.1f s, %.0f MB/s",
            name, word, p.done_segments, p.segments, p.done_bytes / 1e6, p.total_bytes / 1e6, p.elapsed, p.mb_per_s,
        )

    return report
