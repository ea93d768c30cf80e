"""The compiled kernel against the Python reference, byte for byte, over arbitrary bytes.

Every test builds its input independently (records sections are encoded here, from Kafka's documented
layout, so they can hold what no encoder writes: invalid header keys, non-minimal or over-long
varints, damage) and asserts that the kernel and the reference agree: the same columns, the same
lines, or both refuse. Runs at hypothesis' default size in CI; for a long run:

    KAFKAFS_DIFF_EXAMPLES=250000 pytest tests/format/test_kernel_differential.py -k NAME \\
        --hypothesis-show-statistics
"""

import os
import struct

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kafkafs.errors import CorruptRecordError
from kafkafs.format import jsonembed, kernel
from kafkafs.format.batchheader import BatchHeader
from kafkafs.format.jsonrender import line_prefix, render_lines, select_indexes
from kafkafs.format.records import decode_records
from tests.kafka_layout import uvarint

pytestmark = pytest.mark.skipif(kernel.KERNEL is None, reason="the compiled kernel is not built")

_EXAMPLES = int(os.environ.get("KAFKAFS_DIFF_EXAMPLES", "0"))
if _EXAMPLES:  # a long run: many examples, no shrinking database, no deadline
    settings.register_profile(
        "kafkafs-long", max_examples=_EXAMPLES, deadline=None, database=None,
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink], suppress_health_check=list(HealthCheck),
    )
    settings.load_profile("kafkafs-long")

MODES = ("auto", "string", "base64")

# ------------------------------------------------------------------------------------- values

_BAD_UTF8 = [b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xe0\x9f\xbf", b"\xed\xa0\x80", b"\xed\xbf\xbf",
             b"\xf0\x80\x80\x80", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xff", b"\xfe", b"\x80", b"\xbf",
             b"\xc2", b"\xe2\x82", b"\xf0\x9f\x98", b"\xef\xbb\xbf"]
_JSON_PIECES = ['{', '}', '[', ']', ',', ':', '"', '"a"', '"k"', '"\\u00e9"', '"\\ud83d\\ude00"', '"\\ud800"',
                '"\\udc00"', '"\\uD800\\uDC00"', '"\\ud800\\u0041"', '\\', '\\n', '\\/', '\\x', '\\u12', '1', '-0',
                '0.5', '1e400', '-1E-7', '01', '-', '.', 'e5', 'E+2', '1.', '123456789012345678901234567890',
                '18446744073709551616', 'true', 'false', 'null', 'nul', 'True', 'NaN', 'Infinity',
                ' ', '\t', '\n', '\r', '\x0b', '\x0c', '\x00', '\x1f', '\x7f', '\u00a0', '\u2028', '\ufeff', 'é',
                '😀', '"x\x00y"', '"tab\there"', '"\\u0000"']

json_like = st.lists(st.sampled_from(_JSON_PIECES), max_size=24).map(lambda p: "".join(p).encode())
valid_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=4), inner, max_size=4)),
    max_leaves=12,
).filter(lambda v: isinstance(v, (list, dict)))
whitespace = st.text(alphabet=" \t\n\r\x0b\x0c\u00a0", max_size=3)


@st.composite
def spaced_json(draw):
    import json

    text = json.dumps(draw(valid_json), ensure_ascii=draw(st.booleans()), indent=draw(st.sampled_from([None, 1, "\t"])))
    return (draw(whitespace) + text + draw(whitespace)).encode("utf-8", "surrogatepass")


@st.composite
def deep(draw):
    depth = draw(st.integers(jsonembed.MAX_DEPTH - 2, jsonembed.MAX_DEPTH + 2))
    if draw(st.booleans()):
        return b"[" * depth + b"]" * depth
    return b'{"a":' * (depth - 1) + b"{}" + b"}" * (depth - 1)


mixed_bytes = st.lists(
    st.one_of(st.sampled_from(_BAD_UTF8), st.text(max_size=6).map(lambda t: t.encode("utf-8", "surrogatepass")),
              st.binary(max_size=4), st.sampled_from(_JSON_PIECES).map(str.encode)),
    max_size=8,
).map(b"".join)

_ESCAPES = ["\\ud800", "\\ue000", "\\uffff", "\\udbff", "\\udc00", "\\udfff", "\\uD83D", "\\uDE00", "\\u0000", "\\u001f", "\\u00e9",
            "\\n", "\\\\", "\\\"", "\\/", "\\b", "\\q", "\\u12g4", "\\", "a", "é", "\x00", "\x1f", "\x7f", "\t"]
