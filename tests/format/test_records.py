"""The reference record decoder's edge rules (format/records.py): Kafka's varint limits, 64-bit
arithmetic, control record names."""

import struct

import pytest

from kafkafs.errors import CorruptRecordError
from kafkafs.format.batch import decode_batch, encode_batch, read_batch_header
from kafkafs.format.records import control_type_of, decode_records


def _section(record_body: bytes) -> bytes:
    return bytes([len(record_body) << 1]) + record_body


def _header(count=1, base_offset=0, first_ts=0):
    raw = encode_batch([(first_ts, None, b"x", ())], base_offset=base_offset)
    return read_batch_header(raw)._replace(record_count=count)


def test_a_non_minimal_varint_reads_as_kafka_reads_it():
    # attributes, tsDelta 0 written in 3 bytes, offsetDelta 0, key null, value "x", no headers
    body = b"\x00" + b"\x80\x80\x00" + b"\x00" + b"\x01" + b"\x02x" + b"\x00"
    batch = decode_records(_section(body), _header())
    assert batch.timestamps == [0] and batch.values == [b"x"]


def test_a_varint_longer_than_5_bytes_is_corrupt():
    body = b"\x00\x00" + b"\x80\x80\x80\x80\x80\x00" + b"\x01\x02x\x00"
    with pytest.raises(CorruptRecordError, match="longer than 5"):
        decode_records(_section(body), _header())


def test_a_varint_past_32_bits_is_corrupt():
    body = b"\x00\x00" + b"\x80\x80\x80\x80\x10" + b"\x01\x02x\x00"
    with pytest.raises(CorruptRecordError, match="32-bit"):
        decode_records(_section(body), _header())


def test_offsets_and_timestamps_wrap_as_java_longs():
    body = b"\x00" + b"\x02" + b"\x02" + b"\x01\x02x\x00"  # tsDelta 1, offsetDelta 1
    batch = decode_records(_section(body), _header(base_offset=(1 << 63) - 1, first_ts=(1 << 63) - 1))
    assert batch.offsets == [-(1 << 63)] and batch.timestamps == [-(1 << 63)]


@pytest.mark.parametrize(
    "key, name",
    [(struct.pack(">hh", 0, 0), "ABORT"), (struct.pack(">hh", 0, 1), "COMMIT"), (struct.pack(">hh", 0, 2), "LEADER_CHANGE"),
     (struct.pack(">hh", 0, 3), "SNAPSHOT_HEADER"), (struct.pack(">hh", 0, 4), "SNAPSHOT_FOOTER"),
     (struct.pack(">hh", 0, 5), "KRAFT_VERSION"), (struct.pack(">hh", 0, 6), "KRAFT_VOTERS"),
     (struct.pack(">hh", 0, 7), "UNKNOWN"), (struct.pack(">hh", 0, -1), "UNKNOWN"), (b"\x00", "UNKNOWN"), (None, "UNKNOWN")],
)
def test_control_names(key, name):
    assert control_type_of(key) == name


def test_decode_batch_places_errors_at_the_batch():
    raw = bytearray(encode_batch([(1, b"k", b"v", ())]))
    raw[-1] = 5  # header count 5 (-3 zigzag): the record no longer adds up
    with pytest.raises(CorruptRecordError):
        decode_batch(bytes(raw), validate=False)
