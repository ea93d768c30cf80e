"""Many batches of a segment at once, through the kernel's ``render_span_jsonl``: no Python per batch.

Sizing a segment (the length-only pass) reads it in chunks of :data:`CHUNK_BYTES` and lets the kernel
walk every whole uncompressed v2 batch of each chunk; the batches it does not take (compressed, legacy,
damaged) are left to the per-batch path of :mod:`kafkafs.fs.layout`, which also says what is wrong.
The kernel releases the GIL while it works, so a large segment is sized on several threads at once:
:func:`split_points` cuts it at offset-index positions (batch boundaries), each thread lays out its
part, and the parts are laid end to end.

Partitions with a decoder (internal topics, Schema Registry values) never come here. Functions only:
safe from any thread.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from ..format.jsonview import render_span_jsonl

if TYPE_CHECKING:
    from ..storage.segment import LogSegment
    from .layout import Renderer

__all__ = ["Run", "SpanRuns", "span_runs", "split_points", "CHUNK_BYTES"]

#: Bytes of log read and handed to the kernel per call while sizing.
CHUNK_BYTES = 1 << 20


class Run(NamedTuple):
    """A piece: whole batches in ``size`` bytes at ``position``, rendering to ``length`` bytes."""

    position: int
    size: int
    length: int
    last_offset: int


class SpanRuns(NamedTuple):
    """What :func:`span_runs` laid out, and where it stopped (``stop == end``: everything)."""

    runs: list[Run]
    stop: int


def _cut_off(buf: bytes, at: int) -> int:
    """0 when a whole batch (as far as its length field says) starts at ``at``, else the bytes it needs."""
    if len(buf) - at < 12:
        return 12
    need = int.from_bytes(buf[at + 8 : at + 12], "big", signed=True) + 12
    return need if need > 12 and at + need > len(buf) else 0


def span_runs(
    renderer: Renderer,
    segment: LogSegment,
    start: int,
    end: int,
    group_bytes: int,
    on_run: Callable[[int], None] | None = None,
) -> SpanRuns:
    """Lay out the batches between byte ``start`` (a batch boundary) and ``end`` of ``segment`` in runs of
    about ``group_bytes`` of log, until the first batch the kernel does not take; ``on_run(nbytes)``
    hears of each run (progress)."""
    runs: list[Run] = []
    pos = start
    want = CHUNK_BYTES
    while pos < end:
        buf = segment.read_at(pos, min(want, end - pos))
        if not buf:
            break
        result = render_span_jsonl(renderer.topic, renderer.partition, buf, renderer.mode, lengths=True)
        ends, lines, lasts = result.batch_ends, result.line_ends, result.last_offsets
        k, prev_end, prev_line = 0, 0, 0
        while k < len(ends):
            j = min(bisect_left(ends, prev_end + group_bytes, k), len(ends) - 1)
            run = Run(pos + prev_end, ends[j] - prev_end, lines[j] - prev_line, lasts[j])
            runs.append(run)
            if on_run is not None:
                on_run(run.size)
            prev_end, prev_line, k = ends[j], lines[j], j + 1
        pos += result.consumed
        if result.consumed < len(buf):
            need = _cut_off(buf, result.consumed)
            if not need or (result.consumed == 0 and want >= need):
                break  # a batch it does not take, or a partial one at the end: the per-batch path decides
            want = max(CHUNK_BYTES, need)
        else:
            want = CHUNK_BYTES
    return SpanRuns(runs, pos)


def split_points(segment: LogSegment, parts: int) -> list[int]:
    """Up to ``parts - 1`` batch boundaries that cut the segment into parts of similar size, from its
    offset index (sorted, without repeats, none at 0)."""
    base = segment.base_offset
    span = segment.next_offset - base
    points = set()
    for k in range(1, parts):
        position = segment.position_of(base + span * k // parts)
        if 0 < position < segment.size:
            points.add(position)
    return sorted(points)

