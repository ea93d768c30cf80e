"""``kafkafs consume``: records as JSON lines (SPEC §3), with kcat's habits.

Which partitions a name reads and where each starts (``-o``, kcat's forms): :mod:`.consume_plan`.
``e@TS`` stops before the first record with timestamp >= TS. ``--from-time TS`` is ``s@TS`` that also
takes ISO-8601. ``-c``/``--count`` stops after that many records in all.

Filters, decided before anything is printed: ``--key K`` (the key's UTF-8 text) or ``--key-base64 B``
(any bytes), ``--header NAME[=VALUE]`` (repeatable: all must hold) are judged from the record's bytes
by the kernel (:mod:`.format.recordfilter`); ``--grep REGEX`` keeps the rendered lines it matches.
With ``--key``, a partition whose sealed segments have key indexes in the cache folder (built by the
mount or ``kafkafs index --keys``) reads only the batches holding that key; the others are scanned.

The records of a whole topic are interleaved by timestamp (ties by partition, then offset), as a
consumer of the whole topic would roughly see them; ``--no-interleave`` prints one partition after the
other, in partition order.
"""

from __future__ import annotations

import contextlib
import heapq
import os
import re
import time
from array import array
from bisect import bisect_left
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from . import consume_merge
from .consume_plan import (
    OffsetSpec,
    parse_offset_spec,
    past_end_note,
    read_to_end,
    resolve_partitions,
    start_offset,
)
from .consume_spans import SWAP_REREADS, SpanPool, across_swaps, relist, span_chunks, spannable
from .errors import CorruptRecordError, RecordNotShown, UninflatableBatch
from .format.bigbatch import render_in_pieces
from .format.decoders import decoder_for
from .format.jsonview import (
    render_batch_jsonl,
    render_raw_jsonl,
    render_raw_jsonl_count,
    render_raw_jsonl_lines,
    render_raw_jsonl_stamped,
)
from .format.recordfilter import RecordFilter
from .storage.log import Log
from .storage.logdir import LogDir

__all__ = ["OffsetSpec", "parse_offset_spec", "start_offset", "past_end_note", "resolve_partitions", "consume"]


