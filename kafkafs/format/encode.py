"""Records into the bytes of a RecordBatch v2 (with its CRC), and the in-place patches a writer
makes to a batch that is already encoded."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, TypeVar

from . import compression as _compression
from . import kernel as _kernel
from .batchheader import (
    _AFTER_CRC,
    _ATTRIBUTES_OFFSET,
    _CONTROL_MASK,
    _CRC_OFFSET,
    _I16,
    _I32,
    _I64,
    _MAX_TIMESTAMP_OFFSET,
    _PREFIX,
    _TIMESTAMP_TYPE_MASK,
    _TRANSACTIONAL_MASK,
    _U32,
    LOG_OVERHEAD,
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
)
from .compression import Codec
from .crc import crc32c
from .varint import encode_varint, encode_varlong

__all__ = [
    "batch_groups",
    "encode_records",
    "encode_batch",
    "encode_control_batch",
    "set_base_offset",
    "set_partition_leader_epoch",
    "set_log_append_time",
]


#: v2 batch header, and the most a record adds to its key, value and header bytes (varints at their
#: longest: length, attributes, timestamp delta, offset delta, key and value lengths, header count).
_BATCH_OVERHEAD = 61
_RECORD_OVERHEAD = 36
_HEADER_OVERHEAD = 10


#: A record as the encoders take it: (timestamp, key, value, headers); a NamedTuple of that shape too.
_Row = TypeVar("_Row", bound="tuple[Any, ...]")


def _record_size(row: tuple[Any, ...]) -> int:
    """The most bytes the record can take in an uncompressed v2 batch."""
    _ts, key, value, headers = row
    size = _RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
    for name, header_value in headers:
        size += _HEADER_OVERHEAD + len(name.encode("utf-8", "surrogatepass"))
        size += len(header_value) if header_value else 0
    return size


def batch_groups(rows: list[_Row], limit: int) -> list[list[_Row]]:
    """The rows as one batch, or cut into batches that each stay within ``limit`` bytes (a row larger
    than that alone in its batch, which the append then refuses)."""
    sizes = [_record_size(r) for r in rows]
    if _BATCH_OVERHEAD + sum(sizes) <= limit or len(rows) == 1:
        return [rows]
    groups: list[list[_Row]] = []
    group: list[_Row] = []
    used = _BATCH_OVERHEAD
    for row, size in zip(rows, sizes, strict=True):
        if group and used + size > limit:
            groups.append(group)
            group, used = [], _BATCH_OVERHEAD
        group.append(row)
        used += size
    groups.append(group)
    return groups


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
) -> bytes | bytearray:
    """The uncompressed records section of a v2 batch: by the kernel when it is built and the records
    are of the kinds it takes (:func:`encode_records_reference` otherwise, the same bytes)."""
    if _kernel.KERNEL is not None:
        section: bytes | None = _kernel.KERNEL.encode_section(records, first_timestamp, offset_deltas)
        if section is not None:
            return section
    return encode_records_reference(records, first_timestamp, offset_deltas)


def encode_records_reference(
    records: Sequence[tuple[int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]],
    first_timestamp: int,
    offset_deltas: Sequence[int] | None = None,
) -> bytearray:
    """:func:`encode_records` in Python (the definition the kernel is tested against)."""
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
    body: bytes | bytearray = encode_records(records, first_timestamp, offset_deltas)
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
