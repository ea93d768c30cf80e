"""The iteration order of Java's ``HashMap``, which decides the order in which Kafka 4's
``kafka-dump-log`` (``org.apache.kafka.tools.DumpLogSegments``) reports the files with findings.

``DumpLogSegments`` fills its maps of findings (file -> what was found) with ``computeIfAbsent``, one
call per finding. OpenJDK's ``HashMap`` (``new HashMap<>()``: no table until the first call, then 16
buckets, threshold 12) puts a key in bucket ``(h ^ (h >>> 16)) & (cap - 1)`` of its ``hashCode`` ``h``;
``computeIfAbsent`` first doubles the table (and the threshold) when the map already holds more keys
than the threshold (so a call for a key already there can grow it too), then links a new key at the
HEAD of its bucket (``tab[i] = newNode(hash, key, v, first)``; ``put`` would append it). A resize
splits each bucket in two keeping the order, and iteration goes bucket by bucket. (A bucket of 8 or
more keys in a table of 64 or more becomes a tree; reports never get there.)
"""

from __future__ import annotations

from collections.abc import Iterable

from .scala import java_string_hash

__all__ = ["java_hashmap_order"]


def _spread(key: str) -> int:
    h = java_string_hash(key) & 0xFFFFFFFF
    return h ^ (h >> 16)


def java_hashmap_order(calls: Iterable[str]) -> list[str]:
    """The keys of a ``HashMap<String, ?>`` filled by ``computeIfAbsent(key, ..)`` for each of ``calls``
    in turn (a key once for each finding), in the order the map iterates them."""
    buckets: list[list[str]] = []
    threshold = size = 0
    present: set[str] = set()
    for key in calls:
        if not buckets or size > threshold:
            cap = 2 * len(buckets) if buckets else 16
            threshold = cap * 3 // 4
            grown: list[list[str]] = [[] for _ in range(cap)]
            for bucket in buckets:  # each old bucket splits in two, its order kept
                for old in bucket:
                    grown[_spread(old) & (cap - 1)].append(old)
            buckets = grown
        if key in present:
            continue
        present.add(key)
        buckets[_spread(key) & (len(buckets) - 1)].insert(0, key)
        size += 1
    return [key for bucket in buckets for key in bucket]
