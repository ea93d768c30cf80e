"""Key index entries, key names and record filters: the kernel against the Python reference, byte for
byte, over batches built here from Kafka's documented layout (tests/kafka_layout.py), and each
against a definition written in the test (MD5 by hashlib, names by the SPEC's rules)."""

import base64
import hashlib
import os
import struct
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkafs.errors import CorruptRecordError
from kafkafs.format import kernel
from kafkafs.format import keyindex as ki
from kafkafs.format.batchheader import V2_HEADER_SIZE, read_batch_header
from kafkafs.format.jsonspan import reference_span, render_span_jsonl
from kafkafs.format.jsonview import render_raw_jsonl
from kafkafs.format.keynames import NAME_MAX, key_name, name_length, parse_key_name, split_suffix
from kafkafs.format.recordfilter import RecordFilter
from tests import kafka_layout as kl

needs_kernel = pytest.mark.skipif(kernel.KERNEL is None, reason="the compiled kernel is not built")

# ---------------------------------------------------------------------------------------------- names


def _spec_name(key: bytes) -> str:
    """SPEC §3's rule, written out again."""
    if key == b"":
        name = "$empty"
    else:
        try:
            text = key.decode("utf-8")
        except UnicodeDecodeError:
            name = "$base64:" + base64.urlsafe_b64encode(key).decode().rstrip("=")
        else:
            name = text.replace("%", "%25").replace("/", "%2F").replace("\0", "%00")
            if name.startswith("."):
                name = "%2E" + name[1:]
            elif name.startswith("$"):
                name = "%24" + name[1:]
    if len(name.encode()) > 240:
        return "$sha256:" + hashlib.sha256(key).hexdigest()
    return name


@pytest.mark.parametrize("key, name", [
    (b"orders", "orders"), (b"a/b", "a%2Fb"), (b"100%", "100%25"), (b"a\0b", "a%00b"), (b".hidden", "%2Ehidden"),
    (b"..", "%2E."), (b"$empty", "%24empty"), (b"$x$", "%24x$"), (b"", "$empty"), (b"\xff\x00", "$base64:_wA"),
    (b"caf\xc3\xa9", "café"), ("ü".encode() * 120, "ü" * 120), (b"x" * 241, "$sha256:" + hashlib.sha256(b"x" * 241).hexdigest()),
])
def test_key_names(key, name):
    assert key_name(key) == name == _spec_name(key)
    assert parse_key_name(name).key == (key if not name.startswith("$sha256:") else None)


def test_null_key_has_no_name():
    assert key_name(None) is None


@given(st.one_of(st.binary(max_size=300), st.text(max_size=100).map(lambda t: t.encode("utf-8", "surrogatepass")),
                 st.lists(st.sampled_from(["/", "%", "\0", ".", "$", "a", "é", "%2F", "$base64:"]), max_size=90)
                 .map(lambda p: "".join(p).encode())))
def test_names_round_trip(key):
    name = key_name(key)
    assert name == _spec_name(key)
    assert len(name.encode("utf-8", "surrogatepass")) <= NAME_MAX
    assert "/" not in name and "\0" not in name and name not in (".", "..")
    parsed = parse_key_name(name)
    if name.startswith("$sha256:"):
        assert parsed.sha256 == hashlib.sha256(key).digest()
    else:
        assert parsed.key == key


@pytest.mark.parametrize("name", ["a%2fb", "%2e", ".x", "$x", "$base64:b3JkZXJz", "$base64:_w==", "$base64:!!",
                                  "%41", "a%", "$sha256:ABC", "$sha256:" + "0" * 63, "x\udcff"])
def test_names_written_another_way_name_nothing(name):
    assert parse_key_name(name) is None


def test_split_suffix():
    assert split_suffix("a.json") == ("a", ".json")
    assert split_suffix("a.jsonl") == ("a", ".jsonl")
    assert split_suffix("a.json.json") == ("a.json", ".json")
    assert split_suffix(".json") is None
    assert split_suffix("a.txt") is None


# ---------------------------------------------------------------------------------------------- batches

