"""Many whole batches of a ``.log`` rendered at once: :func:`render_span_jsonl` (SPEC §3 lines).

The per-batch functions of :mod:`.jsonview` cost a few microseconds of Python a batch; a partition of
10^6 records in batches of 100 spends most of its time there. ``render_span_jsonl`` takes a buffer of
a ``.log`` that starts at a batch boundary and, in the compiled kernel, walks its whole batches,
checks each CRC-32C and renders each uncompressed v2 batch, with no Python between batches. It stops
before the first batch it does not take: compressed, legacy (magic 0/1), damaged in any way (header,
CRC, records), holding a record whose offset is below the batch's base offset (only crafted data
does), out of the order of offsets (a base offset below ``min_offset`` or below the end of the batch
before it, or offsets that reach the base offset of the batch after it: SPEC §4, the order every reader
keeps, :func:`kafkafs.storage.validation.order_problem`), or cut off by the end of the buffer. A batch
is taken only once the base offset of the one after it is seen, or when the buffer is ``final`` (it ends
where the data ends) and the batch ends below ``upper`` (the next segment's base offset). The caller
handles the batch at ``consumed`` the old way (:func:`.jsonview.render_raw_jsonl`, which decompresses it or raises its damage) and calls
again after it. Partitions with a decoder (Kafka's internal topics, Schema Registry values) never
use it.

:func:`reference_span` is the pure-Python definition (read_batch_header, validate_batch,
decode_records, render_lines), which the kernel matches byte for byte
(tests/format/test_kernel_differential.py); it also serves machines without the kernel.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from typing import NamedTuple

from ..errors import CorruptRecordError
from . import Buffer
from . import kernel as _kernel
from .batchheader import V2_HEADER_SIZE, BatchHeader, read_batch_header, validate_batch
from .jsonrender import check_mode, line_prefix, render_lines
from .recordfilter import RecordFilter
from .records import decode_records

__all__ = ["SpanInto", "SpanResult", "reference_span", "reference_span_into", "render_span_into", "render_span_jsonl",
           "span_sections", "cut_off"]


class SpanResult(NamedTuple):
    """What :func:`render_span_jsonl` took from the start of its buffer.

    ``data``: the JSON lines of every batch taken (empty with ``lengths=True``); ``consumed``: bytes
    of the buffer taken (the next batch starts there); per batch taken, in order: ``batch_ends`` (its
    end in the buffer), ``last_offsets`` (its header's last offset) and ``line_ends`` (the end of its
    lines in ``data``, counted even when ``data`` is not written); ``lines``: the records rendered."""

    data: bytes
    consumed: int
    batch_ends: array[int]
    last_offsets: array[int]
    line_ends: array[int]
    lines: int


def _int64s(raw: bytes) -> array[int]:
    out = array("q")
    out.frombytes(raw)
    return out


def render_span_jsonl(topic: str, partition: int, buf: Buffer, mode: str = "auto", *, lengths: bool = False,
                      record_filter: RecordFilter | None = None, min_offset: int | None = None,
                      final: bool = True, upper: int | None = None) -> SpanResult:
    """The JSON lines of the whole uncompressed v2 batches at the start of ``buf`` (bytes of a ``.log``
    from a batch boundary), up to the first batch it does not take; see the module's docstring.
    ``record_filter``: only the records it accepts are rendered (every batch is still walked and
    checked). ``min_offset``: the least base offset the first batch may have (one past the batch
    before it). Thread-safe: the kernel keeps no state and releases the GIL while it works."""
    check_mode(mode)
    if record_filter is not None and record_filter.empty:
        record_filter = None
    kernel = _kernel.KERNEL
    if kernel is None:
        return reference_span(topic, partition, buf, mode, lengths=lengths, record_filter=record_filter,
                              min_offset=min_offset, final=final, upper=upper)
    data, consumed, lines, ends, lasts, line_ends = kernel.render_span(
        line_prefix(topic, partition), buf, _kernel.MODES[mode], lengths, -1 if min_offset is None else min_offset,
        final, -1 if upper is None else upper, None if record_filter is None else record_filter.kernel_arg(),
    )
    return SpanResult(data, consumed, _int64s(ends), _int64s(lasts), _int64s(line_ends), lines)


class SpanInto(NamedTuple):
    """What :func:`render_span_into` took: ``written`` bytes of lines at ``out[at:]``; ``consumed``,
    ``batch_ends``, ``last_offsets``, ``line_ends`` (counted from ``at``) and ``lines`` as in
    :class:`SpanResult`; ``full``: it stopped before a batch whose lines did not fit in ``out``."""

    written: int
    consumed: int
    batch_ends: array[int]
    last_offsets: array[int]
    line_ends: array[int]
    lines: int
    full: bool


def render_span_into(topic: str, partition: int, buf: Buffer, out: bytearray | memoryview, at: int = 0,
                     mode: str = "auto", *, record_filter: RecordFilter | None = None, min_offset: int | None = None,
                     final: bool = True, upper: int | None = None) -> SpanInto:
    """:func:`render_span_jsonl`'s lines written straight into ``out[at:]`` (a writable buffer), so that a
    reader's reply can be a slice of it with no join: the same walk, which also stops before the first
    batch whose lines do not fit in ``out[at:len(out)]`` (``full``; a batch that fits exactly is taken).
    ``out[at:len(out)]`` is the call's own while it runs: bytes past ``at + written`` may be written over,
    so renders side by side in one buffer each take their own slice (``memoryview(big)[start:stop]``).
    Thread-safe as :func:`render_span_jsonl`: the kernel releases the GIL for the whole walk."""
    check_mode(mode)
    if record_filter is not None and record_filter.empty:
        record_filter = None
    kernel = _kernel.KERNEL
    if kernel is None:
        return reference_span_into(topic, partition, buf, out, at, mode, record_filter=record_filter,
                                   min_offset=min_offset, final=final, upper=upper)
    written, consumed, lines, ends, lasts, line_ends, full = kernel.render_span_into(
        line_prefix(topic, partition), buf, _kernel.MODES[mode], -1 if min_offset is None else min_offset, final,
        -1 if upper is None else upper, out, at, None if record_filter is None else record_filter.kernel_arg(),
    )
    return SpanInto(written, consumed, _int64s(ends), _int64s(lasts), _int64s(line_ends), lines, full)


def reference_span_into(topic: str, partition: int, buf: Buffer, out: bytearray | memoryview, at: int = 0,
                        mode: str = "auto", *, record_filter: RecordFilter | None = None,
                        min_offset: int | None = None, final: bool = True, upper: int | None = None) -> SpanInto:
    """:func:`render_span_into` in pure Python: :func:`reference_span`, then the batches whose lines fit."""
    view = memoryview(out).cast("B")
    if not 0 <= at <= len(view):
        raise ValueError("at is outside out")
    ref = reference_span(topic, partition, buf, mode, record_filter=record_filter, min_offset=min_offset,
                         final=final, upper=upper)
    room = len(view) - at
    keep = 0
    while keep < len(ref.line_ends) and ref.line_ends[keep] <= room:
        keep += 1
    written = ref.line_ends[keep - 1] if keep else 0
    view[at : at + written] = ref.data[:written]
    lines = ref.lines if keep == len(ref.line_ends) else ref.data[:written].count(b"\n")
    return SpanInto(written, ref.batch_ends[keep - 1] if keep else 0, ref.batch_ends[:keep], ref.last_offsets[:keep],
                    ref.line_ends[:keep], lines, keep < len(ref.line_ends))


def cut_off(buf: Buffer, at: int) -> int:
    """0 when a whole batch (as far as its length field says) starts at ``at`` of ``buf``, else the bytes
    it needs (what a span walk that stopped there tells apart: a batch it does not take, or one that
    the end of the buffer cut off)."""
    if len(buf) - at < 12:
        return 12
    need = int.from_bytes(buf[at + 8 : at + 12], "big", signed=True) + 12
    return need if need > 12 and at + need > len(buf) else 0


_LONG_MAX = 2**63 - 1


def in_order(view: Buffer, header: BatchHeader, min_offset: int, final: bool, upper: int | None = None) -> bool:
    """Whether a span takes the batch ``header`` of ``view`` as the order of offsets goes (the
    reference of the kernel's ``span_in_order``): its base at least ``min_offset``, a last offset delta
    of 0 or more and a next offset that fits a long, and the base offset of the batch after it (its
    first 8 bytes) past its last offset; with fewer than 8 bytes after it, only when ``final`` and its
    last offset is below ``upper`` (None: no bound)."""
    h = header
    if h.base_offset < min_offset or h.last_offset_delta < 0 or h.next_offset > _LONG_MAX:
        return False
    after = h.end
    if len(view) - after >= 8:
        following: int = int.from_bytes(view[after : after + 8], "big", signed=True)
        return following > h.last_offset
    return final and (upper is None or upper > h.last_offset)


def span_sections(buf: Buffer, order: tuple[int | None, bool, int | None] | None = None) -> Iterator[tuple[BatchHeader, bytes]]:
    """``(header, records section)`` of each whole, uncompressed v2 batch at the start of ``buf`` whose
    header and CRC hold, up to the first that is not (what the kernel's span walks take; their
    references stop where a section does not decode). ``order``: ``(min_offset, final, upper)``, and
    then only batches that keep the order of offsets (:func:`in_order`, render_span's walk)."""
    view = memoryview(buf).cast("B") if not isinstance(buf, bytes) else buf
    end = len(view)
    pos = 0
    expect = -1 if order is None or order[0] is None else order[0]
    while True:
        try:
            header = read_batch_header(view, pos, end)
            # the kernel's walks stop at a magic byte other than 2 (3..127, read as v2, is left to the
            # caller's batch-at-a-time path)
            if header is None or view[pos + 16] != 2 or header.attributes & 0x07:
                return
            if order is not None and not in_order(view, header, expect, order[1], order[2]):
                return
            validate_batch(view, header)
        except CorruptRecordError:
            return
        yield header, bytes(view[pos + V2_HEADER_SIZE : header.end])
        pos = header.end
        expect = header.next_offset


def reference_span(topic: str, partition: int, buf: Buffer, mode: str = "auto", *, lengths: bool = False,
                   record_filter: RecordFilter | None = None, min_offset: int | None = None, final: bool = True,
                   upper: int | None = None) -> SpanResult:
    """:func:`render_span_jsonl` in pure Python (the definition the kernel is tested against)."""
    check_mode(mode)
    pos = 0
    chunks: list[bytes] = []
    ends, lasts, line_ends = array("q"), array("q"), array("q")
    total = lines = 0
    for header, section in span_sections(buf, (min_offset, final, upper)):
        try:
            batch = decode_records(section, header)
            if any(offset < header.base_offset for offset in batch.offsets):
                break  # a record below its batch's base offset: the caller's (consume must filter it)
            picked = range(len(batch)) if record_filter is None else [
                i for i in range(len(batch))
                if record_filter.accepts(batch.offsets[i], batch.keys[i], batch.headers[i])]
            rendered = render_lines(topic, partition, batch, mode, picked)
        except (CorruptRecordError, IndexError, ValueError, OverflowError):
            break
        for line in rendered:
            total += len(line)
            if not lengths:
                chunks.append(line)
        lines += len(rendered)
        pos = header.end
        ends.append(pos)
        lasts.append(header.last_offset)
        line_ends.append(total)
    return SpanResult(b"".join(chunks), pos, ends, lasts, line_ends, lines)