@dataclass(eq=False)
class _Reader:
    """One partition's lines from ``next_offset``, with their timestamps (for the interleaving)."""

    log: Log
    next_offset: int
    mode: str
    stop_ts: int | None
    decoder: Any
    done: bool = False
    record_filter: RecordFilter | None = None
    grep: re.Pattern | None = None
    #: one past the last offset of the batch read last (None before the first): the batch after it must
    #: start there or later (SPEC §4, :mod:`kafkafs.storage.validation`)
    expect: int | None = None
    #: told of each batch whose records inflate past the limit (valid data that kafkafs does not decode,
    #: R15-7), after which the reader goes on; None: such a batch ends the read, as damage does
    on_skip: Callable[[UninflatableBatch], None] | None = None

    def past_uninflatable(self, read: Callable[[], Iterator[Any]],
                          in_pieces: Callable[[Any, Any], Iterator[Any]] | None = None) -> Iterator[Any]:
        """What ``read()`` yields (records from ``next_offset`` on, advancing it); at a batch that inflates
        past the limit (:class:`~kafkafs.errors.UninflatableBatch`, met after every record before it)
        ``in_pieces(segment, view)`` yields that v2 batch's records read a piece at a time
        (:mod:`kafkafs.format.bigbatch`), or, for what cannot be read so (a legacy wrapper), ``on_skip`` is
        told; then ``next_offset`` moves past the batch and ``read()`` goes on from there."""
        while True:
            try:
                yield from read()
                return
            except UninflatableBatch as exc:
                if exc.next_offset is None:
                    raise
                log_ = self.log
                found = self._big_batch(exc) if in_pieces is not None else None
                if found is not None and in_pieces is not None:
                    segment, view = found
                    try:
                        yield from in_pieces(segment, view)
                    except RecordNotShown:
                        raise
                    except UninflatableBatch as inner:  # nor in pieces (an LZ4 frame of dependent blocks)
                        if self.on_skip is None:
                            raise
                        self.on_skip(inner.in_partition(f"{log_.topic}-{log_.partition}", self.next_offset))
                else:
                    if self.on_skip is None:
                        raise
                    self.on_skip(exc.in_partition(f"{log_.topic}-{log_.partition}", self.next_offset))
                self.next_offset = max(self.next_offset, exc.next_offset)
                self.expect = exc.next_offset
                if self.done or read_to_end(self.next_offset, log_):
                    return

    def _big_batch(self, exc: UninflatableBatch) -> tuple[Any, Any] | None:
        """``(segment, view)`` of the v2 batch ``exc`` is about: the one holding ``next_offset``."""
        got = next(iter(self.log.batches(self.next_offset)), None)  # a generator: closed as it goes
        if got is None or got[1].header.magic != 2 or got[1].header.next_offset != exc.next_offset:
            return None
        return got

    def _not_shown(self, exc: RecordNotShown) -> None:
        """A record of a batch read in pieces that is not held: told as a batch not shown is."""
        if self.on_skip is None:
            raise exc
        log_ = self.log
        self.on_skip(exc.in_partition(f"{log_.topic}-{log_.partition}", exc.base_offset or 0))

    def in_pieces(self, segment: Any, view: Any, what: int, *, stop_ts: int | None = None,
                  record_filter: RecordFilter | None = None) -> Generator[Any, None, bool]:
        """One batch too large to inflate at once, from ``next_offset`` on, a run of records at a time as
        :func:`~kafkafs.format.bigbatch.render_in_pieces` gives them (``what``); damage placed at the
        segment's path and the batch's position; returns whether ``stop_ts`` was reached."""
        log_ = self.log
        pieces = render_in_pieces(log_.topic, log_.partition, view.raw(), self.mode, what, on_skip=self._not_shown,
                                  decoder=self.decoder, lo=self.next_offset, record_filter=record_filter,
                                  stop_ts=stop_ts)
        try:
            stopped = yield from pieces
        except RecordNotShown:
            raise
        except CorruptRecordError as exc:
            raise exc.at(str(segment.log_path), view.position) from None
        return stopped

    def lines(self) -> Iterator[tuple[int, int, int, bytes]]:
        """(timestamp, partition, offset, line) of every record now in the log past ``next_offset``: the
        reference for the kernel's merge (:mod:`.consume_merge`), and the way without the kernel."""
        log_ = self.log
        if self.done or read_to_end(self.next_offset, log_):
            return
        yield from self.past_uninflatable(lambda: across_swaps(log_, self._lines), self._lines_in_pieces)

    def _lines_in_pieces(self, segment: Any, view: Any) -> Iterator[tuple[int, int, int, bytes]]:
        """:meth:`_lines` of a batch too large to inflate at once."""
        partition, grep = self.log.partition, self.grep
        pieces = self.in_pieces(segment, view, 4, stop_ts=self.stop_ts, record_filter=self.record_filter)
        stopped = False
        while True:
            try:
                data, offsets, stamps, ends = next(pieces)
            except StopIteration as finished:
                stopped = finished.value
                break
            start = 0
            for offset, ts, end in zip(array("q", offsets), array("q", stamps), array("q", ends), strict=True):
                line = data[start:end]
                start = end
                if grep is not None and not _matches(grep, line[:-1]):
                    continue
                yield ts, partition, offset, line
        if stopped:
            self.done = True

    def _lines(self) -> Iterator[tuple[int, int, int, bytes]]:
        log_ = self.log
        wanted, grep = self.record_filter, self.grep
        for batch in log_.read(self.next_offset, validate=True):
            if not len(batch):
                self.next_offset = max(self.next_offset, batch.header.next_offset)
                continue
            kwargs = {"decoder": self.decoder} if self.decoder is not None else {}
            rendered = render_batch_jsonl(log_.topic, log_.partition, batch, self.mode, **kwargs).split(b"\n")
            self.next_offset = max(self.next_offset, batch.header.next_offset)  # rendered: past it
            for i, offset in enumerate(batch.offsets):
                ts = batch.timestamps[i]
                if self.stop_ts is not None and ts >= self.stop_ts:
                    self.done = True
                    return
                if wanted is not None and not wanted.accepts(offset, batch.keys[i], batch.headers[i]):
                    continue
                if grep is not None and not _matches(grep, rendered[i]):
                    continue
                yield ts, log_.partition, offset, rendered[i] + b"\n"

    def chunks(self, remaining: int | None) -> Iterator[tuple[bytes, int]]:
        """The lines of whole batches at once, ``(lines, how many)``, at most ``remaining`` records in
        all: the fast path (no interleaving, no ``e@TS``): spans of many batches on every core
        (:mod:`.consume_spans`) when nothing limits the count, else one kernel call per batch."""
        if self.done or read_to_end(self.next_offset, self.log):
            return
        left = [remaining]  # what is still to print, across the reads past_uninflatable starts again

        def read() -> Iterator[tuple[bytes, int]]:
            for reread in range(SWAP_REREADS + 1):  # damage met just after a compaction swap: see across_swaps
                try:
                    for lines, n in self._chunks(left[0]):
                        yield lines, n
                        if left[0] is not None:
                            left[0] -= n
                    return
                except UninflatableBatch:
                    raise  # no swap's doing: past_uninflatable's
                except CorruptRecordError:
                    if reread == SWAP_REREADS or not relist(self.log):
                        raise

        def in_pieces(segment: Any, view: Any) -> Iterator[tuple[bytes, int]]:
            grep = self.grep
            for item in self.in_pieces(segment, view, 3, record_filter=self.record_filter):
                lines, n = item if grep is None else _grep_lines(grep, item[0])
                if left[0] is not None and n >= left[0]:
                    n = left[0]
                    lines = _first_lines(lines, n)
                if n:
                    yield lines, n
                if left[0] is not None:
                    left[0] -= n
                    if left[0] <= 0:
                        return

        yield from self.past_uninflatable(read, in_pieces)

    def _chunks(self, remaining: int | None) -> Iterator[tuple[bytes, int]]:
        log_ = self.log
        if remaining is not None and remaining <= 0:
            return
        if remaining is None and spannable(self.mode, self.decoder):
            for lines, n in span_chunks(self, _pool()):
                if self.grep is not None:
                    lines, n = _grep_lines(self.grep, lines)
                if n:
                    yield lines, n
            return
        for segment, view in log_.batches(self.next_offset):
            lines, n = self.batch_lines(segment, view, remaining)
            if n:
                yield lines, n
            if remaining is not None:
                remaining -= n
                if remaining <= 0:
                    return

    def batch_lines(self, segment: Any, view: Any, remaining: int | None = None) -> tuple[bytes, int]:
        """``(lines, how many)`` of one batch from ``next_offset`` on (at most ``remaining`` records),
        advancing ``next_offset`` past it: the batch-by-batch way, which :mod:`.consume_spans` also
        takes for what a span does not. Damage is raised at the segment's path and the batch's position."""
        log_ = self.log
        lo = self.next_offset
        wanted = self.record_filter
        try:  # next_offset moves once the batch rendered: damage is met again by a read after a swap's relist
            if remaining is None and self.grep is None:
                counted = render_raw_jsonl_count(log_.topic, log_.partition, view.raw(), self.mode,
                                                 decoder=self.decoder, lo=lo, record_filter=wanted)
            else:
                lines, _offsets, ends = render_raw_jsonl_lines(
                    log_.topic, log_.partition, view.raw(), self.mode, decoder=self.decoder, lo=lo, record_filter=wanted
                )
        except CorruptRecordError as exc:
            raise exc.at(str(segment.log_path), view.position) from None
        self.next_offset = max(lo, view.header.next_offset)
        self.expect = view.header.next_offset
        if remaining is None and self.grep is None:
            return counted
        if self.grep is not None:
            kept = [line + b"\n" for line in lines.split(b"\n")[:-1] if _matches(self.grep, line)]
            lines = b"".join(kept)
            ends, end = [], 0
            for line in kept:
                end += len(line)
                ends.append(end)
        if remaining is None:
            return lines, len(ends)
        n = len(ends)
        if n > remaining:
            n = remaining
            lines = lines[: ends[n - 1]]
        return lines, n

    def stamped_lines(self, segment: Any, view: Any, lo: int) -> tuple[bytes, bytes, bytes]:
        """``(lines, timestamps, line ends)`` of one batch's records, trimmed as :meth:`lines` trims
        them (``Log.read`` from ``lo``, where the pass started: when the first record is below ``lo``,
        those before the first at or past it, by ``DecodedBatch.between``'s bisection), the arrays as
        native int64 bytes (what the merge loads), advancing ``next_offset`` past the batch; damage as
        :meth:`batch_lines`."""
        log_ = self.log
        try:
            data, offsets, stamps, ends = render_raw_jsonl_stamped(
                log_.topic, log_.partition, view.raw(), self.mode, decoder=self.decoder
            )
        except CorruptRecordError as exc:  # placed as view.decode places it (the batch's position at least)
            if exc.position is None:
                raise exc.placed(view.position, str(segment.log_path)) from None
            raise exc.at(str(segment.log_path), view.position) from None
        self.next_offset = max(self.next_offset, view.header.next_offset)  # rendered: past it (see batch_lines)
        self.expect = view.header.next_offset
        first = array("q", offsets[:8])
        if first and first[0] < lo:
            cut = bisect_left(array("q", offsets), lo)
            if cut:
                line_ends = array("q", ends)
                start = line_ends[cut - 1]
                data = data[start:]
                stamps = stamps[8 * cut :]
                ends = array("q", (end - start for end in line_ends[cut:])).tobytes()
        return data, stamps, ends


