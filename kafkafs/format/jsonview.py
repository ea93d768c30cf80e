"""The JSON view of records (SPEC §3): the rendering functions every reader calls.

This is the contract the mount, ``consume``, ``dump`` and the decoders share: ``render_batch_jsonl``
(decoded batch), ``render_raw_jsonl`` / ``raw_jsonl_lengths`` (one whole batch's bytes as in the
``.log``), ``render_span_jsonl`` (many whole batches of a ``.log`` at once, :mod:`.jsonspan`),
``render_record`` / ``render_record_pretty``. Each takes ``decoder=None``: a decoder from
:func:`kafkafs.format.decoders.decoder_for` renders the records of Kafka's internal topics (mode
``auto`` only). Otherwise v2 batches render through the compiled kernel when it is built, and
through the Python reference (:mod:`.jsonrender`) when it is not, or for legacy (magic 0/1) batches.

The rules for one value are in :mod:`.jsonembed`; lines written to ``append`` are parsed by
:mod:`.appendlines`; timestamps by :mod:`.timestamps`. All are re-exported here.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from itertools import accumulate
from typing import Any, Protocol

from ..errors import CorruptRecordError
from . import Buffer
from . import kernel as _kernel
from .batch import (
    DEFAULT_MAX_INFLATED_BYTES,
    DecodedBatch,
    decode_batch,
    decode_records_at,
    read_batch_header,
    records_section,
)
from .batchheader import _V2_HEADER, LOG_OVERHEAD, V2_HEADER_SIZE, BatchHeader, validate_batch
from .crc import crc32c
from .jsonembed import indent_json, is_json, render_value, view_auto, view_base64, view_string
from .jsonrender import (
    VALUES_MODES,
    ValuesMode,
    check_mode,
    line_prefix,
    record_object,
    render_lines,
    select_indexes,
)
from .jsonspan import SpanResult, render_span_jsonl
from .recordfilter import KernelFilter, RecordFilter
from .timestamps import format_timestamp, parse_timestamp

__all__ = [
    "ValuesMode",
    "VALUES_MODES",
    "render_batch_jsonl",
    "render_raw_jsonl",
    "raw_jsonl_lengths",
    "render_raw_jsonl_lines",
    "render_raw_jsonl_count",
    "render_raw_jsonl_stamped",
    "render_span_jsonl",
    "render_section",
    "SpanResult",
    "render_record",
    "render_record_pretty",
    "render_raw_record_pretty",
    "raw_pretty_sizes",
    "record_object",
    "render_value",
    "is_json",
    "view_auto",
    "view_string",
    "view_base64",
    "ProducerRecord",  # noqa: F822 - from .appendlines on first use (__getattr__)
    "parse_record_line",  # noqa: F822
    "parse_record_lines",  # noqa: F822
    "parse_lines",  # noqa: F822
    "parse_timestamp",
    "format_timestamp",
    "indent_json",
]


class BatchDecoder(Protocol):
    """What renders a decoded batch its own way (:class:`.decoders.view.Decoder`: internal topics,
    Schema Registry values)."""

    def render_batch_jsonl(self, topic: str, partition: int, batch: DecodedBatch) -> bytes: ...


_APPEND_LINES = ("ProducerRecord", "parse_lines", "parse_record_line", "parse_record_lines")


def __getattr__(name: str) -> Any:
    """The line parser's names (:mod:`.appendlines`), imported on first use: reading records does
    not need it (nor orjson), and ``consume`` starts faster without."""
    if name in _APPEND_LINES:
        from . import appendlines

        return getattr(appendlines, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _subset(batch: DecodedBatch, indexes: list[int]) -> DecodedBatch:
    if len(indexes) == len(batch.offsets):
        return batch
    return DecodedBatch(
        batch.header,
        [batch.offsets[i] for i in indexes],
        [batch.timestamps[i] for i in indexes],
        [batch.keys[i] for i in indexes],
        [batch.values[i] for i in indexes],
        [batch.headers[i] for i in indexes],
    )


def render_batch_jsonl(
    topic: str,
    partition: int,
    batch: DecodedBatch,
    mode: str = "auto",
    start: int = 0,
    stop: int | None = None,
    *,
    decoder: BatchDecoder | None = None,
) -> bytes:
    """Records ``start:stop`` of a decoded ``batch`` as JSON lines."""
    check_mode(mode)
    n = len(batch.offsets)
    if stop is None or stop > n:
        stop = n
    if start >= stop:
        return b""
    if decoder is not None and mode == "auto":
        subset = _subset(batch, list(range(start, stop)))
        return decoder.render_batch_jsonl(topic, partition, subset)
    if _kernel.KERNEL is not None:
        return _kernel.render_columns(line_prefix(topic, partition), batch, mode, start, stop)
    return b"".join(render_lines(topic, partition, batch, mode, range(start, stop)))


def render_record(
    topic: str, partition: int, batch: DecodedBatch, index: int, mode: str = "auto", *,
    decoder: BatchDecoder | None = None
) -> bytes:
    """One record as one compact JSON line (with its newline), exactly as in ``records.jsonl``."""
    return render_batch_jsonl(topic, partition, batch, mode, index, index + 1, decoder=decoder)


def render_record_pretty(
    topic: str, partition: int, batch: DecodedBatch, index: int, mode: str = "auto", *,
    decoder: BatchDecoder | None = None
) -> bytes:
    """One record as indented JSON (two spaces), with a final newline; embedded values indented too,
    every token as in the record's ``records.jsonl`` line."""
    return _kernel.indent_json(render_record(topic, partition, batch, index, mode, decoder=decoder)[:-1]) + b"\n"


