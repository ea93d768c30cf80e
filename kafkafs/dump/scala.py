"""The iteration order of Scala 2.13's ``mutable.HashSet`` / ``mutable.HashMap``, which decides the order of
some of Kafka 3's ``kafka-dump-log`` output (the partitions of a transaction). Kafka 4's tool reports
the files with findings in ``java.util.HashMap`` order (:mod:`.javaorder`).

Both keep a table of ``2**k`` buckets (16 at first, load factor 0.75), put an element in bucket
``improved & (length - 1)`` where ``improved = h ^ (h >>> 16)`` of its Java ``hashCode``, keep every bucket
sorted by ascending ``improved`` (as a signed int) and iterate bucket by bucket. So the order is a sort
by ``(bucket, improved)`` once the table's final length is known; that length follows the additions
(``add``/``put`` double the table first when ``size + 1 >= threshold``; ``sizeHint`` /
``addAll`` may grow it at once).
"""

from __future__ import annotations

__all__ = ["java_string_hash", "improve_hash", "table_size_for", "hash_order"]


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


def improve_hash(h: int) -> int:
    """Scala's ``improveHash``: ``h ^ (h >>> 16)``, a signed 32-bit int."""
    return int32(h ^ ((h & 0xFFFFFFFF) >> 16))


def table_size_for(capacity: int) -> int:
    """Scala 2.13 ``tableSizeFor``: ``(highestOneBit(max(capacity - 1, 4)) * 2) min 2**30``."""
    return min((1 << (max(capacity - 1, 4).bit_length() - 1)) * 2, 1 << 30)


def grown(length: int, size: int) -> int:
    """The table length after one ``add``/``put`` into a table of ``length`` holding ``size`` elements."""
    return length * 2 if size + 1 >= int(length * 0.75) else length


def hash_order(items: dict, length: int) -> list:
    """The keys of ``items`` (key -> Java ``hashCode``) in the iteration order of a table of ``length``."""
    improved = {key: improve_hash(h) for key, h in items.items()}
    return sorted(improved, key=lambda key: (improved[key] & (length - 1), improved[key]))
