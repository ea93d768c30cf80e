"""``consume`` of a whole topic interleaved by timestamp, merged in the kernel: batches, not records.

Each partition's lines come in pieces of whole batches with each line's timestamp and end: spans
rendered on the worker threads as ``--no-interleave`` renders them (:mod:`.consume_spans`, a few
pieces ahead of the merge per partition), and batch by batch for what spans do not take (compressed
or legacy batches, decoders, damage, a start inside a batch). The kernel's ``Merger``
(``format/_kernel_merge.h``) writes the lines of all partitions in the order consume has always
printed them, heapq.merge's over ``(timestamp, partition, offset)`` per partition (the reference is
:meth:`kafkafs.consume._Reader.lines`, kept for machines without the kernel): a piece's lines are
copied as they are, and a partition gives way to another only where their timestamps interleave. No
Python object is made per record.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, BinaryIO

from .consume_plan import read_to_end
from .consume_spans import FIRST_READ_BYTES, PIECE_BYTES, Plan, SpanPool, across_swaps, span_chunks, spannable
from .errors import CorruptRecordError
from .format import kernel as _kernel

__all__ = ["available", "merge", "plan_for"]

#: Bytes of ``.log`` rendered ahead of the merge in all, over every partition (200 partitions: pieces
#: of 80 KiB, each one read and one render: the main thread, which merges, reads and hands out the
#: pieces, is what bounds an interleaved run on a busy machine, and its work goes with the pieces' count).
AHEAD_BYTES = 48 * 1024 * 1024
#: The merge's output: one write of about this many bytes.
OUT_BYTES = 1024 * 1024
_MIN_PIECE = 16 * 1024
_NO_LIMIT = 1 << 62


def available() -> bool:
    """Whether the kernel (and so the merge) is built."""
    return _kernel.KERNEL is not None


def plan_for(partitions: int) -> Plan:
    """Pieces small enough that every partition can have two in flight within :data:`AHEAD_BYTES`, one
    read of the ``.log`` each."""
    piece = max(_MIN_PIECE, min(PIECE_BYTES, AHEAD_BYTES // (3 * max(partitions, 1))))
    return Plan(read=piece, first_read=min(FIRST_READ_BYTES, piece), piece=piece, ahead=2, stamped=True)


def _feed(reader: Any, pool: SpanPool, plan: Plan) -> Generator[tuple[bytes, bytes, bytes], None, None]:
    """``(lines, timestamps, line ends)`` of ``reader``'s records from its ``next_offset``, advancing it."""
    log_ = reader.log
    if reader.done or read_to_end(reader.next_offset, log_):
        return
    plan = plan._replace(lo=max(reader.next_offset, log_.log_start_offset))  # as _Reader.lines trims
    # a batch too large to inflate at once is read a piece at a time (consume's _Reader.past_uninflatable)
    yield from reader.past_uninflatable(lambda: across_swaps(log_, lambda: _feed_once(reader, pool, plan)),
                                        lambda segment, view: _in_pieces(reader, segment, view))


def _in_pieces(reader: Any, segment: Any, view: Any) -> Generator[tuple[bytes, bytes, bytes], None, None]:
    """The records of a batch too large to inflate at once, from ``reader.next_offset`` on, as the merge
    loads them (the merge itself stops at ``e@TS``)."""
    for data, _offsets, stamps, ends in reader.in_pieces(segment, view, 4):
        if ends:
            yield data, stamps, ends


def _feed_once(reader: Any, pool: SpanPool, plan: Plan) -> Generator[tuple[bytes, bytes, bytes], None, None]:
    log_ = reader.log
    if spannable(reader.mode, reader.decoder):
        yield from span_chunks(reader, pool, plan)
        return
    for segment, view in log_.batches(reader.next_offset):
        lines, stamps, ends = reader.stamped_lines(segment, view, plan.lo)
        if ends:
            yield lines, stamps, ends


def merge(readers: list, out: BinaryIO, pool: SpanPool, stop_ts: int | None, count: int | None,
          on_damage: Callable[[CorruptRecordError | OSError], None] | None = None) -> int:
    """Write the records now in ``readers``' partitions (consume's ``_Reader``s, one per partition)
    to ``out`` in timestamp order (ties by partition); at most ``count``. Returns how many were
    written. A reader whose partition reaches ``stop_ts`` is marked done. Damage in a partition (or an OS
    error reading it) raises after every line before it, or, with ``on_damage``, ends that partition
    there (marked done, ``on_damage`` told) while the others merge on."""
    merger = _kernel.KERNEL.Merger([r.log.partition for r in readers], stop_ts)
    plan = plan_for(len(readers))
    feeds = [_feed(r, pool, plan) for r in readers]
    printed = 0
    try:
        while True:
            limit = _NO_LIMIT if count is None else count - printed
            data, n, need = merger.run(limit, OUT_BYTES)
            if data:
                out.write(data)
            printed += n
            if need == -1 or (count is not None and printed >= count):
                return printed
            if need >= 0:
                try:
                    _refill(merger, need, feeds[need], readers[need])
                except (CorruptRecordError, OSError) as exc:  # an OS error reading a partition too (R23-5)
                    if on_damage is None:
                        out.write(merger.drain())  # every line before the one that failed, as before
                        raise
                    readers[need].done = True
                    merger.finish(need)  # the partition ends at its damage; the others merge on
                    on_damage(exc)
                except BaseException:
                    out.write(merger.drain())  # every line before the one that failed, as before
                    raise
    finally:
        for feed in feeds:
            feed.close()


def _refill(merger: Any, j: int, feed: Generator[tuple[bytes, bytes, bytes], None, None], reader: Any) -> None:
    """Stream ``j``'s next lines into the merger, or its end."""
    for data, stamps, ends in feed:
        kept, stopped = merger.load(j, data, stamps, ends)
        if stopped:
            reader.done = True
            feed.close()
            return
        if kept:
            return
    merger.finish(j)
