"""The iteration order of Scala 2.13's ``mutable.HashSet`` / ``mutable.HashMap``, which decides the order of
some of ``kafka-dump-log``'s output (the partitions of a transaction, the files named in the problems it
reports last).

Both keep a table of ``2**k`` buckets (16 at first, load factor 0.75), put an element in bucket
``improved & (length - 1)`` where ``improved = h ^ (h >>> 16)`` of its Java ``hashCode``, keep every bucket
sorted by ascending ``improved`` (as a signed int) and iterate bucket by bucket. So the order is a sort
by ``(bucket, improved)`` once the table's final length is known; that length follows the additions
(``add``/``put`` double the table first when ``size + 1 >= threshold``; ``sizeHint`` /
``addAll`` may grow it at once).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["java_string_hash", "improve_hash", "hash_order", "map_order"]


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


def grown(length: int, size: int) -> int:
    """The table length after one ``add``/``put`` into a table of ``length`` holding ``size`` elements."""
    return length * 2 if size + 1 >= int(length * 0.75) else length


def hash_order(items: dict, length: int) -> list:
    """The keys of ``items`` (key -> Java ``hashCode``) in the iteration order of a table of ``length``."""
    improved = {key: improve_hash(h) for key, h in items.items()}
    return sorted(improved, key=lambda key: (improved[key] & (length - 1), improved[key]))


def map_order(puts: Iterable[str]) -> list[str]:
    """The keys of a ``mutable.HashMap[String, _]()`` in iteration order, after ``put`` was called with
    each of ``puts`` in turn (a key may come again: an update, which may still grow the table)."""
    length = 16
    seen: dict[str, int] = {}
    for key in puts:
        length = grown(length, len(seen))
        if key not in seen:
            seen[key] = java_string_hash(key)
    return hash_order(seen, length)