def render_raw_record_pretty(
    topic: str,
    partition: int,
    buf: Buffer,
    offset: int,
    mode: str = "auto",
    *,
    decoder: BatchDecoder | None = None,
    max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
    record_filter: RecordFilter | None = None,
) -> tuple[bytes, int] | None:
    """``by-offset/<offset>.json`` from one whole batch's bytes (a batch whose header
    :func:`~kafkafs.format.batch.read_batch_header` accepts, as ``Log.locate`` gives it): the record at ``offset`` as
    :func:`render_record_pretty` gives it, and its timestamp; None if the batch holds no such offset.

    Where the kernel renders the batch, only that record is rendered (no record of the batch becomes a
    Python object): a lookup of one record in a batch of a hundred costs a tenth of decoding it.
    Damage raises :class:`CorruptRecordError` as :func:`render_raw_jsonl` does. ``record_filter``: None
    unless the record also passes it (by-key/: the record's key must be the one looked up)."""
    if decoder is not None and mode == "auto":
        header = read_batch_header(buf, 0)
        if header is None or header.size != len(buf):
            raise CorruptRecordError("the buffer does not hold exactly one whole batch", 0)
        batch = decode_batch(buf, header, max_inflated_bytes=max_inflated_bytes)
        for i, found in enumerate(batch.offsets):
            if found == offset:
                if record_filter is not None and not record_filter.accepts(found, batch.keys[i], batch.headers[i]):
                    return None
                return render_record_pretty(topic, partition, batch, i, mode, decoder=decoder), batch.timestamps[i]
        return None
    line = _raw(topic, partition, buf, mode, None, offset, offset, None, None, 0, max_inflated_bytes, record_filter)
    if not line:
        return None
    line = line[: line.index(b"\n") + 1]  # the first record with that offset (a damaged batch may repeat it)
    # The line is ours: the prefix, the offset's digits, then ',"timestamp":' and the timestamp's. A topic
    # name holds no quote, so the first ',"timestamp":' is that one.
    start = line.index(b',"timestamp":') + len(b',"timestamp":')
    timestamp = int(line[start : line.index(b",", start)])
    return _kernel.indent_json(line[:-1]) + b"\n", timestamp


def raw_pretty_sizes(
    topic: str,
    partition: int,
    buf: Buffer,
    mode: str = "auto",
    *,
    lo: int | None = None,
    hi: int | None = None,
    max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
) -> dict[int, tuple[int, int]]:
    """offset -> (length, timestamp) of what :func:`render_raw_record_pretty` gives for each record of one
    whole batch's bytes (offsets ``lo..hi``), from one render of the batch: the sizes of a listing's
    ``by-offset/`` names at the cost of a batch's decode, not of a lookup each (review24 R24-5). No
    decoder (the caller renders internal topics' records one by one). Damage raises
    :class:`CorruptRecordError` as :func:`render_raw_jsonl` does."""
    out, offsets, timestamps, ends = _raw(topic, partition, buf, mode, None, lo, hi, None, None, 4,
                                          max_inflated_bytes)
    offs, stamps, stops = array("q"), array("q"), array("q")
    offs.frombytes(offsets)
    stamps.frombytes(timestamps)
    stops.frombytes(ends)
    indent = _kernel.indent_json
    sizes: dict[int, tuple[int, int]] = {}
    start = 0
    for offset, timestamp, end in zip(offs, stamps, stops, strict=True):
        if offset not in sizes:  # the first record with that offset (a damaged batch may repeat it)
            sizes[offset] = (len(indent(out[start : end - 1])) + 1, timestamp)
        start = end
    return sizes


