"""Zig-zag varints as Kafka and Protocol Buffers write them.

A varint (32-bit) takes at most 5 bytes and a varlong (64-bit) at most 10; anything longer is corrupt.
Decoders take a buffer and a position and return ``(value, next_position)``; they raise
:class:`~kafkafs.errors.CorruptRecordError` for a varint that is too long or out of range, and
``IndexError`` for one that runs past the end of the buffer (their caller reports that as damage: the
hot path checks no end per byte).
"""

from __future__ import annotations

from ..errors import CorruptRecordError
from . import Buffer

__all__ = [
    "read_zigzag",
    "read_varint",
    "read_varlong",
    "encode_varint",
    "encode_varlong",
    "encode_uvarint",
]


def read_zigzag(data: Buffer, pos: int, bits: int, name: str) -> tuple[int, int]:
    """A zig-zag varint (``bits`` 32: at most 5 bytes) or varlong (64: at most 10 bytes) at ``pos``,
    as ``(value, next_position)``; ``name`` says which in the errors. The one decoder of the Python
    code (the compiled kernel has its own, tested against the reference that calls this one).

    It does not check the end of ``data``: reading past it is an ``IndexError``, which the record
    decoder's caller reports as damage (a check per byte would cost the hot path its speed)."""
    start = pos
    raw = 0
    shift = 0
    max_shift = 35 if bits == 32 else 70
    while True:
        b = data[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            if raw >> bits:
                raise CorruptRecordError(f"{name} out of {bits}-bit range", start)
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift >= max_shift:
            raise CorruptRecordError(f"{name} longer than {max_shift // 7} bytes", start)


def read_varint(data: Buffer, pos: int) -> tuple[int, int]:
    """:func:`read_zigzag` of a varint (32-bit); past the end of ``data`` an ``IndexError``."""
    return read_zigzag(data, pos, 32, "varint")


def read_varlong(data: Buffer, pos: int) -> tuple[int, int]:
    """:func:`read_zigzag` of a varlong (64-bit); past the end of ``data`` an ``IndexError``."""
    return read_zigzag(data, pos, 64, "varlong")


def encode_uvarint(raw: int) -> bytes:
    """An unsigned varint (no zig-zag: Kafka's flexible-version lengths and tags, and the raw form of
    the encoders below); a negative ``raw`` is a ``ValueError``."""
    if 0 <= raw < 0x80:
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
    return encode_uvarint(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def encode_varlong(value: int) -> bytes:
    """A signed 64-bit value as a zig-zag varlong."""
    if not -(1 << 63) <= value < (1 << 63):
        raise ValueError(f"{value} does not fit a varlong")
    return encode_uvarint(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)
