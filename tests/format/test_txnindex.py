"""``.txnindex`` entries (Kafka's AbortedTxn) and the transaction event of a batch."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkafs.errors import CorruptRecordError
from kafkafs.format.batch import encode_batch, encode_control_batch, read_batch_header
from kafkafs.format.txnindex import (
    ENTRY_SIZE,
    AbortedTxn,
    TxnEvent,
    check_txn_index,
    collect_aborted_txns,
    decode_aborted_txn,
    encode_aborted_txn,
    parse_txn_index,
    transaction_event,
)

I64 = st.integers(-(2**63), 2**63 - 1)


def test_entry_layout_is_kafkas():
    # version i16, producerId i64, firstOffset i64, lastOffset i64, lastStableOffset i64, big-endian
    data = encode_aborted_txn(AbortedTxn(producer_id=1002, first_offset=4, last_offset=7, last_stable_offset=8))
    assert ENTRY_SIZE == 34 and len(data) == 34
    assert data == (
        b"\x00\x00"
        + (1002).to_bytes(8, "big")
        + (4).to_bytes(8, "big")
        + (7).to_bytes(8, "big")
        + (8).to_bytes(8, "big")
    )
    assert decode_aborted_txn(data) == AbortedTxn(1002, 4, 7, 8, 0)


@given(st.lists(st.tuples(I64, I64, I64, I64), max_size=20))
def test_round_trip(rows):
    entries = [AbortedTxn(*row) for row in rows]
    data = b"".join(map(encode_aborted_txn, entries))
    assert len(data) == ENTRY_SIZE * len(entries)
    assert parse_txn_index(data) == entries


def test_a_torn_tail_is_not_an_entry():
    data = b"".join(map(encode_aborted_txn, [AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 3, 9, 10)]))
    for cut in range(len(data) + 1):
        assert parse_txn_index(data[:cut]) == [AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 3, 9, 10)][: cut // ENTRY_SIZE]
    assert parse_txn_index(b"") == []


def test_an_unknown_version_is_corrupt():
    data = bytearray(b"".join(map(encode_aborted_txn, [AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 3, 9, 10)])))
    data[ENTRY_SIZE + 1] = 1  # version 1 in the second entry
    with pytest.raises(CorruptRecordError) as err:
        parse_txn_index(bytes(data))
    assert err.value.position == ENTRY_SIZE


def test_sanity_check():
    check_txn_index([AbortedTxn(1, 0, 100, 101), AbortedTxn(2, 50, 120, 121)], base_offset=100)
    check_txn_index([], base_offset=100)
    with pytest.raises(CorruptRecordError, match="below the segment's base offset"):
        check_txn_index([AbortedTxn(1, 0, 99, 100)], base_offset=100)
    with pytest.raises(CorruptRecordError, match="does not follow") as err:
        check_txn_index([AbortedTxn(1, 0, 120, 121), AbortedTxn(2, 50, 120, 121)], base_offset=100)
    assert err.value.position == ENTRY_SIZE
    with pytest.raises(CorruptRecordError, match="after its end"):
        check_txn_index([AbortedTxn(1, 130, 120, 121)], base_offset=100)


def test_collect_aborted_txns_follows_kafka():
    entries = [AbortedTxn(1, 0, 10, 5), AbortedTxn(2, 4, 20, 21), AbortedTxn(3, 22, 30, 40)]
    # overlapping [12, 25): the ones ending at or after 12 and starting before 25
    found, complete = collect_aborted_txns(entries, 12, 25)
    assert found == [AbortedTxn(2, 4, 20, 21), AbortedTxn(3, 22, 30, 40)] and complete  # LSO 40 >= 25
    found, complete = collect_aborted_txns(entries, 0, 100)
    assert found == entries and not complete
    found, complete = collect_aborted_txns(entries, 0, 5)
    assert found == [AbortedTxn(1, 0, 10, 5)] and complete  # the first entry's LSO reaches 5: no need to go on


def _legacy_message() -> bytes:
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    builder.append(0, timestamp=1, key=None, value=b"v")
    return bytes(builder.build())


def _header(data: bytes):
    return read_batch_header(data, 0)


def test_transaction_events():
    txn = encode_batch([(1, b"k", b"v", ())] * 3, base_offset=40, transactional=True, producer_id=7, producer_epoch=0)
    assert transaction_event(txn, _header(txn)) == TxnEvent("data", 7, 40)
    for kind in ("COMMIT", "ABORT"):
        marker = encode_control_batch(kind, producer_id=7, producer_epoch=0, timestamp=5, base_offset=43)
        assert transaction_event(marker, _header(marker)) == TxnEvent(kind, 7, 43)
    idempotent = encode_batch([(1, None, b"v", ())], producer_id=7, producer_epoch=0, base_sequence=0)
    plain = encode_batch([(1, None, b"v", ())])
    # a control batch without a producer (KRaft's) and an empty one (a cleaner removed its record)
    no_producer = encode_batch([(1, b"\x00\x00\x00\x02", b"", ())], control=True)
    empty_marker = encode_batch([], producer_id=7, producer_epoch=0, transactional=True, control=True)
    unknown = encode_batch([(1, b"\x00\x00\x00\x09", b"", ())], producer_id=7, transactional=True, control=True)
    legacy = _legacy_message()
    for data in (idempotent, plain, no_producer, empty_marker, unknown, legacy):
        assert transaction_event(data, _header(data)) is None
