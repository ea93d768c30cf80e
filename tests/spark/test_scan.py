"""Scanning splits without Spark: rows, bounds, predicates, damage, transactions."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from kafkafs.errors import CorruptRecordError
from kafkafs.format.batch import encode_batch, encode_control_batch
from kafkafs.spark.plan import ScanSpec
from kafkafs.spark.predicates import NO_PREDICATES, IntBounds, Predicates
from kafkafs.spark.scan import read_split
from kafkafs.spark.schema import ARROW_SCHEMA, spark_schema
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir

from .conftest import BASE_TS, engine_rows
from .helpers import arrow_rows, plan, read_plan


def test_arrow_schema_is_what_spark_expects():
    from pyspark.sql.pandas.types import to_arrow_schema

    assert to_arrow_schema(spark_schema(), timezone="UTC").equals(ARROW_SCHEMA)


def test_small_arrow_batches_give_the_same_rows(generated):
    p = plan(generated, batchRows=7, maxBytesPerPartition=5000)
    batches = [b for s in p.splits for b in read_split(s)]
    assert all(b.schema.equals(ARROW_SCHEMA) for b in batches)
    assert max(b.num_rows for b in batches) <= 16
    assert arrow_rows(batches) == engine_rows(generated)


@pytest.mark.parametrize(
    "offset, ts",
    [
        (IntBounds(lo=100, hi=130), IntBounds()),
        (IntBounds(values=frozenset({0, 5, 121, 999, 5000})), IntBounds()),
        (IntBounds(), IntBounds(lo=(BASE_TS + 2000) * 1000 + 1, hi=(BASE_TS + 2600) * 1000)),
        (IntBounds(lo=10), IntBounds(values=frozenset({(BASE_TS + 40) * 1000, (BASE_TS + 1955) * 1000}))),
        (IntBounds(lo=700), IntBounds(lo=(BASE_TS + 9000) * 1000)),
    ],
)
def test_predicates_return_exactly_the_matching_rows(generated, offset, ts):
    preds = Predicates(offset=offset.tightened(), timestamp=ts.tightened())
    p = plan(generated, preds, maxBytesPerPartition=3000)
    expect = [r for r in engine_rows(generated) if offset.contains(r[2]) and ts.contains(r[3] * 1000)]
    assert read_plan(p) == expect
    assert expect, "each case selects some rows"


def test_log_append_time_and_compression(tmp_path):
    settings = Settings({}, {"stamped": {"message.timestamp.type": "LogAppendTime", "compression.type": "lz4"}})
    with LogDir(tmp_path, settings, writable=True) as ld:
        ld.create_partition("stamped", 0).append_records([(1, b"k", b"v", []), (2, None, None, [])])
    rows = read_plan(plan(tmp_path))
    assert [r[4] for r in rows] == [1, 1]
    assert rows[0][3] == rows[1][3] > 10**12
    assert rows == engine_rows(tmp_path)


# ---------------------------------------------------------------------------------------------- damage


def _batch_positions(logdir: Path, name: str) -> list[tuple[int, int, int, int]]:
    """(segment base, position, first offset, last offset) of every batch."""
    with LogDir(logdir) as ld:
        return [
            (seg.base_offset, view.position, view.header.base_offset, view.header.last_offset)
            for seg, view in ld.log(name).batches()
        ]


def _corrupt_copy(generated: Path, writable_copy, which: int, at: int, data: bytes):
    copy = writable_copy(generated)
    batches = [b for b in _batch_positions(generated, "orders-0") if b[0] == 120]
    base, pos, first, last = batches[which]
    path = copy / "orders-0" / f"{base:020d}.log"
    with open(path, "r+b") as f:
        f.seek(pos + at)
        f.write(data)
    return copy, path, pos, first, last, batches


def test_damaged_batch_fails_with_file_and_position(generated, writable_copy):
    copy, path, pos, *_ = _corrupt_copy(generated, writable_copy, 5, 70, b"\xff\xfe")
    p = plan(copy, topics="orders")
    with pytest.raises(CorruptRecordError) as info:
        read_plan(p)
    message = str(info.value)
    assert str(path) in message and f"position {pos}" in message and "CRC" in message
    assert "onCorrupt=skip" in message


def test_damaged_batch_is_skipped_and_logged(generated, writable_copy, caplog):
    copy, _path, pos, first, last, _ = _corrupt_copy(generated, writable_copy, 5, 70, b"\xff\xfe")
    with caplog.at_level(logging.WARNING, logger="kafkafs.spark"):
        rows = read_plan(plan(copy, topics="orders", onCorrupt="skip"))
    expect = [r for r in engine_rows(generated) if r[0] == "orders" and not (r[1] == 0 and first <= r[2] <= last)]
    assert rows == expect
    assert f"position {pos}" in caplog.text


@pytest.mark.allow_warnings("damaged data is skipped with a warning on purpose")
def test_damaged_header_resumes_at_the_next_index_entry(generated, writable_copy):
    copy, path, pos, _first, _last, batches = _corrupt_copy(generated, writable_copy, 3, 8, b"\x7f\xff\xff\x00")
    with pytest.raises(CorruptRecordError, match="position"):
        read_plan(plan(copy, topics="orders"))
    rows = read_plan(plan(copy, topics="orders", onCorrupt="skip"))
    with LogDir(generated) as ld:
        positions = [e.position for e in ld.log("orders-0").segments.get(120).offset_index]
    resume = min(p for p in positions if p > pos)
    lost = {o for b in batches if pos <= b[1] < resume for o in range(b[2], b[3] + 1)}
    assert lost
    expect = [r for r in engine_rows(generated) if r[0] == "orders" and not (r[1] == 0 and r[2] in lost)]
    assert rows == expect


# ---------------------------------------------------------------------------------------------- transactions


def _transactional_log(path: Path) -> None:
    """plain, txn 7, txn 8, plain, txn 7, COMMIT 7, ABORT 8, txn 9 (open), plain; one batch a segment."""
    ts = BASE_TS

    def rows(tag: str, n: int) -> list:
        return [(ts + i, tag.encode(), f"{tag}-{i}".encode(), ()) for i in range(n)]

    def txn(pid: int, tag: str, n: int) -> bytes:
        return encode_batch(rows(tag, n), producer_id=pid, producer_epoch=0, base_sequence=0, transactional=True)

    with LogDir(path, Settings({"segment.bytes": 100}), writable=True) as ld:
        log = ld.create_partition("tx", 0)
        log.append_records(rows("plainA", 2))
        log.append_batches(txn(7, "t7a", 3))
        log.append_batches(txn(8, "t8", 2))
        log.append_records(rows("plainB", 1))
        log.append_batches(txn(7, "t7b", 1))
        log.append_batches(encode_control_batch("COMMIT", producer_id=7, producer_epoch=0, timestamp=ts))
        log.append_batches(encode_control_batch("ABORT", producer_id=8, producer_epoch=0, timestamp=ts))
        log.append_batches(txn(9, "t9", 2))
        log.append_records(rows("plainC", 1))


def test_isolation_levels(tmp_path):
    _transactional_log(tmp_path)
    uncommitted = read_plan(plan(tmp_path, maxBytesPerPartition=1))
    assert len({x.base_offset for x in plan(tmp_path).pieces}) == 9, "one batch a segment"
    keys = [r[5] for r in uncommitted]
    assert keys == [b"plainA"] * 2 + [b"t7a"] * 3 + [b"t8"] * 2 + [b"plainB", b"t7b", b"t9", b"t9", b"plainC"]
    committed = read_plan(plan(tmp_path, maxBytesPerPartition=1, isolationLevel="read_committed"))
    # as from a broker: nothing at or past the last stable offset (t9 is open), so plainC waits too
    assert [r[5] for r in committed] == [b"plainA"] * 2 + [b"t7a"] * 3 + [b"plainB", b"t7b"]


def test_read_committed_without_index_files_leaves_out_aborted_transactions(tmp_path):
    """A copied broker directory whose index files were not kept (as kafka-logs-b): a broker loading it
    recovers each segment without its offset index and rebuilds its .txnindex, so a read_committed
    consumer does not get the aborted transaction's records. kafkalog read the .txnindex files only,
    and with them gone served t8 (aborted) as if committed. A .txnindex lost beside a kept .index is
    not rebuilt by a broker, nor here."""
    _transactional_log(tmp_path)
    want = [b"plainA"] * 2 + [b"t7a"] * 3 + [b"plainB", b"t7b"]
    for path in tmp_path.glob("tx-0/*.txnindex"):
        path.unlink()
    for path in [*tmp_path.glob("tx-0/*.index"), *tmp_path.glob("tx-0/*.timeindex")]:
        path.unlink()
    for max_bytes in (1, 1 << 20):
        got = read_plan(plan(tmp_path, maxBytesPerPartition=max_bytes, isolationLevel="read_committed"))
        assert [r[5] for r in got] == want
    # from an offset inside the aborted transaction, and ending before its marker
    got = read_plan(plan(tmp_path, isolationLevel="read_committed", startingOffsets='{"tx": {"0": 6}}',
                         endingOffsets='{"tx": {"0": 8}}'))
    assert [r[5] for r in got] == [b"plainB"]


def test_read_committed_stream_waits_for_an_open_transaction(tmp_path):
    """A micro-batch ends at the last stable offset, so the open transaction's records are read once
    it commits rather than passed over while it is open."""
    from kafkafs.spark.options import parse_read_options
    from kafkafs.spark.plan import plan_ranges
    from kafkafs.spark.stream import initial_offsets, log_ends

    _transactional_log(tmp_path)
    opts = parse_read_options({"path": str(tmp_path), "isolationLevel": "read_committed"}, streaming=True)
    with LogDir(tmp_path) as ld:
        log = ld.log("tx-0")
        lso = next(b.header.base_offset for b in log.read() if b.header.producer_id == 9)
        log_end = log.log_end_offset
    assert log_ends(opts)[1] == {("tx", 0): lso} == initial_offsets(opts)
    uncommitted = parse_read_options({"path": str(tmp_path)}, streaming=True)
    assert log_ends(uncommitted)[1] == {("tx", 0): log_end}
    with LogDir(tmp_path, Settings({"segment.bytes": 100}), writable=True) as ld:
        ld.log("tx-0").append_batches(encode_control_batch("COMMIT", producer_id=9, producer_epoch=0, timestamp=BASE_TS))
    end = log_ends(opts)[1][("tx", 0)]
    assert end == log_end + 1
    batch = plan_ranges(opts, {("tx", 0): (str(tmp_path), lso, end)})
    assert [r[5] for r in read_plan(batch)] == [b"t9", b"t9", b"plainC"]


def test_read_committed_stops_at_the_log_start_below_which_a_transaction_is_open(tmp_path):
    """review10 R10-10: kafka-delete-records moved the log start (4) past the first records of a
    transaction still open (0-1). A broker keeps it open and raises its first unstable offset to the
    log start, so a read_committed consumer gets nothing until it ends; a copy of the live broker's
    directory has no producer snapshot (none before the segment rolls). The read's producer state
    replayed the batches from the log start only, missed the transaction, and read to the log end."""
    from kafkafs.spark.options import parse_read_options
    from kafkafs.spark.stream import initial_offsets, log_ends

    with LogDir(tmp_path, writable=True) as ld:
        log = ld.create_partition("tx", 0)
        log.append_batches(encode_batch([(BASE_TS, b"t", b"open", ())] * 2, producer_id=9, producer_epoch=0,
                                        base_sequence=0, transactional=True))  # 0-1
        log.append_records([(BASE_TS, b"p", f"plain-{i}".encode(), ()) for i in range(5)])  # 2-6
    for snapshot in tmp_path.glob("tx-0/*.snapshot"):
        snapshot.unlink()
    (tmp_path / "log-start-offset-checkpoint").write_text("0\n1\ntx 0 4\n")
    assert [r[6] for r in read_plan(plan(tmp_path))] == [b"plain-2", b"plain-3", b"plain-4"]
    assert read_plan(plan(tmp_path, isolationLevel="read_committed")) == []
    opts = parse_read_options({"path": str(tmp_path), "isolationLevel": "read_committed"}, streaming=True)
    assert log_ends(opts) == ({("tx", 0): 4}, {("tx", 0): 4}) and initial_offsets(opts) == {("tx", 0): 4}
    with pytest.raises(Exception, match="Could not read records in offset \\[4, 6\\).*last stable offset is 4"):
        plan(tmp_path, isolationLevel="read_committed", endingOffsets='{"tx": {"0": 6}}')
    with LogDir(tmp_path, writable=True) as ld:  # it commits: the records after it are read
        ld.log("tx-0").append_batches(encode_control_batch("COMMIT", producer_id=9, producer_epoch=0, timestamp=BASE_TS))
    assert [r[6] for r in read_plan(plan(tmp_path, isolationLevel="read_committed"))] == \
        [b"plain-2", b"plain-3", b"plain-4"]


def test_empty_split_reads_nothing():
    from kafkafs.spark.plan import Split

    assert list(read_split(Split((), ScanSpec()))) == []


def test_a_worker_heap_is_frozen_once():
    """PySpark's daemon runs gc.collect() after every task: the worker's modules are frozen out of it."""
    import subprocess
    import sys

    code = (
        "import gc\nfrom kafkafs.spark.scan import freeze_worker_heap\nfreeze_worker_heap()\n"
        "n = gc.get_freeze_count()\nfreeze_worker_heap()\nassert n > 1000 and gc.get_freeze_count() == n, n\n"
    )
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root, env={"PYTHONPATH": str(root)})


@pytest.mark.allow_warnings("damaged data is skipped with a warning on purpose")
def test_a_torn_batch_at_the_end_of_a_sealed_segment_is_damage(generated, writable_copy):
    """A segment that a later one follows, cut inside its last batch: the read fails there (onCorrupt
    fail) or leaves out that batch with a warning (skip), never quietly (it was left out with no word)."""
    copy = writable_copy(generated)
    batches = _batch_positions(generated, "orders-0")
    bases = sorted({b[0] for b in batches})
    assert len(bases) > 1
    base, _pos, first, last = [b for b in batches if b[0] == bases[0]][-1]
    path = copy / "orders-0" / f"{base:020d}.log"
    os.truncate(path, path.stat().st_size - 10)
    with pytest.raises(CorruptRecordError, match="bytes after the last whole batch of a sealed segment"):
        read_plan(plan(copy, topics="orders"))
    rows = read_plan(plan(copy, topics="orders", onCorrupt="skip"))
    expect = [r for r in engine_rows(generated) if r[0] == "orders" and not (r[1] == 0 and first <= r[2] <= last)]
    assert rows == expect


@pytest.mark.allow_warnings("damaged data is read with a warning on purpose (onCorrupt=skip)")
@pytest.mark.parametrize("kernel", [True, False])
@pytest.mark.parametrize("split_bytes", [None, 1])
def test_offsets_out_of_order_are_damage(generated, writable_copy, monkeypatch, caplog, kernel, split_bytes):
    """A batch's base offset is outside its CRC: one rewritten to lie far ahead (or behind) of its
    neighbours is damage, as consume, the mount and verify judge it (SPEC §4). Spark served its records
    at the wrong offsets with no word, onCorrupt=fail or not. The batch is judged whether it is in the
    middle of a piece or the last one (every batch its own piece with maxBytesPerPartition=1)."""
    from kafkafs.spark import scan

    if not kernel:
        monkeypatch.setattr(scan, "available", lambda: False)
    batches = [b for b in _batch_positions(generated, "orders-0") if b[0] == 120]
    assert len(batches) > 3
    options = {"topics": "orders"} if split_bytes is None else {"topics": "orders", "maxBytesPerPartition": split_bytes}
    copy = writable_copy(generated)
    for which, offset in ((1, 10**12), (2, 5)):  # far ahead of the next batch; behind the one before
        base, pos, first, last = batches[which]
        path = copy / "orders-0" / f"{base:020d}.log"
        with open(path, "r+b") as f:
            f.seek(pos)
            f.write(offset.to_bytes(8, "big"))
        with pytest.raises(CorruptRecordError, match=r"offsets (run past the next batch's base|go backwards)") as info:
            read_plan(plan(copy, **options))
        assert info.value.file == str(path)
        caplog.clear()
        rows = read_plan(plan(copy, onCorrupt="skip", **options))
        assert any("offsets out of order" in m for m in caplog.messages)
        assert len(rows) == len([r for r in engine_rows(generated) if r[0] == "orders"])
        with open(path, "r+b") as f:  # as it was, for the next case
            f.seek(pos)
            f.write(first.to_bytes(8, "big"))


@pytest.mark.parametrize("split_bytes", [None, 1])
def test_a_legacy_wrapper_overlapping_the_entry_before_is_damage(tmp_path, split_bytes):
    """review6 F11 remainder (SPEC §4): a gzip wrapper at offset 6 whose inner offsets 4, 5, 6 overlap the
    entry at 4 before it. Spark served offset 4 twice with no word; now the read fails naming the file,
    in the middle of a piece and at a piece's end (every entry its own piece with maxBytesPerPartition=1)."""
    from tests.format.test_legacy import overlapping_wrapper_segment

    options = {} if split_bytes is None else {"maxBytesPerPartition": split_bytes}
    for magic in (0, 1):
        path = tmp_path / f"old{magic}-0" / "00000000000000000000.log"
        path.parent.mkdir()
        path.write_bytes(overlapping_wrapper_segment(magic))
        with pytest.raises(CorruptRecordError, match=r"offsets run past the next batch's base \(4, then 4\)") as info:
            read_plan(plan(tmp_path, topics=f"old{magic}", **options))
        assert info.value.file == str(path)


