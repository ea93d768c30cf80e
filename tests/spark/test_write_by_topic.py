"""Spark writes go by the topic as Kafka knows it (review21, no Spark needed): its partitions as the KRaft
metadata log names them (R21-2), its ``compression.type`` (R21-1), and no timestamp a producer may not
send (R21-5)."""

from __future__ import annotations

import base64

import pyarrow as pa
import pytest

from kafkafs.errors import InvalidInput
from kafkafs.format.batch import encode_batch
from kafkafs.format.compression import Codec
from kafkafs.format.decoders.internal import metadata_frame
from kafkafs.spark.partitioner import partition_for_key
from kafkafs.spark.publish import commit_staged
from kafkafs.spark.write import Stager, discard_job, recorded_for_write, staging_root, start_job
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir

from .conftest import engine_rows


def _uuid(n: int) -> str:
    return base64.urlsafe_b64encode(bytes([n]) * 16).rstrip(b"=").decode()


def _metadata_log(root, topics: dict[str, int], configs: dict[str, dict[str, str]] | None = None) -> None:
    """A KRaft metadata log naming ``topics`` (name -> partition count), all replicas on node 1."""
    (root / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=x\n")
    frames = []
    for i, (name, count) in enumerate(sorted(topics.items()), 1):
        frames.append(metadata_frame("TOPIC_RECORD", 0, {"name": name, "topicId": _uuid(i)}))
        for p in range(count):
            frames.append(metadata_frame("PARTITION_RECORD", 0, {
                "partitionId": p, "topicId": _uuid(i), "replicas": [1], "isr": [1], "removingReplicas": [],
                "addingReplicas": [], "leader": 1, "leaderEpoch": 0, "partitionEpoch": 0}))
    for topic, table in (configs or {}).items():
        for name, value in table.items():
            frames.append(metadata_frame("CONFIG_RECORD", 0, {"resourceType": 2, "resourceName": topic,
                                                              "name": name, "value": value}))
    meta = root / "__cluster_metadata-0"
    meta.mkdir()
    (meta / f"{0:020d}.log").write_bytes(encode_batch([(1, None, v, ()) for v in frames]))


def _stage(root_dir, rows: pa.RecordBatch, *, topic: str | None = None, compression: str = "none",
           settings: Settings | None = None, job: str = "job"):
    root = staging_root(str(root_dir), None)
    start_job(root, job)
    stager = Stager(root, job, "task", topic=topic, logdir=str(root_dir), compression=compression,
                    settings=settings, recorded=recorded_for_write(str(root_dir)))
    stager.add(rows)
    return root, stager.finish()


def _keyed(keys: list[bytes | None], topic: str = "sp") -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"key": pa.array(keys, pa.binary()),
                                       "value": pa.array([b"v%d" % i for i in range(len(keys))], pa.binary()),
                                       "topic": pa.array([topic] * len(keys), pa.string())})


def _keys_to(partitions: set[int], count: int, n: int) -> list[bytes]:
    keys = [b"key-%d" % i for i in range(20 * n)]
    return [k for k in keys if partition_for_key(k, count) in partitions][:n]


def _hosting_0_1_3(tmp_path) -> None:
    """A broker's directory of a cluster whose topic sp has 5 partitions, this broker holding 0, 1, 3."""
    _metadata_log(tmp_path, {"sp": 5})
    with LogDir(tmp_path, writable=True) as ld:
        for p in (0, 1, 3):
            ld.create_partition("sp", p)


def test_rows_hash_over_the_partitions_the_metadata_log_names_not_the_folders(tmp_path):
    _hosting_0_1_3(tmp_path)
    keys = _keys_to({0, 1, 3}, 5, 300)
    root, files = _stage(tmp_path, _keyed(keys + [None] * 30))
    commit_staged(str(tmp_path), files, Settings())
    discard_job(root, "job")
    rows = [r for r in engine_rows(tmp_path) if r[0] == "sp"]
    assert len(rows) == 330
    # Kafka's producer: murmur2 % 5 (partitionsForTopic), not % 4 (the highest folder + 1)
    assert [r[1] for r in rows if r[5] is not None] == [partition_for_key(r[5], 5) for r in rows if r[5] is not None]
    assert {r[1] for r in rows if r[5] is None} == {0, 1, 3}, "keyless rows go round the partitions held here"
    assert sorted(p.name for p in tmp_path.glob("sp-*")) == ["sp-0", "sp-1", "sp-3"]


