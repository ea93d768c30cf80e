"""The iteration order of Java's ``HashMap``, which decides the order in which Kafka 4's
``kafka-dump-log`` (``org.apache.kafka.tools.DumpLogSegments``) reports the files with findings.

A ``HashMap`` of ``n`` keys has a table of ``cap`` buckets (16, doubled while ``n > 0.75 * cap``), puts
a key in bucket ``(h ^ (h >>> 16)) & (cap - 1)`` of its ``hashCode`` ``h``, keeps a bucket's keys in the
order they were first put (a resize splits buckets without reordering them) and iterates bucket by
bucket. (A bucket of 8 or more keys in a table of 64 or more becomes a tree; reports never get there.)
"""

from __future__ import annotations

from collections.abc import Iterable

from .scala import java_string_hash

__all__ = ["java_hashmap_order"]


def java_hashmap_order(keys: Iterable[str]) -> list[str]:
    """The distinct ``keys`` (in the order of their first put) as a ``HashMap<String, ?>`` iterates them."""
    distinct = list(dict.fromkeys(keys))
    cap = 16
    while len(distinct) > cap * 3 // 4:
        cap *= 2

    def bucket(key: str) -> int:
        h = java_string_hash(key) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (cap - 1)

    return sorted(distinct, key=bucket)  # stable: a bucket keeps the order of first puts
