"""The kernel's Arrow columns (``_kernel.ArrowBuilder`` via :mod:`kafkafs.spark.arrowcols`) against the
Python reference (:class:`kafkafs.spark.scan._Columns` over :func:`kafkafs.format.records.decode_records`):
the same Arrow batches for arbitrary records sections (null and empty keys, values and header values,
non-UTF-8 header keys, any offset and timestamp deltas, bounds), the same damage refused; and whole
segment files read through the kernel's walk and through the reference's loop alike (compressed,
control, transactional, legacy and damaged batches, reads cut anywhere, every scan option)."""

from __future__ import annotations

import json
import struct
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkafs.errors import CorruptRecordError, InvalidInput, OffsetOutOfRange
from kafkafs.format import kernel
from kafkafs.format import records as ref_records
from kafkafs.format.batch import BatchHeader, encode_batch, encode_control_batch
from kafkafs.format.compression import Codec
from kafkafs.format.varint import encode_varint, encode_varlong
from kafkafs.spark import arrowcols, scan
from kafkafs.spark.arrowcols import KernelColumns
from kafkafs.spark.plan import ScanSpec
from kafkafs.spark.predicates import IntBounds, Predicates

from .helpers import plan

pytestmark = pytest.mark.skipif(not arrowcols.available(), reason="the compiled kernel is not built")

I64 = st.integers(-(2**63), 2**63 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)
DATA = st.none() | st.binary(max_size=12)
HEADER_KEYS = st.binary(max_size=8) | st.text(max_size=5).map(lambda s: s.encode("utf-8", "surrogatepass"))
RECORD = st.tuples(I64, I32, DATA, DATA, st.lists(st.tuples(HEADER_KEYS, DATA), max_size=3))


def _bytes(out: bytearray, data: bytes | None) -> None:
    out += b"\x01" if data is None else encode_varint(len(data)) + data


def _section(records) -> bytes:
    """A records section from (timestamp delta, offset delta, key, value, [(header key bytes, value)])."""
    out = bytearray()
    for ts_delta, offset_delta, key, value, headers in records:
        rec = bytearray(b"\x00") + encode_varlong(ts_delta) + encode_varint(offset_delta)
        _bytes(rec, key)
        _bytes(rec, value)
        rec += encode_varint(len(headers))
        for hk, hv in headers:
            _bytes(rec, hk)
            _bytes(rec, hv)
        out += encode_varint(len(rec)) + rec
    return bytes(out)


@st.composite
def damaged(draw, data: bytes) -> bytes:
    """The section as it is, or with bytes flipped, cut, inserted, or replaced by arbitrary ones."""
    how = draw(st.sampled_from(["none", "none", "flip", "cut", "insert", "random"]))
    if how == "none" or not data and how != "random":
        return data
    if how == "random":
        return draw(st.binary(max_size=60))
    at = draw(st.integers(0, len(data) - 1))
    if how == "flip":
        return data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1 :]
    if how == "cut":
        return data[:at]
    return data[:at] + draw(st.binary(min_size=1, max_size=3)) + data[at:]


@st.composite
def sections(draw):
    """(topic, partition, data, header, first, end) of one batch's records section."""
    records = draw(st.lists(RECORD, max_size=6))
    data = draw(damaged(_section(records)))
    count = len(records) + draw(st.sampled_from([0, 0, 0, -1, 1]))
    log_append = draw(st.booleans())
    header = BatchHeader(
        position=0, base_offset=draw(st.integers(0, 2**63 - 1) | st.integers(0, 1000)), batch_length=0,
        partition_leader_epoch=-1, magic=2, crc=0, attributes=0x08 if log_append else 0, last_offset_delta=0,
        first_timestamp=draw(I64), max_timestamp=draw(I64), producer_id=-1, producer_epoch=-1,
        base_sequence=-1, record_count=count,
    )
    base = header.base_offset
    top = 2**63 - 1  # offsets and bounds are Kafka longs
    first = draw(st.integers(0, top) | st.integers(max(base - 3, 0), min(base + 8, top)))
    end = draw(st.none() | st.integers(0, top) | st.integers(base, min(base + 10, top)))
    return draw(st.sampled_from(["t", "u"])), draw(st.sampled_from([0, 1])), data, header, first, end


def _reference_add(columns: scan._Columns, topic, partition, data, header, first, end) -> str | None:
    """What scan.py does with a section through the Python reference; None, or the damage message as
    the kernel's decode words it (the scan's message when the kernel is built): the Python decoder
    finds some damage later in a record and words it differently, so it is only held to refusing."""
    try:
        batch = ref_records.decode_records(data, header)
    except (CorruptRecordError, IndexError, ValueError, OverflowError):
        with pytest.raises(CorruptRecordError) as kernel_decode:
            kernel.decode_records(data, header)
        return kernel_decode.value.reason
    import bisect

    offsets = batch.offsets
    lo = 0 if offsets[:1] and offsets[0] >= first else bisect.bisect_left(offsets, first)
    hi = len(offsets)
    if end is not None and offsets and offsets[-1] >= end:
        hi = bisect.bisect_left(offsets, end)
    columns.add(topic, partition, batch, lo, hi)
    return None