keys = st.one_of(st.none(), st.just(b""), st.sampled_from([b"a", b"b", b"k1", b".x", b"x" * 90, b"/" * 81]),
                 st.binary(max_size=6), st.binary(min_size=175, max_size=200))
values = st.one_of(st.none(), st.binary(max_size=8))
headers = st.lists(st.tuples(st.sampled_from(["h", "trace", "é", "\ufffd"]), st.one_of(st.none(), st.sampled_from([b"1", b"2", b""]))),
                   max_size=3).map(tuple)
records = st.lists(st.tuples(keys, values, headers), min_size=0, max_size=6)


@st.composite
def batches(draw):
    """A run of batches: plain, transactional, control, gzip, a gap; maybe cut or damaged at the end."""
    base = draw(st.integers(0, 50))
    out = []
    offset = base
    for _ in range(draw(st.integers(1, 5))):
        recs = draw(records)
        kind = draw(st.sampled_from(["plain", "plain", "txn", "control", "gzip"]))
        if kind == "control":
            out.append(kl.control_batch(offset, draw(st.integers(0, 1)), 0, 7, 0, 1_700_000_000_000))
            offset += 1
            continue
        if not recs:
            continue
        attributes = {"plain": 0, "txn": 0x10, "gzip": 1}[kind]
        pid = 7 if kind == "txn" else -1
        out.append(kl.batch(offset, recs, producer_id=pid, producer_epoch=0 if pid >= 0 else -1, attributes=attributes))
        offset += len(recs) + draw(st.integers(0, 3))
    buf = b"".join(out)
    damage = draw(st.sampled_from(["none", "none", "flip", "cut"]))
    if buf and damage == "flip":
        at = draw(st.integers(0, len(buf) - 1))
        buf = buf[:at] + bytes([buf[at] ^ 0x40]) + buf[at + 1:]
    elif buf and damage == "cut":
        buf = buf[: draw(st.integers(0, len(buf)))]
    return base, buf


filters = st.one_of(
    st.none(),
    st.builds(RecordFilter, key=st.sampled_from([b"a", b"", b"k1", b"x" * 90])),
    st.builds(RecordFilter, headers=st.lists(st.tuples(st.sampled_from(["h", "trace", "é", "\ufffd"]),
                                                       st.one_of(st.none(), st.sampled_from([b"1", b""]))),
                                             min_size=1, max_size=2).map(tuple)),
    st.builds(RecordFilter, bits=st.binary(min_size=1, max_size=8), bits_base=st.integers(0, 60)),
)


@needs_kernel
@settings(max_examples=100)
@given(batches(), filters)
def test_span_entries_kernel_equals_reference(data, record_filter):
    base, buf = data
    assert ki.span_entries(buf, base, record_filter) == ki.span_entries_reference(buf, base, record_filter)


@needs_kernel
@settings(max_examples=100)
@given(batches(), filters)
def test_section_entries_kernel_equals_reference(data, record_filter):
    base, buf = data
    pos = 0
    while True:
        try:
            h = read_batch_header(buf, pos)
        except CorruptRecordError:
            return
        if h is None or h.magic != 2:
            return
        data_ = buf[pos + V2_HEADER_SIZE : h.end]
        if h.attributes & 7:
            return
        try:
            want = ki.section_entries_reference(data_, h, base, record_filter)
        except CorruptRecordError:
            with pytest.raises(CorruptRecordError):
                ki.section_entries(data_, h, base, record_filter)
            return
        assert ki.section_entries(data_, h, base, record_filter) == want
        pos = h.end


