"""Reading a split in a Spark worker: segments opened read-only, batches decoded into Arrow columns.

Rows leave as ``pyarrow.RecordBatch`` es in :data:`~kafkafs.spark.schema.ARROW_SCHEMA`, about
``batchRows`` rows each. With the compiled kernel (:mod:`.arrowcols`), one call walks all the whole
uncompressed batches of a 1 MiB read (CRC, records, bounds) straight into Arrow buffers; a batch it
does not take (compressed, legacy magic, damaged, larger than a read) goes through :meth:`_PieceReader.take`
as in the reference. The reference, :class:`_Columns` (also the fallback without the kernel), appends each
decoded Kafka batch to plain lists with ``list.extend``. Both build the topic and partition columns from
runs, apply offset bounds per Kafka batch by bisection (offsets only grow inside a batch), and run the
timestamp bounds and offset ``IN`` lists vectorised on the finished Arrow batch.

Batches are skipped before decoding when their header already shows they cannot pass: offsets below
the start, a largest timestamp below the lower time bound, control batches (a Kafka consumer never
sees those records)."""

from __future__ import annotations

import bisect
import dataclasses
import gc
import logging
import struct
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import CorruptRecordError, RecordNotShown, UninflatableBatch
from ..format.batch import (
    BatchHeader,
    DecodedBatch,
    control_type_of,
    decode_records_at,
    records_section,
    validate_batch,
)
from ..format.batchheader import read_batch_header, v2_offsets
from ..format.bigbatch import record_runs
from ..storage.config import LogConfig
from ..storage.records import BatchView
from ..storage.segment import LogSegment
from ..storage.validation import first_offset, offsets_problem
from .arrowcols import WALK_END, WALK_FULL, WALK_PARTIAL, KernelColumns, available, finish_batch, repeat_runs
from .dataloss import report_data_loss
from .plan import Piece, ScanSpec, Split
from .positions import indexed_batch_start
from .schema import HEADERS_ARROW_TYPE, TIMESTAMP_ARROW_TYPE

__all__ = ["read_split", "READ_CONFIG", "freeze_worker_heap"]

log = logging.getLogger("kafkafs.spark")

#: Readers accept batches up to 64 MiB of ``max.message.bytes`` (the segment reader's sanity cap is a
#: few times that), so a topic configured for large messages is not mistaken for damage.
READ_CONFIG = LogConfig(max_message_bytes=64 * 1024 * 1024)

_MAX_BUFFER_BYTES = 256 * 1024 * 1024  # keep binary columns well under Arrow's 2 GiB offsets
#: How much of a segment one read hands the kernel's walk.
_WALK_BYTES = 1024 * 1024


class _Columns:
    """Rows gathered from decoded batches until there are enough for one Arrow batch."""

    def __init__(self, include_headers: bool = True) -> None:
        self.include_headers = include_headers
        self.clear()

    def clear(self) -> None:
        self.keys: list = []
        self.values: list = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.headers: list = []
        self.any_headers = False
        self.runs: list[tuple[str, int, int, int]] = []  # topic, partition, timestampType, rows
        self.rows = 0
        self.bytes = 0

    def add(self, topic: str, partition: int, batch: DecodedBatch, lo: int, hi: int) -> None:
        n = hi - lo
        if n <= 0:
            return
        whole = lo == 0 and hi == len(batch.offsets)
        if whole:
            keys, values, headers = batch.keys, batch.values, batch.headers
            self.offsets.extend(batch.offsets)
            self.timestamps.extend(batch.timestamps)
        else:
            keys, values, headers = batch.keys[lo:hi], batch.values[lo:hi], batch.headers[lo:hi]
            self.offsets.extend(batch.offsets[lo:hi])
            self.timestamps.extend(batch.timestamps[lo:hi])
        self.keys.extend(keys)
        self.values.extend(values)
        if self.include_headers:
            self.headers.extend(headers)
            if not self.any_headers and any(headers):
                self.any_headers = True
        tstype = batch.header.timestamp_type
        last = self.runs[-1] if self.runs else None
        if last is not None and last[0] == topic and last[1] == partition and last[2] == tstype:
            self.runs[-1] = (topic, partition, tstype, last[3] + n)
        else:
            self.runs.append((topic, partition, tstype, n))
        self.rows += n
        self.bytes += sum(map(len, filter(None, values))) + sum(map(len, filter(None, keys)))

    def _repeat(self, index: int, type_: pa.DataType) -> pa.Array:
        return repeat_runs(((run[index], run[3]) for run in self.runs), type_)

    def build(self, spec: ScanSpec) -> pa.RecordBatch | None:
        if not self.rows:
            return None
        n = self.rows
        offsets = pa.array(self.offsets, type=pa.int64())
        millis = pa.array(self.timestamps, type=pa.int64())
        micros = pc.multiply(millis, 1000)
        columns = [
            pa.array(self.keys, type=pa.binary()),
            pa.array(self.values, type=pa.binary()),
            self._repeat(0, pa.string()),
            self._repeat(1, pa.int32()),
            offsets,
            micros.cast(TIMESTAMP_ARROW_TYPE),
            self._repeat(2, pa.int32()),
        ]
        if self.include_headers:
            if self.any_headers:
                columns.append(pa.array([h if h else None for h in self.headers], type=HEADERS_ARROW_TYPE))
            else:
                columns.append(pa.nulls(n, type=HEADERS_ARROW_TYPE))
        self.clear()
        return finish_batch(spec, columns, self.include_headers, offsets, micros)


