"""Segment file names and partition folder names: parsed and formatted in one module."""

from __future__ import annotations

import pytest

from kafkafs.errors import InvalidName
from kafkafs.storage.names import (
    log_file_base_offset,
    parse_partition_dir_name,
    parse_segment_file_name,
    segment_file_name,
)


def test_segment_file_names_round_trip() -> None:
    assert segment_file_name(42, ".log") == "00000000000000000042.log"
    assert segment_file_name(42, ".index", ".swap") == "00000000000000000042.index.swap"
    for ext in (".log", ".index", ".timeindex", ".txnindex"):
        for suffix in ("", ".deleted", ".cleaned", ".swap"):
            assert parse_segment_file_name(segment_file_name(7, ext, suffix)) == (7, ext, suffix)


@pytest.mark.parametrize(
    "name",
    ["leader-epoch-checkpoint", "00000000000000000042.snapshot", "42.log", "0000000000000000004x.log",
     "00000000000000000042.log.tmp", "00000000000000000042log", "00000000000000000042.log.swap.swap",
     "", "00000000000000000042", "00000000000000000042.", "00000000000000000042.swap", "00000000000000000042.deleted.log",
     "09223372036854775808.log", "000000000000000000042.log", "0000000000000000042.log"],
)
def test_other_files_are_not_segments(name: str) -> None:
    assert parse_segment_file_name(name) is None
    assert log_file_base_offset(name) is None


def test_log_file_base_offset_takes_plain_logs_only() -> None:
    assert log_file_base_offset("00000000000000000042.log") == 42
    assert log_file_base_offset("00000000000000000042.log.deleted") is None
    assert log_file_base_offset("00000000000000000042.index") is None


def test_partition_dir_names() -> None:
    assert parse_partition_dir_name("orders-3") == ("orders", 3)
    assert parse_partition_dir_name("a-b-0") == ("a-b", 0)
    assert parse_partition_dir_name("__consumer_offsets-49") == ("__consumer_offsets", 49)
    for bad in ("orders", "orders-01", "orders-3-delete", "t-0-future", "bad name-0", "-0", "t-2147483648"):
        with pytest.raises(InvalidName):
            parse_partition_dir_name(bad)


def test_user_appends_refuse_kafkas_internal_topics():
    from kafkafs.errors import InternalTopicRefused
    from kafkafs.format.decoders import INTERNAL_TOPICS
    from kafkafs.storage.names import INTERNAL_TOPIC_WRITERS, refuse_internal_topic

    assert set(INTERNAL_TOPIC_WRITERS) == set(INTERNAL_TOPICS)  # one list of Kafka's internal topics
    for topic in INTERNAL_TOPICS:
        with pytest.raises(InternalTopicRefused, match=f"^{topic} is a Kafka internal topic"):
            refuse_internal_topic(topic)
    for topic in ("orders", "_consumer_offsets", "__consumer_offsets_copy", "__cluster_metadata2", "__other"):
        refuse_internal_topic(topic)  # ordinary topics, also look-alikes


@pytest.mark.parametrize(
    ("name", "refused"),
    [
        ("orders-0", False), ("a-b-12", False), ("x-+1", False), ("__cluster_metadata-0", False),
        ("orders-0.0a1b2c3d-delete", False), ("orders-0.abc-future", False), ("orders-0.abc-stray", False),
        ("remote-log-index-cache", False),
        (".kafkafs-staging", True), ("lost+found", True), ("orders", True), ("orders-", True), ("-0", True),
        ("orders-x", True), ("orders-0-delete", True), ("orders-2147483648", True), ("a b-0.c-delete", True),
    ],
)
def test_the_folders_a_broker_refuses_to_start_with(name: str, refused: bool) -> None:
    """Kafka 4's LogManager stops at start on a folder of its log directory that
    UnifiedLog.parseTopicPartitionName cannot read (review9 R9-8)."""
    from kafkafs.storage.names import broker_refuses_folder

    assert broker_refuses_folder(name) is refused