def _matches(grep: re.Pattern, line: bytes) -> bool:
    return grep.search(line.decode("utf-8", "surrogateescape")) is not None


def _first_lines(lines: bytes, n: int) -> bytes:
    """The first ``n`` lines of ``lines`` (each ends in a newline; it holds at least ``n``)."""
    end = 0
    for _ in range(n):
        end = lines.index(b"\n", end) + 1
    return lines[:end]


def _grep_lines(grep: re.Pattern, lines: bytes) -> tuple[bytes, int]:
    """The lines (each ending in a newline) that ``grep`` matches, and how many."""
    kept = [line for line in lines.split(b"\n")[:-1] if _matches(grep, line)]
    return (b"\n".join(kept) + b"\n" if kept else b""), len(kept)


def _indexed_chunks(reader: _Reader, keys_store, count: int | None) -> Iterator[tuple[bytes, int]]:
    """The records of ``reader.record_filter.key`` from ``next_offset`` on, found through the key
    indexes (a segment without one is scanned for the key): only the batches holding the key are read."""
    from .storage.keytable import PartitionKeys

    log_ = reader.log
    key = reader.record_filter.key if reader.record_filter is not None else None
    assert key is not None  # consume() comes here only to find a key
    stop = None
    if reader.stop_ts is not None:
        first_late = log_.offset_for_timestamp(reader.stop_ts)
        stop = first_late[0] if first_late else None
    printed = 0
    history, damage = PartitionKeys(log_, keys_store, build=False).history_to_damage(key, include_aborted=True)
    for found in history:
        if found.offset < reader.next_offset:
            continue
        if stop is not None and found.offset >= stop:
            damage = None
            break
        view = found.view or log_.locate(found.offset)
        if view is None:
            continue
        try:
            line = render_raw_jsonl(log_.topic, log_.partition, view.raw(), reader.mode, decoder=reader.decoder,
                                    lo=found.offset, hi=found.offset, record_filter=reader.record_filter)
        except CorruptRecordError as exc:
            raise exc.at(str(view.segment.log_path), view.position) from None
        if reader.grep is not None and line and not _matches(reader.grep, line[:-1]):
            continue
        if line:
            yield line, 1
            printed += 1
            if count is not None and printed >= count:
                damage = None
                break
    if isinstance(damage, UninflatableBatch) and reader.on_skip is not None:
        # valid data the key scan does not decode (R15-7): the keys after it are not in the index; a plain
        # read of the key from after the last record printed says the batch and goes on past it
        if history:
            reader.next_offset = max(reader.next_offset, history[-1].offset + 1)
        left = None if count is None else count - printed
        if reader.stop_ts is None:
            yield from reader.chunks(left)
            return
        for _ts, _p, _o, line in reader.lines():  # stops before stop_ts
            if left is not None and left <= 0:
                break
            yield line, 1
            left = None if left is None else left - 1
        return
    if damage is not None:  # what comes before it was printed; the damage is said, as a plain read says it
        raise damage
    reader.next_offset = log_.log_end_offset
    reader.done = True