@pytest.mark.allow_warnings("onCorrupt=skip says what it skips")
def test_a_legacy_inner_message_whose_crc_fails_is_damage(tmp_path):
    """fix37's leftover of review16 R16-4: a gzip wrapper whose inner message at offset 4 fails its own CRC
    (the wrapper's holds) was read as sound. As a v2 batch that fails its CRC (Kafka's consumer fails the
    fetch there, check.crcs): the read fails naming the record, and onCorrupt=skip skips the wrapper."""
    from tests.format.test_legacy import inner_crc_damaged

    for magic in (0, 1):
        path = tmp_path / f"old{magic}-0" / "00000000000000000000.log"
        path.parent.mkdir()
        path.write_bytes(inner_crc_damaged(magic))
        with pytest.raises(CorruptRecordError, match="inner message at offset 4: crc mismatch") as info:
            read_plan(plan(tmp_path, topics=f"old{magic}"))
        assert info.value.file == str(path)
        assert [r[2] for r in read_plan(plan(tmp_path, topics=f"old{magic}", onCorrupt="skip"))] == [0, 1, 2, 6, 7]


@pytest.mark.allow_warnings("onCorrupt=skip says what it skips")
@pytest.mark.parametrize("kernel", [True, False])
@pytest.mark.parametrize("field", ["control", "lastOffsetDelta", "maxTimestamp"])
def test_a_batch_is_left_out_by_its_header_only_once_its_crc_holds(
    generated, writable_copy, monkeypatch, caplog, kernel, field
):
    """R23-12: a data batch whose damaged header says "control" (one bit), or whose lastOffsetDelta or
    maxTimestamp is damaged below a start offset or a time filter, was left out with no word under
    onCorrupt=fail: those fields are inside the CRC, and Kafka's consumer checks the CRC first."""
    import struct

    from kafkafs.spark import scan

    if not kernel:
        monkeypatch.setattr(scan, "available", lambda: False)
    batches = [b for b in _batch_positions(generated, "orders-0") if b[0] == 120]
    which = next(i for i, b in enumerate(batches) if i >= 3 and b[3] > b[2])  # a batch of 2 records or more
    base, pos, first, last = batches[which]
    copy = writable_copy(generated)
    path = copy / "orders-0" / f"{base:020d}.log"
    data = bytearray(path.read_bytes())
    first_ts = struct.unpack_from(">q", data, pos + 27)[0]
    options: dict = {"topics": "orders"}
    predicates = NO_PREDICATES
    if field == "control":
        data[pos + 22] ^= 0x20
    elif field == "lastOffsetDelta":
        struct.pack_into(">i", data, pos + 23, 0)  # last offset = first, below the start
        options["startingOffsets"] = f'{{"orders": {{"0": {first + 1}, "1": -2}}}}'  # every partition, as Spark wants
    else:
        struct.pack_into(">q", data, pos + 35, 1000)  # below the time filter
        predicates = Predicates(timestamp=IntBounds(lo=first_ts * 1000))
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError, match="CRC mismatch") as info:
        read_plan(plan(copy, predicates, **options))
    assert info.value.file == str(path) and f"position {pos}" in str(info.value)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kafkafs.spark"):
        rows = read_plan(plan(copy, predicates, onCorrupt="skip", **options))
    assert any(f"position {pos}" in m and "CRC mismatch" in m for m in caplog.messages)
    assert not [r for r in rows if r[1] == 0 and first <= r[2] <= last]
