"""Kafka's on-disk layouts written and read from Kafka's documentation, independently of kafkafs.

Used by the tests of ``dump`` and of the broker's state files: a v2 record batch encoder (every header
field settable, control records), a producer-state snapshot reader and writer (``ProducerSnapshot.json``,
version 1), a leader-epoch-checkpoint reader, an offset checkpoint's entry and a ``partition.metadata`` reader.
"""

from __future__ import annotations

import base64
import gzip
import struct
import uuid

import crc32c

# ---------------------------------------------------------------------------------------------- batches


def uvarint(raw: int) -> bytes:
    """An unsigned varint (``raw`` >= 0): 7 bits a byte, low bits first, the high bit set on every byte
    but the last (Protocol Buffers' varint; Kafka's flexible-version lengths)."""
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def varint(n: int) -> bytes:
    """Kafka's signed varint (a 64-bit zig-zag, then :func:`uvarint`), as records and Schema Registry's
    message indexes use it, and Avro its int and long."""
    return uvarint((n << 1) ^ (n >> 63))


def _field(b: bytes | None) -> bytes:
    return varint(-1) if b is None else varint(len(b)) + b


def record(delta: int, ts_delta: int, key: bytes | None, value: bytes | None, headers=()) -> bytes:
    """One record (attributes 0); a header key as text (UTF-8) or bytes (any, as a hostile producer
    writes them)."""
    body = b"\0" + varint(ts_delta) + varint(delta) + _field(key) + _field(value) + varint(len(headers))
    for hk, hv in headers:
        body += _field(hk if isinstance(hk, bytes) else hk.encode()) + _field(hv)
    return varint(len(body)) + body


def batch(
    base_offset: int,
    records: list[tuple[bytes | None, bytes | None, tuple]],
    *,
    first_ts: int = 1_700_000_000_000,
    ts_step: int = 1,
    leader_epoch: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    attributes: int = 0,
    offset_deltas: list[int] | None = None,
    max_ts: int | None = None,
) -> bytes:
    """One magic 2 batch: ``records`` are (key, value, headers); attributes as Kafka's bits (codec 1 is
    gzip and compresses the records; 5-7 are written as given)."""
    deltas = offset_deltas or list(range(len(records)))
    body = b"".join(record(d, i * ts_step, k, v, h) for i, (d, (k, v, h)) in enumerate(zip(deltas, records, strict=True)))
    if attributes & 0x07 == 1:
        body = gzip.compress(body)
    last_delta = deltas[-1] if deltas else 0
    if max_ts is None:
        max_ts = first_ts + (len(records) - 1) * ts_step
    after_crc = struct.pack(
        ">hiqqqhii", attributes, last_delta, first_ts, max_ts, producer_id, producer_epoch, base_sequence, len(records)
    ) + body
    crc = crc32c.crc32c(after_crc)
    head = struct.pack(">qiibI", base_offset, len(after_crc) + 9, leader_epoch, 2, crc)
    return head + after_crc


def control_batch(offset: int, kind: int, coordinator_epoch: int, producer_id: int, producer_epoch: int, ts: int) -> bytes:
    """A transaction marker: key (version 0, type 0 ABORT / 1 COMMIT), value (version 0, coordinatorEpoch)."""
    key = struct.pack(">hh", 0, kind)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return batch(offset, [(key, value, ())], first_ts=ts, producer_id=producer_id, producer_epoch=producer_epoch,
                 attributes=0x30)


def batch_fields(buf: bytes, pos: int) -> dict:
    """The header of the batch at ``pos``, by Kafka's field names."""
    names = ("baseOffset", "batchLength", "partitionLeaderEpoch", "magic", "crc", "attributes", "lastOffsetDelta",
             "firstTimestamp", "maxTimestamp", "producerId", "producerEpoch", "baseSequence", "recordCount")
    return dict(zip(names, struct.unpack_from(">qiibIhiqqqhii", buf, pos), strict=True))


def walk_batches(buf: bytes) -> list[tuple[int, dict]]:
    out, pos = [], 0
    while pos + 61 <= len(buf):
        f = batch_fields(buf, pos)
        if pos + 12 + f["batchLength"] > len(buf):
            break
        out.append((pos, f))
        pos += 12 + f["batchLength"]
    return out


# ---------------------------------------------------------------------------------------------- state files

SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")


def read_producer_snapshot(data: bytes) -> list[dict]:
    """ProducerSnapshot v1: version i16, crc u32 (CRC-32C of the rest), [entries]."""
    version, crc, count = struct.unpack_from(">hIi", data)
    assert version == 1, version
    assert crc32c.crc32c(data[6:]) == crc, "snapshot CRC"
    assert len(data) == 10 + count * SNAPSHOT_ENTRY.size
    names = ("producerId", "epoch", "lastSequence", "lastOffset", "offsetDelta", "timestamp", "coordinatorEpoch",
             "currentTxnFirstOffset")
    return [dict(zip(names, SNAPSHOT_ENTRY.unpack_from(data, 10 + i * SNAPSHOT_ENTRY.size), strict=True)) for i in range(count)]


def write_producer_snapshot(entries: list[tuple]) -> bytes:
    body = struct.pack(">i", len(entries)) + b"".join(SNAPSHOT_ENTRY.pack(*e) for e in entries)
    return struct.pack(">hI", 1, crc32c.crc32c(body)) + body


def read_epoch_checkpoint(text: str) -> list[tuple[int, int]]:
    lines = text.split("\n")
    assert lines[0] == "0" and lines[-1] == "", text
    count = int(lines[1])
    entries = [tuple(int(x) for x in line.split(" ")) for line in lines[2:-1]]
    assert len(entries) == count
    return entries


def read_partition_metadata(text: str) -> uuid.UUID:
    """``version: 0`` then ``topic_id: <base64url UUID, no padding>`` (Kafka's PartitionMetadata)."""
    lines = text.split("\n")
    assert lines[0] == "version: 0", text
    assert lines[1].startswith("topic_id: "), text
    raw = base64.urlsafe_b64decode(lines[1][len("topic_id: "):] + "==")
    return uuid.UUID(bytes=raw)


def checkpoint_offset(path, topic: str, partition: int) -> int | None:
    """The offset an offset checkpoint file (``cleaner-offset-checkpoint``, ``log-start-offset-checkpoint``:
    a version line, a count line, then ``topic partition offset`` lines) holds for one partition; None when
    the file or the entry is not there."""
    try:
        lines = open(path).read().splitlines()[2:]
    except FileNotFoundError:
        return None
    for line in lines:
        name, part, offset = line.split()
        if name == topic and int(part) == partition:
            return int(offset)
    return None