_POOL: SpanPool | None = None


def _pool() -> SpanPool:
    """The worker threads that render spans (one per CPU this process may use, at most 4), shared by
    every consume of the process."""
    global _POOL
    if _POOL is None:
        try:
            cpus = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cpus = os.cpu_count() or 1
        _POOL = SpanPool(min(cpus, 4))
    return _POOL


def consume(
    logdir: LogDir,
    names: list[str],
    out: BinaryIO,
    *,
    spec: OffsetSpec,
    stop_ts: int | None = None,
    count: int | None = None,
    follow: bool = False,
    interleave: bool = True,
    mode: str = "auto",
    registry=None,
    record_filter: RecordFilter | None = None,
    grep: re.Pattern | None = None,
    keys_store=None,
    on_damage: Callable[[CorruptRecordError | OSError], None] | None = None,
) -> int:
    """Print the records of ``names`` (partition folders) to ``out``; return how many were printed.
    ``registry``: a Schema Registry's schemas (:func:`kafkafs.storage.schemas.load_registry`);
    ``record_filter`` and ``grep``: only the records they accept; ``keys_store``: a
    :class:`~kafkafs.storage.keyindex.KeyIndexStore` whose indexes serve a filter by key.

    Damage (a batch that cannot be read) raises :class:`CorruptRecordError` after the records before it,
    unless ``on_damage`` is given: then damage is local (SPEC §3), that partition ends at its damage,
    ``on_damage`` is told, and every other partition is read on; so is a partition that cannot be
    opened (an OSError: a folder that cannot be listed), which is then not read at all, and one whose
    files cannot be read (an OSError: a disk error, a segment the user may not read), which ends there. A batch whose
    records inflate past the limit (:class:`~kafkafs.errors.UninflatableBatch`: valid data, R15-7) is no
    damage: its records are read a piece at a time (:mod:`kafkafs.format.bigbatch`); a record of it that
    is not held (:class:`~kafkafs.errors.RecordNotShown`), or a legacy wrapper past the limit, is told to
    ``on_damage`` (its partition and offsets filled in, :meth:`~kafkafs.errors.UninflatableBatch.not_shown`)
    and its partition is read on after it (without ``on_damage``: raised)."""
    if record_filter is not None and record_filter.empty:
        record_filter = None
    readers = []
    for name in names:
        try:
            log_ = logdir.log(name)
            start = start_offset(log_, spec)  # may read the partition's segments (a time, the end)
        except OSError as exc:
            if on_damage is None:
                raise
            on_damage(exc)
            continue
        readers.append(_Reader(log_, start, mode, stop_ts, decoder_for(log_.topic, registry, mode),
                               record_filter=record_filter, grep=grep, on_skip=on_damage))
    if not readers or count == 0:  # -c 0: no record, and nothing to wait for
        return 0
    one_pass = _way_to_read(readers, out, stop_ts=stop_ts, follow=follow, interleave=interleave,
                            record_filter=record_filter, grep=grep, keys_store=keys_store, on_damage=on_damage)
    printed = 0
    while True:
        printed += one_pass(None if count is None else count - printed)
        out.flush()
        if (count is not None and printed >= count) or not follow or all(r.done for r in readers):
            return printed
        _wait(readers)


