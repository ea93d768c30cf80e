"""Compaction keeps and drops exactly what Apache Kafka's log cleaner does (``LogCleaner``'s record
filter, ``CleanedTransactionMetadata`` and ``MemoryRecords.filterTo``): records without a key, aborted
transactions, transaction markers and their delete horizon (KIP-534), and the last batch of an active
producer. Each test states Kafka's rule next to the offsets it expects, pass after pass."""

from __future__ import annotations

import io

import pytest

from kafkafs.dump import DumpOptions, dump_files
from kafkafs.format.batch import encode_batch
from kafkafs.format.txnindex import AbortedTxn
from kafkafs.storage.cleaner import compact
from kafkafs.storage.compaction import clean_log
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir
from kafkafs.storage.offset_map import BYTES_PER_ENTRY, OffsetMap

from .helpers import as_history
from .test_cleaner import _kafka_python_offsets, _marker, _txn

T = 10**10  # "now" of the first cleaning: every producer of these logs (timestamps ~1000) has expired
RETENTION = 5000  # delete.retention.ms


def _offsets(log) -> list[int]:
    return [r[0] for r in log.records()]


def _batches(log) -> list:
    return [view.header for _segment, view in log.batches(0)]


def _settings(**topic) -> Settings:
    return Settings({}, {"kv": {"cleanup.policy": "compact", "delete.retention.ms": RETENTION, **topic}})


def test_records_without_a_key_go(tmp_path):
    with LogDir(tmp_path, _settings(), writable=True) as logdir:
        log = logdir.create_partition("kv", 0)
        rows = [(b"a", b"1"), (None, b"x"), (b"b", b"2"), (None, None), (b"a", b"3"), (None, b"y")]
        with as_history(log):  # written before the topic was compacted
            for i, (key, value) in enumerate(rows):  # offsets 0..5, a batch each
                log.append_records([(1000 + i, key, value, ())])
            log.append_records([(1010, None, b"m", ()), (1011, b"c", b"4", ()), (1012, None, b"n", ())])  # 6, 7, 8
            log.roll()
            log.append_records([(1020, None, b"active", ())])  # 9: the active segment is never cleaned
        lines = compact(log, now_ms=T)
        # Kafka's shouldRetainRecord: no key -> not retained (within the offset map's range); a keyed
        # record stays when it is its key's latest: b@2, a@4, c@7
        assert _offsets(log) == [2, 4, 7, 9]
        assert lines == ["kv-0: compacted 00000000000000000000.log: 1 superseded record(s) removed, "
                         "5 record(s) without a key"]
        mixed = [h for h in _batches(log) if h.base_offset == 6]
        assert len(mixed) == 1 and mixed[0].last_offset == 8 and mixed[0].record_count == 1  # last offset kept
        assert compact(log, now_ms=T, checkpoint=0) == []  # nothing more to do
    assert _kafka_python_offsets(tmp_path / "kv-0") == [2, 4, 7, 9]
    with LogDir(tmp_path, _settings(), writable=True) as logdir:
        assert _offsets(logdir.log("kv-0")) == [2, 4, 7, 9]


