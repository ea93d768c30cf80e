"""Zig-zag varints as Kafka and Protocol Buffers write them.

A varint (32-bit) takes at most 5 bytes and a varlong (64-bit) at most 10; anything longer is corrupt.
Decoders take a buffer and a position and return ``(value, next_position)``; they raise
:class:`~kafkafs.errors.CorruptRecordError` for a varint that is too long or runs past ``end``.
"""

from __future__ import annotations

from ..errors import CorruptRecordError

__all__ = [
    "decode_varint",
    "decode_varlong",
    "encode_varint",
    "encode_varlong",
    "size_of_varint",
    "zigzag",
    "unzigzag",
]


def zigzag(value: int) -> int:
    """Map a signed integer to an unsigned one so that small magnitudes stay small."""
    return (value << 1) ^ (value >> 63)


def unzigzag(raw: int) -> int:
    return (raw >> 1) ^ -(raw & 1)


def _decode(buf, pos: int, end: int | None, max_bytes: int, what: str) -> tuple[int, int]:
    if end is None:
        end = len(buf)
    start = pos
    shift = 0
    raw = 0
    while True:
        if pos >= end:
            raise CorruptRecordError(f"{what} runs past the end of its buffer", start)
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if pos - start >= max_bytes:
            raise CorruptRecordError(f"{what} longer than {max_bytes} bytes", start)


def decode_varint(buf, pos: int = 0, end: int | None = None) -> tuple[int, int]:
    """A zig-zag varint of at most 5 bytes, as ``(value, next_position)``."""
    value, pos2 = _decode(buf, pos, end, 5, "varint")
    if not -(1 << 31) <= value < (1 << 31):
        raise CorruptRecordError("varint out of 32-bit range", pos)
    return value, pos2


def decode_varlong(buf, pos: int = 0, end: int | None = None) -> tuple[int, int]:
    """A zig-zag varlong of at most 10 bytes, as ``(value, next_position)``."""
    value, pos2 = _decode(buf, pos, end, 10, "varlong")
    if not -(1 << 63) <= value < (1 << 63):
        raise CorruptRecordError("varlong out of 64-bit range", pos)
    return value, pos2


def _encode(raw: int) -> bytes:
    if raw < 0x80:
        return _SMALL[raw]
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


_SMALL = [bytes((i,)) for i in range(0x80)]


def encode_varint(value: int) -> bytes:
    """A signed 32-bit value as a zig-zag varint."""
    if not -(1 << 31) <= value < (1 << 31):
        raise ValueError(f"{value} does not fit a varint")
    return _encode(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def encode_varlong(value: int) -> bytes:
    """A signed 64-bit value as a zig-zag varlong."""
    if not -(1 << 63) <= value < (1 << 63):
        raise ValueError(f"{value} does not fit a varlong")
    return _encode(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def size_of_varint(value: int) -> int:
    """Bytes the zig-zag encoding of ``value`` takes."""
    raw = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    size = 1
    while raw >= 0x80:
        raw >>= 7
        size += 1
    return size