json_strings = st.tuples(
    st.sampled_from(['["', '{"k":"', '{"', '[1,"']),
    st.lists(st.sampled_from(_ESCAPES), max_size=6),
    st.sampled_from(['"]', '"}', '":1}', '"]]']),
).map(lambda t: (t[0] + "".join(t[1]) + t[2]).encode())
_UTF8_EDGES = [0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xED, 0xEF, 0xF0,
               0xF4, 0xF5, 0xFF]
utf8_edges = st.lists(st.sampled_from(_UTF8_EDGES), max_size=6).map(bytes)

values = st.one_of(
    st.none(), json_strings, utf8_edges, st.binary(max_size=48), st.text(max_size=24).map(lambda t: t.encode("utf-8", "surrogatepass")),
    json_like, spaced_json(), mixed_bytes, deep(), st.just(b""),
)

# ------------------------------------------------------------------------------------- sections


def _varint(value: int, pad: int = 0, bits: int = 64) -> bytes:
    raw = ((value << 1) ^ (value >> (bits - 1))) & ((1 << bits) - 1)
    data = bytearray(uvarint(raw))
    if pad:  # the same value in more bytes than needed
        data[-1] |= 0x80
        data += b"\x80" * (pad - 1) + b"\x00"
    return bytes(data)


def _field(data: bytes | None, pad: int = 0) -> bytes:
    if data is None:
        return _varint(-1, pad)
    return _varint(len(data), pad) + data


header_keys = st.one_of(st.text(max_size=8).map(str.encode), st.sampled_from(_BAD_UTF8), mixed_bytes, st.just(b""))
record = st.tuples(
    st.integers(-(2**40), 2**40) | st.sampled_from([-(2**63), 2**63 - 1]),  # timestamp delta
    st.integers(0, 1000) | st.integers(-(2**31), 2**31 - 1),  # offset delta
    values,  # key
    values,  # value
    st.lists(st.tuples(header_keys, values), max_size=3),
    st.integers(0, 2),  # padding of the varints
)


def _section(records) -> bytes:
    out = bytearray()
    for ts_delta, offset_delta, key, value, headers, pad in records:
        body = b"\x00" + _varint(ts_delta, pad) + _varint(offset_delta, pad, 32) + _field(key, pad) + _field(value)
        body += _varint(len(headers))
        for hk, hv in headers:
            body += _field(hk) + _field(hv, pad)
        out += _varint(len(body), pad, 32) + body
    return bytes(out)


attributes = st.sampled_from([0, 0x08, 0x10, 0x20, 0x30, 0x18, 0x38])
int64 = st.integers(-(2**63), 2**63 - 1)
bound = st.one_of(st.none(), st.integers(-5, 1100), st.sampled_from([2**70, -(2**70), 2**63 - 1, -(2**63)]))


def _header(count: int, attrs: int, base_offset: int, first_ts: int, max_ts: int, producer_id: int) -> BatchHeader:
    return BatchHeader(0, base_offset, 0, 0, 2, 0, attrs, 0, first_ts, max_ts, producer_id, 0, 0, count)


def _reference(fn, *args):
    try:
        return fn(*args)
    except (CorruptRecordError, IndexError):
        return "refused"


def _kernel(fn, *args):
    try:
        return fn(*args)
    except CorruptRecordError:
        return "refused"


def _columns(batch):
    if isinstance(batch, str):
        return batch
    return batch.offsets, batch.timestamps, batch.keys, batch.values, [list(map(tuple, h)) for h in batch.headers]


def _ref_render(data, header, mode, lo, hi, ts_lo, ts_hi):
    batch = decode_records(data, header)
    indexes = select_indexes(batch, lo, hi, ts_lo, ts_hi)
    return render_lines("topic.x", 7, batch, mode, indexes), [batch.offsets[i] for i in indexes]


def _check(data: bytes, header: BatchHeader, mode: str, bounds) -> None:
    expected = _reference(decode_records, data, header)
    got = _kernel(kernel.decode_records, data, header)
    assert _columns(got) == _columns(expected)
    if not isinstance(got, str):
        assert all(type(h) is tuple or all(type(x).__name__ == "Header" for x in h) for h in got.headers)
    ref = _reference(_ref_render, data, header, mode, *bounds)
    prefix = line_prefix("topic.x", 7)
    rendered = _kernel(kernel.render_raw, prefix, data, header, mode, *bounds, 0)
    lengths = _kernel(kernel.render_raw, prefix, data, header, mode, *bounds, 1)
    with_ends = _kernel(kernel.render_raw, prefix, data, header, mode, *bounds, 2)
    counted = _kernel(kernel.render_raw, prefix, data, header, mode, *bounds, 3)
    if ref == "refused":
        assert rendered == lengths == with_ends == counted == "refused"
        return
    assert counted == (rendered, len(ref[0]))
    lines, offsets = ref
    assert rendered == b"".join(lines)
    assert lengths == [len(line) for line in lines]
    ends = [sum(map(len, lines[: i + 1])) for i in range(len(lines))]
    assert with_ends == (rendered, offsets, ends)
    # the decoded columns render alike through the kernel's column path
    batch = decode_records(data, header)
    assert kernel.render_columns(prefix, batch, mode, 0, len(batch)) == b"".join(
        render_lines("topic.x", 7, batch, mode, range(len(batch)))
    )