def _hint(exc: CorruptRecordError) -> CorruptRecordError:
    return CorruptRecordError(
        f"{exc.reason} (the read fails here; option onCorrupt=skip skips damaged batches)", exc.position, exc.file
    )


def _views(segment: LogSegment, piece: Piece, on_corrupt: str) -> Iterator[BatchView]:
    """The batches of a piece; with ``skip``, a damaged header makes the scan resume at the next
    offset index entry (the next batch boundary the index knows), or end the piece."""
    position = piece.start
    while position < piece.end:
        try:
            yield from segment.batches(position, piece.end, sealed=piece.sealed)
            return
        except CorruptRecordError as exc:
            if on_corrupt != "skip":
                raise _hint(exc) from None
            bad = exc.position if exc.position is not None else position
            resume = indexed_batch_start(segment, bad, piece.end)
            log.warning(
                "%s: skipping damaged data at position %d up to %s: %s",
                segment.log_path, bad, resume if resume is not None else "the end of the piece", exc.reason,
            )
            if resume is None:
                return
            position = resume


class _Aborted:
    """``read_committed`` as Kafka's consumer does it: the fetch's aborted transactions (from the
    ``.txnindex`` files, planned in the driver) enter a set of aborted producer ids once a batch
    reaches their first offset; a producer's batches are skipped while it is in the set, and its
    ABORT marker takes it out again."""

    def __init__(self, aborted: tuple[tuple[int, int, int], ...]) -> None:
        self._pending = list(aborted)  # sorted by first offset
        self._started = False
        self.producers: set[int] = set()

    def skip(self, h: BatchHeader, view: BatchView, path: str) -> bool:
        """True when the batch is part of an aborted transaction (control batches: never returned)."""
        if not self._started:  # the piece may start inside the range: older, finished ones do not count
            self._started = True
            self._pending = [t for t in self._pending if t[2] >= h.base_offset]
        while self._pending and self._pending[0][1] <= h.last_offset:
            self.producers.add(self._pending.pop(0)[0])
        if h.is_control:
            if h.producer_id in self.producers:
                keys = view.decode(file=path).keys
                if keys and control_type_of(keys[0]) == "ABORT":
                    self.producers.discard(h.producer_id)
            return True
        return h.is_transactional and h.producer_id in self.producers


def _open_segment(piece: Piece, spec: ScanSpec) -> LogSegment | None:
    """The piece's segment, or None when retention deleted it since planning (``failOnDataLoss``)."""
    segment = LogSegment(piece.directory, piece.base_offset, READ_CONFIG, writable=False, size=piece.end)
    if not segment.log_path.exists():  # retention renames a segment .deleted, then removes it
        report_data_loss(
            spec.fail_on_data_loss,
            f"Could not read records in offset [{piece.base_offset}, ...) for topic partition "
            f"{piece.topic}-{piece.partition}: its segment was deleted after the read was planned.",
        )
        return None
    return segment


#: A batch's base offset and length: where :meth:`_OffsetOrder._base_at` looks for the next batch.
_BASE_AND_LENGTH = struct.Struct(">qi")


