"""The broker's state files as units: leader epoch cache rules, producer state transitions and
snapshots, partition.metadata; files read back by readers written in the tests from Kafka's formats."""

from __future__ import annotations

import base64
import struct

import pytest

from kafkafs.errors import CorruptRecordError
from kafkafs.format.batch import read_batch_header
from kafkafs.format.producer_snapshot import ProducerEntry, parse_producer_snapshot, render_producer_snapshot
from kafkafs.storage.leader_epochs import LeaderEpochCache
from kafkafs.storage.partition_metadata import (
    ensure_partition_metadata,
    new_topic_id,
    parse_partition_metadata,
    read_topic_id,
)
from kafkafs.storage.producer_state import ProducerState, apply_batch, snapshot_offsets
from tests.kafka_layout import (
    batch,
    control_batch,
    read_epoch_checkpoint,
    read_partition_metadata,
    read_producer_snapshot,
    write_producer_snapshot,
)


def test_leader_epoch_cache_follows_kafkas_rules(tmp_path):
    cache = LeaderEpochCache(tmp_path, writable=True)
    cache.create()
    assert read_epoch_checkpoint((tmp_path / "leader-epoch-checkpoint").read_text()) == []
    for epoch, start in [(0, 0), (0, 5), (2, 10), (2, 12), (3, 20)]:
        cache.assign(epoch, start)
    assert cache.entries == [(0, 0), (2, 10), (3, 20)]
    # a lower epoch at a later offset: Kafka drops the entries it contradicts (epoch or start at or above)
    cache.assign(1, 25)
    assert cache.entries == [(0, 0), (1, 25)]
    cache.assign(4, 30)
    cache.truncate_from_end(30)
    assert cache.entries == [(0, 0), (1, 25)]
    cache.assign(5, 40)
    cache.truncate_from_start(30)
    assert cache.entries == [(1, 30), (5, 40)]
    assert cache.epoch_for(35) == 1 and cache.epoch_for(29) is None and cache.epoch_for(41) == 5
    assert read_epoch_checkpoint((tmp_path / "leader-epoch-checkpoint").read_text()) == [(1, 30), (5, 40)]
    assert LeaderEpochCache(tmp_path, writable=False).entries == [(1, 30), (5, 40)]
    cache.clear()
    assert read_epoch_checkpoint((tmp_path / "leader-epoch-checkpoint").read_text()) == []


def test_read_only_cache_writes_nothing(tmp_path):
    cache = LeaderEpochCache(tmp_path, writable=False)
    cache.create()
    cache.assign(1, 0)
    assert not (tmp_path / "leader-epoch-checkpoint").exists()


def test_producer_entries_as_kafka_updates_them():
    ts = 1_700_000_000_000
    buf = (
        batch(0, [(None, b"a", ()), (None, b"b", ())], producer_id=7, producer_epoch=1, base_sequence=0, first_ts=ts)
        + batch(2, [(None, b"t", ())], producer_id=9, producer_epoch=0, base_sequence=0, attributes=0x10, first_ts=ts + 1)
        + batch(3, [(None, b"u", ())], producer_id=9, producer_epoch=0, base_sequence=1, attributes=0x10, first_ts=ts + 2)
        + batch(4, [(None, b"c", ())], producer_id=7, producer_epoch=1, base_sequence=2, first_ts=ts + 3)
        + batch(5, [(None, b"plain", ())], first_ts=ts + 4)
    )
    entries: dict[int, ProducerEntry] = {}
    pos = 0
    while pos < len(buf):
        h = read_batch_header(buf, pos)
        apply_batch(entries, buf, h)
        pos = h.end
    assert entries[7] == ProducerEntry(7, 1, 2, 4, 0, ts + 3, -1, -1)
    assert entries[9] == ProducerEntry(9, 0, 1, 3, 0, ts + 2, -1, 2)  # a transaction in progress since 2
    marker = control_batch(6, 1, 4, 9, 0, ts + 5)
    apply_batch(entries, marker, read_batch_header(marker, 0))
    assert entries[9] == ProducerEntry(9, 0, 1, 3, 0, ts + 5, 4, -1)
    assert set(entries) == {7, 9}


def test_snapshot_bytes_as_kafka_writes_them(tmp_path):
    entries = [ProducerEntry(7, 1, 9, 40, 4, 1234, 3, 36), ProducerEntry(8, 0, -1, -1, 0, 99)]
    data = render_producer_snapshot(entries)
    assert data == write_producer_snapshot([tuple(e) for e in entries])
    assert parse_producer_snapshot(data) == entries
    assert read_producer_snapshot(data)[0] == {
        "producerId": 7, "epoch": 1, "lastSequence": 9, "lastOffset": 40, "offsetDelta": 4, "timestamp": 1234,
        "coordinatorEpoch": 3, "currentTxnFirstOffset": 36,
    }
    with pytest.raises(CorruptRecordError, match="unknown file version 2"):
        parse_producer_snapshot(struct.pack(">h", 2) + data[2:])
    with pytest.raises(CorruptRecordError, match="CRC is no longer valid"):
        parse_producer_snapshot(data[:-1] + bytes([data[-1] ^ 1]))


@pytest.mark.allow_warnings("an unreadable snapshot on purpose")
def test_producer_state_snapshots(tmp_path):
    state = ProducerState(tmp_path, writable=True)
    buf = batch(0, [(None, b"a", ())], producer_id=7, producer_epoch=1, base_sequence=0)
    state.append(buf, [read_batch_header(buf, 0)])
    assert state.take_snapshot(1) and not state.take_snapshot(1)
    assert state.take_snapshot(5) and not state.take_snapshot(4)
    state.take_snapshot(9)
    assert snapshot_offsets(tmp_path) == [1, 5, 9]
    state.truncate(5)
    assert snapshot_offsets(tmp_path) == [1, 5]
    reloaded = ProducerState(tmp_path, writable=True)
    reloaded.load([], 0, 5)
    assert reloaded.loaded_from == 5 and reloaded.entries == state.entries and reloaded.replayed_batches == 0
    (tmp_path / "00000000000000000005.snapshot").write_bytes(b"\0\1garbage")
    reloaded.load([], 0, 5)
    assert reloaded.loaded_from == 1  # a damaged snapshot: the one before it
    state.remove_snapshot(1)
    state.clear(100)
    assert snapshot_offsets(tmp_path) == [] and state.entries == {}
    assert ProducerState(tmp_path, writable=False).take_snapshot(3) is False


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


def test_state_files_are_never_read_through_links(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_bytes(b"0\n1\n9 0\n")
    folder = tmp_path / "t-0"
    folder.mkdir()
    (folder / "leader-epoch-checkpoint").symlink_to(target)
    (folder / "partition.metadata").symlink_to(tmp_path / "meta")
    (tmp_path / "meta").write_bytes(b"version: 0\ntopic_id: f64BRmo_QQOpNWuZOGjZrA")
    (folder / "00000000000000000005.snapshot").symlink_to(target)
    cache = LeaderEpochCache(folder, writable=False)
    assert cache.entries == [] and not cache.loaded_ok
    assert read_topic_id(folder) is None
    assert snapshot_offsets(folder) == []