#: One pass over the readers: it writes what their partitions now hold past where they are (at most
#: the count given, None: no limit) and returns how many records it wrote.
_Pass = Callable[[int | None], int]


def _way_to_read(readers: list[_Reader], out: BinaryIO, *, stop_ts: int | None, follow: bool, interleave: bool,
                 record_filter: RecordFilter | None, grep: re.Pattern | None, keys_store,
                 on_damage: Callable[[CorruptRecordError | OSError], None] | None) -> _Pass:
    """How :func:`consume` reads: through the key indexes (a key asked, no ``--follow``, no
    interleaving), whole batches at once (no interleaving, no ``e@TS``), the kernel's merge (no filter,
    no ``--grep``), else line by line (``heapq.merge`` of the partitions' lines when interleaved)."""
    one_partition_at_a_time = len(readers) == 1 or not interleave
    if (keys_store is not None and record_filter is not None and record_filter.key is not None and not follow
            and one_partition_at_a_time):
        return lambda remaining: _chunks_pass(
            readers, out, remaining, on_damage, lambda r, at_most: _indexed_chunks(r, keys_store, at_most))
    if stop_ts is None and one_partition_at_a_time:
        return lambda remaining: _chunks_pass(readers, out, remaining, on_damage, _Reader.chunks)
    if consume_merge.available() and record_filter is None and grep is None:
        # the kernel merges (one partition at a time without interleave); filters take the way below
        groups = [readers] if interleave else [[r] for r in readers]
        return lambda remaining: _merge_pass(groups, out, remaining, stop_ts, on_damage)
    return lambda remaining: _lines_pass(readers, out, remaining, interleave, on_damage)


