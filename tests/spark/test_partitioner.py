"""Rows written without a partition go where Kafka's default partitioner puts them (no Spark needed)."""

from __future__ import annotations

import random
from collections import Counter

import pyarrow as pa
import pytest
from kafka.partitioner.default import DefaultPartitioner

from kafkafs.errors import InvalidInput
from kafkafs.spark.partitioner import murmur2, partition_for_key, topic_partition_count
from kafkafs.spark.publish import commit_staged
from kafkafs.spark.write import Stager, staging_root, start_job
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir

from .conftest import engine_rows


class _Cluster:
    """The little of kafka-python's ClusterMetadata its DefaultPartitioner asks."""

    def __init__(self, topic: str, partitions: int) -> None:
        self.topic, self.n = topic, partitions

    def topics(self):
        return {self.topic}

    def partitions_for_topic(self, topic):
        return set(range(self.n))

    def available_partitions_for_topic(self, topic):
        return set(range(self.n))


def _keys(n: int) -> list[bytes]:
    rng = random.Random(12)
    keys = [f"user-{i}".encode() for i in range(n // 2)]
    keys += [rng.randbytes(rng.randrange(0, 40)) for _ in range(n - len(keys))]  # every tail length, binary
    return keys


@pytest.mark.parametrize("partitions", [1, 3, 7, 12])
def test_10000_keys_land_where_kafka_pythons_default_partitioner_puts_them(partitions):
    kafka = DefaultPartitioner()
    cluster = _Cluster("t", partitions)
    for key in _keys(10_000):
        assert partition_for_key(key, partitions) == kafka.partition("t", key, key, b"", b"", cluster), key


def test_murmur2_known_values():
    # the Java client's Utils.murmur2 on these strings (as signed ints), from Kafka's own UtilsTest
    expected = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
                b"a-little-bit-longer-string": -1486304829, b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
                b"abc": 479470107}
    for data, signed in expected.items():
        assert murmur2(data) == signed & 0xFFFFFFFF, data


def _batch(keys: list[bytes | None]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {"key": pa.array(keys, pa.binary()), "value": pa.array([b"v%d" % i for i in range(len(keys))], pa.binary())}
    )


def test_staged_rows_follow_the_topic_partitions_in_the_log_directory(tmp_path):
    with LogDir(tmp_path, writable=True) as ld:
        for p in range(5):
            ld.create_partition("orders", p)
    root = staging_root(str(tmp_path), None)
    start_job(root, "job")
    keys = _keys(2000)
    stager = Stager(root, "job", "task", topic="orders", logdir=str(tmp_path))
    stager.add(_batch(keys + [None] * 1000))
    commit_staged(str(tmp_path), stager.finish(), Settings())
    rows = engine_rows(tmp_path)
    kafka = DefaultPartitioner()
    cluster = _Cluster("orders", 5)
    keyed = [(r[1], r[5]) for r in rows if r[5] is not None]
    assert len(keyed) == 2000 and all(p == kafka.partition("orders", k, k, b"", b"", cluster) for p, k in keyed)
    spread = Counter(r[1] for r in rows if r[5] is None)
    assert sorted(spread.values()) == [200] * 5  # keyless rows: evenly


def test_a_new_topic_gets_the_partitions_option(tmp_path):
    root = staging_root(str(tmp_path), None)
    start_job(root, "job")
    stager = Stager(root, "job", "task", topic="fresh", logdir=str(tmp_path), new_topic_partitions=4)
    stager.add(_batch([b"a", b"b", b"c", None]))
    commit_staged(str(tmp_path), stager.finish(), Settings(), new_topic_partitions=4)
    assert topic_partition_count(str(tmp_path), "fresh") == 4
    assert {r[1] for r in engine_rows(tmp_path) if r[5]} == {partition_for_key(k, 4) for k in (b"a", b"b", b"c")}
    start_job(root, "job2")
    stager = Stager(root, "job2", "task", topic="other", logdir=str(tmp_path))
    stager.add(_batch([b"a", b"b"]))
    commit_staged(str(tmp_path), stager.finish(), Settings())
    assert topic_partition_count(str(tmp_path), "other") == 1  # default: one partition


def test_a_partition_the_topic_does_not_have_is_refused(tmp_path):
    with LogDir(tmp_path, writable=True) as ld:
        ld.create_partition("t", 0)
    root = staging_root(str(tmp_path), None)
    start_job(root, "job")
    stager = Stager(root, "job", "task", topic="t", logdir=str(tmp_path))
    stager.add(pa.RecordBatch.from_pydict({"value": pa.array([b"x"]), "partition": pa.array([3], pa.int32())}))
    with pytest.raises(InvalidInput, match="partition 3 of topic 't': the topic has 1 partitions"):
        commit_staged(str(tmp_path), stager.finish(), Settings())
