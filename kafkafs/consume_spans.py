"""``consume``'s fast path: a partition's whole batches rendered in spans, on every core, in order.

A span is a run of whole batches of one ``.log`` (:func:`~kafkafs.format.jsonview.render_span_jsonl`:
CRC-checked and rendered by the kernel with no Python between batches, without the GIL). The reader
reads the segment in large chunks, cuts each at batch boundaries (``span_cuts``: lengths and offsets
only) into pieces, and has worker threads render the pieces while it writes the finished ones in
order. Whatever a span does not take (a compressed or legacy batch, damage, a batch larger than a
chunk, offsets out of order, a partial batch at the end of the file) goes the old way, through
:meth:`Log.batches <kafkafs.storage.local_log.LocalLog.batches>` one batch at a time, which renders it
or raises its damage exactly as before: the output is the same bytes either way.
"""

from __future__ import annotations

import threading
from array import array
from collections import deque
from collections.abc import Callable, Iterator
from queue import SimpleQueue
from typing import Any, NamedTuple

from .errors import CorruptRecordError, UninflatableBatch
from .format import kernel as _kernel
from .format.jsonrender import line_prefix
from .format.jsonview import render_span_jsonl
from .storage import memory
from .storage.segments import is_sealed
from .storage.validation import checked_order

__all__ = ["SWAP_REREADS", "Plan", "SpanPool", "across_swaps", "relist", "span_chunks", "tune_malloc"]

#: One read of a ``.log``: the pieces of a chunk are rendered while the next chunk is read. The first
#: read of a run of spans is smaller: in a partition of compressed batches it finds none to take.
READ_BYTES = 4 * 1024 * 1024
FIRST_READ_BYTES = 64 * 1024
#: One piece (one render_span call): large enough that the Python around it costs nothing.
PIECE_BYTES = 256 * 1024
#: After a span that took this few batches (a partition that mixes compressed and plain batches), the
#: next this-many batches go the old way before spans are tried again.
_FEW, _COOLDOWN = 4, 64


#: How many times a partition read that met damage lists its folder again and goes on (see across_swaps).
SWAP_REREADS = 3


def across_swaps(log_: Any, read: Callable[[], Iterator[Any]]) -> Iterator[Any]:
    """What ``read()`` yields (a partition's records from where its reader is, advancing it); damage met
    while another process's compaction swapped segments since the log was listed (the folder listed before
    the swap, a merged ``.log`` opened after it: review8 R8-7) lists the folder again and reads on from
    there (``read()`` again); damage that a new listing changes nothing about is raised (real damage is
    met again at the same place, after at most :data:`SWAP_REREADS` new listings)."""
    for reread in range(SWAP_REREADS + 1):
        try:
            yield from read()
            return
        except UninflatableBatch:
            raise  # valid data too large to inflate, not a swap's doing (the reader goes on past it)
        except CorruptRecordError:
            if reread == SWAP_REREADS or not relist(log_):
                raise


def relist(log_: Any) -> bool:
    """A read-only log's folder listed again (``refresh``: segments gone, new, swapped in) and every
    segment's size read again; whether anything changed. A reader that listed the folder just before
    another process's compaction swap and opened the merged ``.log`` after it read that file at the
    replaced one's size, below segments renamed away (review8 R8-7)."""
    if log_.writable:
        return False
    changed = log_.refresh()
    for segment in list(log_.segments):
        before = segment.size
        changed = segment.refresh() != before or changed
    return changed


class _Task:
    """One function call on a pool thread; ``get()`` waits for its result (or raises its error). The
    lock is held from creation until the result is in (cheaper than an Event: consume makes thousands)."""

    __slots__ = ("fn", "args", "done", "value", "error")

    def __init__(self, fn: Callable[..., Any], args: tuple) -> None:
        self.fn, self.args = fn, args
        self.done = threading.Lock()
        self.done.acquire()
        self.value: Any = None
        self.error: BaseException | None = None

    def get(self) -> Any:
        """The result (once: the first caller takes it)."""
        self.done.acquire()
        if self.error is not None:
            raise self.error
        return self.value


