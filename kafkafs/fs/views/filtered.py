"""Records picked out of segments by a filter, as one file: ``table.jsonl`` and ``by-key/<name>.jsonl``.

A :class:`FilteredStream` is a list of parts, each a byte range of a segment (whole batches) and the
:class:`~kafkafs.format.recordfilter.RecordFilter` of the records wanted from it (the table's bitmap of
kept offsets, a key's offsets). It is laid out once, when made: every part is walked and the
length of what its records render to is counted (uncompressed batches through the kernel, many at a
call, the filter applied in C; the others one by one), and a mark is kept about every
:data:`MARK_BYTES` of log: where in the output, which part, which file position. So its size is exact
and known before any read, and a read renders again only from the mark before it, as far as it needs.
What a stream holds never changes: a part reads the segment it was made from.

Threads: a stream may be read from any number of threads at once; the output a read rendered last
(from its mark to the end of what was asked) is kept, under a lock, for the reads that follow.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from typing import NamedTuple

from ...errors import CorruptRecordError
from ...format.jsonview import raw_jsonl_lengths, render_raw_jsonl, render_span_jsonl
from ...format.recordfilter import RecordFilter
from .render import Renderer, SegmentBytes

__all__ = ["StreamPart", "FilteredStream", "MARK_BYTES", "CHUNK_BYTES"]

#: Bytes of log read and handed to the kernel at a time.
CHUNK_BYTES = 1 << 20
#: Log between two marks: a read renders again at most about this much before what it wants.
MARK_BYTES = 1 << 20


class StreamPart(NamedTuple):
    """Whole batches of ``segment`` between file positions ``start`` and ``end``, and the records of
    them that belong to the stream."""

    segment: SegmentBytes
    record_filter: RecordFilter
    start: int
    end: int


class _Mark(NamedTuple):
    out: int
    part: int
    position: int


def _batch_size(buf: bytes, at: int) -> int:
    """The size of the batch at ``at`` as its length field says (0 when the header is cut off)."""
    if len(buf) - at < 12:
        return 0
    return int.from_bytes(buf[at + 8 : at + 12], "big", signed=True) + 12


class FilteredStream:
    """The records of ``parts`` that pass their filters, rendered by ``renderer``, in part order."""

    def __init__(self, renderer: Renderer, parts: list[StreamPart]) -> None:
        self.renderer = renderer
        self.parts = parts
        self._marks: list[_Mark] = []
        self._lock = threading.Lock()
        self._window: tuple[int, bytes] = (0, b"")
        self.total = self._lay_out()
        self._mark_outs = [m.out for m in self._marks]

    # ------------------------------------------------------------------------------------------ walking

    def _step(self, part: StreamPart, position: int, lengths: bool) -> tuple[int, int | bytes]:
        """Render (or count) what the batches at ``position`` give: ``(bytes of log taken, output)``;
        0 taken at the end of the part (or a batch cut off by it: a writer still appending)."""
        r = self.renderer
        segment = part.segment
        want = min(CHUNK_BYTES, part.end - position)
        if want <= 0:
            return 0, 0 if lengths else b""
        buf = segment.read_at(position, want)
        if r.decoder is None:
            got = render_span_jsonl(r.topic, r.partition, buf, r.mode, lengths=lengths, record_filter=part.record_filter)
            if got.consumed:
                return got.consumed, (got.line_ends[-1] if got.line_ends else 0) if lengths else got.data
        size = _batch_size(buf, 0)
        if size <= 12 or position + size > part.end:
            return 0, 0 if lengths else b""
        if size > len(buf):
            buf = segment.read_at(position, size)
            if len(buf) < size:
                return 0, 0 if lengths else b""
        one = buf[:size]
        try:
            if lengths:
                return size, sum(raw_jsonl_lengths(r.topic, r.partition, one, r.mode, decoder=r.decoder,
                                                   record_filter=part.record_filter))
            return size, render_raw_jsonl(r.topic, r.partition, one, r.mode, decoder=r.decoder,
                                          record_filter=part.record_filter)
        except CorruptRecordError as exc:
            exc = exc.at(str(segment.log_path), position)
            r.on_corrupt(exc)
            raise exc from None

    def _lay_out(self) -> int:
        out = 0
        for i, part in enumerate(self.parts):
            position = part.start
            since = MARK_BYTES  # a mark at the start of every part
            while position < part.end:
                if since >= MARK_BYTES:
                    self._marks.append(_Mark(out, i, position))
                    since = 0
                taken, length = self._step(part, position, True)
                if not taken:
                    break
                position += taken
                since += taken
                out += length  # type: ignore[operator]  # lengths mode: out counts bytes (tables, issue 22, to type)
        return out

    # ------------------------------------------------------------------------------------------ reading

    def read(self, offset: int, size: int) -> bytes:
        """``size`` bytes of the stream from ``offset`` (fewer at its end)."""
        if offset >= self.total or size <= 0:
            return b""
        end = min(offset + size, self.total)
        with self._lock:
            start, data = self._window
        if start <= offset and end <= start + len(data):
            return data[offset - start : end - start]
        i = bisect_right(self._mark_outs, offset) - 1
        mark = self._marks[i]
        out, chunks = mark.out, []
        part_index, position = mark.part, mark.position
        first = out
        while out < end and part_index < len(self.parts):
            part = self.parts[part_index]
            taken, data = self._step(part, position, False)
            if not taken:
                part_index += 1
                if part_index < len(self.parts):
                    position = self.parts[part_index].start
                continue
            position += taken
            if out + len(data) <= offset:  # before what is asked: not kept
                out += len(data)
                first = out
                continue
            chunks.append(data)
            out += len(data)
        window = b"".join(chunks)
        with self._lock:
            self._window = (first, window)
        return window[offset - first : end - first]
