"""Rendering the records a view wants from the batches of a segment, and counting what they render to.

A view's *filter* (:class:`Filter`) says which records of a batch belong to it: offsets ``lo..hi``
(inclusive) and timestamps ``ts_lo <= timestamp < ts_hi``. The timestamp bounds are applied record by
record: with CreateTime, timestamps need not grow with offsets, so a record past ``ts_hi`` says nothing
about the ones after it.

A partition's :class:`Renderer` does both halves for every view of it: :meth:`Renderer.length` counts
one batch's rendered bytes (the format layer's ``raw_jsonl_lengths``: nothing is built), and
:meth:`Renderer.render` renders the whole batches of a span from one read of the segment (a span of
an unfiltered view through the kernel's ``render_span_jsonl``, batch after batch with no Python
between them). Both take a batch's bytes as the engine returned them, so the two always agree, and
the mount never decodes a batch twice to render it.

Damage is said once per place (:func:`report_corrupt`), wherever it is found. A disk that will not give
a segment's bytes (EIO: :func:`unreadable`) is damage for the reads that need those bytes, said once per
file, and the rest of the views stay readable (SPEC §3: damage and disk errors are local). Only the
read-only views turn disk errors into that: a writer (recovery, compaction) fails instead, and never
cuts what it could not read.
"""

from __future__ import annotations

import errno
import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol

from ...errors import CorruptRecordError, UninflatableBatch
from ...format.batch import BatchHeader, scan_batches, validate_batch
from ...format.jsonspan import render_span_into
from ...format.jsonview import raw_jsonl_lengths, render_raw_jsonl, render_span_jsonl
from ...storage.records import BatchView

if TYPE_CHECKING:
    from ...format.decoders import Decoder

__all__ = [
    "Filter", "NO_FILTER", "Renderer", "SegmentBytes", "header_skips", "report_corrupt", "UnreadableError",
    "unreadable", "disk_error",
]

log = logging.getLogger("kafkafs.fs")


class Filter(NamedTuple):
    """Which records of a batch belong to a view (None: no bound)."""

    lo: int | None = None
    hi: int | None = None
    ts_lo: int | None = None
    ts_hi: int | None = None


NO_FILTER = Filter()


class SegmentBytes(Protocol):
    """What rendering reads of a segment: a :class:`~kafkafs.storage.segment.LogSegment`, or its
    ``.log`` held open after the segment left the log (:mod:`.streams`)."""

    @property
    def log_path(self) -> Path: ...

    def read_at(self, position: int, size: int) -> bytes: ...


_reported: set[tuple[str | None, int | str | None]] = set()
_reasons_said: set[tuple[str | None, int | str | None]] = set()  # (file, reason): one damage said with or without its position
_report_lock = threading.Lock()
_too_large = [0]  # how many of _reported are UninflatableBatch (under _report_lock)

#: The errno values of a disk that will not give bytes it holds (not a file that is gone or closed); a
#: segment the daemon may not read (EACCES/EPERM: its mode) is the same for the reads (review22 R22-4).
DISK_ERRNOS = frozenset({errno.EIO, errno.EUCLEAN, errno.EBADMSG, errno.ENODATA, errno.EREMOTEIO,
                         errno.EACCES, errno.EPERM})


class UnreadableError(CorruptRecordError):
    """Bytes of a file that the disk would not give (EIO): the reads that need them fail with EIO,
    every other read goes on; reported once per file (:func:`report_corrupt`)."""


def disk_error(exc: BaseException) -> bool:
    """Whether ``exc`` is the disk failing to read (see :data:`DISK_ERRNOS`)."""
    return isinstance(exc, OSError) and exc.errno in DISK_ERRNOS


def unreadable(exc: OSError, file: str | None, position: int | None) -> UnreadableError:
    """The read-only views' word for a disk error reading ``file`` at ``position``."""
    who = "kafkafs may not read it" if exc.errno in (errno.EACCES, errno.EPERM) else "the disk could not read it"
    return UnreadableError(f"{who} ({exc.strerror or exc})", position, file)


def reported_count() -> int:
    """How many distinct damages (file and position; a disk error once a file) :func:`report_corrupt`
    has logged in this process, batches too large to inflate included. Safe from any thread."""
    with _report_lock:
        return len(_reported)


