"""Kafka's producer-state snapshot (``<20-digit offset>.snapshot``), parsed and rendered (sans-io).

The layout is Kafka's ``ProducerSnapshot`` message, version 1, big-endian, not flexible::

    version i16 (1), crc u32, entries i32 count, then per entry:
    producerId i64, epoch i16, lastSequence i32, lastOffset i64, offsetDelta i32, timestamp i64,
    coordinatorEpoch i32, currentTxnFirstOffset i64

``crc`` is the CRC-32C of everything after it (from byte 6 to the end). ``offsetDelta`` is the last
batch's ``lastSequence - firstSequence`` (equal to its ``lastOffsetDelta``); ``timestamp`` the last
batch's max timestamp; ``currentTxnFirstOffset`` -1 when the producer has no transaction in progress;
``lastOffset`` -1 when the producer's batches are gone (a broker then keeps only its epoch). The file's
name is the offset the snapshot was taken at: the log end offset then, exclusive.

Kafka reads it with ``ProducerStateManager.readSnapshot``: an unknown version, a short buffer or a
CRC mismatch is a ``CorruptSnapshotException`` (the broker deletes the file and rebuilds from the
log). :func:`parse_producer_snapshot` raises ``CorruptRecordError`` with Kafka's message for the same
cases.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import NamedTuple

from kafkafs.errors import CorruptRecordError

from .crc import crc32c

__all__ = [
    "SNAPSHOT_VERSION",
    "SNAPSHOT_SUFFIX",
    "ProducerEntry",
    "parse_producer_snapshot",
    "render_producer_snapshot",
    "snapshot_file_name",
]

SNAPSHOT_VERSION = 1
SNAPSHOT_SUFFIX = ".snapshot"
_HEAD = struct.Struct(">hIi")  # version, crc, entry count
_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_START = 6


class ProducerEntry(NamedTuple):
    """One producer's state, as a snapshot stores it."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1

    @property
    def first_sequence(self) -> int:
        """The last batch's first sequence (Kafka's ``BatchMetadata.firstSeq``: wraps at 2**31)."""
        seq = self.last_sequence - self.offset_delta
        return seq if seq >= 0 else seq + 2**31


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def parse_producer_snapshot(data: bytes | bytearray | memoryview) -> list[ProducerEntry]:
    """The entries of a snapshot file's content, in file order; ``CorruptRecordError`` where Kafka's
    ``ProducerStateManager.readSnapshot`` throws, with its message (Kafka 4.4, checked with
    ``kafka-dump-log``): a buffer that ends too soon is Java's ``BufferUnderflowException``, whose
    message is ``null``; an entry count past the bytes left is the generated reader's "Tried to
    allocate ..."; a negative one its "non-nullable field ..."; the CRC is checked after the entries are
    read. Bytes after the last entry are ignored, as Kafka's reader ignores them (the CRC covers them)."""
    buf = bytes(data)

    def schema(message: str, position: int) -> CorruptRecordError:
        return CorruptRecordError(f"Snapshot failed schema validation: {message}", position)

    if len(buf) < 2:
        raise schema("null", 0)  # ByteBuffer.getShort underflows
    version = struct.unpack_from(">h", buf)[0]
    if version != SNAPSHOT_VERSION:
        raise schema(f"Snapshot contained an unknown file version {version}", 0)
    if len(buf) < _HEAD.size:
        raise schema("null", 2)
    _, crc, count = _HEAD.unpack_from(buf)
    remaining = len(buf) - _HEAD.size
    if count < 0:
        raise schema("non-nullable field producerEntries was serialized as null", _HEAD.size)
    if count > remaining:
        raise schema(
            f"Tried to allocate a collection of size {count}, but there are only {remaining} bytes remaining.",
            _HEAD.size,
        )
    end = _HEAD.size + count * _ENTRY.size
    if end > len(buf):
        raise schema("null", len(buf))  # an entry cut short
    computed = crc32c(memoryview(buf)[_CRC_START:])
    if computed != crc:
        raise CorruptRecordError(
            f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {crc}. Computed crc: {computed}", 2
        )
    return [ProducerEntry(*_ENTRY.unpack_from(buf, _HEAD.size + i * _ENTRY.size)) for i in range(count)]


def render_producer_snapshot(entries: Iterable[ProducerEntry]) -> bytes:
    """The bytes of a snapshot holding ``entries`` (in the order given), CRC filled in."""
    items = list(entries)
    body = bytearray(_HEAD.pack(SNAPSHOT_VERSION, 0, len(items)))
    for e in items:
        body += _ENTRY.pack(*e)
    struct.pack_into(">I", body, 2, crc32c(memoryview(body)[_CRC_START:]))
    return bytes(body)