# ------------------------------------------------------------------------------------ raw batches


def _filter_arg(record_filter: RecordFilter | None) -> KernelFilter | None:
    return None if record_filter is None else record_filter.kernel_arg()


def _raw(topic: str, partition: int, buf: Buffer, mode: str, decoder: BatchDecoder | None, lo: int | None,
         hi: int | None, ts_lo: int | None, ts_hi: int | None, what: int, max_inflated_bytes: int,
         record_filter: RecordFilter | None = None) -> Any:
    """The work of the raw functions; ``what`` 0: bytes, 1: lengths, 2: (bytes, offsets, ends),
    3: (bytes, number of lines), 4: (bytes, offsets, timestamps, ends) with the arrays as bytes of native
    int64. ``record_filter``: only the records it accepts."""
    if record_filter is not None and record_filter.empty:
        record_filter = None
    kernel = _kernel.KERNEL
    if kernel is not None and (decoder is None or mode != "auto") and mode in _kernel.MODES:
        # The hot path (an uncompressed v2 batch whose CRC holds): the header unpacked in place, the
        # records handed to the kernel without a copy. Anything else takes the general path below,
        # which says what is wrong exactly as decode_batch does.
        size = len(buf)
        if size >= V2_HEADER_SIZE and buf[16] == 2:
            (base_offset, length, _epoch, _magic, crc, attributes, _delta, first_ts, max_ts, producer_id, _pepoch,
             _seq, count) = _V2_HEADER.unpack_from(buf, 0)
            if length + LOG_OVERHEAD == size and not attributes & 0x07:
                view = memoryview(buf)
                if crc32c(view[21:]) == crc:
                    return kernel.render(line_prefix(topic, partition), view[V2_HEADER_SIZE:], base_offset, first_ts,
                                         max_ts, attributes, producer_id, count, _kernel.MODES[mode], lo, hi, ts_lo,
                                         ts_hi, what, _filter_arg(record_filter))
    check_mode(mode)
    header = read_batch_header(buf, 0)
    if header is None or header.size != len(buf):
        raise CorruptRecordError("the buffer does not hold exactly one whole batch", 0)
    if header.magic == 2 and _kernel.KERNEL is not None and (decoder is None or mode != "auto"):
        validate_batch(buf, header)
        data = records_section(buf, header, max_inflated_bytes)
        return _kernel.render_raw(line_prefix(topic, partition), data, header, mode, lo, hi, ts_lo, ts_hi, what,
                                  _filter_arg(record_filter))
    batch = decode_batch(buf, header, max_inflated_bytes=max_inflated_bytes)
    return _picked(topic, partition, batch, mode, decoder, lo, hi, ts_lo, ts_hi, what, record_filter)


def render_section(topic: str, partition: int, data: Buffer, header: BatchHeader, mode: str,
                   decoder: BatchDecoder | None, lo: int | None, hi: int | None, ts_lo: int | None,
                   ts_hi: int | None, what: int, record_filter: RecordFilter | None = None) -> Any:
    """:func:`_raw`'s work on records already inflated: ``data`` holds ``header.record_count`` whole
    records of the v2 batch ``header`` (all of its records section, or a run of whole records of it: a
    batch read a piece at a time, :mod:`.bigbatch`). Errors are placed at ``header.position``."""
    if record_filter is not None and record_filter.empty:
        record_filter = None
    check_mode(mode)
    if _kernel.KERNEL is not None and (decoder is None or mode != "auto"):
        return _kernel.render_raw(line_prefix(topic, partition), data, header, mode, lo, hi, ts_lo, ts_hi, what,
                                  _filter_arg(record_filter))
    batch = decode_records_at(bytes(data), header)
    return _picked(topic, partition, batch, mode, decoder, lo, hi, ts_lo, ts_hi, what, record_filter)


