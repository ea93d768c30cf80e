"""The records of a RecordBatch v2 as columns (:class:`DecodedBatch`), and the reference decoder.

:func:`decode_records` is the pure-Python reference: the compiled kernel (:mod:`kafkafs.format.kernel`)
must decode every input exactly as it does, raising where it raises (the differential tests hold them
together). Varints follow Kafka's ``ByteUtils``: a varint (lengths, offset delta, counts) takes at most
5 bytes and a varlong (timestamp delta) at most 10; a value past 32 (64) bits is corrupt, and a value
written in more bytes than needed is read as Kafka reads it. Offsets and timestamps are
``base + delta`` in 64-bit two's complement, as Kafka's ``long`` arithmetic gives them.

Record layout::

    length varint | attributes i8 | timestampDelta varlong | offsetDelta varint |
    keyLength varint | key | valueLength varint | value |
    headerCount varint | [headerKeyLength varint | headerKey | headerValueLength varint | headerValue]
"""

from __future__ import annotations

import struct
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from ..errors import CorruptRecordError
from .batchheader import BatchHeader
from .varint import read_varint as _varint
from .varint import read_varlong as _varlong

__all__ = [
    "Header",
    "Record",
    "DecodedBatch",
    "CONTROL_TYPES",
    "control_type_of",
    "decode_records",
    "NO_HEADERS",
]

_I16 = struct.Struct(">h")
_TIMESTAMP_TYPE_MASK = 0x08

class Header(NamedTuple):
    key: str
    value: bytes | None


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] | list[Header]


NO_HEADERS: tuple[Header, ...] = ()
_NO_HEADERS = NO_HEADERS



@dataclass(slots=True, eq=False, repr=False)
class DecodedBatch:
    """One batch decoded into columns: parallel lists, one entry a record.

    ``timestamps`` already hold what a consumer sees: for a LogAppendTime batch every record carries the
    batch's ``max_timestamp``. ``headers[i]`` is a (possibly empty) sequence of :class:`Header`.
    Nobody changes a decoded batch (slicing makes a new one), so threads may share it.
    """

    header: BatchHeader
    offsets: list[int]
    timestamps: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[Sequence[Header]]

    def __len__(self) -> int:
        return len(self.offsets)

    def __iter__(self) -> Iterator[Record]:
        return map(Record, self.offsets, self.timestamps, self.keys, self.values, self.headers)  # type: ignore[arg-type]  # a NamedTuple class as map's callable

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

    def between(self, lo: int, hi: int | None = None) -> DecodedBatch:
        """The records with ``lo <= offset <= hi`` (``hi`` None: no upper bound), same header."""
        offsets = self.offsets
        i = bisect_left(offsets, lo)
        j = len(offsets) if hi is None else bisect_right(offsets, hi, lo=i)
        if i == 0 and j == len(offsets):
            return self
        return DecodedBatch(
            self.header, offsets[i:j], self.timestamps[i:j], self.keys[i:j], self.values[i:j], self.headers[i:j]
        )


#: Kafka's ControlRecordType names by type id (the i16 after the key's version).
CONTROL_TYPES = {
    0: "ABORT",
    1: "COMMIT",
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
    5: "KRAFT_VERSION",
    6: "KRAFT_VOTERS",
}


def control_type_of(key: bytes | None) -> str:
    """Kafka's name for a control record from its key (``version i16, type i16``): ``"COMMIT"``,
    ``"ABORT"``, ... or ``"UNKNOWN"`` for any other type, and for a key too short to hold one."""
    if key is None or len(key) < 4:
        return "UNKNOWN"
    return CONTROL_TYPES.get(_I16.unpack_from(key, 2)[0], "UNKNOWN")


# --------------------------------------------------------------------------------------------- decode

_MASK64 = 0xFFFFFFFFFFFFFFFF


def _wrap64(value: int) -> int:
    """``value`` as a Java ``long`` sum gives it: two's complement, 64 bits."""
    return ((value + (1 << 63)) & _MASK64) - (1 << 63)


_LOW = -(1 << 63)
_HIGH = (1 << 63) - 1


def decode_records(data: bytes, header: BatchHeader) -> DecodedBatch:
    """The records section ``data`` (uncompressed) of the v2 batch ``header`` as columns.

    Raises :class:`CorruptRecordError` (without a position: the caller places it) when the bytes do
    not hold exactly ``header.record_count`` well-formed records; reading past the end of ``data`` is
    an ``IndexError`` that the caller reports the same way.
    """
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
    read_int, read_bytes = _read_int, _read_bytes
    no_headers = NO_HEADERS
    pos = 0
    for _ in range(count):
        length, pos = read_int(data, pos)
        record_end = pos + length
        if length < 6 or record_end > end:
            raise CorruptRecordError(f"record length {length} does not fit the batch")
        pos += 1  # attributes: unused
        ts_delta, pos = _read_long(data, pos)
        offset_delta, pos = read_int(data, pos)
        key, pos = read_bytes(data, pos)
        value, pos = read_bytes(data, pos)
        if data[pos] == 0:
            pos += 1
            record_headers: Sequence[Header] = no_headers
        else:
            n, pos = read_int(data, pos)
            if n < 0 or n > record_end - pos:
                raise CorruptRecordError(f"header count {n}")
            built: list[Header] = []
            for _h in range(n):
                klen, pos = read_int(data, pos)
                if klen < 0:
                    raise CorruptRecordError("header key is null")
                hkey = data[pos : pos + klen].decode("utf-8", "replace")
                pos += klen
                hvalue, pos = read_bytes(data, pos)
                built.append(Header(hkey, hvalue))
            record_headers = built
        if pos != record_end:
            raise CorruptRecordError(f"record declares {length} bytes but holds {length + pos - record_end}")
        offset = base_offset + offset_delta
        add_offset(offset if _LOW <= offset <= _HIGH else _wrap64(offset))
        ts = first_ts + ts_delta
        add_ts(ts if _LOW <= ts <= _HIGH else _wrap64(ts))
        add_key(key)
        add_value(value)
        add_headers(record_headers)
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes left over after {count} records")
    if log_append:
        timestamps = [header.max_timestamp] * count
    return DecodedBatch(header, offsets, timestamps, keys, values, headers)


# The readers of a record's fields: a one-byte varint (nearly every length and delta) is read in place,
# a longer one by varint.read_zigzag.


def _read_int(data: bytes, pos: int) -> tuple[int, int]:
    """A varint (lengths, offset delta, counts) at ``pos``: ``(value, next_position)``."""
    b = data[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    return _varint(data, pos)


def _read_long(data: bytes, pos: int) -> tuple[int, int]:
    """A varlong (the timestamp delta) at ``pos``: ``(value, next_position)``."""
    b = data[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    return _varlong(data, pos)


def _read_bytes(data: bytes, pos: int) -> tuple[bytes | None, int]:
    """A varint length and that many bytes (key, value, header value) at ``pos``: ``(bytes,
    next_position)``; any negative length is null, as Kafka reads it. Bytes past the end of ``data``
    are cut short, and the position past them is the record's check."""
    b = data[pos]
    if b < 0x80:
        n = (b >> 1) ^ -(b & 1)
        pos += 1
    else:
        n, pos = _varint(data, pos)
    if n < 0:
        return None, pos
    return data[pos : pos + n], pos + n
