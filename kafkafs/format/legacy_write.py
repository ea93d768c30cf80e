"""Writing a compressed magic 0/1 message (a "wrapper"), as Kafka's ``MemoryRecordsBuilder`` does when
the cleaner rebuilds one with the records it keeps (``MemoryRecords.buildRetainedRecordsInto``).

A legacy message is ``offset i64, size i32, crc u32, magic i8, attributes i8, [timestamp i64 (magic
1)], key (i32 length, -1: null), value (i32 length)``, the CRC-32 over magic..end. A wrapper's value is
the compressed message set of its inner messages; its offset is the last inner offset. Inner offsets
are absolute for magic 0 and relative to the first kept record for magic 1 (Kafka's
``toInnerOffset``). With LogAppendTime (magic 1, attribute bit 3) the wrapper and every inner message
carry the append time; otherwise the wrapper carries the largest inner timestamp.

Pure functions (sans-io).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

from .compression import Codec, compress

__all__ = ["encode_legacy_message", "encode_legacy_wrapper"]

_TIMESTAMP_TYPE_BIT = 0x08


def encode_legacy_message(offset: int, magic: int, attributes: int, timestamp: int, key: bytes | None,
                          value: bytes | None) -> bytes:
    """One legacy entry (prefix included); ``timestamp`` is ignored for magic 0."""
    body = bytearray(struct.pack(">bB", magic, attributes))
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for part in (key, value):
        if part is None:
            body += b"\xff\xff\xff\xff"
        else:
            body += struct.pack(">i", len(part))
            body += part
    message = struct.pack(">I", zlib.crc32(body)) + bytes(body)
    return struct.pack(">qi", offset, len(message)) + message


def encode_legacy_wrapper(rows: Sequence[tuple[int, int, bytes | None, bytes | None]], *, magic: int, codec: Codec,
                          log_append_time: int | None = None) -> bytes:
    """A compressed wrapper holding ``rows`` ``(offset, timestamp, key, value)`` (offsets increasing,
    at least one row), compressed with ``codec`` (gzip, snappy or lz4)."""
    if not rows:
        raise ValueError("a wrapper holds at least one message")
    if magic not in (0, 1) or codec not in (Codec.GZIP, Codec.SNAPPY, Codec.LZ4):
        raise ValueError(f"no legacy wrapper of magic {magic} with {codec!r}")
    lat = magic == 1 and log_append_time is not None
    inner_attributes = _TIMESTAMP_TYPE_BIT if lat else 0
    base = rows[0][0]
    inner = bytearray()
    for offset, timestamp, key, value in rows:
        inner_offset = offset - base if magic == 1 else offset
        inner_ts = log_append_time if lat and log_append_time is not None else timestamp
        inner += encode_legacy_message(inner_offset, magic, inner_attributes, inner_ts, key, value)
    if lat and log_append_time is not None:
        wrapper_ts = log_append_time
    else:
        wrapper_ts = max(r[1] for r in rows)
    attributes = int(codec) | (_TIMESTAMP_TYPE_BIT if lat else 0)
    return encode_legacy_message(rows[-1][0], magic, attributes, wrapper_ts, None, compress(codec, bytes(inner)))