def _picked(topic: str, partition: int, batch: DecodedBatch, mode: str, decoder: BatchDecoder | None,
            lo: int | None, hi: int | None, ts_lo: int | None, ts_hi: int | None, what: int,
            record_filter: RecordFilter | None) -> Any:
    """The records of a decoded ``batch`` that pass the bounds and the filter, as ``what`` says (:func:`_raw`)."""
    if (decoder is not None and mode == "auto" and what == 0 and lo is hi is ts_lo is ts_hi is None
            and record_filter is None):
        return decoder.render_batch_jsonl(topic, partition, batch)  # the whole batch: nothing to pick
    indexes = select_indexes(batch, lo, hi, ts_lo, ts_hi)
    if record_filter is not None:
        indexes = [i for i in indexes
                   if record_filter.accepts(batch.offsets[i], batch.keys[i], batch.headers[i])]
    if decoder is not None and mode == "auto":
        picked = _subset(batch, indexes)
        text = decoder.render_batch_jsonl(topic, partition, picked) if indexes else b""
        lines = [line + b"\n" for line in text.split(b"\n")[:-1]]
    else:
        picked = batch
        lines = render_lines(topic, partition, batch, mode, indexes)
    if what == 1:
        return [len(line) for line in lines]
    out = b"".join(lines)
    if what == 0:
        return out
    if what == 3:
        return out, len(lines)
    ends = list(accumulate(map(len, lines)))
    if what == 4:
        return (out, array("q", [batch.offsets[i] for i in indexes]).tobytes(),
                array("q", [batch.timestamps[i] for i in indexes]).tobytes(), array("q", ends).tobytes())
    offsets = [batch.offsets[i] for i in indexes]
    return out, offsets, ends


def _raw_function(what: int, name: str, returns: str, doc: str) -> Callable[..., Any]:
    """One of the raw functions below: they take the same arguments and differ in what they give
    (``what``, as :func:`_raw` takes it)."""

    def raw(
        topic: str,
        partition: int,
        buf: Buffer,
        mode: str = "auto",
        *,
        decoder: BatchDecoder | None = None,
        lo: int | None = None,
        hi: int | None = None,
        ts_lo: int | None = None,
        ts_hi: int | None = None,
        max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
        record_filter: RecordFilter | None = None,
    ) -> Any:
        return _raw(topic, partition, buf, mode, decoder, lo, hi, ts_lo, ts_hi, what, max_inflated_bytes,
                    record_filter)

    raw.__name__ = raw.__qualname__ = name
    raw.__doc__ = doc
    raw.__annotations__["return"] = returns
    return raw


render_raw_jsonl = _raw_function(
    0,
    "render_raw_jsonl",
    "bytes",
    """The JSON lines of one whole batch's bytes (as read from the ``.log``, prefix included):
    CRC-checked, decompressed, decoded and rendered; only the records with offsets ``lo..hi``
    (inclusive) and ``ts_lo <= timestamp < ts_hi`` (None: no bound), and that ``record_filter`` (a
    :class:`~.recordfilter.RecordFilter`) accepts when one is given. Damage raises
    :class:`CorruptRecordError` (positions relative to ``buf``).""",
)

raw_jsonl_lengths = _raw_function(
    1,
    "raw_jsonl_lengths",
    "list[int]",
    """The length (newline included) of each line :func:`render_raw_jsonl` would give, in order; the
    kernel counts them without writing the lines.""",
)

render_raw_jsonl_lines = _raw_function(
    2,
    "render_raw_jsonl_lines",
    "tuple[bytes, list[int], list[int]]",
    """:func:`render_raw_jsonl`'s bytes with each rendered record's offset and the end of its line in
    those bytes (line ``i`` is ``out[ends[i-1]:ends[i]]``, ``ends[-1]`` is 0).""",
)

render_raw_jsonl_count = _raw_function(
    3,
    "render_raw_jsonl_count",
    "tuple[bytes, int]",
    """:func:`render_raw_jsonl`'s bytes and how many lines they hold.""",
)

render_raw_jsonl_stamped = _raw_function(
    4,
    "render_raw_jsonl_stamped",
    "tuple[bytes, bytes, bytes, bytes]",
    """:func:`render_raw_jsonl`'s bytes with each rendered record's offset, timestamp and the end of
    its line in those bytes, as native int64 arrays' bytes (``array('q')``): what ``consume``'s merge
    (:mod:`kafkafs.consume_merge`) loads.""",
)
