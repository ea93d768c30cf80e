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


class _Moment:
    """``time`` for producer_state while a test runs: the real clock; a sleep is the moment in which the
    broker finishes (``then``) or does not finish its write, counted."""

    def __init__(self, then=None) -> None:
        import time

        self.time = time.time
        self.then = then
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        if self.then is not None:
            self.then()


def _snapshots_1_and_5(folder):
    """t-0's snapshots 1 and 5 (of producer 7), written and closed; returns 5's bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    state = ProducerState(folder, writable=True)
    buf = batch(0, [(None, b"a", ())], producer_id=7, producer_epoch=1, base_sequence=0)
    state.append(buf, [read_batch_header(buf, 0)])
    assert state.take_snapshot(1) and state.take_snapshot(5)
    return (folder / "00000000000000000005.snapshot").read_bytes()


def _aged(path, seconds=3600):
    import os
    import time

    os.utime(path, (time.time() - seconds, time.time() - seconds))


@pytest.mark.parametrize("finished", [True, False], ids=["written-a-moment-later", "still-partial"])
def test_the_snapshot_a_live_broker_is_writing_is_read_again_not_warned(tmp_path, caplog, monkeypatch, finished):
    """review26 R26-3: beside a live broker (it holds LOGDIR/.lock) a read-only load met the snapshot the broker
    writes in place at a roll still empty and warned "producer snapshot N unreadable ...; an earlier one is
    used" (failed before, seen). Now it is read again after a moment: used when written by then, else said
    at INFO (in flight, not damage) and an earlier one used."""
    import logging

    from kafkafs.storage import producer_state
    from tests.storage.helpers import lock_held

    logdir = tmp_path / "logs"
    logdir.mkdir()
    with lock_held(logdir, tmp_path, "kafka.Kafka"):
        full = _snapshots_1_and_5(logdir / "t-0")
        snapshot = logdir / "t-0" / "00000000000000000005.snapshot"
        snapshot.write_bytes(b"")  # created at the roll, not yet filled
        _aged(snapshot)  # the lock alone tells (a broker's clock or a copy's mtimes may say otherwise)
        moment = _Moment(then=(lambda: snapshot.write_bytes(full)) if finished else None)
        monkeypatch.setattr(producer_state, "time", moment)
        state = ProducerState(logdir / "t-0", writable=False)
        with caplog.at_level(logging.DEBUG, logger="kafkafs.producer_state"):
            state.load([], 0, 5)
    assert moment.slept == [producer_state.REREAD_AFTER]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    if finished:
        assert state.loaded_from == 5 and set(state.entries) == {7}
        assert "unreadable" not in caplog.text
    else:
        assert state.loaded_from == 1
        assert [r.levelno for r in caplog.records if "unreadable" in r.getMessage()] == [logging.INFO]
        assert "producer snapshot 5 unreadable while it is being written" in caplog.text


def test_a_snapshot_written_just_now_is_read_again(tmp_path, caplog, monkeypatch):
    """R26-3: no lock held (a directory synced from a live broker, a .lock kafkafs cannot open): a newest snapshot
    written in the last seconds is read again too."""
    import logging

    from kafkafs.storage import producer_state

    full = _snapshots_1_and_5(tmp_path / "t-0")
    snapshot = tmp_path / "t-0" / "00000000000000000005.snapshot"
    snapshot.write_bytes(full[:20])  # partly written, now
    moment = _Moment(then=lambda: snapshot.write_bytes(full))
    monkeypatch.setattr(producer_state, "time", moment)
    state = ProducerState(tmp_path / "t-0", writable=False)
    with caplog.at_level(logging.INFO, logger="kafkafs.producer_state"):
        state.load([], 0, 5)
    assert moment.slept and state.loaded_from == 5 and "unreadable" not in caplog.text


def test_a_damaged_snapshot_of_a_stopped_directory_is_still_warned_at_once(tmp_path, caplog, monkeypatch):
    """R26-3's bound (SPEC §3: local damage is logged): nothing holds the lock and the file is old: a WARNING,
    no wait; and an older damaged snapshot (not the newest: nothing writes it now) is warned at once too."""
    import logging

    from kafkafs.storage import producer_state

    (tmp_path / "logs").mkdir()
    folder = tmp_path / "logs" / "t-0"
    _snapshots_1_and_5(folder)
    for name in ("00000000000000000005.snapshot", "00000000000000000001.snapshot"):
        (folder / name).write_bytes(b"")
        _aged(folder / name)
    moment = _Moment()
    monkeypatch.setattr(producer_state, "time", moment)
    state = ProducerState(folder, writable=False)
    with caplog.at_level(logging.WARNING, logger="kafkafs.producer_state"):
        state.load([], 0, 5)
    assert moment.slept == [] and state.loaded_from is None
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.WARNING], caplog.text
    assert "producer snapshot 5 unreadable (" in caplog.text and "producer snapshot 1 unreadable (" in caplog.text