class SpanPool:
    """Daemon threads that run span renders. Thread-safe: ``submit`` from any thread; each task's
    result is read by whoever holds it. The threads start on first use and end with the process."""

    def __init__(self, workers: int) -> None:
        self.workers = max(1, workers)
        self._queue: SimpleQueue = SimpleQueue()
        self._started = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> _Task:
        if not self._started:
            self._started = True
            for i in range(self.workers):
                threading.Thread(target=self._run, name=f"kafkafs-span-{i}", daemon=True).start()
        task = _Task(fn, args)
        self._queue.put(task)
        return task

    def _run(self) -> None:
        while True:
            task = self._queue.get()
            try:
                task.value = task.fn(*task.args)
            except BaseException as exc:  # noqa: BLE001 - handed to the reader, which raises it
                task.error = exc
            task.done.release()


def tune_malloc() -> None:
    """Keep the spans' output buffers (a few MB each) on the heap, reused, instead of fresh mmap'd
    pages that the OS zeroes on every call (glibc's default for blocks over 128 KiB): that was 40% of
    the rendering time. For a short-lived command (it applies to the whole process); glibc only
    (:func:`kafkafs.storage.memory.tune_malloc`)."""
    if _kernel.KERNEL is not None:
        memory.tune_malloc(32 << 20, 64 << 20)


def _render(topic: str, partition: int, buf, mode: str, record_filter) -> Any:
    return render_span_jsonl(topic, partition, buf, mode, record_filter=record_filter)


def spannable(mode: str, decoder: Any) -> bool:
    """Whether spans can render this partition: the kernel is built and no decoder is involved."""
    return _kernel.KERNEL is not None and decoder is None and mode in _kernel.MODES


class Plan(NamedTuple):
    """How a partition's spans are read and rendered: ``read``/``first_read`` bytes of the ``.log`` a
    read, ``piece`` bytes a render, at most ``ahead`` pieces in flight; ``stamped``: each piece gives
    ``(lines, timestamps, line ends)`` for the merge (:mod:`.consume_merge`) instead of ``(lines, how
    many)``."""

    read: int = READ_BYTES
    first_read: int = FIRST_READ_BYTES
    piece: int = PIECE_BYTES
    ahead: int = 0  # 0: two per worker and two more
    stamped: bool = False
    lo: int = 0  # stamped: the first offset of the pass (records below it in a batch not taken by a span are left out)


def _render_piece(topic: str, partition: int, buf, mode: str, stamped: bool, record_filter) -> tuple:
    """One piece on a pool thread: ``(item to yield or None, bytes consumed, batches taken, last offset)``;
    ``record_filter``: only the records it accepts (not with ``stamped``: the merge takes no filter)."""
    if stamped:
        data, consumed, batches, last, stamps, ends = _kernel.KERNEL.render_span_lines(
            line_prefix(topic, partition), buf, _kernel.MODES[mode]
        )
        return ((data, stamps, ends) if ends else None), consumed, batches, last
    result = _render(topic, partition, buf, mode, record_filter)
    last = result.last_offsets[-1] if result.last_offsets else -1
    return ((result.data, result.lines) if result.lines else None), result.consumed, len(result.batch_ends), last


def span_chunks(reader: Any, pool: SpanPool, plan: Plan | None = None) -> Iterator[tuple]:
    """``(lines, how many)`` (or, with ``plan.stamped``, ``(lines, timestamps, line ends)``) of every
    record of ``reader`` (consume's ``_Reader``) from its ``next_offset``, advancing it; the same
    bytes, and the same errors, as batch by batch."""
    plan = plan or Plan(READ_BYTES, FIRST_READ_BYTES, PIECE_BYTES)  # the module's values now (tests set them)
    log_ = reader.log
    topic, partition, mode = log_.topic, log_.partition, reader.mode
    while True:
        views = log_.batches(reader.next_offset)  # finds the segment and batch to go on from
        try:
            got = next(views, None)
        finally:
            views.close()
        if got is None:
            return
        segment, view = got
        moved = yield from _segment(reader, pool, segment, view.position, topic, partition, mode, plan)
        if not moved:  # cannot happen (the batch found is read again); never loop on it
            for segment, view in log_.batches(reader.next_offset):
                yield from _old_way(reader, segment, view, plan)
            return


