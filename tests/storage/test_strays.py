"""The partition folders a KRaft broker of the directory sets aside as strays (review12 R12-8), judged
as Kafka 4.4's ``LogManager.isStrayReplica`` judges them, from a generated metadata log (the broker's
own verdict on a real directory: tests/broker/test_settings_vs_kafka.py)."""

from __future__ import annotations

import base64

import pytest

from kafkafs.format.batch import encode_batch
from kafkafs.format.decoders.internal import metadata_frame
from kafkafs.storage.partition_metadata import read_topic_id, render_partition_metadata
from kafkafs.storage.strays import repair_partition_metadata_files, stray_partitions


def _uuid(n: int) -> str:
    return base64.urlsafe_b64encode(bytes([n]) * 16).rstrip(b"=").decode()


def _partition(topic_id: str, partition: int, replicas: list[int]) -> bytes:
    return metadata_frame("PARTITION_RECORD", 0, {
        "partitionId": partition, "topicId": topic_id, "replicas": replicas, "isr": replicas,
        "removingReplicas": [], "addingReplicas": [], "leader": replicas[0], "leaderEpoch": 0, "partitionEpoch": 0})


def _folder(root, name: str, topic_id: str | None) -> None:
    (root / name).mkdir()
    if topic_id is not None:
        (root / name / "partition.metadata").write_bytes(render_partition_metadata(topic_id))


@pytest.mark.allow_warnings("read up to damage")
def test_strays_as_kafka_judges_them(tmp_path):
    meta = tmp_path / "__cluster_metadata-0"
    meta.mkdir()
    (tmp_path / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=x\n")
    a, b, gone = _uuid(1), _uuid(2), _uuid(3)
    snapshot = [  # the state up to offset 5
        metadata_frame("TOPIC_RECORD", 0, {"name": "a", "topicId": a}),
        _partition(a, 0, [1]),
        _partition(a, 1, [1, 2]),
        _partition(a, 2, [2]),
        metadata_frame("TOPIC_RECORD", 0, {"name": "gone", "topicId": gone}),
        _partition(gone, 0, [1]),
    ]
    (meta / f"{5:020d}-{1:010d}.checkpoint").write_bytes(encode_batch([(1, None, v, ()) for v in snapshot]))
    later = [
        # a reassignment moves a-1 off this broker, a-2 onto it; a change without replicas moves nothing
        metadata_frame("PARTITION_CHANGE_RECORD", 0, {"partitionId": 1, "topicId": a, "replicas": [2, 3]}),
        metadata_frame("PARTITION_CHANGE_RECORD", 0, {"partitionId": 2, "topicId": a, "replicas": [2, 1]}),
        metadata_frame("PARTITION_CHANGE_RECORD", 0, {"partitionId": 0, "topicId": a, "leader": 1}),
        metadata_frame("REMOVE_TOPIC_RECORD", 0, {"topicId": gone}),
        metadata_frame("TOPIC_RECORD", 0, {"name": "b", "topicId": b}),
        _partition(b, 0, [1]),
    ]
    (meta / f"{5:020d}.log").write_bytes(encode_batch([(2, None, v, ()) for v in later], base_offset=5))
    for name, topic_id in [("a-0", a), ("a-1", a), ("a-2", a), ("a-3", a), ("gone-0", gone), ("b-0", b),
                           ("b-1", None), ("c-0", b), ("d-0", _uuid(9))]:
        _folder(tmp_path, name, topic_id)
    (tmp_path / "e-0").mkdir()
    (tmp_path / "e-0" / "partition.metadata").write_text("version: 0\ntopic_id: notanid")  # said apart
    names = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    found = stray_partitions(tmp_path, names)
    assert set(found) == {"a-1", "a-3", "gone-0", "b-1", "d-0"}, found
    assert found["a-1"] == ("the metadata log (__cluster_metadata-0) assigns partition 1 of topic a to broker(s) 2, 3, "
                            "not to node 1 of this directory")
    assert found["a-3"] == f"the metadata log (__cluster_metadata-0) has no partition 3 of topic a (id {a})"
    assert found["gone-0"] == (f"its topic id {gone} (partition.metadata) is no topic's in the metadata log "
                               "(__cluster_metadata-0), which has no topic gone")
    assert found["b-1"] == "no partition.metadata (no topic id)"
    # Kafka goes by the topic id and the partition number: c-0 carries b's id, and b-0 is this broker's
    assert "c-0" not in found
    assert stray_partitions(tmp_path, ["a-0", "__cluster_metadata-0"]) == {}

    # a metadata log that does not read whole cannot judge; nor can a directory without one
    log = meta / f"{5:020d}.log"
    data = bytearray(log.read_bytes())
    data[-3] ^= 0xFF  # in the last record: the batch's CRC no longer holds
    log.write_bytes(bytes(data))
    assert stray_partitions(tmp_path, names) == {}
    for path in meta.iterdir():
        path.unlink()
    meta.rmdir()
    assert stray_partitions(tmp_path, names) == {}


def test_topic_id_files_a_broker_refuses_are_rewritten_from_the_metadata_log(tmp_path):
    """review12 R12-7 (``kafkafs recover``; tests/cli/test_topic_ids.py runs the command): the metadata
    log's id for the topic, else a sibling folder's, else the file goes."""
    meta = tmp_path / "__cluster_metadata-0"
    meta.mkdir()
    a, b = _uuid(1), _uuid(2)
    records = [metadata_frame("TOPIC_RECORD", 0, {"name": "a", "topicId": a}), _partition(a, 0, [1])]
    (meta / f"{0:020d}.log").write_bytes(encode_batch([(1, None, v, ()) for v in records]))
    for name, topic_id in [("a-0", None), ("a-1", a), ("b-0", b), ("b-1", None), ("c-0", None)]:
        _folder(tmp_path, name, topic_id)
    for name in ("a-0", "b-1", "c-0"):
        (tmp_path / name / "partition.metadata").write_text("version: 0\ntopic_id: notanid")
    done = repair_partition_metadata_files(tmp_path, ["a-0", "a-1", "b-0", "b-1", "c-0"])
    assert [line.split(":")[0] for line in done] == ["a-0/partition.metadata", "b-1/partition.metadata",
                                                     "c-0/partition.metadata"], done
    assert done[0].endswith(f"rewritten with topic id {a} (the metadata log's TopicRecord)")
    assert done[1].endswith(f"rewritten with topic id {b} (the topic's other partitions)")
    assert "removed: nothing in the log directory names topic c's id" in done[2]
    assert [read_topic_id(tmp_path / n) for n in ("a-0", "a-1", "b-0", "b-1")] == [a, a, b, b]
    assert not (tmp_path / "c-0" / "partition.metadata").exists()
    assert repair_partition_metadata_files(tmp_path, ["a-0", "b-1", "c-0"]) == []