@given(st.lists(record, max_size=6), attributes, int64, int64, int64, st.sampled_from(MODES),
       st.tuples(bound, bound, bound, bound))
def test_valid_sections_render_alike(records, attrs, base_offset, first_ts, max_ts, mode, bounds):
    data = _section(records)
    _check(data, _header(len(records), attrs, base_offset, first_ts, max_ts, 4242), mode, bounds)


@given(st.lists(record, min_size=1, max_size=4), attributes, st.sampled_from(MODES),
       st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 3), st.binary(min_size=1, max_size=6)), min_size=1, max_size=3),
       st.integers(-1, 1))
def test_damaged_sections_are_refused_alike(records, attrs, mode, damage, count_error):
    data = bytearray(_section(records))
    for where, how, junk in damage:
        i = where % (len(data) + 1)
        if how == 0:  # overwrite
            data[i : i + len(junk)] = junk[: max(0, len(data) - i)] or junk
        elif how == 1:  # insert
            data[i:i] = junk
        elif how == 2:  # delete
            del data[i : i + len(junk)]
        else:  # truncate
            del data[i:]
    header = _header(max(0, len(records) + count_error), attrs, 10, 1000, 2000, 9)
    _check(bytes(data), header, mode, (None, None, None, None))


@given(values, st.sampled_from(MODES))
def test_one_value_renders_alike(data, mode):
    assert kernel.render_value(data, mode) == jsonembed.render_value(data, mode)


@given(st.binary(max_size=64), st.sampled_from(MODES))
def test_arbitrary_bytes_render_alike(data, mode):
    assert kernel.render_value(data, mode) == jsonembed.render_value(data, mode)


@given(st.lists(st.sampled_from([0x80, 0xFF, 0x7F, 0x00, 0x01, 0x02, 0x10, 0x0F]), max_size=12), attributes)
def test_varint_bytes_alike(raw, attrs):
    """Sections of raw varint-ish bytes: over-long, out-of-range and truncated varints everywhere."""
    data = bytes(raw)
    for count in (0, 1, 2):
        _check(data, _header(count, attrs, 0, 0, 0, 1), "auto", (None, None, None, None))


def test_control_and_transactional_lines():
    key = struct.pack(">hh", 0, 1)
    data = _section([(0, 0, key, b"\x00\x00\x00\x00\x00\x07", [], 0), (1, 1, None, None, [], 0)])
    header = _header(2, 0x30, 5, 100, 100, 77)
    lines, _ = _ref_render(data, header, "auto", None, None, None, None)
    assert lines[0].endswith(b',"control":"COMMIT","producerId":77}\n')
    assert lines[1].endswith(b',"control":"UNKNOWN","producerId":77}\n')
    _check(data, header, "auto", (None, None, None, None))


control_key = st.one_of(st.none(), st.binary(max_size=6),
                        st.tuples(st.integers(-2, 2), st.integers(-1, 8)).map(lambda vt: struct.pack(">hh", *vt)))
control_value = st.one_of(st.none(), st.binary(max_size=8),
                          st.tuples(st.integers(-2, 2), st.integers(-(2**31), 2**31 - 1)).map(lambda ve: struct.pack(">hi", *ve)))


@given(st.lists(st.tuples(control_key, control_value), min_size=1, max_size=4), st.sampled_from(sorted(kernel.MODES)),
       st.sampled_from([0x20, 0x30, 0x28, 0x38]))
@settings(max_examples=300, deadline=None)
def test_control_records_alike(records, mode, attrs):
    """Control records' keys and markers' values (SPEC §8: decoded in mode auto when they are exactly
    4 and 6 bytes), by the reference and the kernel, raw and from columns."""
    from kafkafs.format.batch import DecodedBatch

    data = _section([(i, i, k, v, [], 0) for i, (k, v) in enumerate(records)])
    header = _header(len(records), attrs, 5, 100, 100, 77)
    _check(data, header, mode, (None, None, None, None))
    batch = decode_records(data, header)
    columns = DecodedBatch(header, batch.offsets, batch.timestamps, batch.keys, batch.values, batch.headers)
    assert kernel.render_columns(line_prefix("topic.x", 7), columns, mode, 0, len(records)) == b"".join(
        render_lines("topic.x", 7, batch, mode, range(len(records))))