def too_large_count() -> int:
    """How many of :func:`reported_count` are batches too large to inflate (valid data, not damage).
    Safe from any thread."""
    with _report_lock:
        return _too_large[0]


def report_corrupt(exc: CorruptRecordError) -> None:
    """Log damage once per (file, position): the segment and where in it; a disk error once per file;
    damage that names no file once per reason (which then says where). Safe from any thread."""
    key: tuple[str | None, int | str | None]
    also: tuple[str | None, int | str | None] | None = None
    if isinstance(exc, UnreadableError):
        key = (exc.file, None)
    elif exc.file is None:
        key = (None, exc.reason)
    else:  # one damage may come from a reader that knows its position and one that does not (R15-9)
        key, also = (exc.file, exc.position), (exc.file, exc.reason)
    with _report_lock:
        if key in _reported or also in _reasons_said:
            return
        _reported.add(key)
        if also is not None:
            _reasons_said.add(also)
        if isinstance(exc, UninflatableBatch):
            _too_large[0] += 1
    if isinstance(exc, UnreadableError):
        log.error("cannot read %s (from position %s): %s; the reads that need its bytes fail with EIO, the "
                  "rest stays readable", exc.file, exc.position, exc.reason)
        return
    if isinstance(exc, UninflatableBatch):  # valid data, too large to inflate: not damage (R15-7)
        offsets = f" (offsets {exc.offsets_text()})" if exc.next_offset is not None else ""
        log.error("batch in %s at position %s%s is too large to inflate: %s; kafkafs does not decode its records "
                  "(valid data, not damage: its CRC holds): the reads that need them fail with EIO, the rest stays "
                  "readable", exc.file, exc.position, offsets, exc.reason)
        return
    if exc.file is None:  # the reason names the file (a key index that stops at damage)
        log.error("%s", exc.reason)
        return
    if exc.position is None:
        log.error("corrupt batch in %s: %s", exc.file, exc.reason)
    else:
        log.error("corrupt batch in %s at position %s: %s", exc.file, exc.position, exc.reason)


def read_segment(segment: SegmentBytes, position: int, size: int) -> bytes:
    """``segment.read_at(position, size)``, a disk error said as :class:`UnreadableError`."""
    try:
        return segment.read_at(position, size)
    except OSError as exc:
        if not disk_error(exc):
            raise
        raise unreadable(exc, str(segment.log_path), position) from None


def header_skips(header: BatchHeader, flt: Filter) -> bool:
    """Whether no record of a batch can pass ``flt``'s lower timestamp bound, from its header alone.

    Only v2 headers are trusted: their ``maxTimestamp`` is the largest timestamp of the batch (and the
    timestamp of every record under LogAppendTime); a legacy wrapper's timestamp is not always that.
    """
    return flt.ts_lo is not None and header.magic == 2 and header.max_timestamp < flt.ts_lo


def _header_excludes(header: BatchHeader, flt: Filter) -> bool:
    """No record of the batch can pass ``flt``, from a v2 header alone."""
    if header.magic != 2:
        return False
    return (
        header_skips(header, flt)
        or (flt.lo is not None and header.last_offset < flt.lo)
        or (flt.hi is not None and header.base_offset > flt.hi)
    )


def _excluded(view: BatchView, flt: Filter, file: str) -> bool:
    """:func:`_header_excludes`, the batch's CRC checked first when it says so: maxTimestamp and
    lastOffsetDelta are inside the CRC, and a damaged batch is never left out quietly (review23 R23-12);
    :class:`CorruptRecordError` placed in ``file`` then."""
    if not _header_excludes(view.header, flt):
        return False
    try:
        validate_batch(view.buf, view.header)
    except CorruptRecordError as exc:
        raise exc.at(file, view.base) from None
    return True


def _bounds(flt: Filter) -> dict[str, int | None]:
    return {"lo": flt.lo, "hi": flt.hi, "ts_lo": flt.ts_lo, "ts_hi": flt.ts_hi}


def decoder_identity(decoder: Decoder | None) -> str | None:
    """What names ``decoder`` in the layout cache's keys (its rendering changes the sizes)."""
    if decoder is None:
        return None
    ident = getattr(decoder, "identity", None)
    if isinstance(ident, str):
        return ident
    cls = type(decoder)
    return f"{cls.__module__}.{cls.__qualname__}"


