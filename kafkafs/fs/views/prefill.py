"""``kafkafs index LOGDIR``: fill the layout cache (the size cache) ahead of time, so that the mount answers ``ls -l`` at once.

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
from .sizing import SIZING_THREADS, Progress, size_layouts

__all__ = ["IndexReport", "index_logdir"]


class IndexReport(NamedTuple):
    partitions: int
    segments: int
    from_cache: int
    sized: int
    bytes_sized: int
    seconds: float
    cache_dir: str

    def line(self) -> str:
        return (
            f"indexed {self.partitions} partitions, {self.segments} segments "
            f"({self.from_cache} from the cache, {self.sized} sized: {self.bytes_sized / 1e6:.1f} MB) "
            f"in {self.seconds:.1f} s into {self.cache_dir}"
        )


def _bar(out: TextIO, tty: bool):
    def report(p: Progress) -> None:
        mb, total = p.done_bytes / 1e6, p.total_bytes / 1e6
        if tty:
            width = 30
            filled = int(width * p.done_bytes / p.total_bytes) if p.total_bytes else width
            out.write(
                f"\rindex: [{'#' * filled}{'.' * (width - filled)}] {p.done_segments}/{p.segments} segments "
                f"{mb:.0f}/{total:.0f} MB {p.mb_per_s:.0f} MB/s "
            )
            if p.finished:
                out.write("\n")
        elif not p.finished:  # the command's summary line follows
            out.write(f"index: {p.done_segments}/{p.segments} segments, {mb:.0f}/{total:.0f} MB, {p.mb_per_s:.0f} MB/s\n")
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
) -> IndexReport:
    """Lay out every partition of the log directory at ``path`` into the layout cache; returns counts.

    ``cache_dir`` defaults to the mount's (``$XDG_CACHE_HOME/kafkafs``); InvalidInput when it is
    inside the log directory. ``out`` None: no progress output."""
    started = time.monotonic()
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
    return IndexReport(len(states), segments, cache.hits, len(jobs), total,
                       time.monotonic() - started, str(directory))
