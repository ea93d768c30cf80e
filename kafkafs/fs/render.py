"""Decode batches from a segment and render the records a view wants from them.

A *piece* of a view is a run of whole, contiguous batches of one segment with a filter: offsets
``lo..hi`` (inclusive) and timestamps ``ts_lo <= timestamp < ts_hi``. The timestamp bounds are applied
record by record: with CreateTime, timestamps need not grow with offsets, so a record past ``ts_hi``
says nothing about the ones after it. The same function renders a piece when a view is sized and when
it is read, so the two always agree.

Consecutive batches that render alike (same timestamp type, control and transactional flags) are
rendered in one call: a log of one-record batches then costs little more than one of large batches.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from typing import NamedTuple

from ..errors import CorruptRecordError
from ..format import jsonview
from ..format.batch import BatchHeader, DecodedBatch, scan_batches
from ..format.jsonview import render_batch_jsonl
from ..storage.segment import BatchView, LogSegment

__all__ = [
    "Filter", "NO_FILTER", "read_batches", "select", "render_batches", "render_raw", "batch_length", "header_skips",
]

# The format layer's whole-batch functions (rendering straight from a batch's bytes, and counting the
# rendered bytes without building them); None where this version of it does not have them.
_render_raw_jsonl = getattr(jsonview, "render_raw_jsonl", None)
_raw_jsonl_lengths = getattr(jsonview, "raw_jsonl_lengths", None)


class Filter(NamedTuple):
    """Which records of a batch belong to a view (None: no bound)."""

    lo: int | None = None
    hi: int | None = None
    ts_lo: int | None = None
    ts_hi: int | None = None


NO_FILTER = Filter()


def header_skips(header: BatchHeader, flt: Filter) -> bool:
    """Whether no record of a batch can pass ``flt``'s lower timestamp bound, from its header alone.

    Only v2 headers are trusted: their ``maxTimestamp`` is the largest timestamp of the batch (and the
    timestamp of every record under LogAppendTime); a legacy wrapper's timestamp is not always that.
    """
    return flt.ts_lo is not None and header.magic == 2 and header.max_timestamp < flt.ts_lo


def _views_in(segment: LogSegment, position: int, size: int) -> Iterator[BatchView]:
    """The whole batches filling ``size`` bytes at ``position`` of ``segment``, from one read; damage
    (a short file, a header that does not parse, batches that no longer fill the span) raises
    :class:`CorruptRecordError` placed in the file."""
    file = str(segment.log_path)
    buf = segment.read_at(position, size)
    if len(buf) != size:
        raise CorruptRecordError("the segment is shorter than when it was laid out", position, file)
    end = 0
    headers = scan_batches(buf, 0, size)
    while True:
        try:
            header = next(headers, None)
        except CorruptRecordError as exc:
            raise exc.at(file, position) from None
        if header is None:
            break
        end = header.end
        yield BatchView(buf, header, position)
    if end != size:
        raise CorruptRecordError("the batches changed since they were laid out", position + end, file)


def read_batches(segment: LogSegment, position: int, size: int) -> list[DecodedBatch]:
    """The whole batches filling ``size`` bytes at ``position`` of ``segment``, decoded and CRC-checked."""
    file = str(segment.log_path)
    return [view.decode(file=file) for view in _views_in(segment, position, size)]


def select(batch: DecodedBatch, flt: Filter) -> DecodedBatch:
    """The records of ``batch`` that pass ``flt`` (offsets in ``lo..hi``, ``ts_lo <= timestamp < ts_hi``)."""
    offsets = batch.offsets
    i = 0 if flt.lo is None else bisect_left(offsets, flt.lo)
    j = len(offsets) if flt.hi is None else bisect_right(offsets, flt.hi)
    keep = None
    if flt.ts_lo is not None or flt.ts_hi is not None:
        timestamps = batch.timestamps
        ts_lo = flt.ts_lo
        ts_hi = flt.ts_hi
        keep = [
            k
            for k in range(i, j)
            if (ts_lo is None or timestamps[k] >= ts_lo) and (ts_hi is None or timestamps[k] < ts_hi)
        ]
        if len(keep) == j - i:
            keep = None
    if keep is not None:
        return DecodedBatch(
            batch.header,
            [batch.offsets[k] for k in keep],
            [batch.timestamps[k] for k in keep],
            [batch.keys[k] for k in keep],
            [batch.values[k] for k in keep],
            [batch.headers[k] for k in keep],
        )
    if i == 0 and j == len(offsets):
        return batch
    return DecodedBatch(
        batch.header,
        offsets[i:j],
        batch.timestamps[i:j],
        batch.keys[i:j],
        batch.values[i:j],
        batch.headers[i:j],
    )


def _signature(batch: DecodedBatch) -> tuple:
    h = batch.header
    return (h.timestamp_type, h.is_control, h.is_transactional, h.producer_id if h.is_transactional else None)


def _merge(batches: list[DecodedBatch]) -> DecodedBatch:
    if len(batches) == 1:
        return batches[0]
    offsets, timestamps, keys, values, headers = [], [], [], [], []
    for b in batches:
        offsets += b.offsets
        timestamps += b.timestamps
        keys += b.keys
        values += b.values
        headers += b.headers
    return DecodedBatch(batches[0].header, offsets, timestamps, keys, values, headers)


def _render_one(topic: str, partition: int, batch: DecodedBatch, mode: str, decoder: object | None) -> bytes:
    if decoder is None:
        return render_batch_jsonl(topic, partition, batch, mode)
    return render_batch_jsonl(topic, partition, batch, mode, decoder=decoder)  # type: ignore[call-arg]


def _bounds(flt: Filter) -> dict:
    return {"lo": flt.lo, "hi": flt.hi, "ts_lo": flt.ts_lo, "ts_hi": flt.ts_hi}


def _header_excludes(header: BatchHeader, flt: Filter) -> bool:
    """No record of the batch can pass ``flt``, from a v2 header alone."""
    if header.magic != 2:
        return False
    return (
        header_skips(header, flt)
        or (flt.lo is not None and header.last_offset < flt.lo)
        or (flt.hi is not None and header.base_offset > flt.hi)
    )


def batch_length(
    topic: str, partition: int, view: BatchView, file: str, flt: Filter, mode: str, decoder: object | None = None
) -> int:
    """Bytes of JSON lines that the records of one batch passing ``flt`` render to.

    With the format layer's ``raw_jsonl_lengths`` nothing is rendered; without it the batch is decoded
    and rendered. Damage raises :class:`CorruptRecordError` placed in ``file``."""
    if _raw_jsonl_lengths is not None:
        if _header_excludes(view.header, flt):
            return 0
        try:
            return sum(_raw_jsonl_lengths(topic, partition, view.raw(), mode, decoder=decoder, **_bounds(flt)))
        except CorruptRecordError as exc:
            raise exc.at(file, view.position) from None
    batch = view.decode(file=file)
    return len(render_batches(topic, partition, [batch], flt, mode, decoder))


def render_raw(
    topic: str,
    partition: int,
    segment: LogSegment,
    position: int,
    size: int,
    flt: Filter,
    mode: str,
    decoder: object | None = None,
) -> bytes:
    """JSON lines of the records passing ``flt`` in the whole batches filling ``size`` bytes at
    ``position`` of ``segment``: one read, then each batch rendered from its bytes (CRC-checked)."""
    if _render_raw_jsonl is None:
        return render_batches(topic, partition, read_batches(segment, position, size), flt, mode, decoder)
    file = str(segment.log_path)
    bounds = _bounds(flt)
    out = []
    for view in _views_in(segment, position, size):
        header = view.header
        if _header_excludes(header, flt):
            continue
        try:
            out.append(_render_raw_jsonl(topic, partition, view.raw(), mode, decoder=decoder, **bounds))
        except CorruptRecordError as exc:
            raise exc.at(file, view.position) from None
    return b"".join(out)


def render_batches(
    topic: str, partition: int, batches: list[DecodedBatch], flt: Filter, mode: str, decoder: object | None = None
) -> bytes:
    """JSON lines of the records of ``batches`` (in order) that pass ``flt``."""
    picked = []
    for batch in batches:
        if flt is not NO_FILTER:
            batch = select(batch, flt)
        if batch.offsets:
            picked.append(batch)
    out = []
    run: list[DecodedBatch] = []
    for batch in picked:
        if run and _signature(run[0]) != _signature(batch):
            out.append(_render_one(topic, partition, _merge(run), mode, decoder))
            run = []
        run.append(batch)
    if run:
        out.append(_render_one(topic, partition, _merge(run), mode, decoder))
    return b"".join(out)
