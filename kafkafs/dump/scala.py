"""Java's arithmetic as Kafka's tools hash with it: a signed 32-bit int, and ``String.hashCode``
(:mod:`.javaorder` orders the files with findings as Kafka 4's ``java.util.HashMap`` does; the Scala
2.13 table order Kafka 3's tool used is no longer needed).
"""

from __future__ import annotations

__all__ = ["int32", "java_string_hash"]


def int32(n: int) -> int:
    n &= 0xFFFFFFFF
    return n - (1 << 32) if n & 0x80000000 else n


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units)."""
    h = 0
    data = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return int32(h)