def test_entries_hash_keys_as_md5_and_flag_records():
    buf = kl.batch(10, [(b"a", b"1", ()), (None, b"2", ()), (b"b", None, ())]) + \
        kl.batch(13, [(b"a", b"3", ())], producer_id=5, producer_epoch=0, attributes=0x10) + \
        kl.control_batch(14, 1, 0, 5, 0, 1_700_000_000_000)
    got = ki.span_entries(buf, 10)
    assert got.consumed == len(buf)
    rows = [ki.ENTRY.unpack_from(got.entries, i) for i in range(0, len(got.entries), ki.ENTRY_SIZE)]
    md5 = [struct.unpack("<QQ", hashlib.md5(k).digest()) for k in (b"a", b"b", b"a")]
    assert rows == [(*md5[0], 0, 0), (*md5[1], 2, ki.TOMBSTONE), (*md5[2], 3, ki.TRANSACTIONAL)]
    assert ki.TXN.unpack(got.txns) == (13, 13, 5)


def test_long_keys_are_the_ones_named_by_digest():
    keys_ = [b"x" * 240, b"x" * 241, b"/" * 80, b"/" * 81, b"\xff" * 174, b"\xff" * 175]
    got = ki.span_entries(kl.batch(0, [(k, b"v", ()) for k in keys_]), 0)
    assert [k for _rel, k in got.longs] == [k for k in keys_ if name_length(k) > NAME_MAX]
    assert [k for _rel, k in got.longs] == [b"x" * 241, b"/" * 81, b"\xff" * 175]


def test_span_stops_before_compressed_and_damaged_batches():
    plain = kl.batch(0, [(b"a", b"1", ())])
    gz = kl.batch(1, [(b"b", b"1", ())], attributes=1)
    assert ki.span_entries(plain + gz, 0).consumed == len(plain)
    bad = bytearray(plain)
    bad[-1] ^= 1
    assert ki.span_entries(bytes(bad), 0).consumed == 0


def test_offsets_outside_the_segment_are_refused():
    buf = kl.batch(2**32 + 5, [(b"a", b"1", ())])
    assert ki.span_entries(buf, 0).consumed == 0
    h = read_batch_header(buf, 0)
    with pytest.raises(CorruptRecordError):
        ki.section_entries(buf[V2_HEADER_SIZE:], h, 0)


# ---------------------------------------------------------------------------------------------- sorting, tables

entry_rows = st.lists(st.tuples(st.integers(0, 7), st.integers(0, 3), st.integers(0, 300), st.integers(0, 3)), max_size=200)


def _pack(rows, spread=True):
    # h1 with the small numbers in its top bits too, so that the radix passes see them
    return b"".join(ki.ENTRY.pack((a << 61 | a) if spread else a, b, rel, flags) for a, b, rel, flags in rows)


@needs_kernel
@given(entry_rows, st.booleans())
def test_sort_kernel_equals_reference(rows, spread):
    raw = _pack(rows, spread)
    got = bytearray(raw)
    ki.sort_entries(got)
    assert bytes(got) == ki.sort_entries_reference(raw)


def test_sort_is_stable_for_one_hash_across_many_entries():
    rows = [(5, 5, rel, 0) for rel in range(1000)] + [(3, 1, rel, 0) for rel in range(500)]
    raw = bytearray(_pack(rows))
    ki.sort_entries(raw)
    assert bytes(raw) == ki.sort_entries_reference(_pack(rows))


@needs_kernel
@given(entry_rows, st.integers(0, 7), st.integers(0, 3))
def test_find_kernel_equals_reference(rows, a, b):
    raw = ki.sort_entries_reference(_pack(rows))
    assert ki.find_entries(raw, a << 61 | a, b) == ki.find_entries_reference(raw, a << 61 | a, b)


@needs_kernel
@given(entry_rows, st.integers(0, 6))
def test_prefix_counts_kernel_equals_python(rows, bits):
    raw = _pack(rows)
    got = array("Q", bytes(8 << bits))
    ki.prefix_counts(raw, bits, got)
    want = [0] * (1 << bits)
    for a, *_ in rows:
        want[((a << 61 | a) >> (64 - bits)) if bits else 0] += 1
    assert list(got) == want