class _OffsetOrder:
    """Offsets out of order are damage, never served (SPEC §4; README "Safety"), as ``consume`` and the
    mount judge them: each batch a piece reads is judged between the batch before it and the one after
    it (:func:`~kafkafs.storage.validation.order_problem`; a batch's base offset is outside its CRC). A
    batch is judged once the next header is seen, or when the piece's walk ends, against the batch that
    starts where it ended (the next piece's first, or the batch past the end offset), so each batch is
    judged by the piece that serves it. ``fail``: the read fails naming the file and position; ``skip``:
    the damage is logged and the read goes on. The last batch of a sealed segment is not judged against
    the next segment's base offset here (``verify``, ``consume`` and the mount do that). Batches are
    seen as numbers (the kernel's walk gives no headers), judged by
    :func:`~kafkafs.storage.validation.offsets_problem` (order_problem on those numbers)."""

    def __init__(self, segment: LogSegment, path: str, on_corrupt: str) -> None:
        self.segment, self.path, self.skip = segment, path, on_corrupt == "skip"
        self.segment_base = segment.base_offset
        self.next_offset: int | None = None  # one past the batch before the pending one (None: not known)
        # (file position, base offset, lastOffsetDelta, magic)
        self.pending: tuple[int, int, int, int] | None = None

    def see(self, position: int, base: int, last_offset_delta: int, magic: int) -> None:
        """The next batch of the walk, in file order (``position``: in the file)."""
        if self.pending is not None:
            self._judge(base)
        self.pending = (position, base, last_offset_delta, magic)

    def see_view(self, view: BatchView) -> None:
        """The next batch of the walk, whole (a legacy compressed wrapper is judged by its first inner
        offset, :func:`~kafkafs.storage.validation.first_offset`)."""
        h = view.header
        first = first_offset(view)
        self.see(view.position, first, h.last_offset - first, h.magic)

    def see_v2(self, buf: bytes, at: int, stop: int, file_base: int) -> None:
        """The whole v2 batches of ``buf[at:stop]`` (what the kernel walked), ``buf`` read at ``file_base``."""
        see = self.see
        while at < stop:
            base, length, delta = v2_offsets(buf, at)
            see(file_base + at, base, delta, 2)
            at += length + 12

    def stop(self) -> None:
        """The walk ended at the batch last seen, which is not served (past the end offset)."""
        self.pending = None

    def finish(self, position: int) -> None:
        """The walk ended at ``position``, the first batch it did not read (if there is one)."""
        if self.pending is not None:
            self._judge(self._base_at(position))
            self.pending = None

    def _base_at(self, position: int) -> int | None:
        head = self.segment.read_at(position, 18)
        if len(head) < 17:
            return None
        base, length = _BASE_AND_LENGTH.unpack_from(head, 0)
        magic = head[16]
        if magic > 127 or length < 14 or (magic >= 2 and length < 49) or base < 0:  # 3..127: v2, as Kafka
            return None  # not a batch header (a torn write, zeros): nothing to judge by
        if magic < 2 and len(head) > 17 and head[17] & 0x07:  # a legacy compressed wrapper: its first inner offset
            entry = self.segment.read_at(position, length + 12)
            try:
                header = read_batch_header(entry, 0, len(entry))
            except CorruptRecordError:
                return base
            if header is not None:
                return first_offset(BatchView(entry, header, position))
        return base

    def _judge(self, following: int | None) -> None:
        assert self.pending is not None
        position, base, delta, magic = self.pending
        before, self.next_offset = self.next_offset, base + delta + 1
        problem = offsets_problem(base, delta, magic, next_offset=before, following=following,
                                  segment_base=self.segment_base)
        if problem is None:
            return
        if not self.skip:
            raise _hint(CorruptRecordError(problem, position, self.path))
        log.warning("%s: offsets out of order at position %d (its records are read): %s", self.path, position,
                    problem)