def _same(kernel: pa.RecordBatch | None, reference: pa.RecordBatch | None) -> None:
    if reference is None:
        assert kernel is None
        return
    assert kernel is not None
    assert kernel.schema.equals(reference.schema)
    assert kernel.num_rows == reference.num_rows
    for name in kernel.schema.names:
        k, r = kernel.column(name), reference.column(name)
        if name == "timestamp":  # as numbers: a wrapped microsecond count is no datetime
            k, r = k.cast(pa.int64()), r.cast(pa.int64())
        assert k.to_pylist() == r.to_pylist(), name
    assert kernel.equals(reference)
    kernel.validate(full=True)


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(sections(), min_size=1, max_size=4), st.booleans(), st.sampled_from([None, (0, 2**62), (-5, 5)]))
def test_sections_give_the_reference_batches(batches, include_headers, ts_bounds):
    ts = IntBounds() if ts_bounds is None else IntBounds(lo=ts_bounds[0], hi=ts_bounds[1])
    spec = ScanSpec(include_headers=include_headers, timestamp=ts)
    reference, built = scan._Columns(include_headers), KernelColumns(include_headers)
    for topic, partition, data, header, first, end in batches:
        expected = _reference_add(reference, topic, partition, data, header, first, end)
        try:
            built.add_section(topic, partition, data, header, first, end)
            got = None
        except CorruptRecordError as exc:
            got = exc.reason
        assert got == expected
        assert built.rows == reference.rows
    _same(built.build(spec), reference.build(spec))
    assert built.rows == 0 and built.build(spec) is None


@settings(deadline=None)
@given(st.lists(RECORD, max_size=8), st.data())
def test_decoded_columns_give_the_reference_batches(records, data):
    header = BatchHeader(0, 5, 0, -1, 2, 0, 0, 0, 1000, 2000, -1, -1, -1, len(records))
    batch = ref_records.decode_records(_section(records), header)
    lo = data.draw(st.integers(0, len(records)))
    hi = data.draw(st.integers(0, len(records)))
    for include_headers in (False, True):
        reference, built = scan._Columns(include_headers), KernelColumns(include_headers)
        reference.add("t", 3, batch, lo, hi)
        built.add("t", 3, batch, lo, hi)
        spec = ScanSpec(include_headers=include_headers)
        _same(built.build(spec), reference.build(spec))


def test_non_utf8_header_keys_are_replaced_as_python_does():
    keys = [b"\xff", b"a\xc3", b"\xed\xa0\x80x", b"\xf0\x9f\x98", b"ok\xe2\x82\xac"]
    records = [(0, i, None, b"v", [(k, None)]) for i, k in enumerate(keys)]
    header = BatchHeader(0, 0, 0, -1, 2, 0, 0, 0, 0, 0, -1, -1, -1, len(records))
    built = KernelColumns(True)
    built.add_section("t", 0, _section(records), header, 0, None)
    got = built.build(ScanSpec(include_headers=True)).column("headers").to_pylist()
    assert [h[0]["key"] for h in got] == [k.decode("utf-8", "replace") for k in keys]


# ------------------------------------------------------------------------------------ whole segments


def _legacy(magic: int, offset: int, n: int, codec: int) -> bytes:
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for i in range(n):
        builder.append(offset + i, timestamp=1_600_000_000_000 + i if magic else None, key=b"k%d" % i, value=b"v")
    return bytes(builder.build())


KINDS = ["plain", "plain", "plain", "gzip", "control", "txn", "append", "crc", "records", "legacy0", "legacy1",
         "zero_count", "length", "control_bit", "delta", "max_ts"]


