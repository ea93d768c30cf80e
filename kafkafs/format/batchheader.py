"""The fixed 61-byte header of a RecordBatch v2 (and the prefix of legacy magic 0/1 entries): read,
scan and CRC-check batches without touching their records.

Everything takes a buffer (``bytes``, ``bytearray``, ``mmap`` or ``memoryview``) and a position and
returns values; nothing reads files. Index rebuilding, offset lookups and recovery need only this.

Layout (big-endian)::

    baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 | magic i8 | crc u32 |
    attributes i16 | lastOffsetDelta i32 | firstTimestamp i64 | maxTimestamp i64 |
    producerId i64 | producerEpoch i16 | baseSequence i32 | recordCount i32 | records...

``batchLength`` counts the bytes after itself; the CRC-32C covers ``attributes`` to the end.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

from ..errors import CorruptRecordError
from . import Buffer
from .compression import Codec
from .crc import crc32, crc32c

__all__ = [
    "BatchHeader",
    "Codec",
    "read_batch_header",
    "batch_header_at",
    "scan_batches",
    "validate_batch",
    "v2_offsets",
    "LOG_OVERHEAD",
    "V2_HEADER_SIZE",
    "NO_TIMESTAMP",
    "CREATE_TIME",
    "LOG_APPEND_TIME",
    "NO_PRODUCER_ID",
]

LOG_OVERHEAD = 12  # baseOffset + batchLength: the prefix every magic shares
V2_HEADER_SIZE = 61
_MAGIC_OFFSET = 16
_CRC_OFFSET = 17
_LEGACY_CRC_OFFSET = 12  # magic 0/1: offset, size, then the CRC-32 right before the magic byte
_ATTRIBUTES_OFFSET = 21
_MAX_TIMESTAMP_OFFSET = 35
_V2_MIN_LENGTH = V2_HEADER_SIZE - LOG_OVERHEAD
#: A magic byte of 3 to 127 (outside the CRC) is read as a v2 batch, as Kafka's ``FileLogInputStream``
#: reads every magic above 1 (its signed byte): Kafka's recovery keeps such a batch when its CRC holds
#: and its broker serves its records (review11 R11-8). 128 to 255 are negative to Kafka, a legacy
#: message that cannot be read: damage ("unknown magic").
_V2_FUTURE_MAGIC_LO = 3
_V2_FUTURE_MAGIC_HI = 127
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


_LONG_MAX = 2**63 - 1


_LAST_OFFSET_DELTA_OFFSET = 23


def v2_offsets(buf: Buffer, position: int) -> tuple[int, int, int]:
    """``(baseOffset, batchLength, lastOffsetDelta)`` of the v2 batch at ``position`` of ``buf`` (at
    least 27 bytes there): what the order of offsets needs, read without the rest of the header."""
    base, length = _PREFIX.unpack_from(buf, position)
    return base, length, _I32.unpack_from(buf, position + _LAST_OFFSET_DELTA_OFFSET)[0]


def read_batch_header(
    buf: Buffer, pos: int = 0, end: int | None = None, max_batch_size: int | None = None
) -> BatchHeader | None:
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
    if magic == 2 or _V2_FUTURE_MAGIC_LO <= magic <= _V2_FUTURE_MAGIC_HI:
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
    if not 0 <= base_offset <= _LONG_MAX:  # outside the CRC: an on-disk offset is never negative
        raise CorruptRecordError(f"base offset {base_offset} is negative", pos)
    if magic >= 2:
        header = BatchHeader(pos, *_V2_HEADER.unpack_from(buf, pos))
        if magic != 2:  # read as v2, as Kafka does (see _V2_FUTURE_MAGIC_LO): the header says 2
            header = header._replace(magic=2)
        if base_offset + header.last_offset_delta > _LONG_MAX:
            raise CorruptRecordError(f"offsets past {base_offset} do not fit a long", pos)
        return header
    return _legacy_header(buf, pos, base_offset, length, magic)


def _legacy_header(buf: Buffer, pos: int, offset: int, length: int, magic: int) -> BatchHeader:
    crc = _U32.unpack_from(buf, pos + _LEGACY_CRC_OFFSET)[0]
    attributes = buf[pos + _MAGIC_OFFSET + 1]
    timestamp = _I64.unpack_from(buf, pos + 18)[0] if magic == 1 else NO_TIMESTAMP
    count = 1 if attributes & _COMPRESSION_MASK == 0 else -1
    return BatchHeader(
        pos, offset, length, -1, magic, crc, attributes, 0, timestamp, timestamp, -1, -1, -1, count
    )


def batch_header_at(buf: Buffer, pos: int = 0) -> BatchHeader:
    """The header of the batch at ``pos``, which the caller knows is whole: a batch cut short by the
    end of ``buf`` is :class:`CorruptRecordError` here."""
    found = read_batch_header(buf, pos)
    if found is None:
        raise CorruptRecordError("batch is cut short by the end of the buffer", pos)
    return found


def scan_batches(
    buf: Buffer, start: int = 0, end: int | None = None, max_batch_size: int | None = None
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


def validate_batch(buf: Buffer, header: BatchHeader) -> None:
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