def _chunks_pass(readers: list[_Reader], out: BinaryIO, remaining: int | None,
                 on_damage: Callable[[CorruptRecordError | OSError], None] | None,
                 chunks_of: Callable[[_Reader, int | None], Iterator[tuple[bytes, int]]]) -> int:
    """One partition after the other, the ``(lines, how many)`` that ``chunks_of(reader, at most)`` gives."""
    printed = 0
    for r in readers:
        for lines, n in _guarded(r, chunks_of(r, None if remaining is None else remaining - printed), on_damage):
            out.write(lines)  # outside the guard: a failed write (a closed pipe) is no partition's damage
            printed += n
            if remaining is not None and printed >= remaining:
                return printed
    return printed


def _merge_pass(groups: list[list[_Reader]], out: BinaryIO, remaining: int | None, stop_ts: int | None,
                on_damage: Callable[[CorruptRecordError | OSError], None] | None) -> int:
    """The kernel's merge of each group of readers, one group after the other."""
    printed = 0
    for group in groups:
        printed += consume_merge.merge(group, out, _pool(), stop_ts, None if remaining is None else remaining - printed,
                                       on_damage=on_damage)
        if remaining is not None and printed >= remaining:
            break
    return printed


def _lines_pass(readers: list[_Reader], out: BinaryIO, remaining: int | None, interleave: bool,
                on_damage: Callable[[CorruptRecordError | OSError], None] | None) -> int:
    """Line by line: by timestamp across the partitions when ``interleave``, else one after the other."""
    if interleave and len(readers) > 1:
        streams: Iterator = heapq.merge(*(_guarded_lines(r, on_damage) for r in readers))
    else:
        streams = (item for r in readers for item in _guarded_lines(r, on_damage))
    printed = 0
    for _ts, _p, _o, line in streams:
        out.write(line)
        printed += 1
        if remaining is not None and printed >= remaining:
            break
    return printed


@contextlib.contextmanager
def _local_damage(reader: _Reader, on_damage: Callable[[CorruptRecordError | OSError], None] | None) -> Iterator[None]:
    """Damage met reading ``reader`` in the block, or an OS error reading its files (a segment the disk or
    the permissions will not give: review23 R23-5), ends that partition (``on_damage`` told), or, without
    ``on_damage``, the whole consume. Only reads belong in the block: writing the output is no partition's."""
    try:
        yield
    except (CorruptRecordError, OSError) as exc:
        if on_damage is None:
            raise
        reader.done = True
        on_damage(exc)


def _guarded(reader: _Reader, items: Iterator, on_damage: Callable[[CorruptRecordError | OSError], None] | None
             ) -> Iterator:
    """``items`` (read from ``reader``'s partition), ending at damage as :func:`_local_damage` says; what the
    caller does with each item is outside the guard."""
    with _local_damage(reader, on_damage):
        yield from items


def _guarded_lines(reader: _Reader, on_damage: Callable[[CorruptRecordError | OSError], None] | None) -> Iterator:
    """``reader.lines()``, ending at damage as :func:`_local_damage` says."""
    return _guarded(reader, reader.lines(), on_damage)


def _wait(readers: list[_Reader]) -> None:
    """Until some partition has records past what was read (a second at most between checks); a
    partition read to its end for good (``done``: damage, or ``e@TS`` reached) is not waited for."""
    readers = [r for r in readers if not r.done]
    if len(readers) == 1:
        r = readers[0]
        while not r.log.wait_for_records(r.next_offset - 1, timeout=1.0):
            pass
        return
    while True:
        for r in readers:
            if r.log.wait_for_records(r.next_offset - 1, timeout=0):
                return
        time.sleep(0.2)