@needs_kernel
@given(st.lists(entry_rows, min_size=1, max_size=4), st.data(), st.booleans())
def test_table_kernel_equals_reference(slices_rows, data, tombstones):
    slices = [ki.sort_entries_reference(_pack(rows)) for rows in slices_rows]
    aborted = []
    for _ in slices:
        pairs = sorted(data.draw(st.lists(st.integers(0, 300), max_size=6)))
        aborted.append(None if not pairs else array("I", pairs[: len(pairs) // 2 * 2]).tobytes() or None)
    bitmaps_a = [bytearray(40) if data.draw(st.booleans()) else None for _ in slices]
    bitmaps_b = [None if b is None else bytearray(b) for b in bitmaps_a]
    got = ki.table_latest(slices, aborted, bitmaps_a, tombstones)
    want = ki.table_latest_reference(slices, aborted, bitmaps_b, tombstones)
    assert got == want and bitmaps_a == bitmaps_b


def test_table_takes_the_newest_slice_and_skips_aborted_and_tombstones():
    h = ki.key_hash(b"k")
    old = ki.ENTRY.pack(*h, 3, 0)
    new = ki.ENTRY.pack(*h, 1, ki.TRANSACTIONAL) + ki.ENTRY.pack(*h, 2, ki.TRANSACTIONAL)
    bits_new, bits_old = bytearray(1), bytearray(1)
    # the newest slice's entries are aborted: the older slice's record is the latest
    assert ki.table_latest([new, old], [array("I", [1, 2]), None], [bits_new, bits_old]) == (1, 1)
    assert bits_new == bytearray(1) and bits_old == bytearray([1 << 3])
    gone = ki.ENTRY.pack(*h, 0, ki.TOMBSTONE)
    assert ki.table_latest([gone, old], [None, None], [bytearray(1), bytearray(1)]) == (0, 1)
    assert ki.table_latest([gone, old], [None, None], [bytearray(1), bytearray(1)], True) == (1, 1)


# ---------------------------------------------------------------------------------------------- filters on rendering


@needs_kernel
@settings(max_examples=100)
@given(batches(), filters, st.sampled_from(["auto", "string", "base64"]))
def test_filtered_span_rendering_kernel_equals_reference(data, record_filter, mode):
    _base, buf = data
    assert render_span_jsonl("t", 0, buf, mode, record_filter=record_filter) == \
        reference_span("t", 0, buf, mode, record_filter=record_filter)


@needs_kernel
@settings(max_examples=100)
@given(batches(), filters)
def test_filtered_batch_rendering_kernel_equals_reference(data, record_filter):
    _base, buf = data
    try:
        h = read_batch_header(buf, 0)
    except CorruptRecordError:
        return
    if h is None:
        return
    one = buf[: h.end]
    saved = kernel.KERNEL
    try:
        want = render_raw_jsonl("t", 0, one, record_filter=record_filter)
    except CorruptRecordError:
        want = CorruptRecordError
    kernel.KERNEL = None
    try:
        try:
            ref = render_raw_jsonl("t", 0, one, record_filter=record_filter)
        except CorruptRecordError:
            ref = CorruptRecordError
    finally:
        kernel.KERNEL = saved
    assert want == ref


def test_filter_accepts_by_key_headers_and_bits():
    from kafkafs.format.records import Header

    assert RecordFilter(key=b"a").accepts(0, b"a", ())
    assert not RecordFilter(key=b"a").accepts(0, None, ())
    assert not RecordFilter(key=b"").accepts(0, None, ())
    f = RecordFilter(headers=(("h", b"1"),))
    assert f.accepts(0, None, (Header("x", b"1"), Header("h", b"1")))
    assert not f.accepts(0, None, (Header("h", None),))
    assert RecordFilter(headers=(("h", None),)).accepts(0, None, (Header("h", None),))
    assert not RecordFilter(headers=(("\ufffd", None),)).accepts(0, None, (Header("\ufffd", None),))
    bits = RecordFilter(bits=bytes([0b10]), bits_base=10)
    assert bits.accepts(11, None, ()) and not bits.accepts(10, None, ()) and not bits.accepts(18, None, ())


def test_reference_agrees_on_a_random_sample():
    rnd = os.urandom(64)
    assert ki.span_entries_reference(rnd, 0).consumed == 0