def test_short_byte_strings_exhaustively():
    """Every 1- and 2-byte value, and every 3- and 4-byte value over the bytes where UTF-8's rules
    change, in every mode (and inside a JSON string, for auto)."""
    import itertools

    cases = [bytes([a]) for a in range(256)] + [bytes([a, b]) for a in range(256) for b in range(256)]
    cases += [bytes(c) for n in (3, 4) for c in itertools.product(_UTF8_EDGES, repeat=n)]
    for mode in MODES:
        for data in cases:
            assert kernel.render_value(data, mode) == jsonembed.render_value(data, mode), (data, mode)
    for data in cases[:65792]:
        wrapped = b'["' + data + b'"]'
        assert kernel.render_value(wrapped, "auto") == jsonembed.render_value(wrapped, "auto"), data


def test_string_escapes_exhaustively():
    """Every sequence of up to three escape pieces (lone, paired and reversed surrogates, bad escapes,
    raw control bytes) inside a JSON string, as an array element and as an object key."""
    import itertools

    for n in range(4):
        for parts in itertools.product(_ESCAPES, repeat=n):
            inner = "".join(parts).encode()
            for data in (b'["' + inner + b'"]', b'{"' + inner + b'":0}'):
                assert kernel.render_value(data, "auto") == jsonembed.render_value(data, "auto"), data


# ------------------------------------------------------------------------------------- spans
# render_span_jsonl (the kernel's multi-batch walk, with its own CRC-32C) against reference_span, over
# buffers of whole batches of every kind it must stop before: compressed, legacy magic, CRC mismatch,
# damaged records under a good CRC, records below the base offset, bad headers, zeros, a cut-off tail.

import crc32c as _crc32c_package  # noqa: E402 - the independent CRC the kernel's is held to

from kafkafs.format.jsonspan import SpanResult, reference_span, render_span_jsonl  # noqa: E402


def _batch(section: bytes, count: int, attrs: int = 0, base: int = 0, last_delta: int | None = None,
           first_ts: int = 1000, max_ts: int = 2000, producer_id: int = -1, magic: int = 2, crc_flip: int = 0,
           length_error: int = 0) -> bytes:
    """One batch laid out as Kafka's docs say, its CRC-32C by the crc32c package (``crc_flip`` spoils it)."""
    delta = max(count - 1, 0) if last_delta is None else last_delta
    after = struct.pack(">hiqqqhii", attrs, delta, first_ts, max_ts, producer_id, 0, 0, count) + section
    body = struct.pack(">iBI", 0, magic, _crc32c_package.crc32c(after) ^ crc_flip) + after
    return struct.pack(">qi", base, len(body) + length_error) + body


_small_record = st.tuples(st.integers(-3, 3), st.integers(0, 4), values, values,
                          st.lists(st.tuples(header_keys, values), max_size=2), st.just(0))


@st.composite
def span_batch(draw, base: int) -> bytes:
    records = draw(st.lists(_small_record, max_size=4))
    section = _section(records)
    kind = draw(st.sampled_from(["ok"] * 6 + ["compressed", "legacy", "crc", "junk", "count", "below", "base",
                                              "length", "zeros", "huge"]))
    attrs = draw(st.sampled_from([0, 0x08, 0x10, 0x20, 0x30, 0x18]))
    count, magic, crc_flip, length_error, last_delta = len(records), 2, 0, 0, None
    if kind == "compressed":
        attrs |= draw(st.integers(1, 7))
    elif kind == "legacy":
        magic = draw(st.sampled_from([0, 1, 3, 0xFF]))
    elif kind == "crc":
        crc_flip = 1 << draw(st.integers(0, 31))
    elif kind == "junk" and section:
        i = draw(st.integers(0, len(section) - 1))
        section = section[:i] + draw(st.binary(min_size=1, max_size=3)) + section[i + 1 :]
    elif kind == "count":
        count += draw(st.sampled_from([-1, 1, 2**31 - 1 - count, -(2**31)]))
    elif kind == "below":
        section = _section([(0, -1, b"k", b"v", [], 0)] + records)
        count += 1
    elif kind == "base":
        base = draw(st.sampled_from([-1, -(2**63), 2**63 - 1]))
        last_delta = draw(st.sampled_from([0, 1, 5]))
    elif kind == "length":
        length_error = draw(st.sampled_from([-1, 1, -10**6, 10**6]))
    elif kind == "zeros":
        return bytes(draw(st.integers(1, 80)))
    elif kind == "huge":
        last_delta = draw(st.sampled_from([-1, -(2**31), 2**31 - 1]))
    return _batch(section, count, attrs, base, last_delta, draw(int64), draw(int64), draw(int64), magic, crc_flip,
                  length_error)


