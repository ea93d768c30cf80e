"""RecordBatch v2: golden bytes, round trips, an independent oracle (kafka-python), and damage."""

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkafs.errors import CorruptRecordError
from kafkafs.format.batch import (
    Codec,
    Header,
    decode_batch,
    encode_batch,
    encode_control_batch,
    read_batch_header,
    scan_batches,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_batch,
)
from kafkafs.format.records import control_type_of

# One record, key "k", value "v", timestamp 1700000000000, base offset 0, leader epoch 0, no producer.
GOLDEN = bytes.fromhex(
    "0000000000000000"  # baseOffset 0
    "0000003a"  # batchLength 58
    "00000000"  # partitionLeaderEpoch 0
    "02"  # magic 2
    "e99b8dd8"  # crc (CRC-32C of the bytes from attributes on)
    "0000"  # attributes: no compression, CreateTime
    "00000000"  # lastOffsetDelta 0
    "0000018bcfe56800"  # firstTimestamp
    "0000018bcfe56800"  # maxTimestamp
    "ffffffffffffffff"  # producerId -1
    "ffff"  # producerEpoch -1
    "ffffffff"  # baseSequence -1
    "00000001"  # recordCount 1
    "10"  # record length 8
    "00"  # attributes
    "00"  # timestampDelta 0
    "00"  # offsetDelta 0
    "02" "6b"  # key length 1, "k"
    "02" "76"  # value length 1, "v"
    "00"  # no headers
)

CODECS = [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]


def test_golden_batch_decodes():
    header = read_batch_header(GOLDEN)
    assert header.size == len(GOLDEN) == 70
    assert header.crc == 0xE99B8DD8
    assert (header.base_offset, header.last_offset, header.record_count) == (0, 0, 1)
    assert header.max_timestamp == 1_700_000_000_000
    batch = decode_batch(GOLDEN, header)
    assert list(batch) == [(0, 1_700_000_000_000, b"k", b"v", ())]


def test_golden_batch_encodes_byte_for_byte():
    assert encode_batch([(1_700_000_000_000, b"k", b"v", ())], partition_leader_epoch=0) == GOLDEN


def test_golden_batch_in_kafka_python():
    from kafka.record.default_records import DefaultRecordBatch

    batch = DefaultRecordBatch(GOLDEN)
    assert batch.validate_crc()
    assert [(r.offset, r.key, r.value) for r in batch] == [(0, b"k", b"v")]


# ----------------------------------------------------------------------------------------- round trips