def test_rows_for_partitions_the_directory_does_not_hold_are_refused_in_one_message(tmp_path):
    _hosting_0_1_3(tmp_path)
    keys = _keys_to({0, 2, 4}, 5, 60)
    root, files = _stage(tmp_path, _keyed(keys))
    with pytest.raises(InvalidInput, match=r"topic 'sp' partition\(s\) 2, 4 \(of 5, as __cluster_metadata-0 names "
                                           r"them; this directory holds 0, 1, 3\).*nothing is appended"):
        commit_staged(str(tmp_path), files, Settings())
    discard_job(root, "job")
    assert [r for r in engine_rows(tmp_path) if r[0] == "sp"] == []
    assert sorted(p.name for p in tmp_path.glob("sp-*")) == ["sp-0", "sp-1", "sp-3"], "no stray folder made"
    # a partition column: one the topic has but this directory lacks, one the topic does not have
    for partition, words in ((4, r"partition\(s\) 4 "), (7, "partition 7 of topic 'sp': the topic has 5 partitions")):
        batch = pa.RecordBatch.from_pydict({"value": pa.array([b"x"]), "partition": pa.array([partition], pa.int32())})
        root, files = _stage(tmp_path, batch, topic="sp", job=f"job-{partition}")
        with pytest.raises(InvalidInput, match=words):
            commit_staged(str(tmp_path), files, Settings())
        discard_job(root, f"job-{partition}")
    assert sorted(p.name for p in tmp_path.glob("sp-*")) == ["sp-0", "sp-1", "sp-3"]


def test_a_topic_the_metadata_log_names_but_this_directory_holds_none_of_is_refused(tmp_path):
    _metadata_log(tmp_path, {"elsewhere": 3})
    root, files = _stage(tmp_path, _keyed([b"a", None], topic="elsewhere"))
    with pytest.raises(InvalidInput, match=r"'elsewhere' partition\(s\) .* this directory holds none of them"):
        commit_staged(str(tmp_path), files, Settings(), new_topic_partitions=3)
    assert not list(tmp_path.glob("elsewhere-*"))


def _codecs(logdir, name: str) -> list[Codec]:
    with LogDir(logdir) as ld:
        return [view.header.compression for _segment, view in ld.log(name).batches()]


def test_staged_batches_take_the_topics_compression_type(tmp_path):
    """Kafka's LogValidator stores a produce request in the topic's compression.type unless it is
    `producer`; the writer's compression option is the producer's."""
    _metadata_log(tmp_path, {"z": 1, "g": 1, "p": 1}, {"z": {"compression.type": "zstd"}, "g": {"compression.type": "lz4"}})
    with LogDir(tmp_path, writable=True) as ld:
        for topic in ("z", "g", "p"):
            ld.create_partition(topic, 0)
    # the broker's ConfigRecord (z), a settings table over it (g: gzip over lz4), `producer` (p: the option)
    settings = Settings({}, {"g": {"compression.type": "gzip"}})
    for topic, expected in (("z", Codec.ZSTD), ("g", Codec.GZIP), ("p", Codec.SNAPPY)):
        root, files = _stage(tmp_path, _keyed([b"k%d" % i for i in range(50)], topic=topic), compression="snappy",
                             settings=settings, job=f"job-{topic}")
        commit_staged(str(tmp_path), files, settings)
        discard_job(root, f"job-{topic}")
        assert set(_codecs(tmp_path, f"{topic}-0")) == {expected}, topic
    # a default for every topic (--set compression.type=uncompressed) over `producer`: no compression
    settings = Settings({"compression.type": "uncompressed"})
    root, files = _stage(tmp_path, _keyed([b"a"], topic="p"), compression="lz4", settings=settings, job="job-u")
    commit_staged(str(tmp_path), files, settings)
    assert _codecs(tmp_path, "p-0")[-1] == Codec.NONE
    assert len([r for r in engine_rows(tmp_path) if r[0] in ("z", "g", "p")]) == 151


@pytest.mark.parametrize("micros", [-1000, -1, -315_619_200_000_000])
def test_a_timestamp_before_1970_is_refused_as_append_refuses_it(tmp_path, micros):
    ms = micros // 1000
    batch = pa.RecordBatch.from_pydict({"value": pa.array([b"ok", b"x"]),
                                        "timestamp": pa.array([1_700_000_000_000_000, micros], pa.timestamp("us", "UTC"))})
    root = staging_root(str(tmp_path), None)
    start_job(root, "job")
    stager = Stager(root, "job", "task", topic="t", logdir=str(tmp_path))
    with pytest.raises(InvalidInput, match=rf"^a row's timestamp {ms} is out of range \(epoch milliseconds, 0 or later\)"):
        stager.add(batch)
    stager.discard()
    discard_job(root, "job")
    assert not list(tmp_path.glob("t-*"))
