"""Where a row written without a ``partition`` goes: Kafka's default partitioner.

A keyed record goes to ``(murmur2(key) & 0x7fffffff) % partitions`` (the Java client's
``Utils.murmur2`` and ``Utils.toPositive``), so a topic written through kafkalog keeps each key in the
partition a Kafka producer would have chosen, and consumers that rely on per-key order still see it.
Records without a key are spread evenly (round robin from a random start per writer), as Kafka's
producers spread them over time.

How many partitions: Kafka's producer hashes over all the topic's partitions
(``cluster.partitionsForTopic(topic).size()``), wherever they live. A KRaft log directory's metadata log
(``__cluster_metadata-0``: its ``PartitionRecord``s) names them: that count is used when the topic is
in it, even when this directory (one broker's of several) holds only some of them. Rows without a
key then go round the partitions this directory holds (a producer's sticky partitioner picks among the
partitions it can send to; another broker's partition is not one a write here can reach). A row
placed on a partition the directory does not hold is refused when the job is published
(:func:`kafkafs.spark.publish.check_staged`): its folder would be a stray a broker sets aside. Without a
metadata log (or a topic it does not name) the count is the topic's highest partition folder + 1.

Thread safety: :class:`RowPartitioner` keeps counters; use one per task (Spark runs a task in one thread).
"""

from __future__ import annotations

import os
import random
import struct
from collections.abc import Mapping

from ..errors import InvalidName
from ..storage.names import parse_partition_dir_name

__all__ = ["murmur2", "partition_for_key", "topic_partition_count", "topic_partition_folders", "RowPartitioner"]

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


def topic_partition_folders(logdir: str, topic: str) -> list[int]:
    """The partitions of ``topic`` that have a folder in ``logdir``, in order."""
    try:
        names = os.listdir(logdir)
    except FileNotFoundError:
        return []
    prefix = topic + "-"
    found = []
    for name in names:
        if not name.startswith(prefix):
            continue
        try:
            t, p = parse_partition_dir_name(name)
        except InvalidName:
            continue
        if t == topic and os.path.isdir(os.path.join(logdir, name)):
            found.append(p)
    return sorted(found)


def topic_partition_count(logdir: str, topic: str) -> int:
    """How many partitions ``topic`` has in ``logdir``: its highest partition folder + 1 (0: no topic)."""
    folders = topic_partition_folders(logdir, topic)
    return folders[-1] + 1 if folders else 0


class RowPartitioner:
    """Chooses the partition of each row without one, topic by topic (counts read once per writer).

    ``recorded``: topic -> its partitions as the log directory's metadata log names them (None or a
    topic left out: no metadata log to go by)."""

    def __init__(self, logdir: str, new_topic_partitions: int = 1,
                 recorded: Mapping[str, frozenset[int]] | None = None) -> None:
        self.logdir = logdir
        self.new_topic_partitions = new_topic_partitions
        self.recorded = recorded or {}
        self._counts: dict[str, tuple[int, list[int]]] = {}
        self._next: dict[str, int] = {}

    def _plan(self, topic: str) -> tuple[int, list[int]]:
        """(the count keys hash over, the partitions keyless rows go round)."""
        plan = self._counts.get(topic)
        if plan is None:
            folders = topic_partition_folders(self.logdir, topic)
            named = self.recorded.get(topic)
            if named:  # Kafka's count; keyless rows stay on the partitions held here (when any are)
                plan = (len(named), [p for p in folders if p in named] or sorted(named))
            else:
                n = folders[-1] + 1 if folders else self.new_topic_partitions
                plan = (n, list(range(n)))
            self._counts[topic] = plan
        return plan

    def count(self, topic: str) -> int:
        return self._plan(topic)[0]

    def partition(self, topic: str, key: bytes | None) -> int:
        n, spread = self._plan(topic)
        if key is not None:
            return partition_for_key(key, n)
        i = self._next.get(topic)
        if i is None:
            i = random.randrange(len(spread))
        self._next[topic] = i + 1
        return spread[i % len(spread)]
