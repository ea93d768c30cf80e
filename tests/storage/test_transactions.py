"""Transactions: the ``.txnindex`` an ABORT marker writes, as a broker writes it, and its rebuild."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kafkafs.format.batch import encode_batch, encode_control_batch
from kafkafs.format.txnindex import AbortedTxn, parse_txn_index
from kafkafs.storage.log import Log
from kafkafs.storage.transactions import ProducerTransactions

from .helpers import Clock, config, open_log


def txn(pid: int, n: int = 1, ts: int = 1000) -> bytes:
    return encode_batch(
        [(ts + i, b"k%d" % i, b"v%d" % i, ()) for i in range(n)],
        transactional=True,
        producer_id=pid,
        producer_epoch=0,
        base_sequence=0,
    )


def marker(kind: str, pid: int, ts: int = 2000) -> bytes:
    return encode_control_batch(kind, producer_id=pid, producer_epoch=0, timestamp=ts)


def plain(n: int = 1) -> bytes:
    return encode_batch([(1000, None, b"p", ())] * n)


def txn_files(directory: Path) -> dict[str, bytes]:
    return {n: (directory / n).read_bytes() for n in sorted(os.listdir(directory)) if ".txnindex" in n}


def entries(directory: Path, base: int) -> list[AbortedTxn]:
    return parse_txn_index((directory / f"{base:020d}.txnindex").read_bytes())


def interleaved(log: Log) -> None:
    """Five producers; two transactions aborted while another one is in progress."""
    for data in (
        txn(1, 3),  # 0-2
        marker("COMMIT", 1),  # 3
        txn(2, 3),  # 4-6
        txn(3, 2),  # 7-8 (P3 in progress)
        marker("ABORT", 2),  # 9: LSO stops at P3's first offset, 7
        txn(3, 2),  # 10-11, same transaction
        marker("ABORT", 3),  # 12: nothing else in progress, LSO 13
        plain(),  # 13
        marker("ABORT", 4),  # 14: P4 has no transaction: no entry (Kafka emits none)
        txn(5, 2),  # 15-16
        marker("COMMIT", 5),  # 17: commits leave no entry
    ):
        log.append_batches(data)


INTERLEAVED = [AbortedTxn(2, 4, 9, 7), AbortedTxn(3, 7, 12, 13)]


def spanning(log: Log) -> None:
    """Transactions that start in one segment and end in the next."""
    log.append_batches(txn(1, 3))  # 0-2
    log.append_batches(txn(2, 2))  # 3-4
    log.roll()
    log.append_batches(marker("ABORT", 1))  # 5: P1 began at 0, P2 (3) still in progress
    log.append_batches(txn(2, 1))  # 6
    log.roll()
    log.append_batches(marker("ABORT", 2))  # 7: P2 began at 3 in the first segment


def test_abort_markers_write_kafkas_entries(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory)
    interleaved(log)
    assert entries(directory, 0) == INTERLEAVED
    assert log.transactions().current == {}
    assert log.aborted_transactions(0, 100) == INTERLEAVED
    assert log.aborted_transactions(10, 100) == [AbortedTxn(3, 7, 12, 13)]
    log.close()
    assert entries(directory, 0) == INTERLEAVED
    assert (directory / "00000000000000000000.txnindex").stat().st_size == 2 * 34


def test_a_segment_without_aborted_transactions_has_no_txnindex(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory)
    log.append_batches(txn(1, 2))
    log.append_batches(marker("COMMIT", 1))
    log.append_records([(1000, None, b"x", ())])
    log.close()
    assert txn_files(directory) == {}


def test_entries_go_to_the_segment_of_the_marker(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory)
    spanning(log)
    log.close()
    assert list(txn_files(directory)) == ["00000000000000000005.txnindex", "00000000000000000007.txnindex"]
    assert entries(directory, 5) == [AbortedTxn(1, 0, 5, 3)]
    assert entries(directory, 7) == [AbortedTxn(2, 3, 7, 8)]


@pytest.mark.allow_warnings("a damaged .txnindex on purpose")
def test_recovery_rebuilds_the_txnindex_identically(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory)
    interleaved(log)
    log.roll()
    spanning_base = log.log_end_offset
    for data in (txn(7, 2), txn(8, 1)):
        log.append_batches(data)
    log.roll()
    log.append_batches(marker("ABORT", 7))
    log.append_batches(marker("ABORT", 8))
    log.close()
    before = txn_files(directory)
    assert len(before) == 2
    last = max(int(n[:20]) for n in before)
    assert entries(directory, last) == [
        AbortedTxn(7, spanning_base, spanning_base + 3, spanning_base + 2),
        AbortedTxn(8, spanning_base + 2, spanning_base + 4, spanning_base + 5),
    ]
    # lost, then rebuilt by a recovery from the start
    for name in before:
        (directory / name).unlink()
    log = open_log(directory, clean=False)
    assert txn_files(directory) == before
    assert log.transactions().current == {}
    log.close()
    # a torn or damaged file is rebuilt even after a clean shutdown
    (directory / f"{last:020d}.txnindex").write_bytes(before[f"{last:020d}.txnindex"][:50])
    (directory / "00000000000000000000.txnindex").write_bytes(b"\x00\x07" + bytes(32))
    log = open_log(directory, clean=True)
    assert txn_files(directory) == before
    assert sorted(log.last_recovery.rebuilt_indexes) == [f"{0:020d}.log", f"{last:020d}.log"]  # type: ignore[union-attr]
    log.close()


def test_recovery_from_a_recovery_point_reads_the_transactions_before_it(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory)
    spanning(log)
    log.close()
    before = txn_files(directory)
    (directory / "00000000000000000007.txnindex").unlink()
    log = open_log(directory, clean=False, recovery_point=7)
    assert log.last_recovery.recovered_segments == ["00000000000000000007.log"]  # type: ignore[union-attr]
    assert txn_files(directory) == before
    log.close()


def test_the_transactions_in_progress_survive_a_reopen(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory)
    log.append_batches(txn(1, 2))  # 0-1
    log.append_batches(plain(3))  # 2-4
    log.append_batches(txn(2, 1))  # 5
    log.close()
    log = open_log(directory)  # clean: nothing scanned until a transaction needs it
    assert log._txn is None
    log.append_batches(marker("ABORT", 1))  # 6: P2 (5) still in progress
    assert log.transactions().current == {2: 5}
    log.append_batches(marker("ABORT", 2))  # 7
    log.close()
    assert entries(directory, 0) == [AbortedTxn(1, 0, 6, 5), AbortedTxn(2, 5, 7, 8)]


def test_one_append_starts_its_transactions_before_completing_any(tmp_path: Path) -> None:
    """As in Kafka's UnifiedLog.append: a transaction begun later in the same append already holds the
    last stable offset of an abort earlier in it."""
    directory = tmp_path / "t-0"
    log = open_log(directory)
    log.append_batches(txn(1, 2))  # 0-1
    log.append_batches(marker("ABORT", 1) + plain() + txn(2, 1))  # 2, 3, 4
    assert entries(directory, 0) == [AbortedTxn(1, 0, 2, 4)]
    log.close()


def test_truncation_drops_entries_and_reopens_the_transaction(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory)
    interleaved(log)
    log.truncate_to(12)  # the ABORT of P3 goes
    assert entries(directory, 0) == INTERLEAVED[:1]
    assert log.transactions().current == {3: 7}
    log.append_batches(marker("ABORT", 3))  # 12 again
    assert entries(directory, 0) == INTERLEAVED
    log.truncate_fully_and_start_at(100)
    assert txn_files(directory) == {}
    assert log.transactions().current == {}
    log.close()


def test_retention_and_renames_carry_the_txnindex(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    clock = Clock()
    log = open_log(directory, config(file_delete_delay_ms=1000), clock=clock)
    spanning(log)
    doomed = [log.segments.get(0), log.segments.get(5)]
    log.delete_segments(doomed)
    assert (directory / "00000000000000000005.txnindex.deleted").exists()
    assert log.pending_deletions() == doomed
    clock.sleep(1000)
    assert log.delete_expired_files() == ["00000000000000000000.log.deleted", "00000000000000000005.log.deleted"]
    assert list(txn_files(directory)) == ["00000000000000000007.txnindex"]
    log.close()


def test_producer_transactions_follow_kafka() -> None:
    from kafkafs.format.txnindex import TxnEvent

    state = ProducerTransactions()
    assert state.apply([TxnEvent("data", 1, 0), TxnEvent("data", 1, 3), TxnEvent("data", 2, 5)]) == []
    assert state.current == {1: 0, 2: 5} and state.first_undecided_offset() == 0
    assert state.undecided(1, 4) and not state.undecided(3, 4)
    assert state.apply([TxnEvent("COMMIT", 1, 6)]) == []
    assert state.apply([TxnEvent("ABORT", 2, 7)]) == [AbortedTxn(2, 5, 7, 8)]
    assert state.apply([TxnEvent("ABORT", 2, 8)]) == []  # no transaction: nothing
    assert state.current == {} and state.first_undecided_offset() is None


def test_the_demo_has_the_txnindex_of_its_aborted_transaction(tmp_path: Path) -> None:
    from kafkafs.demo import build_demo

    build_demo(tmp_path / "demo")
    payments = tmp_path / "demo" / "payments-0"
    # 0-2 committed (1001), 3 COMMIT, 4-6 aborted (1002), 7 ABORT, 8-10 committed (1003), 11 COMMIT
    assert entries(payments, 0) == [AbortedTxn(1002, 4, 7, 8)]
    assert [n for n in os.listdir(tmp_path / "demo" / "orders-0") if n.endswith(".txnindex")] == []
    before = txn_files(payments)
    (payments / "00000000000000000000.txnindex").unlink()
    log = open_log(payments, clean=False)
    log.close()
    assert txn_files(payments) == before


def test_cleaned_transactions_follow_kafkas_cleaned_transaction_metadata() -> None:
    from kafkafs.format.batch import read_batch_header
    from kafkafs.storage.transactions import CleanedTransactions

    def h(data: bytes, offset: int):
        buf = bytearray(data)
        buf[0:8] = offset.to_bytes(8, "big")
        return read_batch_header(buf, 0)

    abort_key, commit_key = b"\x00\x00\x00\x00", b"\x00\x00\x00\x01"
    state = CleanedTransactions()
    entry = AbortedTxn(1, 10, 13, 14)
    state.add_aborted([entry, entry])  # the same entry found from two segments: taken once
    assert state.on_batch(h(txn(1), 9)) is False  # before its first offset: not yet aborted (pid 1 seen)
    assert state.on_batch(h(txn(1), 10)) is True  # aborted: may go
    assert state.on_batch(h(txn(2), 11)) is False  # another producer's transaction: seen, kept
    assert state.on_batch(h(encode_batch([(0, b"k", b"v", ())]), 12)) is False  # not transactional
    assert state.on_control(h(marker("ABORT", 1), 13), abort_key, False) is False  # its batch just went
    assert state.cleaned == [entry]
    assert state.on_control(h(marker("COMMIT", 2), 14), commit_key, False) is False  # its batch is there
    assert state.on_control(h(marker("COMMIT", 2), 15), commit_key, False) is True  # none left: may go
    assert state.on_control(h(marker("ABORT", 3), 16), abort_key, False) is True  # no entry: may go
    assert state.on_control(h(marker("COMMIT", 1), 17), commit_key, False) is False  # pid 1's batch at 9
    assert state.on_control(h(marker("ABORT", 1), 18), None, True) is True  # an emptied control batch
    leader_change = b"\x00\x00\x00\x02"
    assert state.on_control(h(marker("ABORT", 1), 19), leader_change, False) is False  # not a marker: stays
    # an aborted transaction whose batches were already removed: the marker may go, no entry is kept
    state = CleanedTransactions()
    state.add_aborted([AbortedTxn(5, 20, 22, 23)])
    assert state.on_control(h(marker("ABORT", 5), 22), abort_key, False) is True and state.cleaned == []
