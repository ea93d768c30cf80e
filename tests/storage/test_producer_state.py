"""Producer state and its ``.snapshot`` files, as Kafka's ProducerStateManager keeps them."""

from __future__ import annotations

import struct

import pytest

from kafkafs.errors import CorruptRecordError
from kafkafs.format.batch import read_batch_header
from kafkafs.format.producer_snapshot import ProducerEntry, parse_producer_snapshot, render_producer_snapshot
from kafkafs.storage.producer_state import ProducerState, apply_batch, snapshot_offsets
from tests.kafka_layout import (
    batch,
    control_batch,
    read_producer_snapshot,
    write_producer_snapshot,
)


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


def test_a_load_keeps_the_snapshots_a_broker_keeps(tmp_path):
    """Finding 3 of issue 19: every writable close after appends snapshots the producers at the log end
    (as Kafka's close does), and Kafka's load removes the stray ones (removeStraySnapshots): of the
    snapshots not at a segment base only the latest stays. kafkafs kept them all (one more per
    open/append/close)."""
    from kafkafs.storage.config import Settings
    from kafkafs.storage.logdir import LogDir

    settings = Settings({"segment.bytes": 10**6})
    for i in range(5):
        with LogDir(tmp_path, settings, writable=True) as logdir:
            log = logdir.log("t-0") if i else logdir.create_partition("t", 0)
            log.append_records([(1000 + i, None, b"v%d" % i, ())] * 3)
    # each load left only the latest stray; the close after it added its own
    assert snapshot_offsets(tmp_path / "t-0") == [12, 15]
    with LogDir(tmp_path, settings, writable=True) as logdir:
        log = logdir.log("t-0")
        log.roll()  # a snapshot at the new segment's base (15) stays as a base; 12 is the stray below it
        log.append_records([(2000, None, b"x", ())])
    assert snapshot_offsets(tmp_path / "t-0") == [15, 16]
    with LogDir(tmp_path, settings, writable=True):
        pass
    assert snapshot_offsets(tmp_path / "t-0") == [15, 16]


def test_a_load_drops_snapshots_at_or_below_the_log_start(tmp_path):
    """Kafka's truncateAndReload at load deletes the snapshots at or below the log start offset (a real
    4.4 broker deleted the one at the base of the first segment left by retention, the broker tests
    saw it); kafkafs kept it."""
    from kafkafs.storage.config import Settings
    from kafkafs.storage.logdir import LogDir

    settings = Settings({"segment.bytes": 10**6})
    with LogDir(tmp_path, settings, writable=True) as logdir:
        log = logdir.create_partition("t", 0)
        log.append_records([(1000, None, b"a", ())] * 3)
        log.roll()
        log.append_records([(1001, None, b"b", ())] * 3)
        log.roll()
        log.append_records([(1002, None, b"c", ())] * 3)
        log.delete_segments([log.segments.first()])  # retention: the log now starts at 3
        assert log.log_start_offset == 3
    assert 3 in snapshot_offsets(tmp_path / "t-0")
    with LogDir(tmp_path, settings, writable=True) as logdir:
        logdir.log("t-0")  # loaded (kafkafs opens a partition when it is used)
    assert snapshot_offsets(tmp_path / "t-0") == [6, 9]