def test_records_without_a_key_past_the_rounds_end_wait_for_the_next_round(tmp_path):
    # 30 records: keys k0..k14 in turn with a record without a key after each; the map holds 9 keys
    with LogDir(tmp_path, _settings(), writable=True) as logdir:
        log = logdir.create_partition("kv", 0)
        keys = []
        for i in range(30):
            key = b"k%d" % (i // 2 % 15) if i % 2 == 0 else None
            keys.append(key)
            with as_history(log):  # written before the topic was compacted
                log.append_records([(1000 + i, key, b"v%d" % i, ())])
        log.roll()
        omap = OffsetMap(11 * BYTES_PER_ENTRY, 0.9)  # 11 slots, 9 keys
        assert omap.max_entries == 9
        rounds: list[int] = []
        clean_log(log, T, omap, on_round=rounds.append, should_stop=lambda: bool(rounds))
        # the round ends before the record of the 10th key (k9 at offset 18): Kafka's map is full there
        end = keys.index(b"k9")
        assert rounds == [end] == [18]
        # below the end: keyed records that are their key's latest; past it everything stays (Kafka's
        # shouldRetainRecord: record.offset > map.latestOffset -> retained, with or without a key)
        expected = [o for o in range(end) if keys[o] is not None] + list(range(end, 30))
        assert _offsets(log) == expected
        clean_log(log, T, omap, checkpoint=end)  # the following rounds
        assert _offsets(log) == [o for o in range(30) if keys[o] is not None]


def _transactional_log(log) -> None:
    log.append_records([(1000, b"a", b"1", ())])  # 0
    log.append_batches(_txn(1, b"a", b"aborted"))  # 1: aborted below
    log.append_batches(_txn(2, b"b", b"b-txn"))  # 2: committed below, superseded at 5
    log.append_batches(_marker("ABORT", 1))  # 3
    log.append_batches(_marker("COMMIT", 2))  # 4
    log.append_records([(1000, b"b", b"b2", ())])  # 5
    log.append_records([(1000, b"c", b"c1", ())])  # 6: superseded by the tombstone at 10
    log.append_batches(_txn(3, b"d", b"d"))  # 7: committed, stays
    log.append_batches(_marker("COMMIT", 3))  # 8
    with as_history(log):  # written before the topic was compacted
        log.append_records([(1000, None, b"no key", ())])  # 9
    log.append_records([(1000, b"c", None, ())])  # 10: tombstone
    log.roll()
    log.append_records([(1000, b"z", b"z", ())])  # 11: active


def _horizons(log) -> dict[int, int]:
    """base offset -> delete horizon of the batches that have one (attribute bit 6: firstTimestamp)."""
    return {h.base_offset: h.first_timestamp for h in _batches(log) if h.attributes & 0x40}


@pytest.mark.parametrize("segment_bytes", [1024 * 1024, 14], ids=["one-segment", "a-segment-a-batch"])
def test_aborted_transactions_markers_and_tombstones_go_in_kafkas_passes(tmp_path, segment_bytes):
    settings = _settings(**{"segment.bytes": segment_bytes})
    with LogDir(tmp_path, settings, writable=True) as logdir:
        log = logdir.create_partition("kv", 0)
        _transactional_log(log)
        if segment_bytes == 14:
            assert len(log.segments) == 12  # each batch its own segment: groups of one, state carried across
        entry = log.aborted_transactions(0, 12)
        assert [(e.producer_id, e.first_offset, e.last_offset) for e in entry] == [(1, 1, 3)]

        # Pass 1. The aborted batch (1) goes; its ABORT marker (3) stays, with its index entry, because
        # a batch of its transaction was just removed ("retain the marker until all batches from the
        # transaction have been removed"). The COMMIT markers stay: batches of their transactions
        # (2, 7) were read in this pass. Superseded 2 and 6 go, the record without a key (9) goes, the
        # tombstone (10) stays and its batch gets a delete horizon of now + delete.retention.ms.
        compact(log, now_ms=T, checkpoint=0)
        assert _offsets(log) == [0, 3, 4, 5, 7, 8, 10, 11]
        assert log.aborted_transactions(0, 12) == entry
        assert _horizons(log) == {10: T + RETENTION}

        # Pass 2. No batch of pid 1's or pid 2's transactions is left: both markers may go, so they get
        # a delete horizon (the piggy-backed tombstone rule); the ABORT entry is not written again. The
        # COMMIT of pid 3 stays as it is (its record 7 is still there). The tombstone waits.
        compact(log, now_ms=T + 1000, checkpoint=0)
        assert _offsets(log) == [0, 3, 4, 5, 7, 8, 10, 11]
        assert log.aborted_transactions(0, 12) == []
        assert _horizons(log) == {3: T + 1000 + RETENTION, 4: T + 1000 + RETENTION, 10: T + RETENTION}
        assert not [s for s in log.segments if s.txn_index.entries()]

        # Pass 3, at the tombstone's horizon: the tombstone goes (Kafka: currentTime >= deleteHorizonMs);
        # the markers' horizon is 1 s later (Kafka: deleteHorizonMs <= currentTime), they stay.
        compact(log, now_ms=T + RETENTION, checkpoint=0)
        assert _offsets(log) == [0, 3, 4, 5, 7, 8, 11]
        # the batch of 10 ends where the round must stop (the active segment): Kafka keeps it, emptied
        # (RETAIN_EMPTY for batch.nextOffset == upperBoundOffsetOfCleaningRound), without a horizon
        empties = {h.base_offset: h for h in _batches(log) if h.record_count == 0}
        assert 10 in empties and not empties[10].attributes & 0x40 and empties[10].last_offset == 10
        if segment_bytes != 14:  # (one segment a batch: every group's last batch keeps its offsets too)
            assert sorted(empties) == [10]
        compact(log, now_ms=T + 1000 + RETENTION - 1, checkpoint=0)
        assert _offsets(log) == [0, 3, 4, 5, 7, 8, 11]

        # Pass 4, at the markers' horizon: both go. pid 3's COMMIT stays for as long as record 7 does.
        compact(log, now_ms=T + 1000 + RETENTION, checkpoint=0)
        assert _offsets(log) == [0, 5, 7, 8, 11]
        compact(log, now_ms=T + 10**9, checkpoint=0)
        assert _offsets(log) == [0, 5, 7, 8, 11]
        # no batch is left that would open a transaction for a reader that rebuilds the state
        assert all(h.record_count for h in _batches(log) if h.is_transactional)
    assert _kafka_python_offsets(tmp_path / "kv-0") == [0, 5, 7, 8, 11]
    with LogDir(tmp_path, settings, writable=True) as logdir:
        reopened = logdir.log("kv-0")
        assert _offsets(reopened) == [0, 5, 7, 8, 11]
        assert reopened.first_undecided_offset() is None


def test_dump_shows_the_markers_delete_horizon(tmp_path):
    with LogDir(tmp_path, _settings(), writable=True) as logdir:
        log = logdir.create_partition("kv", 0)
        _transactional_log(log)
        compact(log, now_ms=T, checkpoint=0)
        compact(log, now_ms=T + 1000, checkpoint=0)
    out, err = io.StringIO(), io.StringIO()
    rc = dump_files([str(tmp_path / "kv-0" / "00000000000000000000.log")], out, err, DumpOptions(print_data_log=True))
    lines = out.getvalue().splitlines()
    assert rc == 0, err.getvalue()
    marker = [line for line in lines if line.startswith("baseOffset: 3 ")]
    assert len(marker) == 1 and " isControl: true " in marker[0]
    assert f" deleteHorizonMs: OptionalLong[{T + 1000 + RETENTION}] " in marker[0]
    assert any(line.startswith("| offset: 3 ") and "endTxnMarker: ABORT" in line for line in lines)
    plain = [line for line in lines if line.startswith("baseOffset: 0 ")]
    assert len(plain) == 1 and " deleteHorizonMs: OptionalLong.empty " in plain[0]


def test_an_active_producers_last_batch_stays_empty_and_holds_its_marker(tmp_path):
    day = 86_400_000  # producer.id.expiration.ms
    with LogDir(tmp_path, _settings(), writable=True) as logdir:
        log = logdir.create_partition("kv", 0)
        log.append_batches(_txn(1, b"a", b"t"))  # 0: pid 1, committed; superseded at 2
        log.append_batches(_marker("COMMIT", 1))  # 1
        log.append_records([(1000, b"a", b"p", ())])  # 2
        log.append_batches(encode_batch([(1000, b"b", b"x", ())], producer_id=7, producer_epoch=0,
                                        base_sequence=0))  # 3: idempotent pid 7; superseded at 4
        log.append_records([(1000, b"b", b"y", ())])  # 4
        log.append_batches(_txn(9, b"e", b"aborted"))  # 5: pid 9, aborted
        log.append_batches(_marker("ABORT", 9))  # 6
        log.append_records([(1000, b"f", b"f", ())])  # 7
        log.roll()
        log.append_records([(1000, b"z", b"z", ())])  # 8: active

        # A second after the appends every producer is active (idle < producer.id.expiration.ms): Kafka
        # keeps the batch holding each one's last data offset, emptied (RETAIN_EMPTY), for its sequence
        # and epoch. The empty aborted batch 5 still counts as read, so its ABORT marker and index entry stay.
        compact(log, now_ms=2000, checkpoint=0)
        assert _offsets(log) == [1, 2, 4, 6, 7, 8]
        empty = {h.base_offset: h for h in _batches(log) if h.record_count == 0}
        assert sorted(empty) == [0, 3, 5]
        assert (empty[0].producer_id, empty[0].is_transactional, empty[0].last_offset) == (1, True, 0)
        assert (empty[3].producer_id, empty[3].base_sequence) == (7, 0)
        assert (empty[5].producer_id, empty[5].is_transactional) == (9, True)
        assert log.aborted_transactions(0, 9) == [AbortedTxn(9, 5, 6, 7)]
        assert _horizons(log) == {}

        # A day later they have expired: the empty batches go (5 as aborted, the others as empty). Read
        # in this pass, they still hold both markers back.
        later = 1000 + day
        compact(log, now_ms=later, checkpoint=0)
        assert _offsets(log) == [1, 2, 4, 6, 7, 8]
        assert sorted(h.base_offset for h in _batches(log)) == [1, 2, 4, 6, 7, 8]
        assert log.aborted_transactions(0, 9) == [AbortedTxn(9, 5, 6, 7)]
        # then the markers get their horizon, and go once it has passed
        compact(log, now_ms=later + 1, checkpoint=0)
        assert _horizons(log) == {1: later + 1 + RETENTION, 6: later + 1 + RETENTION}
        assert log.aborted_transactions(0, 9) == []
        compact(log, now_ms=later + 1 + RETENTION, checkpoint=0)
        assert _offsets(log) == [2, 4, 7, 8]
    assert _kafka_python_offsets(tmp_path / "kv-0") == [2, 4, 7, 8]


# ------------------------------------------------------------------ legacy (magic 0/1) messages


@pytest.mark.parametrize(("magic", "codec"), [(0, "GZIP"), (0, "SNAPPY"), (1, "GZIP"), (1, "LZ4")])
def test_legacy_messages_are_compacted_record_by_record(tmp_path, magic, codec):
    import os

    from kafkafs.format.compression import Codec
    from tests.format.test_legacy import broker_like, message

    codec = Codec[codec]
    part = tmp_path / "kv-0"
    part.mkdir()
    ts = 1_700_000_000_000
    sealed = (
        message(0, magic, 0, ts, b"a", b"1")
        + message(1, magic, 0, ts + 1, None, b"x")
        # one compressed wrapper, offsets 2..5: superseded b, latest a, no key, tombstone of c
        + broker_like(magic, codec, [(ts + 2, b"b", b"2"), (ts + 3, b"a", b"3"), (ts + 4, None, b"y"),
                                     (ts + 5, b"c", None)], base_offset=2)
        + message(6, magic, 0, ts + 6, b"b", b"4")
    )
    (part / "00000000000000000000.log").write_bytes(sealed)
    (part / "00000000000000000007.log").write_bytes(message(7, magic, 0, ts + 7, b"z", b"z"))
    settings = _settings()
    with LogDir(tmp_path, settings, writable=True) as logdir:
        log = logdir.log("kv-0")
        first = part / "00000000000000000000.log"
        os.utime(first, ns=(10**18, 10**18))
        compact(log, now_ms=T)
        # Kafka: a (0) and b (2) superseded, no key (1, 4) gone; c's tombstone (5) stays, since no
        # segment was clean before this cleaning (legacyDeleteHorizonMs 0). Kafka 4.x writes what
        # stays of each legacy entry as a v2 batch (KAFKA-13093): the wrapper's 3 and 5 as one batch of
        # its codec from offset 3, offsets kept, with a delete horizon (it keeps a tombstone)
        assert [(r[0], r[2], r[3]) for r in log.records()] == [
            (3, b"a", b"3"), (5, b"c", None), (6, b"b", b"4"), (7, b"z", b"z")]
        assert first.stat().st_mtime_ns == 10**18  # the cleaned segment keeps the original's time
        cleaned = {h.base_offset: h for h in _batches(log) if h.base_offset < 7}
        assert sorted(cleaned) == [3, 6] and all(h.magic == 2 for h in cleaned.values())
        wrapper, single = cleaned[3], cleaned[6]
        assert wrapper.attributes & 0x07 == codec and wrapper.last_offset == 5 and wrapper.record_count == 2
        assert wrapper.attributes & 0x40 and wrapper.first_timestamp == T + RETENTION  # the delete horizon
        assert (wrapper.producer_id, wrapper.producer_epoch, wrapper.base_sequence) == (-1, -1, -1)
        assert wrapper.partition_leader_epoch == -1 and not wrapper.attributes & 0x08  # CreateTime
        assert single.attributes & 0x47 == 0 and single.record_count == 1
        assert next(s for s in log.segments if s.base_offset == 7).log_path.read_bytes()[16] == magic  # not cleaned
        assert _kafka_python_offsets(part) == [3, 5, 6, 7]

        # More segments: one modified delete.retention.ms after the tombstone's, then a dirty one.
        log.append_records([(ts + 8, b"q", b"1", ())])  # 8 (v2, in the legacy active segment)
        log.roll()
        log.append_records([(ts + 9, b"q", b"2", ())])  # 9
        log.roll()
        log.append_records([(ts + 10, b"r", b"r", ())])  # 10: active
        later = next(s for s in log.segments if s.base_offset == 7).log_path
        os.utime(later, ns=(10**18 + RETENTION * 10**6, 10**18 + RETENTION * 10**6))
        compact(log, now_ms=T, checkpoint=9)  # the segment of 9 is dirty, the others clean
        # the tombstone is in a v2 batch now: it stays until its batch's delete horizon (q@8 goes,
        # superseded by 9; z@7, a legacy message, becomes a v2 batch)
        assert _offsets(log) == [3, 5, 6, 7, 9, 10]
        assert all(h.magic == 2 for h in _batches(log))
        compact(log, now_ms=T + RETENTION, checkpoint=9)  # past the horizon
        assert _offsets(log) == [3, 6, 7, 9, 10]
    assert _kafka_python_offsets(part) == [3, 6, 7, 9, 10]


def test_legacy_tombstones_stay_within_the_delete_retention(tmp_path):
    import os

    from tests.format.test_legacy import message

    part = tmp_path / "kv-0"
    part.mkdir()
    (part / "00000000000000000000.log").write_bytes(message(0, 1, 0, 5, b"c", None) + message(1, 1, 0, 6, b"d", b"1"))
    (part / "00000000000000000002.log").write_bytes(message(2, 1, 0, 7, b"e", b"1"))
    (part / "00000000000000000003.log").write_bytes(message(3, 1, 0, 8, b"e", b"2"))
    (part / "00000000000000000004.log").write_bytes(message(4, 1, 0, 9, b"z", b"z"))
    with LogDir(tmp_path, _settings(**{"segment.bytes": 60}), writable=True) as logdir:
        log = logdir.log("kv-0")
        os.utime(part / "00000000000000000000.log", ns=(10**18, 10**18))
        # the last clean segment (2) was modified less than delete.retention.ms after the tombstone's
        os.utime(part / "00000000000000000002.log", ns=(10**18 + (RETENTION - 1) * 10**6,) * 2)
        compact(log, now_ms=T, checkpoint=3)
        assert _offsets(log) == [0, 1, 3, 4]  # the tombstone stays; e@2 superseded


def test_the_rounds_last_batch_stays_as_an_empty_batch_with_its_producer(tmp_path):
    with LogDir(tmp_path, _settings(), writable=True) as logdir:
        log = logdir.create_partition("kv", 0)
        log.append_batches(_txn(5, b"a", b"1"))  # 0: pid 5, superseded at 1
        log.append_records([(1000, b"a", b"2", ())])  # 1
        log.append_batches(_marker("COMMIT", 5))  # 2: the last batch before the active segment
        log.roll()
        log.append_records([(1000, b"z", b"z", ())])  # 3: active
        compact(log, now_ms=T, checkpoint=0)  # 0 goes; the marker stays (its batch was read)
        compact(log, now_ms=T, checkpoint=0)  # no batch of its transaction left: horizon
        assert _horizons(log) == {2: T + RETENTION}
        compact(log, now_ms=T + RETENTION, checkpoint=0)
        # past its horizon the marker's record goes, but its batch ends where the round must stop:
        # Kafka keeps it empty with its producer fields (RETAIN_EMPTY, DefaultRecordBatch.writeEmptyHeader)
        assert _offsets(log) == [1, 3]
        last = [h for h in _batches(log) if h.base_offset == 2]
        assert len(last) == 1 and last[0].record_count == 0
        assert (last[0].producer_id, last[0].is_control, last[0].is_transactional) == (5, True, True)
        assert not last[0].attributes & 0x40
        # writeEmptyHeader: base timestamp NO_TIMESTAMP (-1), the max timestamp kept (a 4.4 broker's
        # cleaner wrote such a batch beside kafkafs's in tests/broker/test_compaction_vs_kafka.py)
        assert last[0].first_timestamp == -1 and last[0].max_timestamp == 1000
        compact(log, now_ms=T + 2 * RETENTION, checkpoint=0)  # and so on, while it is the last
        assert [h.base_offset for h in _batches(log)] == [1, 2, 3]
    assert _kafka_python_offsets(tmp_path / "kv-0") == [1, 3]