@st.composite
def span_buffer(draw) -> bytes:
    out, base = bytearray(), draw(st.integers(0, 2**40))
    for _ in range(draw(st.integers(0, 5))):
        out += draw(span_batch(base))
        base += draw(st.integers(0, 12))
    cut = draw(st.one_of(st.none(), st.integers(0, max(len(out) - 1, 0))))
    return bytes(out if cut is None else out[:cut])


def _same_span(got: SpanResult, ref: SpanResult) -> None:
    assert got.data == ref.data
    assert (got.consumed, got.lines) == (ref.consumed, ref.lines)
    assert (got.batch_ends, got.last_offsets, got.line_ends) == (ref.batch_ends, ref.last_offsets, ref.line_ends)


@given(span_buffer(), st.sampled_from(MODES), st.none() | st.integers(-1, 2**40 + 50), st.booleans(),
       st.none() | st.integers(0, 2**40 + 60))
def test_spans_render_alike(buf, mode, min_offset, final, upper):
    kw = {"min_offset": min_offset, "final": final, "upper": upper}
    ref = reference_span("topic.x", 7, buf, mode, **kw)
    _same_span(render_span_jsonl("topic.x", 7, buf, mode, **kw), ref)
    _same_span(render_span_jsonl("topic.x", 7, memoryview(bytearray(buf)), mode, lengths=True, **kw),
               ref._replace(data=b""))
    assert reference_span("topic.x", 7, buf, mode, lengths=True, **kw) == ref._replace(data=b"")
    assert ref.consumed == (ref.batch_ends[-1] if ref.batch_ends else 0)
    assert ref.line_ends[-1:].tolist() == ([len(ref.data)] if ref.batch_ends else [])


@given(st.lists(st.tuples(st.lists(record, max_size=3), st.sampled_from([0, 0x08, 0x10, 0x20, 0x30])), max_size=4),
       st.sampled_from(MODES))
def test_spans_of_good_batches_are_whole(batches, mode):
    """Valid batches are all taken, and their lines are the per-batch path's (render_raw_jsonl)."""
    from kafkafs.format.jsonview import render_raw_jsonl

    raws, base = [], 5
    for records, attrs in batches:
        records = [(ts, min(abs(delta), 2**31 - 1), k, v, h, pad) for ts, delta, k, v, h, pad in records]
        raws.append(_batch(_section(records), len(records), attrs, base, max([r[1] for r in records], default=0)))
        base += 1 + max([r[1] for r in records], default=0)
    buf = b"".join(raws)
    got = render_span_jsonl("t", 0, buf, mode)
    ok = [raw for raw in raws if _reference(render_raw_jsonl, "t", 0, raw, mode) != "refused"]
    if len(ok) == len(raws):
        assert got.consumed == len(buf)
        assert got.data == b"".join(render_raw_jsonl("t", 0, raw, mode) for raw in raws)
    _same_span(got, reference_span("t", 0, buf, mode))


def _pretty_reference(buf: bytes, offset: int, mode: str):
    """by-offset/N.json the way it was made before render_raw_record_pretty: decode the whole batch
    into Python objects, take the first record with that offset, pretty-print it."""
    from kafkafs.format.batch import decode_batch
    from kafkafs.format.jsonview import render_record_pretty

    batch = _reference(decode_batch, buf)
    if batch == "refused":
        return batch
    for i, found in enumerate(batch.offsets):
        if found == offset:
            return render_record_pretty("topic.x", 7, batch, i, mode), batch.timestamps[i]
    return None


@given(st.integers(0, 2**40), st.data(), st.sampled_from(MODES))
def test_one_record_pretty_from_raw_bytes_alike(base, data, mode):
    """render_raw_record_pretty (only the record asked for, rendered from the batch's bytes) against
    decoding the whole batch, for every offset in and around the batch, with and without the kernel."""
    from kafkafs.format.batch import read_batch_header
    from kafkafs.format.jsonview import render_raw_record_pretty

    buf = data.draw(span_batch(base))
    if _reference(read_batch_header, buf, 0) in ("refused", None):
        return  # the function takes what Log.locate gives: a batch whose header reads
    for offset in range(base - 1, base + 7):
        want = _pretty_reference(buf, offset, mode)
        assert _kernel(render_raw_record_pretty, "topic.x", 7, buf, offset, mode) == want
        saved, kernel.KERNEL = kernel.KERNEL, None
        try:
            assert _kernel(render_raw_record_pretty, "topic.x", 7, buf, offset, mode) == want
        finally:
            kernel.KERNEL = saved


