"""Open, aborted and hanging transactions of a generated log directory (SPEC §3 transactions.json,
transactions/<id>.json), reported exactly."""

from __future__ import annotations

import time

from kafkafs.format.batch import encode_batch, encode_control_batch
from kafkafs.format.producer_snapshot import parse_producer_snapshot
from kafkafs.format.txnindex import AbortedTxn
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir
from kafkafs.storage.txnstate import CoordinatorView, partition_transactions, replay_transactions

from .groupslogs import read_transaction_ids, txn_key, txn_value

NOW = 0  # set by build(): the time the log is written at (the CLI tests run the command, on the real clock)


def _data(pid, ts, key=b"k", epoch=3):
    return encode_batch([(ts, key, b"v", ()), (ts + 1, key, b"w", ())], transactional=True, producer_id=pid,
                        producer_epoch=epoch, base_sequence=0)


def _end(kind, pid):
    return encode_control_batch(kind, producer_id=pid, producer_epoch=3, timestamp=NOW - 10)


def build(tmp_path):
    """t-0 with transactions of every kind, and the coordinator's records of some of them, written as of now."""
    global NOW
    NOW = time.time_ns() // 1_000_000
    (tmp_path / "logs").mkdir()
    with LogDir(tmp_path / "logs", Settings({"segment.bytes": 300}), writable=True) as logdir:
        t = logdir.create_partition("t", 0)
        t.append_records([(NOW - 10**7, b"plain", b"v", ())])  # 0
        t.append_batches(_data(1, NOW - 10**7))  # 1-2 committed
        t.append_batches(_end("COMMIT", 1))  # 3
        t.append_batches(_data(2, NOW - 10**7))  # 4-5 aborted
        t.append_batches(_end("ABORT", 2))  # 6
        t.append_batches(_data(5, NOW - 2_000_000))  # 7-8 open, no record, older than the max timeout
        t.append_batches(_data(3, NOW - 10**7))  # 9-10 open 1 s by the coordinator's clock; old CreateTimes (R10-1)
        t.append_batches(_data(4, NOW - 5_000))  # 11-12 open, the coordinator says it committed
        t.append_batches(_data(6, NOW - 120_000))  # 13-14 open past its 60 s timeout
        t.append_batches(_data(7, NOW - 1_000))  # 15-16 open, the coordinator names another partition
        t.append_batches(_data(8, NOW - 1_000))  # 17-18 open, no record, recent
        t.append_batches(_data(3, NOW - 10**7 + 500))  # 19-20 pid 3's transaction goes on
        state = logdir.create_partition("__transaction_state", 0)
        state.append_records([
            (1, txn_key("app-3"), txn_value(3, 3, "Ongoing", {"t": [0]}, start=NOW - 1_000), ()),
            (1, txn_key("app-4"), txn_value(4, 3, "Ongoing", {"t": [0]}), ()),
            (1, txn_key("app-4"), txn_value(4, 3, "CompleteCommit", {}), ()),
            (1, txn_key("app-6"), txn_value(6, 3, "Ongoing", {"t": [0]}, timeout=60_000, start=NOW - 120_000), ()),
            (1, txn_key("app-7"), txn_value(7, 3, "Ongoing", {"t": [1], "u": [0]}), ()),
            (1, txn_key("gone"), txn_value(9, 0, "Empty", {}), ()),
            (1, txn_key("gone"), None, ()),
        ])
    return tmp_path / "logs"


def test_transactions_are_reported_exactly(tmp_path):
    with LogDir(build(tmp_path)) as logdir:
        ids = read_transaction_ids(logdir)
        assert ids == {
            "app-3": {"state": "Ongoing", "producerId": 3, "producerEpoch": 3, "timeout": 60_000,
                      "partitions": [{"topic": "t", "partitions": [0]}]},
            "app-4": {"state": "CompleteCommit", "producerId": 4, "producerEpoch": 3, "timeout": 60_000,
                      "partitions": []},
            "app-6": {"state": "Ongoing", "producerId": 6, "producerEpoch": 3, "timeout": 60_000,
                      "partitions": [{"topic": "t", "partitions": [0]}]},
            "app-7": {"state": "Ongoing", "producerId": 7, "producerEpoch": 3, "timeout": 60_000,
                      "partitions": [{"topic": "t", "partitions": [1]}, {"topic": "u", "partitions": [0]}]},
        }
        view = partition_transactions(logdir.log("t-0"), NOW, CoordinatorView.of(replay_transactions(logdir), 900_000))
    assert list(view) == ["lastStableOffset", "open", "abortedRanges"]
    assert view["lastStableOffset"] == 7
    assert view["abortedRanges"] == [{"producerId": 2, "firstOffset": 4, "lastOffset": 6}]
    got = [(t["producerId"], t["firstOffset"], t["firstTimestamp"], t["ageMs"], t["hanging"]) for t in view["open"]]
    assert got == [
        (5, 7, NOW - 2_000_000, 2_000_000, True),
        (3, 9, NOW - 10**7, 10**7, False),  # R10-1: 1 s old by the coordinator's clock, not by its CreateTimes
        (4, 11, NOW - 5_000, 5_000, True),
        (6, 13, NOW - 120_000, 120_000, True),
        (7, 15, NOW - 1_000, 1_000, True),
        (8, 17, NOW - 1_000, 1_000, False),
    ]
    assert all(list(t) == ["producerId", "producerEpoch", "firstOffset", "firstTimestamp", "lastTimestamp", "ageMs",
                           "hanging"] for t in view["open"])
    pid3 = next(t for t in view["open"] if t["producerId"] == 3)
    assert (pid3["producerEpoch"], pid3["lastTimestamp"]) == (3, NOW - 10**7 + 501)


