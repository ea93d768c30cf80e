"""The iteration order of Java's ``HashMap``, which decides the order in which Kafka 4's
``kafka-dump-log`` (``org.apache.kafka.tools.DumpLogSegments``) reports the files with findings.

``DumpLogSegments`` fills its maps of findings (file -> what was found) with ``computeIfAbsent``, one
call per finding. OpenJDK's ``HashMap`` (``new HashMap<>()``: no table until the first call, then 16
buckets, threshold 12) puts a key in bucket ``(h ^ (h >>> 16)) & (cap - 1)`` of its ``hashCode`` ``h``;
``computeIfAbsent`` first doubles the table (and the threshold) when the map already holds more keys
than the threshold (so a call for a key already there can grow it too), then links a new key at the
HEAD of its bucket (``tab[i] = newNode(hash, key, v, first)``; ``put`` would append it). A resize
splits each bucket in two keeping the order, and iteration goes bucket by bucket. A new key that
makes its bucket 8 long (``binCount >= TREEIFY_THRESHOLD - 1``) calls ``treeifyBin``, which doubles a
table of fewer than 64 buckets instead of making a tree: paths that share a bucket of 16 do get there.
(In a table of 64 or more the bucket becomes a tree, whose iteration order this does not model: that
takes 8 files whose hashes agree in their low 6 bits.)
"""

from __future__ import annotations

from collections.abc import Iterable

from .scala import java_string_hash

__all__ = ["java_hashmap_order"]

_TREEIFY_THRESHOLD = 8  # HashMap.TREEIFY_THRESHOLD
_MIN_TREEIFY_CAPACITY = 64  # HashMap.MIN_TREEIFY_CAPACITY


def _spread(key: str) -> int:
    h = java_string_hash(key) & 0xFFFFFFFF
    return h ^ (h >> 16)


def java_hashmap_order(calls: Iterable[str]) -> list[str]:
    """The keys of a ``HashMap<String, ?>`` filled by ``computeIfAbsent(key, ..)`` for each of ``calls``
    in turn (a key once for each finding), in the order the map iterates them."""
    buckets: list[list[str]] = []
    threshold = size = 0
    present: set[str] = set()

    def resize() -> None:
        nonlocal buckets, threshold
        cap = 2 * len(buckets) if buckets else 16
        threshold = cap * 3 // 4
        grown: list[list[str]] = [[] for _ in range(cap)]
        for bucket in buckets:  # each old bucket splits in two, its order kept
            for old in bucket:
                grown[_spread(old) & (cap - 1)].append(old)
        buckets = grown

    for key in calls:
        if not buckets or size > threshold:
            resize()
        if key in present:
            continue
        present.add(key)
        bucket = buckets[_spread(key) & (len(buckets) - 1)]
        walked = len(bucket)
        bucket.insert(0, key)
        if walked >= _TREEIFY_THRESHOLD - 1 and len(buckets) < _MIN_TREEIFY_CAPACITY:
            resize()  # treeifyBin on a small table
        size += 1
    return [key for bucket in buckets for key in bucket]