def _old_way(reader, segment, view, plan: Plan) -> Iterator[tuple]:
    """One batch as consume renders it batch by batch (records from ``reader.next_offset`` on)."""
    if plan.stamped:
        lines, stamps, ends = reader.stamped_lines(segment, view, plan.lo)
        if ends:
            yield lines, stamps, ends
        return
    lines, n = reader.batch_lines(segment, view)
    if n:
        yield lines, n


def _segment(reader, pool: SpanPool, segment, pos: int, topic: str, partition: int, mode: str, plan: Plan):
    """The batches of ``segment`` from ``pos`` (a batch boundary) to its end: spans where they take
    the batches, else one batch at a time as :meth:`Log.batches` gives them (which ends the segment
    quietly at a partial batch or zeros, unless the segment is sealed, and raises its damage). Returns
    whether it moved."""
    start = pos
    end = segment.size
    while pos < end:
        upper = reader.log.segments.upper(segment.base_offset)  # the next segment's base (None: the last)
        taken, pos = yield from _spans(reader, pool, segment, pos, topic, partition, mode, plan, upper)
        if pos >= end:
            break
        # the batch at pos is not a span's (and, after a span of a few batches only, the next ones
        # neither: a segment that mixes compressed and plain batches is read the old way); each batch
        # judged between its neighbours, as Log.batches does (offsets out of order raise)
        views = checked_order(segment.batches(pos, sealed=is_sealed(upper)), str(segment.log_path),
                              next_offset=reader.expect, upper=upper, segment_base=segment.base_offset)
        try:
            for i, view in enumerate(views):
                if view.header.last_offset >= reader.next_offset:  # as Log.batches skips
                    yield from _old_way(reader, segment, view, plan)
                pos = view.position + view.size
                if taken >= _FEW or i >= _COOLDOWN:
                    break
            else:
                return True  # the segment ends here
        finally:
            views.close()
    return pos != start


def _spans(reader, pool: SpanPool, segment, pos: int, topic: str, partition: int, mode: str, plan: Plan,
           upper: int | None):
    """Spans of ``segment`` from ``pos``; yields lines, returns (batches taken, where they end).
    ``upper``: the next segment's base offset (None: it is the last segment)."""
    end = segment.size
    pending: deque = deque()
    expect = reader.next_offset
    taken = 0
    done = pos  # where the batches taken end
    walking = True
    limit = plan.ahead or 2 * pool.workers + 2
    step = min(plan.first_read, plan.read)
    while True:
        while walking and len(pending) < limit and pos < end:
            chunk = segment.read_at(pos, min(step, end - pos))
            step = plan.read
            # final: the chunk reaches the segment's end, so its last batch is judged against the next
            # segment's base offset (upper) instead of the next batch's
            raw, expect = _kernel.KERNEL.span_cuts(chunk, plan.piece, expect, pos + len(chunk) >= end,
                                                   -1 if upper is None else upper)
            cuts = array("q")
            cuts.frombytes(raw)
            if len(cuts) < 2:
                walking = False  # the batch at pos is not for a span
                break
            view = memoryview(chunk)
            for a, b in zip(cuts, cuts[1:], strict=False):
                pending.append((pool.submit(_render_piece, topic, partition, view[a:b], mode, plan.stamped,
                                            reader.record_filter), b - a))
            pos += cuts[-1]
        if not pending:
            return taken, done
        task, length = pending.popleft()
        item, consumed, batches, last = task.get()
        if batches:
            taken += batches
            reader.next_offset = max(reader.next_offset, last + 1)
            reader.expect = last + 1
        done += consumed
        if item is not None:
            yield item
        if consumed < length:  # a batch the span does not take: the caller's
            return taken, done
