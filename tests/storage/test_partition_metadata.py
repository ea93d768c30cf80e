"""partition.metadata: the topic id file, as Kafka writes and reads it."""

from __future__ import annotations

import base64

import pytest

from kafkafs.errors import CorruptRecordError
from kafkafs.storage.partition_metadata import (
    ensure_partition_metadata,
    new_topic_id,
    parse_partition_metadata,
    read_topic_id,
)
from tests.kafka_layout import (
    read_partition_metadata,
)


def test_partition_metadata(fixtures_dir, tmp_path):
    for folder in ("__consumer_offsets-12", "demo-0"):
        data = (fixtures_dir / "kafka-logs-a" / folder / "partition.metadata").read_bytes()
        version, topic_id = parse_partition_metadata(data)
        assert version == 0 and str(read_partition_metadata(data.decode())).replace("-", "") == base64.urlsafe_b64decode(topic_id + "==").hex()
    for _ in range(50):
        text = new_topic_id()
        assert len(text) == 22 and not text.startswith("-")
    (tmp_path / "t-0").mkdir()
    (tmp_path / "t-1").mkdir()
    (tmp_path / "u-0").mkdir()
    first = ensure_partition_metadata(tmp_path / "t-0", "t")
    assert (tmp_path / "t-0/partition.metadata").read_text() == f"version: 0\ntopic_id: {first}"
    assert read_partition_metadata((tmp_path / "t-0/partition.metadata").read_text())
    assert ensure_partition_metadata(tmp_path / "t-1", "t") == first  # one id for the whole topic
    assert ensure_partition_metadata(tmp_path / "u-0", "u") != first
    assert read_topic_id(tmp_path / "u-0") is not None and read_topic_id(tmp_path) is None
    for bad in (b"version: 0\n", b"version: x\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA"):
        with pytest.raises(CorruptRecordError):
            parse_partition_metadata(bad)