def test_without_a_coordinator_only_the_max_timeout_decides(tmp_path):
    """No coordinator record: open longer than transaction.max.timeout.ms from its first record's timestamp."""
    with LogDir(build(tmp_path)) as logdir:
        view = partition_transactions(logdir.log("t-0"), NOW)
        assert [t["producerId"] for t in view["open"] if t["hanging"]] == [5, 3]
        view = partition_transactions(logdir.log("t-0"), NOW, CoordinatorView({}, 100_000))
        assert [t["producerId"] for t in view["open"] if t["hanging"]] == [5, 3, 6]


def test_hanging_by_the_coordinators_record(tmp_path):
    """review10 R10-1 and SPEC §3 as Kafka decides: a transaction the coordinator's record lists open in
    the partition hangs once the record's timeout has passed since the record's start (the coordinator's
    clock; never the records' CreateTimes, which a client sets: Kafka's find-hanging does not call a
    live one hanging); a record that ended, or does not name the partition, or prepares the end of an
    older epoch, makes it hanging at once; a prepared end at a newer epoch is this transaction's (the
    epoch bump of transaction version 2, or a fence): not hanging while its timeout runs."""
    now = time.time_ns() // 1_000_000
    (tmp_path / "logs").mkdir()
    cases = {  # producer id: (its data's epoch, record state, record epoch, record start, timeout, hanging)
        20: (3, "Ongoing", 3, now - 1_000, 60_000, False),  # records an hour old by their CreateTimes
        21: (3, "Ongoing", 3, now - 61_000, 60_000, True),  # past its timeout on the coordinator's clock
        22: (3, "PrepareCommit", 4, now - 1_000, 60_000, False),  # TV2: the end of this transaction, epoch bumped
        23: (3, "PrepareAbort", 4, now - 1_000, 60_000, False),  # a fence's abort, epoch bumped
        24: (3, "PrepareCommit", 3, now - 1_000, 60_000, False),  # TV1: markers to come
        25: (5, "PrepareCommit", 4, now - 1_000, 60_000, True),  # the end of an earlier epoch's transaction
        26: (3, "CompleteAbort", 3, now - 1_000, 60_000, True),  # ended: at once
        27: (3, "PrepareEpochFence", 3, now - 1_000, 60_000, False),
    }
    with LogDir(tmp_path / "logs", writable=True) as logdir:
        t = logdir.create_partition("t", 0)
        for pid, (epoch, *_rest) in cases.items():
            t.append_batches(_data(pid, now - 3_600_000, epoch=epoch))
        logdir.create_partition("__transaction_state", 0).append_records([
            (1, txn_key(f"app-{pid}"), txn_value(pid, rec_epoch, state, {} if state == "CompleteAbort" else {"t": [0]},
                                                 timeout=timeout, start=start), ())
            for pid, (_e, state, rec_epoch, start, timeout, _h) in cases.items()])
    with LogDir(tmp_path / "logs") as logdir:
        coordinator = CoordinatorView.of(replay_transactions(logdir), 900_000)
        view = partition_transactions(logdir.log("t-0"), now, coordinator)
    assert {t["producerId"]: t["hanging"] for t in view["open"]} == {pid: c[-1] for pid, c in cases.items()}
    assert all(t["ageMs"] == 3_600_000 for t in view["open"])  # from the first record's timestamp


def test_a_partition_without_transactions(tmp_path):
    (tmp_path / "logs").mkdir()
    with LogDir(tmp_path / "logs", writable=True) as logdir:
        logdir.create_partition("p", 0).append_records([(1, None, b"x", ())] * 3)
    with LogDir(tmp_path / "logs") as logdir:
        assert partition_transactions(logdir.log("p-0"), NOW) == {"lastStableOffset": 3, "open": [], "abortedRanges": []}
        assert read_transaction_ids(logdir) == {}


