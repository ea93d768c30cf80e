"""Where a row written without a ``partition`` goes: Kafka's default partitioner.

A keyed record goes to ``(murmur2(key) & 0x7fffffff) % partitions`` (the Java client's
``Utils.murmur2`` and ``Utils.toPositive``), so a topic written through kafkalog keeps each key in the
partition a Kafka producer would have chosen, and consumers that rely on per-key order still see it.
Records without a key are spread evenly (round robin from a random start per writer), as Kafka's
producers spread them over time.

Thread safety: :class:`RowPartitioner` keeps counters; use one per task (Spark runs a task in one thread).
"""

from __future__ import annotations

import os
import random
import struct

from ..errors import InvalidName
from ..storage.names import parse_partition_dir_name

__all__ = ["murmur2", "partition_for_key", "topic_partition_count", "RowPartitioner"]

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """MurmurHash2 (32 bits, seed 0x9747b28c) as Kafka's Java client computes it, as an unsigned int."""
    n = len(data)
    h = (_SEED ^ n) & _MASK
    body = n & ~3
    for (k,) in struct.iter_unpack("<I", data[:body]):
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = n & 3
    if tail:
        if tail == 3:
            h ^= data[body + 2] << 16
        if tail >= 2:
            h ^= data[body + 1] << 8
        h ^= data[body]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def partition_for_key(key: bytes, partitions: int) -> int:
    """Kafka's ``toPositive(murmur2(key)) % partitions`` (murmur2's sign bit cleared)."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def topic_partition_count(logdir: str, topic: str) -> int:
    """How many partitions ``topic`` has in ``logdir``: its highest partition folder + 1 (0: no topic)."""
    top = -1
    try:
        names = os.listdir(logdir)
    except FileNotFoundError:
        return 0
    prefix = topic + "-"
    for name in names:
        if not name.startswith(prefix):
            continue
        try:
            t, p = parse_partition_dir_name(name)
        except InvalidName:
            continue
        if t == topic:
            top = max(top, p)
    return top + 1


class RowPartitioner:
    """Chooses the partition of each row without one, topic by topic (counts read once per writer)."""

    def __init__(self, logdir: str, new_topic_partitions: int = 1) -> None:
        self.logdir = logdir
        self.new_topic_partitions = new_topic_partitions
        self._counts: dict[str, int] = {}
        self._next: dict[str, int] = {}

    def count(self, topic: str) -> int:
        n = self._counts.get(topic)
        if n is None:
            n = self._counts[topic] = topic_partition_count(self.logdir, topic) or self.new_topic_partitions
        return n

    def partition(self, topic: str, key: bytes | None) -> int:
        n = self.count(topic)
        if key is not None:
            return partition_for_key(key, n)
        i = self._next.get(topic)
        if i is None:
            i = random.randrange(n)
        self._next[topic] = i + 1
        return i % n