@st.composite
def segment(draw) -> bytes:
    """The bytes of a .log: batches of every kind, some damaged, offsets growing as a broker writes them."""
    out, offset = bytearray(), 0
    for kind in draw(st.lists(st.sampled_from(KINDS), max_size=8)):
        n = draw(st.integers(1, 4))
        recs = [(1000 + 10 * offset + i, draw(DATA), draw(DATA),
                 draw(st.lists(st.tuples(st.text(max_size=3), DATA), max_size=2))) for i in range(n)]
        if kind.startswith("legacy"):
            out += _legacy(int(kind[-1]), offset, n, 0)
        elif kind == "control":
            out += encode_control_batch(draw(st.sampled_from(["ABORT", "COMMIT"])), producer_id=9, producer_epoch=0, timestamp=7, base_offset=offset)
            n = 1
        else:
            raw = bytearray(encode_batch(
                recs, base_offset=offset, compression=Codec.GZIP if kind == "gzip" else Codec.NONE,
                transactional=kind == "txn", producer_id=9 if kind == "txn" else -1,
                log_append_time=5_000 if kind == "append" else None,
            ))
            if kind == "crc":
                raw[-1] ^= 0x10
            elif kind == "records":  # a record count the bytes do not hold, CRC made right again
                struct.pack_into(">i", raw, 57, n + 1)
                from crc32c import crc32c

                struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
            elif kind == "control_bit":  # a data batch damaged to say "control" (R23-12)
                raw[22] ^= 0x20
            elif kind == "delta":  # a lastOffsetDelta damaged below a start offset
                struct.pack_into(">i", raw, 23, 0)
            elif kind == "max_ts":  # a maxTimestamp damaged below a time filter
                struct.pack_into(">q", raw, 35, 1000)
            elif kind == "length":
                struct.pack_into(">i", raw, 8, 20)  # below the v2 minimum: a damaged header
            out += raw
        offset += n
    if draw(st.booleans()):
        out += bytes(draw(st.integers(0, 30)))  # a zero-filled or cut tail
    return bytes(out)


def _read(p, kernel: bool, caplog):
    """(batches, None) or (None, the error), and the warnings logged."""
    caplog.clear()
    try:
        return [b for s in p.splits for b in scan.read_split(s, kernel=kernel)], None, caplog.messages
    except CorruptRecordError as exc:
        return None, str(exc), caplog.messages


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture], deadline=None,
          max_examples=150)
@given(segment(), st.integers(17, 600) | st.just(1 << 20), st.data())
def test_segments_read_alike_through_the_walk(monkeypatch, caplog, log, walk_bytes, data):
    monkeypatch.setattr(scan, "_WALK_BYTES", walk_bytes)
    options = {
        "onCorrupt": data.draw(st.sampled_from(["skip", "fail"])),
        "batchRows": data.draw(st.integers(1, 12)),
        "includeHeaders": data.draw(st.sampled_from(["true", "false"])),
        "isolationLevel": data.draw(st.sampled_from(["read_committed", "read_uncommitted"])),
    }
    start = data.draw(st.integers(0, 12))
    if data.draw(st.booleans()):
        options["startingOffsets"] = json.dumps({"t": {"0": start}})
    if data.draw(st.booleans()):
        options["endingOffsets"] = json.dumps({"t": {"0": data.draw(st.integers(start, 30))}})
    ts = data.draw(st.sampled_from([None, 1_000_005, 1_000_050]))
    predicates = Predicates(timestamp=IntBounds(lo=ts * 1000) if ts is not None else IntBounds())
    with tempfile.TemporaryDirectory() as tmp:
        part = Path(tmp) / "t-0"
        part.mkdir()
        (part / "00000000000000000000.log").write_bytes(log)
        try:
            p = plan(tmp, predicates, **options)
        except (InvalidInput, OffsetOutOfRange):  # a start (or an end) past the log end fails the plan, as in Spark
            return
        got, got_err, got_warnings = _read(p, True, caplog)
        expected, expected_err, expected_warnings = _read(p, False, caplog)
    assert got_err == expected_err
    assert got_warnings == expected_warnings
    if expected is not None:
        assert [b.num_rows for b in got] == [b.num_rows for b in expected]
        for g, e in zip(got, expected, strict=True):
            _same(g, e)


@pytest.mark.parametrize("name", ["kafka-logs-a", "kafka-logs-b", "kafka-logs-c"])
def test_broker_written_logs_read_alike(fixtures_dir, name):
    for include_headers in ("true", "false"):
        p = plan(fixtures_dir / name, includeHeaders=include_headers, batchRows=50, maxBytesPerPartition=8192)
        got, got_err, _ = _read(p, True, _NoLog())
        expected, expected_err, _ = _read(p, False, _NoLog())
        assert got_err is None and expected_err is None
        assert [b.num_rows for b in got] == [b.num_rows for b in expected] and sum(b.num_rows for b in got)
        for g, e in zip(got, expected, strict=True):
            _same(g, e)


class _NoLog:
    messages: list = []

    def clear(self) -> None:
        pass


def test_without_the_kernel_the_reference_reads(monkeypatch, fixtures_dir):
    from kafkafs.format import kernel as kernel_module

    p = plan(fixtures_dir / "kafka-logs-b")
    expected = [b for s in p.splits for b in scan.read_split(s)]
    monkeypatch.setattr(kernel_module, "KERNEL", None)  # as if it had never been built
    assert not arrowcols.available()
    got = [b for s in p.splits for b in scan.read_split(s)]
    assert sum(b.num_rows for b in got) == 8
    for g, e in zip(got, expected, strict=True):
        _same(g, e)
