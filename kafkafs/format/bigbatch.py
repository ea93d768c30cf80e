"""A v2 batch whose records inflate past what a reader holds at once, read a piece at a time (R15-7).

A batch's records section is inflated whole (:func:`.compression.decompress`) up to
:data:`~.batchheader.DEFAULT_MAX_INFLATED_BYTES` (64 MiB); past it the batch is
:class:`~kafkafs.errors.UninflatableBatch`. Kafka stores and serves such a batch (``max.message.bytes``
bounds the compressed batch: a batch of 100,000 small records, or one 80 MiB record, is a few hundred KB
of zstd), and so does a decompression bomb whose CRC holds: they are the same case. Here its records are
inflated a piece at a time (:func:`.compression.inflate_pieces`), cut at record boundaries (each record's
length varint) and rendered in runs of whole records of about :data:`PIECE_BYTES` (the kernel renders a
run as it renders a whole section: the same bytes), so memory goes with the piece and the largest
record, never with the batch.

What one record may take (the README says it too, beside the batches past 64 MiB):

- a record of more than :data:`MAX_RECORD_BYTES` (128 MiB) is not held: it is said not shown
  (:class:`~kafkafs.errors.RecordNotShown`), and its bytes are inflated and dropped to read on to the
  records after it; the batch's last record is not inflated at all (nothing after it: a bomb of one
  huge record costs one piece). Kafka itself bounds a record only by the compressed batch (a record's length is a 32-bit
  varint: up to 2 GiB);
- a record whose JSON line would be longer than :data:`MAX_LINE_BYTES` (256 MiB: a value of zeros
  renders six bytes a byte, ``\\u0000``) is said not shown too; its line is measured by the kernel, without
  writing it, before it is rendered (records of :data:`_MEASURE_FROM` bytes or more).

So a reader holds at most one record (128 MiB), its line (256 MiB) and a piece, whatever the batch
claims; the one-shot path it replaces held 64 MiB of records and up to six times that of lines. Time
goes with what the batch inflates to (a bomb of small records is rendered, as Kafka would serve it; a
huge record followed by others costs the time to inflate and drop it, about 0.5 s a GiB for zstd's
zeros, several seconds for gzip's).
A legacy (magic 0/1) wrapper is not read this way (it stays not shown). Without the compiled kernel the
records render through the Python reference and lines are not measured first.

Who reads this way: ``consume`` (every way it reads), ``verify`` and ``dump --deep-iteration``
(:func:`check_in_pieces`, :func:`record_runs`), the Spark source's scan, a mount's ``by-offset/``
(:func:`record_in_pieces`, with a mount's tighter limits). A mount's ``records.jsonl`` does not (its size
needs every line's length): EIO there.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Generator
from typing import Any

from ..errors import CorruptRecordError, RecordNotShown, UninflatableBatch
from . import Buffer
from . import kernel as _kernel
from .batch import decode_records_at
from .batchheader import (
    _COMPRESSION_MASK,
    DEFAULT_MAX_INFLATED_BYTES,
    V2_HEADER_SIZE,
    BatchHeader,
    validate_batch,
)
from .batchheader import read_batch_header as _read_header
from .compression import Codec, inflate_pieces
from .jsonview import BatchDecoder, render_section
from .recordfilter import RecordFilter
from .varint import read_varint, read_varlong

__all__ = [
    "MAX_LINE_BYTES",
    "MAX_RECORD_BYTES",
    "PIECE_BYTES",
    "check_in_pieces",
    "first_at_or_after",
    "record_in_pieces",
    "render_in_pieces",
    "record_runs",
]

#: Inflated bytes a piece, and about the bytes of whole records rendered at once.
PIECE_BYTES = 1 << 20
#: The largest record held (its bytes, inflated).
MAX_RECORD_BYTES = 128 << 20
#: The longest JSON line of one record written.
MAX_LINE_BYTES = 256 << 20
#: A record this large has its line's length measured (not written) before it is rendered.
_MEASURE_FROM = 8 << 20


def _mib(size: int) -> str:
    return f"{size >> 20} MiB" if size and not size & ((1 << 20) - 1) else f"{size} bytes"


def _offset_delta(data: Buffer, pos: int) -> int:
    """The offset delta of the record whose attributes byte is at ``pos`` (``IndexError``: not all here)."""
    _ts_delta, pos = read_varlong(data, pos + 1)
    delta, _ = read_varint(data, pos)
    return delta


def record_runs(buf: Buffer, header: BatchHeader, *, piece: int = PIECE_BYTES,
                max_record: int = MAX_RECORD_BYTES) -> Generator[tuple[memoryview, int] | RecordNotShown, None, None]:
    """The records of the v2 batch ``header`` of ``buf``, inflated a piece at a time: runs of whole records
    ``(bytes, how many)`` of about ``piece`` bytes (a record of ``piece`` bytes or more alone), each a memoryview to
    use before asking for the next; a record past ``max_record`` is given as a :class:`RecordNotShown`
    (its offsets; position and file as the batch's), inflated and dropped when records follow it, and
    when it is the last, the end (what follows it in the data is not checked). ``CorruptRecordError`` (at the
    batch's position) for data that does not inflate or does not hold exactly ``record_count`` records,
    after the runs before it."""
    codec = header.attributes & _COMPRESSION_MASK
    if codec > 4:
        raise CorruptRecordError(f"unknown compression type {codec}", header.position)
    data = memoryview(buf)[header.position + V2_HEADER_SIZE : header.end]
    left = header.record_count
    if left < 0:
        raise CorruptRecordError(f"record count {left}", header.position)
    pending = bytearray()
    drop = 0  # bytes of a record past max_record still to inflate and drop
    try:
        for part in inflate_pieces(Codec(codec), data, piece, DEFAULT_MAX_INFLATED_BYTES):
            if drop:
                if len(part) <= drop:
                    drop -= len(part)
                    continue
                part, drop = part[drop:], 0
            if not left:
                raise CorruptRecordError(f"bytes left over after {header.record_count} records")
            pending += part
            pos = run = n = 0
            size = len(pending)
            while left:
                try:
                    length, after = read_varint(pending, pos)
                    delta = _offset_delta(pending, after) if length > max_record else 0
                except IndexError:
                    break  # the rest of this record is in the next piece
                if length < 6:
                    raise CorruptRecordError(f"record length {length} does not fit the batch")
                end = after + length
                if length > max_record:
                    if n:
                        yield _run(pending, run, pos, n)
                        n = 0
                    offset = header.base_offset + delta
                    yield RecordNotShown(
                        f"a record of {length} bytes, past the {_mib(max_record)} kafkafs holds of one record",
                        header.position, limit=max_record, base_offset=offset, next_offset=offset + 1)
                    left -= 1
                    if not left:  # the batch's last record: nothing after it to inflate it for (a bomb's)
                        return
                    if end > size:
                        drop, end = end - size, size
                    pos = run = end
                    continue
                if end > size:
                    break
                if length >= piece and n:  # a record as large as a piece goes alone (its line is measured)
                    yield _run(pending, run, pos, n)
                    run, n = pos, 0
                pos, n, left = end, n + 1, left - 1
                if pos - run >= piece:
                    yield _run(pending, run, pos, n)
                    run, n = pos, 0
            if n:
                yield _run(pending, run, pos, n)
            del pending[:pos]
            if not left and pending:
                raise CorruptRecordError(f"bytes left over after {header.record_count} records")
        if left or pending or drop:
            raise CorruptRecordError(f"the records end after {header.record_count - left} of {header.record_count}")
    except UninflatableBatch as exc:  # a snappy chunk past the limit, a zstd window past the decoder's
        raise exc.of_batch(header.position, header.base_offset, header.next_offset) from None
    except CorruptRecordError as exc:
        raise exc.placed(header.position) from None


def check_in_pieces(buf: Buffer, header: BatchHeader, at_or_after: int = 0, *,
                    max_record: int = MAX_RECORD_BYTES) -> tuple[int, list[RecordNotShown]]:
    """Every record of the v2 batch ``header`` of ``buf`` decoded a run at a time, as
    :func:`~.batch.decode_batch` checks a batch's records (the CRC is the caller's): how many have an offset
    at or after ``at_or_after``, and the records not held (past ``max_record``: counted, their bytes not
    decoded). ``CorruptRecordError`` (at the batch's position) for records that do not parse."""
    count = 0
    not_held: list[RecordNotShown] = []
    for run in record_runs(buf, header, max_record=max_record):
        if isinstance(run, RecordNotShown):
            not_held.append(run)
            count += run.base_offset is not None and run.base_offset >= at_or_after
            continue
        data, n = run
        try:
            offsets = decode_records_at(bytes(data), header._replace(record_count=n)).offsets
        finally:
            data.release()
        count += n if offsets[0] >= at_or_after else sum(1 for o in offsets if o >= at_or_after)
    return count, not_held


def first_at_or_after(buf: Buffer, header: BatchHeader, timestamp: int) -> int | None:
    """The offset of the first record of the v2 batch ``header`` of ``buf`` whose timestamp is >= ``timestamp``
    (Kafka's ``offsetsForTimes`` inside one batch), its records decoded a run at a time up to it; a record
    not held counts as one (its timestamp is not read). None when no record reaches it."""
    if header.timestamp_type == 1:  # LogAppendTime: every record has the batch's largest timestamp
        return header.base_offset if header.max_timestamp >= timestamp else None
    runs = record_runs(buf, header)
    try:
        for run in runs:
            if isinstance(run, RecordNotShown):
                return run.base_offset
            data, n = run
            try:
                batch = decode_records_at(bytes(data), header._replace(record_count=n))
            finally:
                data.release()
            for offset, ts in zip(batch.offsets, batch.timestamps, strict=True):
                if ts >= timestamp:
                    return offset
    finally:
        runs.close()
    return None


def _run(pending: bytearray, start: int, end: int, n: int) -> tuple[memoryview, int]:
    """Records ``start:end`` of ``pending`` (``n`` of them) without a copy; released by its user."""
    return memoryview(pending)[start:end], n


def render_in_pieces(
    topic: str,
    partition: int,
    buf: Buffer,
    mode: str,
    what: int,
    *,
    on_skip: Callable[[RecordNotShown], None] | None,
    decoder: BatchDecoder | None = None,
    lo: int | None = None,
    hi: int | None = None,
    ts_lo: int | None = None,
    ts_hi: int | None = None,
    record_filter: RecordFilter | None = None,
    stop_ts: int | None = None,
    piece: int = PIECE_BYTES,
    max_record: int = MAX_RECORD_BYTES,
    max_line: int = MAX_LINE_BYTES,
) -> Generator[Any, None, bool]:
    """What :func:`.jsonview.render_raw_jsonl` and its siblings give for one whole v2 batch's bytes
    (``what`` as :func:`.jsonview._raw` takes it: 0 bytes, 2 ``(bytes, offsets, ends)``, 3 ``(bytes,
    how many)``, 4 ``(bytes, offsets, timestamps, ends)``), a run of records at a time, for a batch whose
    records inflate past what is held at once. The CRC is checked first. A record not held (see the
    module) is told to ``on_skip`` (None: raised) unless the bounds leave it out; the records after it
    go on. ``stop_ts``: only the records before the first one (in the batch's order, filters aside) whose
    timestamp is >= it; the generator then returns True (False when it read the whole batch). Damage
    raises :class:`CorruptRecordError` (positions relative to ``buf``) after the runs before it."""
    header = _read_header(buf, 0)
    if header is None or header.size != len(buf) or header.magic != 2:
        raise CorruptRecordError("the buffer does not hold exactly one whole v2 batch", 0)
    validate_batch(buf, header)

    def skip(exc: RecordNotShown) -> None:
        offset = exc.base_offset
        assert offset is not None
        if (lo is not None and offset < lo) or (hi is not None and offset > hi):
            return  # not asked for anyway
        if on_skip is None:
            raise exc
        on_skip(exc)

    stopped = False
    measure = _kernel.KERNEL is not None and (decoder is None or mode != "auto")
    for run in record_runs(buf, header, piece=piece, max_record=max_record):
        if isinstance(run, RecordNotShown):
            skip(run)
            continue
        data, n = run
        try:
            part = header._replace(record_count=n)
            if measure and n == 1 and len(data) >= _MEASURE_FROM:
                length = sum(render_section(topic, partition, data, part, mode, decoder, lo, hi, ts_lo, ts_hi, 1,
                                            record_filter))
                if length > max_line:
                    start = read_varint(data, 0)[1]
                    offset = header.base_offset + _offset_delta(data, start)
                    skip(RecordNotShown(
                        f"a record whose JSON line is {length} bytes, past the {_mib(max_line)} kafkafs writes of "
                        "one line", header.position, limit=max_line, base_offset=offset, next_offset=offset + 1))
                    continue
            last = hi
            if stop_ts is not None:
                _lines, offsets, stamps, _ends = render_section(topic, partition, data, part, mode, decoder, lo, hi,
                                                                ts_lo, ts_hi, 4, None)
                late = [i for i, ts in enumerate(array("q", stamps)) if ts >= stop_ts][:1]
                if late:
                    stopped = True
                    last = array("q", offsets)[late[0]] - 1
                    if last < (lo if lo is not None else header.base_offset):
                        return True
                elif what == 4 and record_filter is None:
                    yield _lines, offsets, stamps, _ends
                    continue
            result = render_section(topic, partition, data, part, mode, decoder, lo, last, ts_lo, ts_hi, what,
                                    record_filter)
        except RecordNotShown:
            raise
        except CorruptRecordError as exc:
            raise exc.placed(header.position) from None
        finally:
            data.release()
        yield result
        if stopped:
            return True
    return False


def record_in_pieces(topic: str, partition: int, buf: Buffer, offset: int, mode: str, *,
                     decoder: BatchDecoder | None = None, record_filter: RecordFilter | None = None,
                     max_record: int = DEFAULT_MAX_INFLATED_BYTES,
                     max_line: int = 2 * DEFAULT_MAX_INFLATED_BYTES) -> tuple[bytes, int] | None:
    """:func:`~.jsonview.render_raw_record_pretty`'s answer (``by-offset/<offset>.json``: the record
    indented, and its timestamp; None: no such record, or ``record_filter`` refuses it) from one whole v2
    batch too large to inflate at once: its runs are inflated and rendered up to the one that holds
    ``offset``, no further. Tighter limits on one record than consume's by default (a mount serves many
    readers at once: one record of up to 64 MiB held, its line up to 128 MiB, what one batch took
    before); a record past them raises :class:`RecordNotShown`."""
    pieces = render_in_pieces(topic, partition, buf, mode, 0, on_skip=None, decoder=decoder, lo=offset, hi=offset,
                              record_filter=record_filter, max_record=max_record, max_line=max_line)
    try:
        line = next((lines for lines in pieces if lines), None)
    finally:
        pieces.close()
    if line is None:
        return None
    line = line[: line.index(b"\n") + 1]
    start = line.index(b',"timestamp":') + len(b',"timestamp":')  # our own line: the first one is the record's
    return _kernel.indent_json(line[:-1]) + b"\n", int(line[start : line.index(b",", start)])
