"""Legacy message sets (magic 0 and 1): kafka-python as the oracle, Kafka's wrapper rules, damage."""

import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkafs.errors import CorruptRecordError
from kafkafs.format.compression import Codec, compress
from kafkafs.format.legacy import (
    LegacyEntry,
    decode_legacy_entry,
    legacy_entry_size,
)

legacy_records = pytest.importorskip("kafka.record.legacy_records")

MB = 1 << 20
LEGACY_CODECS = [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4]


# ------------------------------------------------------------------------------------------ helpers


def message(offset, magic, attributes=0, timestamp=0, key=None, value=None, crc=None) -> bytes:
    """One entry, written by hand (our own little encoder, for crafting what no library writes)."""
    body = struct.pack(">bB", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for part in (key, value):
        body += struct.pack(">i", -1) if part is None else struct.pack(">i", len(part)) + part
    msg = struct.pack(">I", zlib.crc32(body) if crc is None else crc) + body
    return struct.pack(">qi", offset, len(msg)) + msg


def wrapper(magic, codec, inner: bytes, offset, timestamp=0, log_append=False) -> bytes:
    attributes = int(codec) | (0x08 if log_append else 0)
    return message(offset, magic, attributes, timestamp, None, compress(codec, inner))


def inner_crc_damaged(magic: int) -> bytes:
    """A segment of magic ``magic``: offsets 0-2 plain, a gzip wrapper of 3-5 whose outer CRC holds but
    whose inner message at offset 4 fails its own CRC, then offsets 6-7 plain (review16 R16-4)."""
    firsts = [message(i, magic, 0, 1000 + i, b"k%d" % i, b"v%d" % i) for i in range(3)]
    inner_offsets = (3, 4, 5) if magic == 0 else (0, 1, 2)  # absolute (magic 0), relative (magic 1)
    inner = [message(o, magic, 0, 2000, b"w", b"x%d" % o) for o in inner_offsets]
    inner[1] = inner[1][:-1] + bytes([inner[1][-1] ^ 1])  # its value's last byte: the CRC fails
    after = [message(6 + i, magic, 0, 3000 + i, b"a%d" % i, b"after%d" % i) for i in range(2)]
    return b"".join(firsts) + wrapper(magic, Codec.GZIP, b"".join(inner), 5, 2000) + b"".join(after)


def fix_crc(entry: bytes | bytearray) -> bytes:
    entry = bytearray(entry)
    struct.pack_into(">I", entry, 12, zlib.crc32(entry[16:]))
    return bytes(entry)


def set_wrapper(entry, offset, timestamp=None, log_append=False) -> bytes:
    """What a broker does to a compressed message: set its offset, timestamp and timestamp type."""
    entry = bytearray(entry)
    struct.pack_into(">q", entry, 0, offset)
    if entry[16] == 1:
        if timestamp is not None:
            struct.pack_into(">q", entry, 18, timestamp)
        if log_append:
            entry[17] |= 0x08
    return fix_crc(entry)


def overlapping_wrapper_segment(magic: int) -> bytes:
    """A segment (review6 F11): entries 0..4, then a gzip wrapper at offset 6 whose inner messages are
    4, 5, 6 (increasing, ending at the wrapper's offset, but the first overlaps the entry before it),
    then 7 and 8. Readers dropped the inner 4 without a word (Spark served offset 4 twice)."""
    entries = b"".join(message(i, magic, 0, 1000 + i, b"k%d" % i, b"v%d" % i) for i in range(5))
    inner = b"".join(message(o, magic, 0, 2000, b"w%d" % o, b"x%d" % o) for o in ((4, 5, 6) if magic == 0 else (0, 1, 2)))
    tail = b"".join(message(i, magic, 0, 3000 + i, b"t", b"t%d" % i) for i in (7, 8))
    return entries + wrapper(magic, Codec.GZIP, inner, 6, 2000) + tail


def kafka_python_build(magic, codec, records, offsets) -> bytes:
    builder = legacy_records.LegacyRecordBatchBuilder(magic, int(codec), batch_size=1 << 30)
    for offset, (timestamp, key, value) in zip(offsets, records, strict=True):
        assert builder.append(offset, timestamp, key, value) is not None
    return bytes(builder.build())


def broker_like(magic, codec, records, base_offset, log_append_time=None) -> bytes:
    """A message set as a 0.10 broker stores it: wrappers carry the last offset and max timestamp."""
    n = len(records)
    absolute = list(range(base_offset, base_offset + n))
    if codec == Codec.NONE:
        return kafka_python_build(magic, codec, records, absolute)
    inner_offsets = list(range(n)) if magic == 1 else absolute
    entry = kafka_python_build(magic, codec, records, inner_offsets)
    if log_append_time is not None:
        return set_wrapper(entry, absolute[-1], log_append_time, log_append=True)
    return set_wrapper(entry, absolute[-1], max(r[0] for r in records))


def split(buf: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(buf):
        size = legacy_entry_size(buf, pos)
        assert size is not None
        out.append(buf[pos : pos + size])
        pos += size
    return out


def oracle(entry: bytes) -> list[tuple]:
    batch = legacy_records.LegacyRecordBatch(bytearray(entry), entry[16])
    return [
        (
            r.offset,
            -1 if r.timestamp is None else r.timestamp,
            -1 if r.timestamp_type is None else r.timestamp_type,
            r.key,
            r.value,
        )
        for r in batch
    ]


def ours(entry: LegacyEntry) -> list[tuple]:
    n = len(entry.offsets)
    assert len(entry.timestamps) == len(entry.keys) == len(entry.values) == n
    return list(
        zip(
            entry.offsets, entry.timestamps, [entry.timestamp_type] * n, entry.keys, entry.values, strict=True
        )
    )


def decode_all(buf: bytes, max_size=MB) -> list[LegacyEntry]:
    entries, pos = [], 0
    while pos < len(buf):
        entry = decode_legacy_entry(buf, pos, max_size)
        entries.append(entry)
        pos += entry.size
    return entries


def _needs_codec(magic, codec):
    if magic == 0 and codec == Codec.LZ4:
        pytest.importorskip("xxhash")  # kafka-python writes Kafka 0.8's wrong LZ4 checksum with it


RECORDS = [
    (1_700_000_000_000, b"k1", b"v1"),
    (1_700_000_000_005, None, b"value without key"),
    (1_700_000_000_003, b"key without value", None),
    (1_700_000_000_009, b"", b""),
    (1_700_000_000_001, None, None),
    (1_700_000_000_002, b"\xff\x00binary", b"x" * 5000),
]


# ------------------------------------------------------------------------------- kafka-python oracle


@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("magic", [0, 1])
def test_same_records_as_kafka_python(magic, codec):
    _needs_codec(magic, codec)
    buf = broker_like(magic, codec, RECORDS, base_offset=1000)
    entries = decode_all(buf)
    assert len(entries) == (len(RECORDS) if codec == Codec.NONE else 1)
    decoded = [r for e in entries for r in ours(e)]
    assert decoded == [r for raw in split(buf) for r in oracle(raw)]
    assert [r[0] for r in decoded] == list(range(1000, 1000 + len(RECORDS)))
    assert [(r[3], r[4]) for r in decoded] == [(k, v) for _, k, v in RECORDS]
    if magic == 0:
        assert {r[1] for r in decoded} == {-1} and {r[2] for r in decoded} == {-1}
    else:
        assert [r[1] for r in decoded] == [t for t, _, _ in RECORDS]
        assert {r[2] for r in decoded} == {0}


record = st.tuples(
    st.integers(0, 1 << 42),
    st.none() | st.binary(max_size=20),
    st.none() | st.binary(max_size=60),
)


@settings(max_examples=60, deadline=None)
@given(
    magic=st.sampled_from([0, 1]),
    codec=st.sampled_from([Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4]),
    records=st.lists(record, min_size=1, max_size=8),
    base=st.integers(0, 1 << 40),
    log_append=st.none() | st.integers(0, 1 << 42),
)
def test_same_records_as_kafka_python_hypothesis(magic, codec, records, base, log_append):
    if magic == 0 and codec == Codec.LZ4:
        pytest.importorskip("xxhash")
    buf = broker_like(magic, codec, records, base, log_append if codec != Codec.NONE else None)
    decoded = [r for e in decode_all(buf) for r in ours(e)]
    assert decoded == [r for raw in split(buf) for r in oracle(raw)]
    assert [r[0] for r in decoded] == list(range(base, base + len(records)))


def test_header_fields():
    buf = b"\xee" * 7 + broker_like(1, Codec.GZIP, RECORDS, base_offset=50)
    entry = decode_legacy_entry(buf, 7, MB)
    assert (entry.position, entry.size, entry.magic) == (7, len(buf) - 7, 1)
    assert entry.attributes == Codec.GZIP and entry.codec is Codec.GZIP
    assert entry.crc == struct.unpack_from(">I", buf, 7 + 12)[0]
    assert entry.last_offset == 50 + len(RECORDS) - 1
    assert entry.max_timestamp == max(t for t, _, _ in RECORDS)
    assert entry.timestamp_type == 0


def test_memoryview_and_bytearray_buffers():
    buf = broker_like(1, Codec.SNAPPY, RECORDS, base_offset=3)
    expected = ours(decode_legacy_entry(buf, 0, MB))
    for wrapped in (bytearray(buf), memoryview(buf), memoryview(bytearray(b"..." + buf))[3:]):
        entry = decode_legacy_entry(wrapped, 0, MB)
        assert ours(entry) == expected
        assert all(type(k) is bytes for k in entry.keys if k is not None)
        assert all(type(v) is bytes for v in entry.values if v is not None)


# -------------------------------------------------------------------------------- wrapper rules


def test_compacted_wrapper_keeps_gaps():
    """Magic 1 inner offsets are relative to the wrapper's, which is the LAST inner offset."""
    records = RECORDS[:3]
    entry = kafka_python_build(1, Codec.GZIP, records, [0, 2, 5])
    entry = set_wrapper(entry, 105, timestamp=max(r[0] for r in records))
    decoded = decode_legacy_entry(entry, 0, MB)
    assert decoded.offsets == [100, 102, 105]
    assert ours(decoded) == oracle(entry)


def test_wrapper_offset_zero_means_base_zero():
    """Some librdkafka versions left the wrapper offset at 0 (Kafka reads the inner offsets as is)."""
    inner = b"".join(message(i, 1, 0, 10 + i, None, b"v%d" % i) for i in (3, 4, 5))
    decoded = decode_legacy_entry(wrapper(1, Codec.GZIP, inner, 0, 12), 0, MB)
    assert decoded.offsets == [3, 4, 5]


def test_wrapper_offset_below_last_inner_offset():
    inner = b"".join(message(i, 1, 0, 10, None, b"v") for i in (0, 1, 7))
    with pytest.raises(CorruptRecordError, match="below its last inner offset 7"):
        decode_legacy_entry(wrapper(1, Codec.GZIP, inner, 5, 10), 0, MB)


def test_magic0_inner_offsets_are_absolute():
    inner = b"".join(message(i, 0, 0, 0, None, b"v") for i in (40, 41, 45))
    decoded = decode_legacy_entry(wrapper(0, Codec.SNAPPY, inner, 45), 0, MB)
    assert decoded.offsets == [40, 41, 45]
    assert decoded.timestamps == [-1, -1, -1]
    assert decoded.max_timestamp == -1 and decoded.timestamp_type == -1


def test_inner_offsets_that_go_backwards_are_damage():
    """review6 F11 (SPEC §4: offsets that go backwards are damage, never skipped): a magic 0 wrapper at
    offset 5 whose inner message says 0 (readers trimmed it away silently), inner offsets out of order;
    a dump (``ordered=False``) still shows them as kafka-dump-log does."""
    stray = wrapper(0, Codec.GZIP, message(0, 0, 0, 0, b"k5", b"backward"), 5)
    _corrupt(stray, "wrapper offset 5 is not its last inner offset 0")
    assert decode_legacy_entry(stray, 0, MB, ordered=False).offsets == [0]
    for magic, offsets, last in ((0, (40, 42, 41), 41), (1, (0, 2, 1), 9)):
        inner = b"".join(message(i, magic, 0, 10, None, b"v") for i in offsets)
        entry = wrapper(magic, Codec.GZIP, inner, last, 10)
        _corrupt(entry, "inner offsets go backwards: 42 is followed by 41" if magic == 0
                 else "inner offsets go backwards: 2 is followed by 1")
        assert len(decode_legacy_entry(entry, 0, MB, ordered=False).offsets) == 3


def test_log_append_time_wrapper_overrides_inner_timestamps():
    buf = broker_like(1, Codec.LZ4, RECORDS, base_offset=0, log_append_time=1_800_000_000_000)
    decoded = decode_legacy_entry(buf, 0, MB)
    assert decoded.timestamp_type == 1
    assert decoded.timestamps == [1_800_000_000_000] * len(RECORDS)
    assert decoded.max_timestamp == 1_800_000_000_000
    assert ours(decoded) == oracle(buf)


def test_uncompressed_log_append_time():
    entry = message(9, 1, 0x08, 1234, b"k", b"v")
    decoded = decode_legacy_entry(entry, 0, MB)
    assert ours(decoded) == [(9, 1234, 1, b"k", b"v")] == oracle(entry)


def test_legacy_lz4_checksum_of_old_kafka():
    """Magic 0 LZ4 from Kafka < 0.10 carries the wrong frame descriptor checksum (KAFKA-3160)."""
    from kafkafs.format.compression import xxh32

    inner = b"".join(message(i, 0, 0, 0, b"k", b"v%d" % i) for i in range(3))
    frame = bytearray(compress(Codec.LZ4, inner))
    frame[6] = (xxh32(bytes(frame[:6])) >> 8) & 0xFF
    decoded = decode_legacy_entry(message(2, 0, Codec.LZ4, 0, None, bytes(frame)), 0, MB)
    assert decoded.values == [b"v0", b"v1", b"v2"]


# ---------------------------------------------------------------------------------- bad wrappers


def _corrupt(buf, match, pos=0, max_size=MB, validate_crc=True):
    with pytest.raises(CorruptRecordError, match=match) as info:
        decode_legacy_entry(buf, pos, max_size, validate_crc)
    assert info.value.position == pos
    return info.value


def test_nested_wrapper_is_refused():
    innermost = message(0, 1, 0, 1, None, b"v")
    middle = wrapper(1, Codec.GZIP, innermost, 0, 1)
    _corrupt(wrapper(1, Codec.GZIP, middle, 0, 1), "compressed again")


def test_inner_magic_must_match_wrapper():
    _corrupt(wrapper(1, Codec.GZIP, message(0, 0, 0, 0, None, b"v"), 0, 1), "inner message magic 0 differs")
    _corrupt(wrapper(0, Codec.GZIP, message(0, 1, 0, 0, None, b"v"), 0), "inner message magic 1 differs")


def test_inner_crc_is_checked():
    inner = message(0, 1, 0, 5, b"k", b"v", crc=12345)
    entry = wrapper(1, Codec.SNAPPY, inner, 0, 5)
    _corrupt(entry, "inner message at offset 0: crc mismatch")
    assert decode_legacy_entry(entry, 0, MB, validate_crc=False).values == [b"v"]


def test_empty_and_null_wrappers():
    _corrupt(wrapper(1, Codec.GZIP, b"", 0, 1), "no inner messages")
    _corrupt(message(0, 1, Codec.GZIP, 1, None, None), "null value")


@pytest.mark.parametrize("attributes", [Codec.ZSTD, 5, 6, 7])
def test_codecs_not_of_the_legacy_formats(attributes):
    _corrupt(message(0, 1, attributes, 1, None, compress(Codec.GZIP, b"x")), "not valid for magic 1")


@pytest.mark.parametrize("magic", [2, 3, -1])
def test_not_a_legacy_magic(magic):
    entry = bytearray(message(0, 1, 0, 1, b"key", b"value"))
    entry[16] = magic & 0xFF
    _corrupt(fix_crc(entry), f"magic {magic} is not a legacy format")


def test_inflate_bound():
    inner = b"".join(message(i, 1, 0, 1, None, bytes(10_000)) for i in range(100))
    entry = wrapper(1, Codec.LZ4, inner, 99, 1)
    assert len(entry) < 10_000
    err = _corrupt(b"\0" * 3 + entry, "inflates past 65536 bytes", pos=3, max_size=65536)
    assert "lz4" in err.reason
    assert len(decode_legacy_entry(entry, 0, len(inner)).offsets) == 100


def test_bad_inner_message_set():
    good = message(0, 1, 0, 1, b"k", b"v")
    _corrupt(wrapper(1, Codec.GZIP, good + good[:8], 1, 1), "inner message set ends inside")
    _corrupt(wrapper(1, Codec.GZIP, good + good[:-1], 1, 1), "does not fit")
    tiny = struct.pack(">qi", 0, 5) + b"\0" * 5
    _corrupt(wrapper(1, Codec.GZIP, tiny, 0, 1), "inner message size 5")
    short_v1 = message(0, 0, 0, 0, None, None)  # 14 bytes: enough for magic 0, not for magic 1
    short_v1 = bytearray(short_v1)
    short_v1[16] = 1
    _corrupt(wrapper(1, Codec.GZIP, fix_crc(short_v1), 0, 1), "below the minimum of 22")


# ------------------------------------------------------------------------------- sizes and CRC


def test_entry_size_and_partial_entries():
    buf = b"".join(message(i, 1, 0, i, b"key", b"value %d" % i) for i in range(3))
    sizes = [len(e) for e in split(buf)]
    boundaries = {0, sizes[0], sizes[0] + sizes[1], len(buf)}
    for cut in range(len(buf) + 1):
        data = buf[:cut]
        pos = 0
        while True:
            size = legacy_entry_size(data, pos)
            if size is None:
                break
            decode_legacy_entry(data, pos, MB)
            pos += size
        assert pos == max(b for b in boundaries if b <= cut)
        if pos < cut or cut == 0:
            with pytest.raises(CorruptRecordError, match="truncated"):
                decode_legacy_entry(data, pos, MB)


def test_size_field_below_minimum():
    entry = bytearray(message(0, 0, 0, 0, None, None))
    assert legacy_entry_size(bytes(entry), 0) == 26
    for bad in (13, 0, -1, -(1 << 31)):
        struct.pack_into(">i", entry, 8, bad)
        with pytest.raises(CorruptRecordError, match=f"message size {bad} is below") as info:
            legacy_entry_size(bytes(entry), 0)
        assert info.value.position == 0


def test_absurd_size_is_partial_not_an_allocation():
    entry = bytearray(message(0, 0, 0, 0, b"k", b"v"))
    struct.pack_into(">i", entry, 8, (1 << 31) - 1)
    assert legacy_entry_size(bytes(entry), 0) is None


@pytest.mark.parametrize("value", [-2, 7, 1 << 30, (1 << 31) - 1])
def test_absurd_key_length(value):
    entry = bytearray(message(0, 1, 0, 0, b"k", b"v"))
    struct.pack_into(">i", entry, 26, value)  # prefix 12, crc 4, magic 1, attributes 1, timestamp 8
    _corrupt(fix_crc(entry), f"key length {value} does not fit")


def test_value_length_cut_off():
    entry = bytearray(message(0, 1, 0, 0, b"k", b"v"))
    struct.pack_into(">i", entry, 26, 6)  # the key swallows all but 0 bytes of the value length
    _corrupt(fix_crc(entry), "ends inside its value length")


def test_negative_position():
    with pytest.raises(CorruptRecordError, match="negative position"):
        legacy_entry_size(message(0, 0), -3)


def test_bytes_after_the_value():
    entry = bytearray(message(0, 1, 0, 0, b"k", b"v") + b"xyz")
    struct.pack_into(">i", entry, 8, len(entry) - 12)
    _corrupt(fix_crc(entry), "3 bytes after its value")


def test_every_flipped_byte_is_caught_by_the_crc():
    entry = broker_like(1, Codec.NONE, RECORDS[:1], 0)
    for at in range(12, len(entry)):
        damaged = bytearray(entry)
        damaged[at] ^= 0x10
        with pytest.raises(CorruptRecordError):
            decode_legacy_entry(bytes(damaged), 0, MB)


def test_crc_mismatch_and_opting_out():
    entry = bytearray(message(7, 1, 0, 1, b"key", b"value"))
    entry[-1] ^= 0x01
    _corrupt(bytes(entry), "message crc mismatch: stored")
    decoded = decode_legacy_entry(bytes(entry), 0, MB, validate_crc=False)
    assert decoded.values == [b"valud"]


def test_offset_field_is_not_under_the_crc():
    entry = bytearray(message(7, 0, 0, 0, None, b"v"))
    struct.pack_into(">q", entry, 0, 99)
    assert decode_legacy_entry(bytes(entry), 0, MB).offsets == [99]


# --------------------------------------------------------------------------------------- mutation

ABSURD_I32 = [-(1 << 31), -2, -1, 0, 1, 13, 21, (1 << 31) - 1, 1 << 24]


def _sample_entry(kind: int) -> bytes:
    if kind == 0:
        return message(5, 0, 0, 0, b"key", b"value")
    if kind == 1:
        return message(5, 1, 0x08, 77, None, b"value")
    codec = [Codec.GZIP, Codec.SNAPPY, Codec.LZ4][kind % 3]
    magic = kind % 2
    inner = b"".join(message(i, magic, 0, 100 + i, b"k%d" % i, b"v" * i) for i in range(4))
    return wrapper(magic, codec, inner, 3, 103)


def _mutate(data, draw, buf: bytearray) -> bytearray:
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["flip", "i32", "truncate", "extend"]))
        if op == "flip" and buf:
            buf[draw(st.integers(0, len(buf) - 1))] ^= 1 << draw(st.integers(0, 7))
        elif op == "i32" and len(buf) >= 4:
            struct.pack_into(">i", buf, draw(st.integers(0, len(buf) - 4)), draw(st.sampled_from(ABSURD_I32)))
        elif op == "truncate":
            del buf[draw(st.integers(0, len(buf))) :]
        elif op == "extend":
            buf += draw(st.binary(max_size=30))
    return buf


