"""Checksums: CRC-32C for RecordBatch v2, CRC-32 (zlib) for legacy magic 0 and 1 messages."""

from __future__ import annotations

import zlib

import crc32c as _crc32c

__all__ = ["crc32c", "crc32"]


def crc32c(data, value: int = 0) -> int:
    """CRC-32C (Castagnoli) of ``data``; hardware-accelerated where the CPU has it."""
    return _crc32c.crc32c(data, value)


def crc32(data, value: int = 0) -> int:
    """CRC-32 (IEEE) of ``data``, as legacy Kafka messages carry it."""
    return zlib.crc32(data, value)