_compact_json = valid_json.map(lambda v: __import__("json").dumps(v, separators=(",", ":")).encode())


@given(st.one_of(json_like, _compact_json, st.binary(max_size=64), values.filter(lambda v: v is not None)),
       st.sampled_from([b"  ", b"", b"\t", b"    ", b"\xff"]))
def test_indent_alike(compact, step):
    """The kernel's indent_json against jsonembed.indent_json over any bytes: open strings, unbalanced
    brackets (a depth below zero), empty objects with something between the brackets."""
    from kafkafs.format.jsonembed import indent_json as reference

    assert kernel.KERNEL.indent_json(compact, step) == reference(compact, step)
    assert kernel.KERNEL.indent_json(memoryview(bytearray(compact)), step) == reference(compact, step)


def test_indent_edges_alike():
    from kafkafs.format.jsonembed import indent_json as reference

    for compact in [b"", b"{}", b"[]", b"{ }", b'{"}', b'{"a":[{},[],{"b":[1,2]}]}', b"]]]x[[[", rb'"\\', rb'"\\"',
                    rb'"a\\"b"', rb'{"\"}', b"\\", b'"', b'""', b"{,}", b"[:]", b"}{", rb'{"a":"\u00e9\"x"}']:
        assert kernel.KERNEL.indent_json(compact, b"  ") == reference(compact), compact


def _in_order(buf, pos: int, length: int, base: int, delta: int, expect: int, final: bool, upper: int) -> bool:
    """SPEC §4's order of offsets as a span keeps it: the base from ``expect`` on, and the next batch's
    base offset (its first 8 bytes, when they are there; else ``upper`` in a final buffer) past this
    one's last offset."""
    if base < expect or delta < 0 or base + delta + 1 > 2**63 - 1:
        return False
    after = pos + length + 12
    if len(buf) - after >= 8:
        return struct.unpack_from(">q", buf, after)[0] > base + delta
    return final and (upper < 0 or upper > base + delta)


def _cuts_reference(buf: bytes, step: int, min_offset: int, final: bool, upper: int) -> tuple[list[int], int]:
    cuts, pos, last, expect = [0], 0, 0, min_offset
    while len(buf) - pos >= 61:
        base, length = struct.unpack_from(">qi", buf, pos)
        delta = struct.unpack_from(">i", buf, pos + 23)[0]
        if buf[pos + 16] != 2 or length < 49 or length + 12 > len(buf) - pos or buf[pos + 22] & 0x07:
            break
        if not _in_order(buf, pos, length, base, delta, expect, final, upper):
            break
        expect = base + delta + 1
        pos += length + 12
        if pos - last >= step:
            cuts.append(pos)
            last = pos
    if pos != last:
        cuts.append(pos)
    return cuts, expect


@given(span_buffer(), st.integers(1, 400), st.integers(-5, 2**40 + 50), st.booleans(),
       st.just(-1) | st.integers(0, 2**40 + 60))
def test_span_cuts_alike(buf, step, min_offset, final, upper):
    from array import array

    raw, expect = kernel.KERNEL.span_cuts(buf, step, min_offset, final, upper)
    got = array("q")
    got.frombytes(raw)
    assert (got.tolist(), expect) == _cuts_reference(buf, step, min_offset, final, upper)


@given(st.binary(max_size=300), st.integers(0, 16))
def test_crc32c_alike(data, skip):
    expected = _crc32c_package.crc32c(data[skip:])
    assert kernel.KERNEL.crc32c(data[skip:]) == expected
    assert kernel.KERNEL.crc32c(memoryview(data)[skip:], 0) == expected  # the table, whatever the CPU
    assert kernel.KERNEL.crc32c(data[skip:], 1) in (expected, None)  # the instruction, where the CPU has it


# ------------------------------------------------------------------------------------- 16-byte blocks
# The kernel scans strings 16 bytes at a time (_kernel_text.h: a block may be read past a string's end,
# never past the end of its records section) and counts lengths without writing. Every piece that stops
# a block (a quote, a backslash, a control byte, a multi-byte character, a byte that is not UTF-8), put
# at every offset of ASCII runs that span one to four blocks, rendered and counted, as keys, values,
# header keys and header values (a header value last in its section: no byte readable after it), in
# strings and inside JSON strings, against the reference.

_STOPS = [b'"', b"\\", b"\n", b"\x01", b"\x1f", b"\x7f", "é".encode(), "東".encode(), "😀".encode(), b"\xff",
          b"\xc3", b"\xe6\x9d", b"\xf0\x9f\x98", b"\xed\xa0\x80", b"\xc0\xaf"]