header_keys = st.text(max_size=12)
maybe_bytes = st.one_of(st.none(), st.binary(max_size=64))
timestamps = st.integers(-(2**40), 2**42)  # before 1970 too
records_strategy = st.lists(
    st.tuples(
        timestamps,
        maybe_bytes,
        maybe_bytes,
        st.lists(st.tuples(header_keys, maybe_bytes), max_size=3).map(tuple),
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=records_strategy,
    base_offset=st.one_of(st.integers(0, 2**20), st.integers(2**63 - 2**32, 2**63 - 2**31 - 1)),
    gap=st.sampled_from([1, 2, 2**20]),
    codec=st.sampled_from(CODECS),
)
def test_round_trip(records, base_offset, gap, codec):
    deltas = [i * gap for i in range(len(records))]
    data = encode_batch(records, base_offset=base_offset, offset_deltas=deltas, compression=codec)
    header = read_batch_header(data)
    assert header.size == len(data)
    assert header.compression == codec
    assert header.last_offset == base_offset + deltas[-1]
    batch = decode_batch(data)
    assert batch.offsets == [base_offset + d for d in deltas]
    assert batch.timestamps == [r[0] for r in records]
    assert batch.keys == [r[1] for r in records]
    assert batch.values == [r[2] for r in records]
    assert [tuple(tuple(h) for h in hs) for hs in batch.headers] == [r[3] for r in records]


def test_offset_delta_near_two_to_the_31():
    records = [(0, b"a", b"1", ()), (1, b"b", b"2", ())]
    data = encode_batch(records, base_offset=2**63 - 2**31, offset_deltas=[0, 2**31 - 1])
    assert decode_batch(data).offsets == [2**63 - 2**31, 2**63 - 1]


def test_empty_strings_are_not_null():
    data = encode_batch([(5, b"", b"", (("", b""),))])
    assert list(decode_batch(data)) == [(0, 5, b"", b"", [Header("", b"")])]


def test_log_append_time_gives_every_record_the_max_timestamp():
    data = bytearray(encode_batch([(1, b"a", b"x", ()), (2, b"b", b"y", ())]))
    set_log_append_time(data, 0, 99)
    validate_batch(data, read_batch_header(data))
    batch = decode_batch(bytes(data))
    assert batch.timestamp_type == 1
    assert batch.timestamps == [99, 99]


def test_patching_base_offset_and_epoch_keeps_the_crc():
    data = bytearray(GOLDEN)
    set_base_offset(data, 0, 1234)
    set_partition_leader_epoch(data, 0, 7)
    header = read_batch_header(data)
    assert (header.base_offset, header.partition_leader_epoch) == (1234, 7)
    assert decode_batch(data).offsets == [1234]


def test_control_batch():
    data = encode_control_batch("COMMIT", producer_id=42, producer_epoch=3, timestamp=10, base_offset=9)
    batch = decode_batch(data)
    assert batch.is_control and batch.is_transactional and batch.producer_id == 42
    assert control_type_of(batch.keys[0]) == "COMMIT"


def test_scan_stops_at_a_partial_trailing_batch():
    one = encode_batch([(1, b"a", b"x", ())])
    two = encode_batch([(2, b"b", b"y", ())], base_offset=1)
    log = one + two + two[:30]
    headers = list(scan_batches(log))
    assert [h.position for h in headers] == [0, len(one)]
    assert headers[-1].end == len(one) + len(two)


def test_scan_reports_a_bad_magic_with_its_position():
    one = encode_batch([(1, b"a", b"x", ())])
    bad = bytearray(one)
    bad[16] = 200  # negative to Kafka: a legacy message it cannot read
    with pytest.raises(CorruptRecordError, match="unknown magic 200") as err:
        list(scan_batches(one + bytes(bad)))
    assert err.value.position == len(one)


@pytest.mark.parametrize("magic", [3, 7, 127])
def test_a_magic_past_2_is_read_as_v2_as_kafka_does(magic):
    """Kafka's FileLogInputStream reads any magic above 1 as a v2 batch (review11 R11-8); the magic is
    outside the CRC, so the batch is whole and valid."""
    one = encode_batch([(1, b"a", b"x", ())])
    odd = bytearray(encode_batch([(2, b"b", b"y", ())], base_offset=1))
    odd[16] = magic
    headers = list(scan_batches(one + bytes(odd)))
    assert [(h.base_offset, h.magic) for h in headers] == [(0, 2), (1, 2)]
    validate_batch(one + bytes(odd), headers[1])
    assert decode_batch(bytes(odd)).values == [b"y"]


def test_max_batch_size():
    data = encode_batch([(1, b"a", b"x" * 1000, ())])
    with pytest.raises(CorruptRecordError, match="exceeds"):
        read_batch_header(data, 0, None, max_batch_size=100)


def test_crc_mismatch_is_reported():
    data = bytearray(GOLDEN)
    data[-2] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_batch(bytes(data))
    # without validation the damage may still decode: the caller chose
    assert len(decode_batch(bytes(data), validate=False)) == 1


# ----------------------------------------------------------------------------- kafka-python as oracle

def _kp_build(codec, records, transactional=False):
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=transactional,
        producer_id=77 if transactional else -1,
        producer_epoch=1 if transactional else -1,
        base_sequence=0 if transactional else -1,
        batch_size=1 << 20,
    )
    for i, (ts, key, value, headers) in enumerate(records):
        builder.append(i, timestamp=ts, key=key, value=value, headers=list(headers))
    return bytes(builder.build())


SAMPLE = [
    (1_763_700_000_000 + i, f"key-{i}".encode() if i % 3 else None, b'{"n": %d}' % i, (("h", b"v"),) if i % 2 else ())
    for i in range(50)
]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_decodes_what_kafka_python_builds(codec):
    data = _kp_build(codec, SAMPLE)
    header = read_batch_header(data)
    assert header.compression == codec
    batch = decode_batch(data)
    assert batch.offsets == list(range(50))
    assert batch.timestamps == [r[0] for r in SAMPLE]
    assert batch.keys == [r[1] for r in SAMPLE]
    assert batch.values == [r[2] for r in SAMPLE]
    assert [tuple((h.key, h.value) for h in hs) for hs in batch.headers] == [r[3] for r in SAMPLE]


def test_decodes_a_transactional_kafka_python_batch():
    batch = decode_batch(_kp_build(Codec.NONE, SAMPLE[:3], transactional=True))
    assert batch.is_transactional and batch.producer_id == 77 and batch.header.base_sequence == 0


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_kafka_python_decodes_what_we_encode(codec):
    from kafka.record.default_records import DefaultRecordBatch

    data = encode_batch(SAMPLE, base_offset=1000, compression=codec, partition_leader_epoch=3)
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc()
    assert batch.compression_type == int(codec)
    decoded = list(batch)
    assert [r.offset for r in decoded] == list(range(1000, 1050))
    assert [r.timestamp for r in decoded] == [r[0] for r in SAMPLE]
    assert [r.key for r in decoded] == [r[1] for r in SAMPLE]
    assert [r.value for r in decoded] == [r[2] for r in SAMPLE]
    assert [tuple(r.headers) for r in decoded] == [r[3] for r in SAMPLE]


