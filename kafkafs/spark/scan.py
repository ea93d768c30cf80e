"""Reading a split in a Spark worker: segments opened read-only, batches decoded into Arrow columns.

Rows leave as ``pyarrow.RecordBatch`` es in :data:`~kafkafs.spark.schema.ARROW_SCHEMA`. Each decoded
Kafka batch is appended to plain lists with ``list.extend`` (no per-row Python for the common columns)
and about ``batchRows`` rows become one Arrow batch; the topic, partition and timestamp type columns
are built from runs. Offset bounds are applied per Kafka batch by bisection (offsets only grow inside
a batch); the timestamp bounds and offset ``IN`` lists run vectorised on the finished Arrow batch.

Batches are skipped before decoding when their header already shows they cannot pass: offsets below
the start, a largest timestamp below the lower time bound, control batches (a Kafka consumer never
sees those records).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import CorruptRecordError
from ..format.batch import BatchHeader, DecodedBatch, control_type_of
from ..storage.config import LogConfig
from ..storage.records import BatchView
from ..storage.segment import LogSegment
from .dataloss import report_data_loss
from .plan import Piece, ScanSpec, Split
from .schema import HEADERS_ARROW_TYPE, TIMESTAMP_ARROW_TYPE, arrow_schema

__all__ = ["read_split", "READ_CONFIG"]

log = logging.getLogger("kafkafs.spark")

#: Readers accept batches up to 64 MiB of ``max.message.bytes`` (the segment reader's sanity cap is a
#: few times that), so a topic configured for large messages is not mistaken for damage.
READ_CONFIG = LogConfig(max_message_bytes=64 * 1024 * 1024)

_MAX_BUFFER_BYTES = 256 * 1024 * 1024  # keep binary columns well under Arrow's 2 GiB offsets


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
        if len(self.runs) == 1:
            return pa.repeat(pa.scalar(self.runs[0][index], type_), self.rows)
        return pa.concat_arrays([pa.repeat(pa.scalar(r[index], type_), r[3]) for r in self.runs])

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
        batch = pa.RecordBatch.from_arrays(columns, schema=arrow_schema(self.include_headers))
        self.clear()
        mask = _row_mask(spec, offsets, micros)
        if mask is not None:
            batch = batch.filter(mask)
        return batch if batch.num_rows else None


def _row_mask(spec: ScanSpec, offsets: pa.Array, micros: pa.Array) -> pa.Array | None:
    conditions = []
    ts = spec.timestamp
    if ts.lo is not None:
        conditions.append(pc.greater_equal(micros, ts.lo))
    if ts.hi is not None:
        conditions.append(pc.less_equal(micros, ts.hi))
    if ts.values is not None:
        conditions.append(pc.is_in(micros, value_set=pa.array(sorted(ts.values), pa.int64())))
    if spec.offset_values is not None:
        conditions.append(pc.is_in(offsets, value_set=pa.array(sorted(spec.offset_values), pa.int64())))
    if not conditions:
        return None
    mask = conditions[0]
    for c in conditions[1:]:
        mask = pc.and_(mask, c)
    return mask


def _next_indexed_position(segment: LogSegment, after: int, end: int) -> int | None:
    """The first offset index position past ``after`` (a batch boundary to resume at), if before ``end``."""
    try:
        for entry in segment.offset_index:
            if after < entry.position < end:
                return entry.position
    except (CorruptRecordError, OSError):
        return None
    return None


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
            yield from segment.batches(position, piece.end)
            return
        except CorruptRecordError as exc:
            if on_corrupt != "skip":
                raise _hint(exc) from None
            bad = exc.position if exc.position is not None else position
            resume = _next_indexed_position(segment, bad, piece.end)
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


def _read_piece(piece: Piece, spec: ScanSpec, columns: _Columns) -> Iterator[pa.RecordBatch]:
    segment = _open_segment(piece, spec)
    if segment is None:
        return
    aborted = _Aborted(piece.aborted) if spec.read_committed else None
    first, end = piece.first_offset, piece.end_offset
    ts_lo_ms = None if spec.timestamp.lo is None else -((-spec.timestamp.lo) // 1000)
    path = str(segment.log_path)
    try:
        for view in _views(segment, piece, spec.on_corrupt):
            h = view.header
            if h.last_offset < first:
                continue
            if end is not None and h.magic == 2 and h.base_offset >= end:
                break
            if aborted is not None and h.magic == 2 and aborted.skip(h, view, path):
                continue
            if h.is_control:
                continue
            if ts_lo_ms is not None and h.max_timestamp < ts_lo_ms and h.magic > 0:
                continue
            try:
                batch = view.decode(file=path, max_inflated_bytes=READ_CONFIG.max_message_bytes)
            except CorruptRecordError as exc:
                if spec.on_corrupt != "skip":
                    raise _hint(exc) from None
                log.warning("%s: skipping damaged batch at position %d: %s", path, view.position, exc.reason)
                continue
            offsets = batch.offsets
            lo = 0 if offsets[:1] and offsets[0] >= first else bisect.bisect_left(offsets, first)
            hi = len(offsets)
            if end is not None and offsets and offsets[-1] >= end:
                hi = bisect.bisect_left(offsets, end)
            columns.add(piece.topic, piece.partition, batch, lo, hi)
            if columns.rows >= spec.batch_rows or columns.bytes >= _MAX_BUFFER_BYTES:
                built = columns.build(spec)
                if built is not None:
                    yield built
    finally:
        segment.close_handlers()


def read_split(split: Split) -> Iterator[pa.RecordBatch]:
    """Every row of a split that passes its bounds and predicates, as Arrow batches."""
    columns = _Columns(split.spec.include_headers)
    for piece in split.pieces:
        yield from _read_piece(piece, split.spec, columns)
    built = columns.build(split.spec)
    if built is not None:
        yield built
