"""Render the records a view wants from the batches of a segment.

A *piece* of a view is a run of whole, contiguous batches of one segment with a filter: offsets
``lo..hi`` (inclusive) and timestamps ``ts_lo <= timestamp < ts_hi``. The timestamp bounds are applied
record by record: with CreateTime, timestamps need not grow with offsets, so a record past ``ts_hi``
says nothing about the ones after it.

Sizing a piece counts each batch's rendered bytes (:func:`batch_length`, the format layer's
``raw_jsonl_lengths``: nothing is built); reading it renders the same batches from one read of the
segment (:func:`render_raw`, ``render_raw_jsonl``). Both take a batch's bytes as the engine returned
them, so the two always agree, and the mount never decodes a batch twice to render it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from ..errors import CorruptRecordError
from ..format.batch import BatchHeader, scan_batches
from ..format.jsonview import raw_jsonl_lengths, render_raw_jsonl, render_span_jsonl
from ..storage.records import BatchView
from ..storage.segment import LogSegment

__all__ = ["Filter", "NO_FILTER", "render_raw", "batch_length", "header_skips"]


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


def _render_span(
    topic: str, partition: int, segment: LogSegment, position: int, size: int, mode: str, decoder: object | None
) -> bytes:
    """Every record of the whole batches filling ``size`` bytes at ``position`` (``records.jsonl``'s
    hot path): batches found by their length fields alone, each checked whole by the renderer."""
    file = str(segment.log_path)
    buf = segment.read_at(position, size)
    if len(buf) != size:
        raise CorruptRecordError("the segment is shorter than when it was laid out", position, file)
    out = []
    pos = 0
    while pos < size:
        if decoder is None:  # the kernel takes every uncompressed v2 batch it can, no Python between them
            taken = render_span_jsonl(topic, partition, memoryview(buf)[pos:] if pos else buf, mode)
            if taken.consumed:
                out.append(taken.data)
                pos += taken.consumed
                if pos >= size:
                    break
        # the batch at pos the old way: decompressed, legacy, or its damage said
        n = int.from_bytes(buf[pos + 8 : pos + 12], "big", signed=True) + 12 if size - pos >= 12 else 0
        if n <= 12 or pos + n > size:
            raise CorruptRecordError("the batches changed since they were laid out", position + pos, file)
        try:
            out.append(render_raw_jsonl(topic, partition, buf[pos : pos + n], mode, decoder=decoder))
        except CorruptRecordError as exc:
            raise exc.at(file, position + pos) from None
        pos += n
    return out[0] if len(out) == 1 else b"".join(out)


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

    Damage raises :class:`CorruptRecordError` placed in ``file``."""
    try:
        if flt is NO_FILTER:
            return sum(raw_jsonl_lengths(topic, partition, view.raw(), mode, decoder=decoder))
        if _header_excludes(view.header, flt):
            return 0
        return sum(raw_jsonl_lengths(topic, partition, view.raw(), mode, decoder=decoder, **_bounds(flt)))
    except CorruptRecordError as exc:
        raise exc.at(file, view.position) from None


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
    if flt is NO_FILTER:
        return _render_span(topic, partition, segment, position, size, mode, decoder)
    file = str(segment.log_path)
    bounds = _bounds(flt)
    out = []
    for view in _views_in(segment, position, size):
        header = view.header
        if _header_excludes(header, flt):
            continue
        try:
            out.append(render_raw_jsonl(topic, partition, view.raw(), mode, decoder=decoder, **bounds))
        except CorruptRecordError as exc:
            raise exc.at(file, view.position) from None
    return b"".join(out)