def _only_corrupt_or_partial(buf: bytes, validate_crc: bool):
    try:
        size = legacy_entry_size(buf, 0)
    except CorruptRecordError:
        size = None
    try:
        entry = decode_legacy_entry(buf, 0, 4096, validate_crc)
    except CorruptRecordError as e:
        assert e.position == 0
        return
    assert size == entry.size
    assert len(entry.offsets) == len(entry.timestamps) == len(entry.keys) == len(entry.values) >= 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), kind=st.integers(0, 7), recrc=st.booleans(), validate=st.booleans())
def test_mutated_entries_only_raise_corrupt(data, kind, recrc, validate):
    buf = _mutate(data, data.draw, bytearray(_sample_entry(kind)))
    if recrc and len(buf) >= 16:
        buf = bytearray(fix_crc(buf))
    _only_corrupt_or_partial(bytes(buf), validate)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    magic=st.sampled_from([0, 1]),
    codec=st.sampled_from([Codec.GZIP, Codec.SNAPPY, Codec.LZ4]),
    validate=st.booleans(),
)
def test_mutated_inner_sets_only_raise_corrupt(data, magic, codec, validate):
    """Damage inside a well-formed wrapper: the outer CRC is right, the inflated bytes are not."""
    inner = bytearray(b"".join(message(i, magic, 0, i, b"k", b"v%d" % i) for i in range(3)))
    inner = _mutate(data, data.draw, inner)
    _only_corrupt_or_partial(wrapper(magic, codec, bytes(inner), 2, 2), validate)


@settings(max_examples=100, deadline=None)
@given(junk=st.binary(max_size=80))
def test_random_bytes_only_raise_corrupt_or_partial(junk):
    _only_corrupt_or_partial(junk, True)
    _only_corrupt_or_partial(junk, False)