class _PieceReader:
    """One piece's batches into ``columns``, the reference's way one batch at a time (:meth:`take`), or
    with the kernel walking whole uncompressed batches of a read (:meth:`walk`)."""

    def __init__(self, piece: Piece, spec: ScanSpec, segment: LogSegment, columns: _Columns | KernelColumns) -> None:
        self.piece, self.spec, self.segment, self.columns = piece, spec, segment, columns
        self.aborted = _Aborted(piece.aborted) if spec.read_committed else None
        self.first, self.end = piece.first_offset, piece.end_offset
        self.ts_lo_ms = None if spec.timestamp.lo is None else -((-spec.timestamp.lo) // 1000)
        self.path = str(segment.log_path)
        self.order = _OffsetOrder(segment, self.path, spec.on_corrupt)
        #: a v2 batch :meth:`take` met whose records inflate past what is held at once: its rows are added
        #: a run at a time by :meth:`in_pieces` (R15-7)
        self.big: BatchView | None = None

    def full(self) -> bool:
        return self.columns.rows >= self.spec.batch_rows or self.columns.bytes >= _MAX_BUFFER_BYTES

    def take(self, view: BatchView) -> bool:
        """Adds the rows of one batch that pass the bounds; False once past the end offset."""
        h, first, end, path = view.header, self.first, self.end, self.path
        # lastOffsetDelta, attributes (control, transactional), producer id and maxTimestamp are inside the
        # CRC: a batch is left out by them only once its CRC holds, as Kafka's consumer checks it first (R23-12)
        if h.last_offset < first:
            self._intact(view)
            return True
        if end is not None and h.magic == 2 and h.base_offset >= end:
            return False
        if self.aborted is not None and h.magic == 2:
            if (h.is_control or h.is_transactional) and not self._intact(view):
                return True
            if self.aborted.skip(h, view, path):
                return True
        if h.is_control or (self.ts_lo_ms is not None and h.max_timestamp < self.ts_lo_ms and h.magic > 0):
            self._intact(view)
            return True
        columns = self.columns
        try:
            if h.magic == 2 and isinstance(columns, KernelColumns):
                validate_batch(view.buf, h)
                data = records_section(view.buf, h, READ_CONFIG.max_message_bytes)
                try:
                    columns.add_section(self.piece.topic, self.piece.partition, data, h, first, end)
                except CorruptRecordError as exc:
                    raise CorruptRecordError(exc.reason, h.position) from None
                return True
            batch = view.decode(file=path, max_inflated_bytes=READ_CONFIG.max_message_bytes)
        except UninflatableBatch as exc:
            if h.magic != 2:  # a legacy wrapper: as damage (the read fails, or onCorrupt=skip skips it)
                return self._damaged(view, exc)
            self.big = view  # valid data: its rows a run at a time (in_pieces)
            return True
        except CorruptRecordError as exc:
            return self._damaged(view, exc)
        offsets = batch.offsets
        lo = 0 if offsets[:1] and offsets[0] >= first else bisect.bisect_left(offsets, first)
        hi = len(offsets)
        if end is not None and offsets and offsets[-1] >= end:
            hi = bisect.bisect_left(offsets, end)
        columns.add(self.piece.topic, self.piece.partition, batch, lo, hi)
        return True

    def _intact(self, view: BatchView) -> bool:
        """Whether the batch's CRC holds; a damaged batch fails the read, or with ``onCorrupt=skip`` is
        logged (False)."""
        try:
            validate_batch(view.buf, view.header)
        except CorruptRecordError as exc:
            self._damaged(view, exc)
            return False
        return True

    def _damaged(self, view: BatchView, exc: CorruptRecordError) -> bool:
        """A batch whose records cannot be read: the read fails, or with ``onCorrupt=skip`` it is skipped."""
        exc = exc if exc.file is not None else exc.at(self.path, view.base)
        if self.spec.on_corrupt != "skip":
            raise _hint(exc) from None
        log.warning("%s: skipping damaged batch at position %d: %s", self.path, view.position, exc.reason)
        return True

    def in_pieces(self) -> Iterator[pa.RecordBatch]:
        """The rows of :attr:`big` (a v2 batch whose records inflate past what is held at once), a run of
        records at a time (:func:`~kafkafs.format.bigbatch.record_runs`), an Arrow batch built whenever the
        columns are full. A record past the most held of one (128 MiB) is not read: the read fails there,
        or with ``onCorrupt=skip`` it is skipped (logged), as a damaged batch is."""
        view, self.big = self.big, None
        if view is None:
            return
        h, columns, piece = view.header, self.columns, self.piece
        try:
            for run in record_runs(view.buf, h):
                if isinstance(run, RecordNotShown):
                    self._damaged(view, run)
                    continue
                data, n = run
                part = h._replace(record_count=n)
                try:
                    if isinstance(columns, KernelColumns):
                        columns.add_section(piece.topic, piece.partition, bytes(data), part, self.first, self.end)
                    else:
                        batch = decode_records_at(bytes(data), part)
                        offsets = batch.offsets
                        lo = bisect.bisect_left(offsets, self.first)
                        hi = len(offsets) if self.end is None else bisect.bisect_left(offsets, self.end)
                        columns.add(piece.topic, piece.partition, batch, lo, hi)
                finally:
                    data.release()
                if self.full():
                    built = columns.build(self.spec)
                    if built is not None:
                        yield built
        except CorruptRecordError as exc:
            self._damaged(view, exc)

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The reference's loop: every batch through :meth:`take`."""
        for view in _views(self.segment, self.piece, self.spec.on_corrupt):
            self.order.see_view(view)
            if not self.take(view):
                self.order.stop()
                return
            yield from self.in_pieces()
            if self.full():
                built = self.columns.build(self.spec)
                if built is not None:
                    yield built
        self.order.finish(self.piece.end)

    def walk(self) -> Iterator[pa.RecordBatch]:
        """The kernel's loop: whole uncompressed batches of each read in one call; a batch it stops at
        (compressed, legacy, damaged, larger than a read) goes through :meth:`take`."""
        piece, spec, columns = self.piece, self.spec, self.columns
        assert isinstance(columns, KernelColumns)
        end = min(piece.end, self.segment.size)
        max_batch = self.segment.records.max_batch_size
        pos = piece.start  # the file position walked to
        buf, base = b"", pos  # the last read, and its file position
        while pos < end:
            if pos - base >= len(buf):  # everything read is walked: read on (a batch cut off is read again)
                buf, base = self.segment.read_at(pos, min(_WALK_BYTES, end - pos)), pos
                if not buf:
                    self.order.stop()
                    return
            at = pos - base
            stop, status = columns.walk(
                piece.topic, piece.partition, buf, at, self.first, self.end, self.ts_lo_ms, max_batch,
                spec.batch_rows, _MAX_BUFFER_BYTES,
            )
            self.order.see_v2(buf, at, stop, base)  # the whole batches the kernel walked
            pos = base + stop
            if status == WALK_END:
                self.order.finish(pos)
                return
            if status == WALK_PARTIAL and pos > base:  # a batch cut off by the end of the read: read again
                buf, base = b"", pos
                continue
            if status != WALK_FULL:  # one batch the reference's way, from pos
                view = next(_views(self.segment, dataclasses.replace(piece, start=pos), spec.on_corrupt), None)
                if view is None:
                    self.order.finish(pos)
                    return
                pos = view.position + view.size  # still in buf, or past it: the next turn reads on
                self.order.see_view(view)
                if not self.take(view):
                    self.order.stop()
                    return
                yield from self.in_pieces()
                if not self.full():
                    continue
            built = columns.build(spec)
            if built is not None:
                yield built
        self.order.finish(pos)


def _read_piece(piece: Piece, spec: ScanSpec, columns: _Columns | KernelColumns) -> Iterator[pa.RecordBatch]:
    segment = _open_segment(piece, spec)
    if segment is None:
        return
    reader = _PieceReader(piece, spec, segment, columns)
    try:
        # the kernel skips control batches by their header: right unless an aborted transaction needs them
        if isinstance(columns, KernelColumns) and not (spec.read_committed and piece.aborted):
            yield from reader.walk()
        else:
            yield from reader.batches()
    finally:
        segment.close_handlers()


_heap_frozen = False


def freeze_worker_heap() -> None:
    """Moves what the Python worker holds now (pyspark, pyarrow, kafkafs: modules, classes, functions)
    out of the garbage collector's sight, once per process. PySpark's daemon runs a full
    ``gc.collect()`` after every task of a reused worker, and walking those objects took 50-100 ms a
    task on a loaded 2-core machine, which the next task waited for; frozen, they are not walked. The
    task's own objects are collected as before; only garbage cycles that already existed at the freeze
    would be kept (one collect just before leaves none)."""
    global _heap_frozen
    if not _heap_frozen:
        _heap_frozen = True
        gc.collect()
        gc.freeze()


def read_split(split: Split, *, kernel: bool = True) -> Iterator[pa.RecordBatch]:
    """Every row of a split that passes its bounds and predicates, as Arrow batches (through the
    compiled kernel when it is built and ``kernel``, else the Python reference)."""
    include = split.spec.include_headers
    columns = KernelColumns(include) if kernel and available() else _Columns(include)
    for piece in split.pieces:
        yield from _read_piece(piece, split.spec, columns)
    built = columns.build(split.spec)
    if built is not None:
        yield built
