"""``kafkafs index LOGDIR``: fill the layout cache (the size cache) and the size summary ahead of time, so
that the mount answers ``ls -l`` at once.

Opens the log directory read-only (it writes nothing there), lays out every segment the cache does not
know yet over worker threads, and stores the layouts; a progress bar on stderr (one line every few
seconds when stderr is not a terminal: systemd's journal, cron mail). Suits ``ExecStartPre=`` and cron.
"""

from __future__ import annotations

import os
import sys
import time
from typing import NamedTuple, TextIO

from ...format.decoders import decoder_for
from ...storage.config import Settings
from ...storage.logdir import LogDir
from ...storage.schemas import load_registry
from .layoutcache import LayoutCache, check_outside, default_cache_dir
from .partition import PartitionState
from .render import report_corrupt, reported_count, too_large_count
from .sizing import SIZING_THREADS, Progress, size_layouts
from .summary import SizeSummary

__all__ = ["IndexReport", "index_logdir", "index_keys"]


class IndexReport(NamedTuple):
    partitions: int
    segments: int
    from_cache: int
    sized: int
    bytes_sized: int
    seconds: float
    cache_dir: str
    keys: str | None = None  #: what index_keys did, when asked
    damaged: int = 0  #: damages found (each logged once as an ERROR, SPEC §3); the command exits 1
    #: of ``damaged``, batches too large to inflate (valid data whose records the views cannot show, R15-7)
    too_large: int = 0

    def line(self) -> str:
        return (
            f"indexed {self.partitions} partitions, {self.segments} segments "
            f"({self.from_cache} from the cache, {self.sized} sized: {self.bytes_sized / 1e6:.1f} MB) "
            f"in {self.seconds:.1f} s into {self.cache_dir}"
        ) + (f"\n{self.keys}" if self.keys else "")


def _bar(out: TextIO, tty: bool, what: str = "index"):
    def report(p: Progress) -> None:
        mb, total = p.done_bytes / 1e6, p.total_bytes / 1e6
        if tty:
            width = 30
            filled = int(width * p.done_bytes / p.total_bytes) if p.total_bytes else width
            out.write(
                f"\r{what}: [{'#' * filled}{'.' * (width - filled)}] {p.done_segments}/{p.segments} segments "
                f"{mb:.0f}/{total:.0f} MB {p.mb_per_s:.0f} MB/s "
            )
            if p.finished:
                out.write("\n")
        elif not p.finished:  # the command's summary line follows
            out.write(f"{what}: {p.done_segments}/{p.segments} segments, {mb:.0f}/{total:.0f} MB, {p.mb_per_s:.0f} MB/s\n")
        out.flush()

    return report


def index_logdir(
    path: str | os.PathLike[str],
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    mode: str = "auto",
    settings: Settings | None = None,
    out: TextIO | None = sys.stderr,
    threads: int = SIZING_THREADS,
    schemas: str | os.PathLike[str] | None = None,
    keys: bool = False,
) -> IndexReport:
    """Lay out every partition of the log directory at ``path`` into the layout cache; returns counts.

    ``cache_dir`` defaults to the mount's (``$XDG_CACHE_HOME/kafkafs``); InvalidInput when it is
    inside the log directory. ``out`` None: no progress output. ``keys``: then build the key indexes
    too (:func:`index_keys`)."""
    started = time.monotonic()
    damaged_before, too_large_before = reported_count(), too_large_count()
    directory = check_outside(cache_dir if cache_dir is not None else default_cache_dir(), path)
    cache = LayoutCache(directory)
    registry = load_registry(path, schemas)  # as the mount decodes (SPEC §8), so its sizes match
    with LogDir(path, settings) as logdir:
        states = []
        for i, name in enumerate(logdir.partition_names()):
            log_ = logdir.log(name)
            states.append(PartitionState(name, i, log_, mode, cache=cache, decoder=decoder_for(log_.topic, registry, mode)))
        segments = sum(len(state.listed_segments()) for state in states)
        jobs = [job for state in states for job in state.sizing_jobs()]
        total = sum(max(job.layout.segment.size - job.layout.scanned, 0) for job in jobs)
        progress = None
        if out is not None and jobs:
            tty = out.isatty()
            progress = Progress(len(jobs), total, _bar(out, tty), after=0.0 if tty else 5.0,
                                every=0.2 if tty else 5.0)
        size_layouts(jobs, cache, progress, threads=threads)
        # the sizes the next read-only mount answers a stat with before it opens a partition
        summary = SizeSummary(directory, logdir.path, mode)
        for state in states:
            state.composition()  # every segment laid out by now: nothing renders
            start = logdir.log_start_offsets.get((state.log.topic, state.log.partition))
            summary.record(state.name, start, state.renderer.decoder_id, state.measured)
        summary.keep_only({state.name for state in states})
        summary.save()
    keys_line = index_keys(path, cache_dir=directory, settings=settings, out=out, threads=threads) if keys else None
    return IndexReport(len(states), segments, cache.hits, len(jobs), total,
                       time.monotonic() - started, str(directory), keys_line, reported_count() - damaged_before,
                       too_large_count() - too_large_before)


def index_keys(
    path: str | os.PathLike[str],
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    settings: Settings | None = None,
    out: TextIO | None = sys.stderr,
    threads: int = SIZING_THREADS,
) -> str:
    """Build the key index (:mod:`kafkafs.storage.keyindex`) of every sealed segment of the log
    directory at ``path`` into the cache folder, with the same progress bar; returns a summary line."""
    from concurrent.futures import ThreadPoolExecutor

    from ...storage.keyindex import KeyIndexStore
    from ...storage.log import Log
    from ...storage.segment import LogSegment

    started = time.monotonic()
    directory = check_outside(cache_dir if cache_dir is not None else default_cache_dir(), path)
    store = KeyIndexStore(directory, max_open=0)
    with LogDir(path, settings) as logdir:
        jobs: list[tuple[Log, LogSegment]] = []
        for name in logdir.partition_names():
            log_ = logdir.log(name)
            jobs.extend((log_, segment) for segment in list(log_.segments)[:-1])
        progress = None
        if out is not None and jobs:
            tty = out.isatty()
            progress = Progress(len(jobs), sum(s.size for _l, s in jobs), _bar(out, tty, "keys"),
                                after=0.0 if tty else 5.0, every=0.2 if tty else 5.0)

        def one(job) -> None:
            log_, segment = job
            on_bytes = (lambda n: progress.advance(0, n)) if progress is not None else None
            index = store.get(segment, log_.topic, log_.partition, on_bytes=on_bytes,
                              upper=log_.segments.upper(segment.base_offset))
            damage = index.damage(segment.log_path) if index is not None else None
            if damage is not None:  # said once, as the mount says it; counted in the report
                report_corrupt(damage)
            if progress is not None:
                progress.advance(1, 0)

        with ThreadPoolExecutor(max(1, threads)) as pool:
            list(pool.map(one, jobs))
        if progress is not None:
            progress.finish()
    return (f"key indexes: {len(jobs)} sealed segments ({store.loaded} from the cache, {store.built} built) "
            f"in {time.monotonic() - started:.1f} s into {directory}")
