"""Decode batches from a segment and render the records a view wants from them.

A *piece* of a view is a run of whole, contiguous batches of one segment with a filter: offsets
``lo..hi`` (inclusive), timestamps from ``ts_lo``, and a stop at the first record whose timestamp is
``>= ts_hi`` (the end of a by-time range: Kafka's ``offsetsForTimes`` of the upper bound). The same
function renders a piece when a view is sized and when it is read, so the two always agree.

Consecutive batches that render alike (same timestamp type, control and transactional flags) are
rendered in one call: a log of one-record batches then costs little more than one of large batches.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import NamedTuple

from ..errors import CorruptRecordError
from ..format.batch import DecodedBatch, read_batch_header, scan_batches
from ..format.jsonview import render_batch_jsonl
from ..storage.segment import BatchView, LogSegment

__all__ = ["Filter", "NO_FILTER", "read_batch", "read_batches", "select", "render_batches"]


class Filter(NamedTuple):
    """Which records of a batch belong to a view (None: no bound)."""

    lo: int | None = None
    hi: int | None = None
    ts_lo: int | None = None
    ts_hi: int | None = None


NO_FILTER = Filter()


def read_batch(segment: LogSegment, position: int, size: int) -> DecodedBatch:
    """The batch of ``size`` bytes at ``position`` of ``segment``, decoded and CRC-checked."""
    file = str(segment.log_path)
    buf = segment.read_at(position, size)
    try:
        header = read_batch_header(buf, 0, len(buf))
    except CorruptRecordError as exc:
        raise exc.at(file, position) from None
    if header is None or header.size != size:
        raise CorruptRecordError("the batch changed or was cut short since it was indexed", position, file)
    return BatchView(buf, header, position).decode(file=file)


def read_batches(segment: LogSegment, position: int, size: int) -> list[DecodedBatch]:
    """The whole batches filling ``size`` bytes at ``position`` of ``segment``, decoded and CRC-checked."""
    file = str(segment.log_path)
    buf = segment.read_at(position, size)
    if len(buf) != size:
        raise CorruptRecordError("the segment is shorter than when it was laid out", position, file)
    out = []
    end = 0
    try:
        for header in scan_batches(buf, 0, size):
            out.append(BatchView(buf, header, position).decode(file=file))
            end = header.end
    except CorruptRecordError as exc:
        if exc.file is None:
            raise exc.at(file, position) from None
        raise
    if end != size:
        raise CorruptRecordError("the batches changed since they were laid out", position + end, file)
    return out


def select(batch: DecodedBatch, flt: Filter) -> tuple[DecodedBatch, bool]:
    """The records of ``batch`` that pass ``flt``, and whether the ``ts_hi`` stop was met."""
    offsets = batch.offsets
    i = 0 if flt.lo is None else bisect_left(offsets, flt.lo)
    j = len(offsets) if flt.hi is None else bisect_right(offsets, flt.hi)
    stopped = False
    if flt.ts_hi is not None:
        timestamps = batch.timestamps
        ts_hi = flt.ts_hi
        for k in range(i, j):
            if timestamps[k] >= ts_hi:
                j = k
                stopped = True
                break
    keep = None
    if flt.ts_lo is not None:
        ts_lo = flt.ts_lo
        keep = [k for k in range(i, j) if batch.timestamps[k] >= ts_lo]
        if len(keep) == j - i:
            keep = None
    if keep is not None:
        picked = DecodedBatch(
            batch.header,
            [batch.offsets[k] for k in keep],
            [batch.timestamps[k] for k in keep],
            [batch.keys[k] for k in keep],
            [batch.values[k] for k in keep],
            [batch.headers[k] for k in keep],
        )
        return picked, stopped
    if i == 0 and j == len(offsets):
        return batch, stopped
    return (
        DecodedBatch(
            batch.header,
            offsets[i:j],
            batch.timestamps[i:j],
            batch.keys[i:j],
            batch.values[i:j],
            batch.headers[i:j],
        ),
        stopped,
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


def render_batches(
    topic: str, partition: int, batches: list[DecodedBatch], flt: Filter, mode: str
) -> tuple[bytes, bool]:
    """JSON lines of the records of ``batches`` (in order) that pass ``flt``; and whether the ``ts_hi``
    stop was met (nothing after it is rendered)."""
    picked = []
    stopped = False
    for batch in batches:
        if flt is not NO_FILTER:
            batch, stopped = select(batch, flt)
        if batch.offsets:
            picked.append(batch)
        if stopped:
            break
    out = []
    run: list[DecodedBatch] = []
    for batch in picked:
        if run and _signature(run[0]) != _signature(batch):
            out.append(render_batch_jsonl(topic, partition, _merge(run), mode))
            run = []
        run.append(batch)
    if run:
        out.append(render_batch_jsonl(topic, partition, _merge(run), mode))
    return b"".join(out), stopped