# The UTF-8 check of a whole block (_kernel_text.h utf8_block) works on masks of byte classes, with what a
# sequence still needs carried into the next block: the edges of every lead byte's range of second bytes
# (valid and one past), every lead class cut short or followed by one continuation too many, and runs of
# characters of every length crossing blocks.
_UTF8_STOPS = [b"\xc2\x80", b"\xdf\xbf", b"\xc1\xbf", b"\xe0\xa0\x80", b"\xe0\x9f\xbf", b"\xed\x9f\xbf",
               b"\xed\xbf\xbf", b"\xef\xbf\xbf", b"\xf0\x90\x80\x80", b"\xf0\x8f\xbf\xbf", b"\xf4\x8f\xbf\xbf",
               b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xf1\x80\x80", "é".encode() + b"\x80",
               "😀".encode() + b"\xbf", b"\xe6\x9d" + "é".encode(), b"\xe6" + b"a", "é東😀é東😀".encode(),
               "東".encode() * 7, "😀".encode() * 5 + b"\xf0", b"\xc0", b"\xc1", b"\xf5", b"\xf8\x80", b"\xfe"]


def _run_with(stop: bytes, at: int, length: int) -> bytes:
    plain = bytes(0x61 + (i % 26) for i in range(length))
    return plain[:at] + stop + plain[at:]


def _block_values(lengths=(0, 1, 7, 15, 16, 17, 31, 33, 47, 64), stops=_STOPS):
    for length in lengths:
        yield bytes(0x61 + (i % 26) for i in range(length))
        for stop in stops:
            for at in range(0, length + 1, 1 if length <= 33 else 5):
                yield _run_with(stop, at, length)


def _check_section(values: list[bytes | None], mode: str) -> None:
    records = [(i, i, v, v, [(v or b"k", v)], 0) for i, v in enumerate(values)]
    data = _section(records)
    _check(data, _header(len(records), 0, 100, 1000, 1000, -1), mode, (None, None, None, None))


@pytest.mark.parametrize("mode", MODES)
def test_stops_at_every_offset_of_blocks_render_and_count_alike(mode):
    values = list(_block_values())
    for value in values:
        assert kernel.render_value(value, mode) == jsonembed.render_value(value, mode), value
    for i in range(0, len(values), 40):
        _check_section(values[i : i + 40], mode)
    _check_section([values[-1]], mode)  # alone: the header value ends the section


@pytest.mark.parametrize("mode", ["auto", "string"])
def test_utf8_edges_at_every_offset_of_blocks_render_and_count_alike(mode):
    values = list(_block_values((0, 15, 16, 17, 33), _UTF8_STOPS))
    for value in values:
        assert kernel.render_value(value, mode) == jsonembed.render_value(value, mode), value
    for i in range(0, len(values), 40):
        _check_section(values[i : i + 40], mode)
    _check_section([values[-1]], mode)


_UTF8_PIECES = [b"a", b"bc", b'"', b"\\", b"\n", b"\x00", "é".encode(), "東".encode(), "😀".encode(), b"\x80", b"\xbf",
                b"\xc2", b"\xe0", b"\xe0\xa0", b"\xed", b"\xed\xa0", b"\xf0", b"\xf0\x90", b"\xf4", b"\xf4\x90",
                b"\xf5", b"\xff", b"\xc0", b"\xc1"]


@given(st.integers(0, 15), st.lists(st.sampled_from(_UTF8_PIECES), max_size=40), st.sampled_from(MODES))
def test_utf8_pieces_at_any_alignment_render_and_count_alike(shift, pieces, mode):
    """Random sequences of characters, continuation and lead bytes (whole, cut, out of range) after 0-15
    plain bytes: a value, a header key, and a string inside JSON, rendered and counted."""
    text = b"x" * shift + b"".join(pieces)
    for value in (text, b'{"' + text + b'":1}'):
        assert kernel.render_value(value, mode) == jsonembed.render_value(value, mode)
    records = [(0, 0, text, text, [(text, text)], 0), (1, 1, b"k", b'["' + text + b'"]', [(b"h", text)], 0)]
    _check(_section(records), _header(2, 0, 100, 1000, 1000, -1), mode, (None, None, None, None))


def test_stops_inside_json_strings_at_every_offset():
    """In mode auto, JSON values whose strings (keys and values) hold every stop at every offset of a
    run crossing blocks, compact and spaced: embedded (and compacted) when valid, else a string or base64."""
    values = []
    for inner in _block_values((0, 5, 15, 16, 17, 40)):
        values += [b'{"k":"' + inner + b'"}', b'["' + inner + b'",1]', b'{"' + inner + b'":[true]}',
                   b'{ "k" : "' + inner + b'" , "n" : [ 1 , 2 ] }', b'\t[ "' + inner + b'" ]\n']
    for value in values:
        assert kernel.render_value(value, "auto") == jsonembed.render_value(value, "auto"), value
    for i in range(0, len(values), 40):
        _check_section(values[i : i + 40], "auto")