# -------------------------------------------------------------------------------------------- damage

VALID = [
    encode_batch(SAMPLE[:10], compression=c, base_offset=5) for c in CODECS
] + [_kp_build(Codec.NONE, SAMPLE[:5])]


def _decode_all(data: bytes) -> None:
    for header in scan_batches(data, max_batch_size=1 << 20):
        decode_batch(data, header, max_inflated_bytes=1 << 20)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    which=st.integers(0, len(VALID) - 1),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), min_size=1, max_size=4),
    cut=st.one_of(st.none(), st.integers(0, 10_000)),
    validate=st.booleans(),
)
def test_mutations_raise_only_our_error(which, flips, cut, validate):
    data = bytearray(VALID[which])
    for pos, xor in flips:
        data[pos % len(data)] ^= xor
    if cut is not None:
        data = data[: cut % (len(data) + 1)]
    try:
        for header in scan_batches(bytes(data), max_batch_size=1 << 20):
            decode_batch(bytes(data), header, validate=validate, max_inflated_bytes=1 << 20)
    except CorruptRecordError:
        pass


@settings(max_examples=200, deadline=None)
@given(
    field=st.sampled_from(["length", "count", "record_length", "key_length"]),
    value=st.sampled_from([-(2**31), -2, -1, 0, 1, 2**20, 2**31 - 1]),
)
def test_absurd_lengths_and_counts(field, value):
    data = bytearray(encode_batch(SAMPLE[:3]))
    if field == "length":
        struct.pack_into(">i", data, 8, value)
    elif field == "count":
        struct.pack_into(">i", data, 57, value)
    elif field == "record_length":
        data[61] = (value & 0x7F) if value >= 0 else 0x03
    else:
        data[65] = 0x7F if value > 0 else 0x05
    try:
        _decode_all(bytes(data))
        for header in scan_batches(bytes(data)):
            decode_batch(bytes(data), header, validate=False)
    except CorruptRecordError:
        pass


def test_huge_record_count_fails_fast():
    data = bytearray(encode_batch(SAMPLE[:3]))
    struct.pack_into(">i", data, 57, 2**31 - 1)
    with pytest.raises(CorruptRecordError, match="record count"):
        decode_batch(bytes(data), validate=False)


def test_trailing_garbage_after_records():
    data = encode_batch(SAMPLE[:3])
    padded = bytearray(data + b"\x00\x00")
    struct.pack_into(">i", padded, 8, len(data) + 2 - 12)
    with pytest.raises(CorruptRecordError, match="left over"):
        decode_batch(bytes(padded), validate=False)


# ----------------------------------------------------------------------------- legacy through decode_batch


def _legacy_set(magic: int, codec: int, n: int = 5, first_offset: int = 0) -> bytes:
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for i in range(n):
        builder.append(first_offset + i, timestamp=1_600_000_000_000 + i if magic else None,
                       key=b"k%d" % i, value=b"v%d" % i)
    return bytes(builder.build())


@pytest.mark.parametrize("magic, codec", [(0, 0), (1, 0), (0, 1), (1, 1), (1, 2), (1, 3)])
def test_legacy_message_sets_scan_validate_and_decode(magic, codec):
    data = _legacy_set(magic, codec) + _legacy_set(magic, codec, first_offset=5)
    headers = list(scan_batches(data))
    records = []
    for h in headers:
        validate_batch(data, h)  # the stored CRC-32 is where legacy messages keep it
        records.extend(decode_batch(data, h))
    assert [r.offset for r in records] == list(range(10))
    assert [r.key for r in records] == [b"k%d" % (i % 5) for i in range(10)]
    assert [r.value for r in records] == [b"v%d" % (i % 5) for i in range(10)]
    if magic:
        assert [r.timestamp for r in records] == [1_600_000_000_000 + i % 5 for i in range(10)]


def test_a_flipped_byte_in_a_legacy_message_fails_its_crc():
    data = bytearray(_legacy_set(1, 0, n=1))
    data[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC"):
        validate_batch(data, read_batch_header(data))


def test_decoded_batch_between():
    batch = decode_batch(encode_batch(SAMPLE[:5], base_offset=10))
    assert batch.between(12).offsets == [12, 13, 14]
    assert batch.between(11, 12).offsets == [11, 12] and batch.between(11, 12).keys == batch.keys[1:3]
    assert batch.between(0) is batch and batch.between(10, 14) is batch
    assert batch.between(15).offsets == [] and batch.between(0, 9).offsets == []