class Renderer:
    """What rendering needs besides the batches: the partition's name, the values mode, the partition's
    decoder (None for ordinary topics), and where to report damage (once per place).

    Immutable once made: shared by every thread that sizes or reads the partition's views."""

    def __init__(
        self,
        topic: str,
        partition: int,
        mode: str,
        on_corrupt: Callable[[CorruptRecordError], None] = report_corrupt,
        decoder: Decoder | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.mode = mode
        self.on_corrupt = on_corrupt
        self.decoder = decoder
        #: what names the decoder in the layout cache's keys (its rendering changes the sizes)
        self.decoder_id = decoder_identity(decoder)

    def length(self, view: BatchView, file: str, flt: Filter) -> int:
        """Bytes of JSON lines that the records of one batch passing ``flt`` render to (without
        rendering them when the format layer can count). Damage raises :class:`CorruptRecordError`
        placed in ``file``."""
        try:
            if flt is NO_FILTER:
                return sum(raw_jsonl_lengths(self.topic, self.partition, view.raw(), self.mode, decoder=self.decoder))
            if _excluded(view, flt, file):
                return 0
            return sum(
                raw_jsonl_lengths(self.topic, self.partition, view.raw(), self.mode, decoder=self.decoder, **_bounds(flt))
            )
        except CorruptRecordError as exc:
            raise exc.at(file, view.position) from None

    def render(self, segment: SegmentBytes, position: int, size: int, flt: Filter) -> bytes:
        """JSON lines of the records passing ``flt`` in the whole batches filling ``size`` bytes at
        ``position`` of ``segment``: one read, then each batch rendered from its bytes (CRC-checked)."""
        if flt is NO_FILTER:
            return self._render_all(segment, position, size)
        file = str(segment.log_path)
        bounds = _bounds(flt)
        out = []
        for view in _batches_in(segment, position, size):
            if _excluded(view, flt, file):
                continue
            try:
                out.append(render_raw_jsonl(self.topic, self.partition, view.raw(), self.mode, decoder=self.decoder, **bounds))
            except CorruptRecordError as exc:
                raise exc.at(file, view.position) from None
        return b"".join(out)

    def _render_all(self, segment: SegmentBytes, position: int, size: int) -> bytes:
        """Every record of the whole batches filling ``size`` bytes at ``position`` (``records.jsonl``'s
        hot path): batches found by their length fields alone, each checked whole as it renders."""
        topic, partition, mode, decoder = self.topic, self.partition, self.mode, self.decoder
        file = str(segment.log_path)
        buf = read_segment(segment, position, size)
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

    def renders_into(self, flt: Filter) -> bool:
        """Whether :meth:`render_into` takes spans of a view with this filter (unfiltered, no decoder)."""
        return flt is NO_FILTER and self.decoder is None

    def render_into(self, segment: SegmentBytes, position: int, size: int, out: memoryview) -> bool:
        """:meth:`render`'s lines of an unfiltered view (:meth:`renders_into`) written straight into
        ``out``: True when they fill it exactly; False when they do not (the segment changed, or damage:
        the caller renders them the usual way, which says what is wrong). ``out`` is all scratch."""
        topic, partition, mode = self.topic, self.partition, self.mode
        buf = read_segment(segment, position, size)
        if len(buf) != size:
            return False
        room = len(out)
        pos = written = 0
        while pos < size:
            got = render_span_into(topic, partition, memoryview(buf)[pos:] if pos else buf, out[written:], 0, mode)
            pos += got.consumed
            written += got.written
            if pos >= size or got.full:
                break
            # the batch at pos the old way: decompressed or legacy (damage: the caller says it)
            n = int.from_bytes(buf[pos + 8 : pos + 12], "big", signed=True) + 12 if size - pos >= 12 else 0
            if n <= 12 or pos + n > size:
                return False
            try:
                data = render_raw_jsonl(topic, partition, buf[pos : pos + n], mode)
            except CorruptRecordError:
                return False
            if written + len(data) > room:
                return False
            out[written : written + len(data)] = data
            written += len(data)
            pos += n
        return pos == size and written == room


def _batches_in(segment: SegmentBytes, position: int, size: int) -> Iterator[BatchView]:
    """The whole batches filling ``size`` bytes at ``position`` of ``segment``, from one read; damage
    (a short file, a header that does not parse, batches that no longer fill the span) raises
    :class:`CorruptRecordError` placed in the file."""
    file = str(segment.log_path)
    buf = read_segment(segment, position, size)
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