def test_json_cut_inside_a_string_with_quotes_after_it_in_the_section():
    """A JSON key cut at every byte (often inside a string), followed in its records section by a quote
    (the kernel reads a string's first block past the key's end, and must never take a quote there as
    the string's end), and whole ones for contrast."""
    whole = b'{"key":"value","n":[1,"x",{"y":"z"}],"t":"tab\\there"}'
    values = [whole[:cut] for cut in range(len(whole) + 1)] + [b'["' + b"a" * k for k in range(20)]
    for value in values:
        assert kernel.render_value(value, "auto") == jsonembed.render_value(value, "auto"), value
    # as a key, the value's length comes next: 17 bytes is the varint 0x22, a quote
    records = [(i, i, v, b'"' * 17, [(b'"quoted"', v)], 0) for i, v in enumerate(values)]
    _check(_section(records), _header(len(records), 0, 100, 1000, 1000, -1), "auto", (None, None, None, None))


def test_spaced_json_with_escapes_at_every_offset_compacts_alike():
    """Spaced JSON (compacted 16 bytes at a time: whitespace outside strings dropped, a backslash taking
    the byte after it along, even into the next block) with every valid escape, a space and a tab-free
    run at every offset of its strings, keys and values."""
    escapes = [b'\\"', b"\\\\", b"\\n", b"\\/", b"\\u00e9", b"\\ud83d\\ude00", b" ", b"  ", b'\\"\\"', b"\\\\\\\""]
    values = []
    for inner in _block_values((0, 14, 15, 16, 17, 31, 33), escapes):
        values += [b'{ "k" : "' + inner + b'" , "n" : [ 1 , 2 ] }', b'[ "' + inner + b'" ,\n\t"' + inner + b'" ]',
                   b'{"' + inner + b'" :\r\n [ true , "' + inner + b'" ] }', b"  " * 7 + b'[ "' + inner + b'" ]  ']
    for value in values:
        assert kernel.render_value(value, "auto") == jsonembed.render_value(value, "auto"), value
    for i in range(0, len(values), 40):
        _check_section(values[i : i + 40], "auto")


def test_long_strings_render_and_count_alike():
    """Strings of thousands of bytes: plain ASCII, text with characters to escape and multi-byte
    characters throughout, one bad byte far in, and a long JSON value (the output buffer grows)."""
    text = ("Zürich naïve 東京 😀 say \"hi\" tab\there back\\slash \x01 " * 300).encode()
    values = [b"x" * 5000, text, text[:4001] + b"\xff" + text[4001:], b"[" + b",".join([b'"' + text[:200] + b'"'] * 40) + b"]",
              b'{"a": ' + b"[1, 2.5e-3, true, null, \"x\"]," * 500 + b'"b": 0}']
    for mode in MODES:
        for value in values:
            assert kernel.render_value(value, mode) == jsonembed.render_value(value, mode)
        _check_section(values, mode)


def test_integers_at_every_decimal_length_render_and_count_alike():
    """Offsets and timestamps at every power of ten and one below it, and at the ends of 64 bits: the
    kernel counts their digits without formatting them, and formats eight at a time."""
    edges = sorted({s * (10**k + d) for k in range(19) for d in (-1, 0, 1) for s in (1, -1)} | {2**63 - 1, -(2**63)})
    for first in edges:
        data = _section([(0, 0, b"k", b"v", [], 0), (1, 1, None, None, [], 0)])
        for base in (first, 0):
            if -(2**63) <= first <= 2**63 - 2:
                _check(data, _header(2, 0, max(base, 0), first, first, first), "auto", (None, None, None, None))
                _check(data, _header(2, 0x18, max(base, 0), first, first, first), "auto", (None, None, None, None))


@pytest.mark.parametrize("size", [0, 1, 7, 8, 255, 256, 767, 768, 769, 1535, 1536, 1537, 2304, 9000, 70000])
def test_crc32c_of_every_stream_length_alike(size):
    """The instruction's CRC runs three streams of 256 bytes side by side: lengths around their multiples."""
    data = bytes((i * 131 + size) & 0xFF for i in range(size + 3))
    for skip in (0, 3):
        expected = _crc32c_package.crc32c(data[skip:])
        assert kernel.KERNEL.crc32c(data[skip:]) == expected
        assert kernel.KERNEL.crc32c(data[skip:], 0) == expected
        assert kernel.KERNEL.crc32c(data[skip:], 1) in (expected, None)
