"""RecordBatch v2 (magic 2): scan, decode and encode, plus dispatch to legacy magic 0/1 entries.

Everything here takes a buffer (``bytes``, ``bytearray``, ``mmap`` or ``memoryview``) and a position,
and returns values. Nothing reads files. Three levels of work, cheapest first:

* :func:`read_batch_header` / :func:`scan_batches`: the fixed header only, no records touched; what
  index rebuilding, offset lookups and recovery need.
* :func:`decode_batch`: one whole batch into columns (:class:`DecodedBatch`), decompressing as needed.
  This is the unit of work of every hot path (FUSE views, ``consume``, Spark), so a compiled kernel
  can later replace its inside without touching the callers.
* :func:`encode_batch`: records into the bytes of one batch, with its CRC.

Layout (big-endian)::

    baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 | magic i8 | crc u32 |
    attributes i16 | lastOffsetDelta i32 | firstTimestamp i64 | maxTimestamp i64 |
    producerId i64 | producerEpoch i16 | baseSequence i32 | recordCount i32 | records...

``batchLength`` counts the bytes after itself; the CRC-32C covers ``attributes`` to the end.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from ..errors import CorruptRecordError
from . import compression as _compression
from .compression import Codec
from .crc import crc32, crc32c
from .varint import encode_varint, encode_varlong

__all__ = [
    "BatchHeader",
    "DecodedBatch",
    "Record",
    "Header",
    "Codec",
    "read_batch_header",
    "scan_batches",
    "decode_batch",
    "encode_batch",
    "validate_batch",
    "set_base_offset",
    "set_partition_leader_epoch",
    "set_log_append_time",
    "LOG_OVERHEAD",
    "V2_HEADER_SIZE",
    "DEFAULT_MAX_INFLATED_BYTES",
    "NO_TIMESTAMP",
    "CREATE_TIME",
    "LOG_APPEND_TIME",
]

LOG_OVERHEAD = 12  # baseOffset + batchLength: the prefix every magic shares
V2_HEADER_SIZE = 61
_MAGIC_OFFSET = 16
_CRC_OFFSET = 17
_LEGACY_CRC_OFFSET = 12  # magic 0/1: offset, size, then the CRC-32 right before the magic byte
_ATTRIBUTES_OFFSET = 21
_MAX_TIMESTAMP_OFFSET = 35
_V2_MIN_LENGTH = V2_HEADER_SIZE - LOG_OVERHEAD
_LEGACY_MIN_LENGTH = {0: 14, 1: 22}  # crc + magic + attributes (+ timestamp) + key and value lengths

NO_TIMESTAMP = -1
CREATE_TIME = 0
LOG_APPEND_TIME = 1
NO_PRODUCER_ID = -1

_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_MASK = 0x08
_TRANSACTIONAL_MASK = 0x10
_CONTROL_MASK = 0x20

#: A batch that inflates past this is reported as corrupt instead of exhausting memory. It is 64 times
#: Kafka's default ``max.message.bytes`` (1 MiB + 12 bytes), rounded; callers may pass their own.
DEFAULT_MAX_INFLATED_BYTES = 64 * 1024 * 1024

try:  # a compiled record reader, when aiokafka is installed (see _decode_records_compiled)
    from aiokafka.record._crecords import DefaultRecordBatch as _CompiledBatch
except ImportError:  # pragma: no cover - the pure-Python decoder serves alone
    _CompiledBatch = None

_PREFIX = struct.Struct(">qi")
_V2_HEADER = struct.Struct(">qiibIhiqqqhii")
_AFTER_CRC = struct.Struct(">hiqqqhii")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")


class BatchHeader(NamedTuple):
    """The fixed part of one batch, read without touching its records.

    For legacy (magic 0/1) entries the v2-only fields hold Kafka's "none" values (-1), ``base_offset``
    is the entry's own offset (for a compressed wrapper: the last inner offset, since finding the first
    needs decompression) and ``record_count`` is -1 when only decompression would tell.
    """

    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch takes, prefix included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def end(self) -> int:
        """Position just past this batch."""
        return self.position + self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Codec:
        return Codec(self.attributes & _COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> int:
        """0 CreateTime, 1 LogAppendTime; -1 (no timestamps) for magic 0."""
        if self.magic == 0:
            return -1
        return LOG_APPEND_TIME if self.attributes & _TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & _TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & _CONTROL_MASK)


class Header(NamedTuple):
    key: str
    value: bytes | None


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] | list[Header]


_NO_HEADERS: tuple = ()


class DecodedBatch:
    """One batch decoded into columns: parallel lists, one entry a record.

    ``timestamps`` already hold what a consumer sees: for a LogAppendTime batch every record carries the
    batch's ``max_timestamp``. ``headers[i]`` is a (possibly empty) sequence of :class:`Header`.
    """

    __slots__ = ("header", "offsets", "timestamps", "keys", "values", "headers")

    def __init__(
        self,
        header: BatchHeader,
        offsets: list[int],
        timestamps: list[int],
        keys: list[bytes | None],
        values: list[bytes | None],
        headers: list[Sequence[Header]],
    ) -> None:
        self.header = header
        self.offsets = offsets
        self.timestamps = timestamps
        self.keys = keys
        self.values = values
        self.headers = headers

    def __len__(self) -> int:
        return len(self.offsets)

    def __iter__(self) -> Iterator[Record]:
        return map(Record, self.offsets, self.timestamps, self.keys, self.values, self.headers)

    def __repr__(self) -> str:
        h = self.header
        return f"<DecodedBatch magic={h.magic} offsets={h.base_offset}..{h.last_offset} records={len(self)}>"

    @property
    def timestamp_type(self) -> int:
        return self.header.timestamp_type

    @property
    def is_control(self) -> bool:
        return self.header.is_control

    @property
    def is_transactional(self) -> bool:
        return self.header.is_transactional

    @property
    def producer_id(self) -> int:
        return self.header.producer_id

    def control_type(self, index: int) -> str | None:
        """Kafka's name of a control record's type (:func:`control_type_of`) in a control batch, else None."""
        if not self.header.is_control:
            return None
        return control_type_of(self.keys[index])

    def slice_from(self, offset: int) -> DecodedBatch:
        """The records with offsets >= ``offset`` (same header)."""
        offsets = self.offsets
        i = 0
        n = len(offsets)
        while i < n and offsets[i] < offset:
            i += 1
        if i == 0:
            return self
        return DecodedBatch(
            self.header, offsets[i:], self.timestamps[i:], self.keys[i:], self.values[i:], self.headers[i:]
        )


#: Kafka's ControlRecordType names by id (clients' ControlRecordType.fromTypeId); any other is UNKNOWN.
CONTROL_TYPE_NAMES = {
    0: "ABORT",
    1: "COMMIT",
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
    5: "KRAFT_VERSION",
    6: "KRAFT_VOTERS",
}


def control_type_of(key: bytes | None) -> str | None:
    """Kafka's name of a control record's type from its key (``version i16, type i16``): ``ABORT``,
    ``COMMIT``, ``LEADER_CHANGE``, ``SNAPSHOT_HEADER``, ``SNAPSHOT_FOOTER``, ``KRAFT_VERSION``,
    ``KRAFT_VOTERS``, else ``UNKNOWN``; None for a key too short to hold a type."""
    if key is None or len(key) < 4:
        return None
    return CONTROL_TYPE_NAMES.get(_I16.unpack_from(key, 2)[0], "UNKNOWN")


# --------------------------------------------------------------------------------------------- header


def read_batch_header(buf, pos: int = 0, end: int | None = None, max_batch_size: int | None = None):
    """The header of the batch at ``pos``, or None when the bytes up to ``end`` hold only part of it.

    A partial trailing batch is not an error (a writer may be appending); a header that cannot be right
    (a length too small for its magic, over ``max_batch_size``, an unknown magic) raises
    :class:`CorruptRecordError` at ``pos``.
    """
    if end is None:
        end = len(buf)
    if pos + _MAGIC_OFFSET + 1 > end:
        return None
    base_offset, length = _PREFIX.unpack_from(buf, pos)
    magic = buf[pos + _MAGIC_OFFSET]
    if magic == 2:
        if length < _V2_MIN_LENGTH:
            raise CorruptRecordError(f"batch length {length} is below the v2 minimum {_V2_MIN_LENGTH}", pos)
    elif magic in _LEGACY_MIN_LENGTH:
        if length < _LEGACY_MIN_LENGTH[magic]:
            raise CorruptRecordError(f"message size {length} is below the magic {magic} minimum", pos)
    else:
        raise CorruptRecordError(f"unknown magic {magic}", pos)
    if max_batch_size is not None and length + LOG_OVERHEAD > max_batch_size:
        raise CorruptRecordError(
            f"batch size {length + LOG_OVERHEAD} exceeds the largest allowed {max_batch_size}", pos
        )
    if pos + length + LOG_OVERHEAD > end:
        return None
    if magic == 2:
        return BatchHeader(pos, *_V2_HEADER.unpack_from(buf, pos))
    return _legacy_header(buf, pos, base_offset, length, magic)


def _legacy_header(buf, pos: int, offset: int, length: int, magic: int) -> BatchHeader:
    crc = _U32.unpack_from(buf, pos + _LEGACY_CRC_OFFSET)[0]
    attributes = buf[pos + _MAGIC_OFFSET + 1]
    timestamp = _I64.unpack_from(buf, pos + 18)[0] if magic == 1 else NO_TIMESTAMP
    count = 1 if attributes & _COMPRESSION_MASK == 0 else -1
    return BatchHeader(
        pos, offset, length, -1, magic, crc, attributes, 0, timestamp, timestamp, -1, -1, -1, count
    )


def scan_batches(
    buf, start: int = 0, end: int | None = None, max_batch_size: int | None = None
) -> Iterator[BatchHeader]:
    """Yield the header of every whole batch from ``start``; stop quietly at a partial trailing batch.

    Corruption (see :func:`read_batch_header`) raises :class:`CorruptRecordError` with its position once
    the batches before it have been yielded. The caller knows where the scan stopped from the last
    header's ``end`` (or ``start`` if nothing was yielded).
    """
    if end is None:
        end = len(buf)
    pos = start
    read = read_batch_header
    while True:
        header = read(buf, pos, end, max_batch_size)
        if header is None:
            return
        yield header
        pos = header.end


def validate_batch(buf, header: BatchHeader) -> None:
    """Check the stored CRC (CRC-32C over attributes..end for v2, CRC-32 for legacy)."""
    if header.magic == 2:
        start = header.position + _ATTRIBUTES_OFFSET
        actual = crc32c(memoryview(buf)[start : header.end])
    else:
        # legacy: CRC-32 over magic..end, the crc field sits just before the magic byte
        actual = crc32(memoryview(buf)[header.position + _MAGIC_OFFSET : header.end])
    if actual != header.crc:
        raise CorruptRecordError(
            f"CRC mismatch: stored {header.crc:#010x}, computed {actual:#010x}", header.position
        )


# --------------------------------------------------------------------------------------------- decode


def _slow_varint(data: bytes, pos: int) -> tuple[int, int]:
    """A multi-byte zig-zag varint (the first byte has its continuation bit set)."""
    start = pos
    raw = 0
    shift = 0
    while True:
        b = data[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift >= 70:
            raise CorruptRecordError("varint longer than 10 bytes", start)


def decode_batch(
    buf,
    header: BatchHeader | int = 0,
    *,
    validate: bool = True,
    max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
) -> DecodedBatch:
    """Decode the whole batch at ``header`` (a :class:`BatchHeader` or a position) into columns.

    Raises :class:`CorruptRecordError` (position relative to ``buf``) for anything that does not parse,
    including a batch cut short by the end of ``buf``.
    """
    if not isinstance(header, BatchHeader):
        pos = header
        header = read_batch_header(buf, pos)
        if header is None:
            raise CorruptRecordError("batch is cut short by the end of the buffer", pos)
    if validate:
        validate_batch(buf, header)
    if header.magic != 2:
        return _decode_legacy(buf, header, max_inflated_bytes)
    start = header.position + V2_HEADER_SIZE
    data = buf[start : header.end]
    if not isinstance(data, bytes):
        data = bytes(data)
    codec = header.attributes & _COMPRESSION_MASK
    if codec:
        if codec > 4:
            raise CorruptRecordError(f"unknown compression type {codec}", header.position)
        try:
            data = _compression.decompress(Codec(codec), data, max_inflated_bytes)
        except CorruptRecordError as exc:
            raise CorruptRecordError(exc.reason, header.position) from None
    if validate and _CompiledBatch is not None:  # only bytes whose CRC held (see the function)
        decoded = _decode_records_compiled(data, header)
        if decoded is not None:
            return decoded
    try:
        return _decode_records(data, header)
    except CorruptRecordError as exc:
        raise CorruptRecordError(exc.reason, header.position) from None
    except (IndexError, ValueError, OverflowError) as exc:
        raise CorruptRecordError(f"records do not parse: {exc}", header.position) from None


def _decode_records_compiled(data: bytes, header: BatchHeader) -> DecodedBatch | None:
    """The records section decoded by aiokafka's compiled (Cython) reader, about four times faster
    than :func:`_decode_records`; None when it is not available or does not accept the bytes, and the
    pure-Python decoder (the reference, with this package's error messages) takes over.

    It is handed an uncompressed copy of the batch: decompression (bounded) and CRC checks stay ours,
    and :func:`decode_batch` uses it only for batches whose CRC it has just checked. That matters:
    the compiled reader misreads a varint written in more bytes than needed (legal, but no Kafka client
    writes one, and a damaged byte that would produce one fails the CRC), where the reference reads
    it as Kafka does. Unchecked bytes (``validate=False``) always take the reference decoder.
    """
    count = header.record_count
    if count < 0 or count > len(data) // 7:
        return None
    prefix = _V2_HEADER.pack(
        header.base_offset,
        V2_HEADER_SIZE - LOG_OVERHEAD + len(data),
        header.partition_leader_epoch,
        2,
        header.crc,
        header.attributes & ~_COMPRESSION_MASK,
        header.last_offset_delta,
        header.first_timestamp,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        count,
    )
    offsets: list[int] = []
    timestamps: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: list[Sequence[Header]] = []
    add_offset = offsets.append
    add_ts = timestamps.append
    add_key = keys.append
    add_value = values.append
    add_headers = headers.append
    no_headers = _NO_HEADERS
    try:
        for record in _CompiledBatch(prefix + data):
            add_offset(record.offset)
            add_ts(record.timestamp)
            add_key(record.key)
            add_value(record.value)
            record_headers = record.headers
            add_headers([Header(k, v) for k, v in record_headers] if record_headers else no_headers)
    except Exception:  # noqa: BLE001 - anything unusual is the reference decoder's to judge
        return None
    if len(offsets) != count:
        return None
    if header.attributes & _TIMESTAMP_TYPE_MASK:
        timestamps = [header.max_timestamp] * count
    return DecodedBatch(header, offsets, timestamps, keys, values, headers)


def _decode_records(data: bytes, header: BatchHeader) -> DecodedBatch:
    count = header.record_count
    end = len(data)
    if count < 0 or count > end // 7:  # the smallest record takes 7 bytes
        raise CorruptRecordError(f"record count {count} cannot fit in {end} bytes")
    base_offset = header.base_offset
    first_ts = header.first_timestamp
    log_append = header.attributes & _TIMESTAMP_TYPE_MASK
    offsets: list[int] = []
    timestamps: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: list[Sequence[Header]] = []
    add_offset = offsets.append
    add_ts = timestamps.append
    add_key = keys.append
    add_value = values.append
    add_headers = headers.append
    slow = _slow_varint
    no_headers = _NO_HEADERS
    pos = 0
    for _ in range(count):
        # length
        b = data[pos]
        if b < 0x80:
            length = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            length, pos = slow(data, pos)
        record_end = pos + length
        if length < 6 or record_end > end:
            raise CorruptRecordError(f"record length {length} does not fit the batch")
        pos += 1  # attributes: unused
        # timestampDelta
        b = data[pos]
        if b < 0x80:
            ts_delta = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            ts_delta, pos = slow(data, pos)
        # offsetDelta
        b = data[pos]
        if b < 0x80:
            offset_delta = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            offset_delta, pos = slow(data, pos)
        # key
        b = data[pos]
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            n, pos = slow(data, pos)
        if n >= 0:
            key = data[pos : pos + n]
            pos += n
        else:  # any negative length is null, as Kafka reads it
            key = None
        # value
        b = data[pos]
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            n, pos = slow(data, pos)
        if n >= 0:
            value = data[pos : pos + n]
            pos += n
        else:  # any negative length is null, as Kafka reads it
            value = None
        # headers
        b = data[pos]
        if b == 0:
            pos += 1
            record_headers = no_headers
        else:
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                n, pos = slow(data, pos)
            if n < 0 or n > record_end - pos:
                raise CorruptRecordError(f"header count {n}")
            record_headers = []
            for _h in range(n):
                klen, pos = _read_len(data, pos)
                if klen < 0:
                    raise CorruptRecordError("header key is null")
                hkey = data[pos : pos + klen].decode("utf-8", "replace")
                pos += klen
                vlen, pos = _read_len(data, pos)
                if vlen >= 0:
                    hvalue = data[pos : pos + vlen]
                    pos += vlen
                else:
                    hvalue = None
                record_headers.append(Header(hkey, hvalue))
        if pos != record_end:
            raise CorruptRecordError(f"record declares {length} bytes but holds {length + pos - record_end}")
        add_offset(base_offset + offset_delta)
        add_ts(first_ts + ts_delta)
        add_key(key)
        add_value(value)
        add_headers(record_headers)
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes left over after {count} records")
    if log_append:
        timestamps = [header.max_timestamp] * count
    return DecodedBatch(header, offsets, timestamps, keys, values, headers)


def _decode_legacy(buf, header: BatchHeader, max_inflated_bytes: int) -> DecodedBatch:
    from .legacy import decode_legacy_entry

    entry = decode_legacy_entry(buf, header.position, max_inflated_bytes, validate_crc=False)
    offsets = entry.offsets
    if offsets:
        header = header._replace(base_offset=offsets[0], last_offset_delta=offsets[-1] - offsets[0],
                                 record_count=len(offsets))
    return DecodedBatch(header, offsets, entry.timestamps, entry.keys, entry.values,
                        [_NO_HEADERS] * len(offsets))


def _read_len(data: bytes, pos: int) -> tuple[int, int]:
    b = data[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    return _slow_varint(data, pos)


# --------------------------------------------------------------------------------------------- encode


def _encode_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += b"\x01"
    else:
        out += encode_varint(len(data))
        out += data


def encode_records(
    records: Sequence[tuple[int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]],
    first_timestamp: int,
    offset_deltas: Sequence[int] | None = None,
) -> bytearray:
    """The uncompressed records section of a v2 batch."""
    out = bytearray()
    for i, (timestamp, key, value, headers) in enumerate(records):
        rec = bytearray(b"\x00")
        rec += encode_varlong(timestamp - first_timestamp)
        rec += encode_varint(i if offset_deltas is None else offset_deltas[i])
        _encode_bytes(rec, key)
        _encode_bytes(rec, value)
        rec += encode_varint(len(headers))
        for hkey, hvalue in headers:
            _encode_bytes(rec, hkey.encode("utf-8"))
            _encode_bytes(rec, hvalue)
        out += encode_varint(len(rec))
        out += rec
    return out


def encode_batch(
    records: Sequence[tuple[int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]],
    *,
    base_offset: int = 0,
    offset_deltas: Sequence[int] | None = None,
    compression: Codec | int = Codec.NONE,
    log_append_time: int | None = None,
    partition_leader_epoch: int = -1,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    last_offset_delta: int | None = None,
    first_timestamp: int | None = None,
    max_timestamp: int | None = None,
) -> bytes:
    """The bytes of one v2 batch holding ``records``: ``(timestamp, key, value, headers)`` tuples.

    ``offset_deltas`` defaults to 0..n-1 (pass gaps for a compacted batch). ``log_append_time`` marks
    the batch LogAppendTime with that max timestamp. The CRC is computed; nothing else is checked
    beyond what the format needs.
    """
    n = len(records)
    if offset_deltas is not None and len(offset_deltas) != n:
        raise ValueError("offset_deltas must have one entry per record")
    if first_timestamp is None:
        first_timestamp = records[0][0] if n else NO_TIMESTAMP
    if max_timestamp is None:
        max_timestamp = max((r[0] for r in records), default=NO_TIMESTAMP)
    if last_offset_delta is None:
        if offset_deltas is not None and n:
            last_offset_delta = offset_deltas[-1]
        else:
            last_offset_delta = max(n - 1, 0)
    codec = Codec(compression)
    attributes = int(codec)
    if log_append_time is not None:
        attributes |= _TIMESTAMP_TYPE_MASK
        max_timestamp = log_append_time
    if transactional:
        attributes |= _TRANSACTIONAL_MASK
    if control:
        attributes |= _CONTROL_MASK
    body = encode_records(records, first_timestamp, offset_deltas)
    if codec != Codec.NONE:
        body = _compression.compress(codec, bytes(body))
    after_crc = (
        _AFTER_CRC.pack(
            attributes,
            last_offset_delta,
            first_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            n,
        )
        + body
    )
    crc = crc32c(after_crc)
    length = len(after_crc) + 9  # partitionLeaderEpoch + magic + crc
    return _PREFIX.pack(base_offset, length) + struct.pack(">ibI", partition_leader_epoch, 2, crc) + after_crc


def encode_control_batch(
    kind: str,
    *,
    producer_id: int,
    producer_epoch: int,
    timestamp: int,
    coordinator_epoch: int = 0,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A transaction marker batch: one control record, key ``(version 0, type)``, value
    ``(version 0, coordinatorEpoch i32)``."""
    types = {"ABORT": 0, "COMMIT": 1}
    if kind not in types:
        raise ValueError(f"control type must be ABORT or COMMIT, not {kind!r}")
    key = struct.pack(">hh", 0, types[kind])
    value = struct.pack(">hi", 0, coordinator_epoch)
    return encode_batch(
        [(timestamp, key, value, ())],
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
    )


# --------------------------------------------------------------------------------------------- patch


def set_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Assign a v2 batch's base offset in place; not covered by the CRC."""
    _I64.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Assign a v2 batch's partition leader epoch in place; not covered by the CRC."""
    _I32.pack_into(buf, pos + 12, epoch)


def set_log_append_time(buf: bytearray | memoryview, pos: int, timestamp: int) -> None:
    """Mark a v2 batch LogAppendTime with ``timestamp`` as its max timestamp, and fix its CRC."""
    length = _I32.unpack_from(buf, pos + 8)[0]
    end = pos + LOG_OVERHEAD + length
    attributes = _I16.unpack_from(buf, pos + _ATTRIBUTES_OFFSET)[0] | _TIMESTAMP_TYPE_MASK
    _I16.pack_into(buf, pos + _ATTRIBUTES_OFFSET, attributes)
    _I64.pack_into(buf, pos + _MAX_TIMESTAMP_OFFSET, timestamp)
    crc = crc32c(memoryview(buf)[pos + _ATTRIBUTES_OFFSET : end])
    _U32.pack_into(buf, pos + _CRC_OFFSET, crc)