def test_a_copy_without_its_index_files_keeps_its_aborted_ranges(tmp_path):
    """transactions.json of a directory copied without its index files: the aborted transactions a
    broker's recovery finds (the markers replayed), not none."""
    logs = build(tmp_path)
    with LogDir(logs) as logdir:
        expected = partition_transactions(logdir.log("t-0"), NOW)["abortedRanges"]
    assert expected == [{"producerId": 2, "firstOffset": 4, "lastOffset": 6}]
    for path in (logs / "t-0").iterdir():
        if path.suffix in (".index", ".timeindex", ".txnindex"):
            path.unlink()
    with LogDir(logs) as logdir:
        assert partition_transactions(logdir.log("t-0"), NOW)["abortedRanges"] == expected
        assert [(t.producer_id, t.first_offset, t.last_offset) for t in logdir.log("t-0").aborted_transactions(0, 21)] \
            == [(2, 4, 6)]


def _begun_below_the_log_start(tmp_path, now):
    """t-0: a transaction at 0-1 left open, plain records at 2-6, the log start moved to 4 (as
    kafka-delete-records moves it), no producer snapshot (a live broker's directory: none before the
    segment rolls)."""
    (tmp_path / "logs").mkdir()
    with LogDir(tmp_path / "logs", writable=True) as logdir:
        t = logdir.create_partition("t", 0)
        t.append_batches(_data(3, now - 1_000))  # 0-1: a transaction, left open
        t.append_records([(now, b"p", b"plain", ())] * 5)  # 2-6
    for snapshot in (tmp_path / "logs" / "t-0").glob("*.snapshot"):
        snapshot.unlink()
    (tmp_path / "logs" / "log-start-offset-checkpoint").write_text("0\n1\nt 0 4\n")


def test_a_transaction_begun_below_the_log_start_stays_open(tmp_path):
    """review10 R10-10: kafka-delete-records (or retention inside a segment) moves the log start past the
    first records of an open transaction. A broker's producer state keeps it open (describe-producers:
    CurrentTransactionStartOffset 0), its first unstable offset raised to the log start; a read of a live
    broker's directory (no producer snapshot yet) replayed the batches from the log start only, so it
    showed no open transaction and the log end as the last stable offset."""
    now = time.time_ns() // 1_000_000
    _begun_below_the_log_start(tmp_path, now)
    with LogDir(tmp_path / "logs") as logdir:
        log = logdir.log("t-0")
        assert log.log_start_offset == 4
        view = partition_transactions(log, now, CoordinatorView({}, 900_000))
    assert [(t["producerId"], t["firstOffset"], t["firstTimestamp"], t["hanging"]) for t in view["open"]] == \
        [(3, 0, now - 1_000, False)]
    assert view["lastStableOffset"] == 4  # the first unstable offset, raised to the log start


def test_appends_keep_a_transaction_begun_below_the_log_start(tmp_path):
    """review10 R10-10, the writable side: appends after the log start moved past an open transaction's
    first records. The writer's producer state replayed the batches from the log start only, so it lost
    the transaction: the snapshot written at the close had no transaction in progress (a broker loading
    it served read_committed past the transaction), and the transaction's ABORT marker appended later
    wrote no ``.txnindex`` entry. As a broker's producer state, it stays open, the first unstable offset
    raised to the log start."""
    now = time.time_ns() // 1_000_000
    _begun_below_the_log_start(tmp_path, now)
    logs = tmp_path / "logs"
    with LogDir(logs, writable=True) as logdir:
        t = logdir.log("t-0")
        t.append_records([(now, b"p", b"more", ())] * 2)  # 7-8
        assert t.first_undecided_offset() == 4  # Kafka's first unstable offset: raised to the log start
    [snapshot] = (logs / "t-0").glob("*.snapshot")
    entries = parse_producer_snapshot(snapshot.read_bytes())
    assert snapshot.name == "00000000000000000009.snapshot"
    assert [(e.producer_id, e.current_txn_first_offset) for e in entries] == [(3, 0)]
    with LogDir(logs) as logdir:
        view = partition_transactions(logdir.log("t-0"), now, CoordinatorView({}, 900_000))
    assert [(t["producerId"], t["firstOffset"]) for t in view["open"]] == [(3, 0)]
    assert view["lastStableOffset"] == 4
    with LogDir(logs, writable=True) as logdir:  # the coordinator aborts it: the marker at 9
        logdir.log("t-0").append_batches(encode_control_batch("ABORT", producer_id=3, producer_epoch=3, timestamp=now))
        [segment] = list(logdir.log("t-0").segments)
        assert segment.txn_index.entries() == [AbortedTxn(3, 0, 9, 10)]
        view = partition_transactions(logdir.log("t-0"), now, CoordinatorView({}, 900_000))
    assert view == {"lastStableOffset": 10, "open": [], "abortedRanges": [{"producerId": 3, "firstOffset": 0,
                                                                           "lastOffset": 9}]}
