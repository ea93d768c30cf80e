"""Arrow columns filled by the compiled kernel (``_kernel.ArrowBuilder``, kafkafs/format/_kernel_arrow.h).

:class:`KernelColumns` is what :class:`kafkafs.spark.scan._Columns` (the Python reference and the
fallback when the kernel is not built) does, without a Python object per key, value or header: the
kernel appends records into Arrow buffers (validity bits, int32 offsets, data), and :meth:`build`
wraps them with ``pyarrow.Array.from_buffers`` without a copy. :meth:`walk` takes whole uncompressed
v2 batches of a segment buffer in one call (CRC-checked by the kernel) and stops at anything else,
which the caller takes the reference's way. Bounds are the reference's: offsets ``[first, end)`` by
bisection per Kafka batch, the timestamp and offset-list predicates on the finished Arrow batch.

Not thread-safe: one instance per split reader.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from ..format import kernel as _kernel
from ..format.batch import BatchHeader, DecodedBatch
from .plan import ScanSpec
from .schema import HEADERS_ARROW_TYPE, TIMESTAMP_ARROW_TYPE, arrow_schema

__all__ = ["KernelColumns", "available", "row_mask", "repeat_runs", "finish_batch", "WALK_PARTIAL", "WALK_PYTHON", "WALK_END", "WALK_FULL"]

#: :meth:`KernelColumns.walk` stopped where the buffer holds no whole batch.
WALK_PARTIAL = 0
#: ... at a batch the caller takes the Python way (compressed, legacy magic, damaged, zeros).
WALK_PYTHON = 1
#: ... at a batch whose base offset is at or past the end bound.
WALK_END = 2
#: ... after the batch that made the rows (or bytes) enough for one Arrow batch.
WALK_FULL = 3

_HEADER_STRUCT = HEADERS_ARROW_TYPE.value_type


def available() -> bool:
    """True when the kernel with its ArrowBuilder is built."""
    return _kernel.KERNEL is not None and hasattr(_kernel.KERNEL, "ArrowBuilder")


def row_mask(spec: ScanSpec, offsets: pa.Array, micros: pa.Array) -> pa.Array | None:
    """The rows of a built batch that pass the timestamp bounds and the offset list (None: all)."""
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


def repeat_runs(runs: Iterable[tuple[object, int]], type_: pa.DataType) -> pa.Array:
    """A column that holds each run's value for its number of rows, ``runs`` as ``(value, rows)``: the
    topic, partition and timestamp type columns, which change rarely within an Arrow batch."""
    parts = [pa.repeat(pa.scalar(value, type_), rows) for value, rows in runs]
    return parts[0] if len(parts) == 1 else pa.concat_arrays(parts)


def finish_batch(
    spec: ScanSpec, columns: list[pa.Array], include_headers: bool, offsets: pa.Array, micros: pa.Array
) -> pa.RecordBatch | None:
    """One Arrow batch of ``columns`` (in the schema's order) with the rows that pass the scan's
    timestamp bounds and offset list (:func:`row_mask`), or None when no row is left. Both column
    builders, the kernel's and the Python reference's, end here."""
    batch = pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers))
    mask = row_mask(spec, offsets, micros)
    if mask is not None:
        batch = batch.filter(mask)
    return batch if batch.num_rows else None


def _binary(type_: pa.DataType, column: tuple) -> pa.Array:
    items, valid, offsets, data, nulls = column
    return pa.Array.from_buffers(
        type_, items, [None if valid is None else pa.py_buffer(valid), pa.py_buffer(offsets), pa.py_buffer(data)],
        null_count=nulls,
    )


class KernelColumns:
    """Rows appended by the kernel until there are enough for one Arrow batch (see the module doc)."""

    def __init__(self, include_headers: bool = True) -> None:
        self.include_headers = include_headers
        self._builder = _kernel.KERNEL.ArrowBuilder(include_headers)
        self._runs: list[list] = []  # [topic, partition, rows up to here]

    @property
    def rows(self) -> int:
        return self._builder.rows

    @property
    def bytes(self) -> int:
        return self._builder.bytes

    def _ran(self, topic: str, partition: int) -> None:
        rows = self._builder.rows
        runs = self._runs
        if runs and runs[-1][0] == topic and runs[-1][1] == partition:
            runs[-1][2] = rows
        elif rows > (runs[-1][2] if runs else 0):
            runs.append([topic, partition, rows])

    def add(self, topic: str, partition: int, batch: DecodedBatch, lo: int, hi: int) -> None:
        """Rows ``lo:hi`` of a decoded batch (a legacy entry): the reference's ``add``."""
        if hi <= lo:
            return
        self._builder.add_columns(
            list(batch.offsets), list(batch.timestamps), list(batch.keys), list(batch.values), list(batch.headers),
            batch.header.timestamp_type, lo, hi,
        )
        self._ran(topic, partition)

    def add_section(
        self, topic: str, partition: int, data: builtins.bytes, header: BatchHeader, first: int, end: int | None
    ) -> None:
        """The records of a v2 batch's section (CRC-checked and decompressed) in ``[first, end)``; damage
        raises :class:`~kafkafs.errors.CorruptRecordError` without a position, as the kernel's decode."""
        self._builder.add_section(
            data, header.base_offset, header.first_timestamp, header.max_timestamp, header.attributes,
            header.record_count, first, end,
        )
        self._ran(topic, partition)

    def walk(
        self, topic: str, partition: int, buf: builtins.bytes, start: int, first: int, end: int | None, ts_lo_ms: int | None,
        max_batch: int, batch_rows: int, max_bytes: int,
    ) -> tuple[int, int]:
        """Whole uncompressed v2 batches of ``buf`` from ``start`` (a batch boundary) appended, skipping
        what the scan skips by header; ``(position in buf where it stopped, WALK_*)``."""
        pos, status = self._builder.walk(buf, start, first, end, ts_lo_ms, max_batch, batch_rows, max_bytes)
        self._ran(topic, partition)
        return pos, status

    def _repeat(self, index: int, type_: pa.DataType) -> pa.Array:
        runs = self._runs  # each run holds the rows up to its end: it starts where the one before ends
        starts = [0, *(run[2] for run in runs[:-1])]
        return repeat_runs(((run[index], run[2] - start) for run, start in zip(runs, starts, strict=True)), type_)

    def build(self, spec: ScanSpec) -> pa.RecordBatch | None:
        """The rows so far as one Arrow batch (predicates applied), or None; starts again empty."""
        if not self._builder.rows:
            return None
        n, offset, timestamp, tstype, key, value, headers = self._builder.finish()
        offsets = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(offset)])
        micros = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(timestamp)])
        columns = [
            _binary(pa.binary(), key),
            _binary(pa.binary(), value),
            self._repeat(0, pa.string()),
            self._repeat(1, pa.int32()),
            offsets,
            pa.Array.from_buffers(TIMESTAMP_ARROW_TYPE, n, [None, pa.py_buffer(timestamp)]),
            pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(tstype)]),
        ]
        self._runs = []
        if self.include_headers:
            valid, list_offsets, nulls, hkey, hvalue = headers
            children = [_binary(pa.string(), hkey), _binary(pa.binary(), hvalue)]
            struct = pa.StructArray.from_arrays(children, fields=list(_HEADER_STRUCT))
            columns.append(pa.Array.from_buffers(
                HEADERS_ARROW_TYPE, n, [None if valid is None else pa.py_buffer(valid), pa.py_buffer(list_offsets)],
                null_count=nulls, children=[struct],
            ))
        return finish_batch(spec, columns, self.include_headers, offsets, micros)
