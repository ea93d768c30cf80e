"""The compiled write path (format/_kernel_lines.h via format/lineencode.py) against the Python reference
(appendlines.parse_lines, encode.batch_groups, encode.encode_batch), byte for byte: the same batches for
any lines, or the same error naming the same line. Lines are drawn to reach every branch of the kernel's
own JSON scanner and the cases it hands to the reference: plain lines, record objects with every field
in every form (strings with escapes and surrogates, objects and arrays spaced or not, numbers of every
shape, kept as written, and near misses, $base64 right and wrong, both header forms, ISO and bad timestamps), repeated
and unknown fields, whitespace JSON does not allow, bad JSON. Also encode_section (encode_records) of
record tuples."""

from __future__ import annotations

import json
import os
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkafs.errors import InvalidInput
from kafkafs.format import kernel
from kafkafs.format.compression import Codec
from kafkafs.format.encode import encode_records, encode_records_reference
from kafkafs.format.lineencode import encode_lines

pytestmark = pytest.mark.skipif(kernel.KERNEL is None, reason="the compiled kernel is not built")

_NUMBERS = ["0", "-0", "5", "-17", "123456789012345", "1234567890123456", "5.1", "5.10", "0.0", "-0.0", "1.0",
            "100.0", "0.0001", "0.00001", "0.00012", "1e5", "1E5", "1.5e3", "-2.25", "123456789012345.6",
            "12345678901234.5", "0.1", "007", "1.", ".5", "99999999999999999999", "3.14159265358979"]
_STRINGS = ['"plain"', '""', '"café"', '"東京"', '"tab\\there"', '"q\\"uote"', '"back\\\\slash"', '"\\/"',
            '"\\u00e9"', '"\\ud83d\\ude00"', '"\\ud800"', '"\\udc00x"', '"\\u0000"', '"\\b\\f\\n\\r\\t"',
            '"bad\\x"', '"\x01"', '"\xff"', '"unterminated', '"\\u12"', '"$base64"']

_NEAR_MISSES = ["01", "-01", "00", "-", "--1", "+1", ".5", "1.", "-.5", "1.e5", "1e", "1E+", "1e-", "1.5.2", "1e5e5",
                "0x10", "1_000", "Infinity", "-Infinity", "NaN", "1e309", "-1.8e308", "1.7976931348623159e308",
                "1e0400", "0e1000", "1e2147483648", "1e-4294967297", "1e99999999999999", "1" * 301, "1" * 301 + ".5",
                "9" * 290 + "e11", "1e-1000", "- 1", "1 e5"]


@st.composite
def json_number(draw) -> str:
    """A JSON number of any shape: sign, zero or digits past 15 (and past a double's range), a fraction
    with trailing zeros, an exponent in either case, with or without sign and leading zeros, small,
    near a double's limits or past them; and, one time in eight, a near miss that is not JSON."""
    if draw(st.integers(0, 7)) == 0:
        return draw(st.sampled_from(_NEAR_MISSES))
    sign = draw(st.sampled_from(["", "", "-"]))
    whole = draw(st.one_of(st.just("0"), st.integers(1, 10**20).map(str),
                           st.integers(1, 310).map(lambda n: "9" * n)))
    frac = draw(st.one_of(st.just(""), st.text("0123456789", min_size=1, max_size=25).map(lambda d: "." + d),
                          st.sampled_from([".0", ".00", ".10", ".90", ".5000"])))
    exp = ""
    if draw(st.booleans()):
        digits = draw(st.one_of(st.integers(0, 20), st.integers(280, 330), st.integers(990, 1010)))
        exp = (draw(st.sampled_from("eE")) + draw(st.sampled_from(["", "+", "-"])) + "0" * draw(st.integers(0, 3))
               + str(digits))
    return sign + whole + frac + exp


def _kernel_takes(number: str) -> bool:
    """Whether the kernel's encoder takes a number itself (RFC 8259's form, integer digits plus a positive
    exponent at most 300, an exponent of at most 3 significant digits), as _kernel_lines.h canon_number."""
    m = re.fullmatch(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?(?:[eE]([-+]?)([0-9]+))?", number)
    if m is None:
        return False
    exp = (m.group(4) or "0").lstrip("0")
    up = int(exp or "0") if m.group(3) != "-" else 0
    return len(exp) <= 3 and len(m.group(1)) + up <= 300


json_scalar = st.one_of(st.sampled_from(_NUMBERS), json_number(), st.sampled_from(_STRINGS),
                        st.sampled_from(["true", "false", "null", "tru", "nul"]))


@st.composite
def json_text(draw, depth: int = 0) -> str:
    """JSON-ish text: mostly valid, sometimes spaced, sometimes repeated keys or broken."""
    kind = draw(st.sampled_from(["scalar", "scalar", "object", "array"] if depth < 3 else ["scalar"]))
    sp = draw(st.sampled_from(["", "", "", " "]))
    if kind == "scalar":
        return draw(json_scalar)
    items = draw(st.lists(json_text(depth + 1), max_size=4))
    if kind == "array":
        return "[" + sp + ("," + sp).join(items) + sp + "]"
    keys = draw(st.lists(st.sampled_from(['"a"', '"b"', '"$base64"', '"c\\n"', '"é"']), min_size=len(items),
                         max_size=len(items)))
    return "{" + sp + ("," + sp).join(f"{k}:{sp}{v}" for k, v in zip(keys, items, strict=True)) + sp + "}"


_B64 = ['"QUJD"', '"QQ=="', '"QUI="', '""', '"QR=="', '"QUJ"', '"Q==="', '"QU=D"', '"QU JD"', '"QUJD\\n"', "5", "null",
        '"4pyTIMOgIGxhIG1vZGU="']


@st.composite
def bytes_field(draw) -> str:
    choice = draw(st.sampled_from(["json", "json", "b64", "b64extra"]))
    if choice == "json":
        return draw(json_text())
    sp = draw(st.sampled_from(["", " "]))
    b64 = draw(st.sampled_from(_B64))
    if choice == "b64":
        return "{" + sp + '"$base64"' + sp + ":" + sp + b64 + sp + "}"
    return '{"$base64":' + b64 + ',"x":1}'


@st.composite
def headers_field(draw) -> str:
    form = draw(st.sampled_from(["list", "list", "dict", "null", "bad"]))
    if form == "null":
        return "null"
    if form == "bad":
        return draw(st.sampled_from(["5", '"h"', "[5]", '[{"value":"x"}]', '[{"key":5}]', '[{"key":"a","other":1}]',
                                     '[{"key":"a","key":"b"}]', "[{}]", '{"a":1,"a":2}', '{"\\u0061":1,"a":2}']))
    n = draw(st.integers(0, 3))
    if form == "dict":
        names = draw(st.lists(st.sampled_from(['"h"', '"trace"', '"é"', '"t\\tab"', '""']), min_size=n, max_size=n))
        return "{" + ",".join(f"{k}:{draw(bytes_field())}" for k in names) + "}"
    out = []
    for _ in range(n):
        parts = [f'"key":{draw(st.sampled_from(_STRINGS[:8]))}']
        if draw(st.booleans()):
            parts.append(f'"value":{draw(bytes_field())}')
        if draw(st.booleans()):
            parts.reverse()
        out.append("{" + ",".join(parts) + "}")
    return "[" + ",".join(out) + "]"


_TIMESTAMPS = ["1763700000000", "0", "-1", "-2", "-0", "null", '"2026-11-21T10:00:00Z"', '"bad"', "1.5", "true",
               "9223372036854775807", "9223372036854775808", "01", "1e3", "123456789012345678"]


@st.composite
def record_line(draw) -> bytes:
    fields = []
    for name in draw(st.lists(st.sampled_from(["key", "value", "headers", "timestamp", "topic", "offset",
                                               "timestampType", "partition", "control", "producerId", "other"]),
                              max_size=5)):
        if name in ("key", "value"):
            v = draw(bytes_field())
        elif name == "headers":
            v = draw(headers_field())
        elif name == "timestamp":
            v = draw(st.sampled_from(_TIMESTAMPS))
        else:
            v = draw(json_text())
        fields.append(f'"{name}":{v}')
    sp = draw(st.sampled_from(["", "", " ", "\t"]))
    lead = draw(st.sampled_from(["", "", " ", "\x0b", "\r"]))
    tail = draw(st.sampled_from(["", "", " ", "\r", "x", "}"]))
    return (lead + "{" + sp + ("," + sp).join(fields) + sp + "}" + tail).encode("utf-8", "surrogatepass")


plain_line = st.one_of(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")),
                       st.text(max_size=20).map(lambda t: t.replace("\n", "").encode("utf-8", "surrogatepass")),
                       st.sampled_from([b"", b" ", b"hello", b"[1,2]", b"  x{", b"\x0c", b"\xff\xfe"]))

lines_blob = st.lists(st.one_of(record_line(), record_line(), plain_line), min_size=1, max_size=8).map(b"\n".join)


def _groups(fn, blob: bytes, args: dict) -> list:
    """Every group of ``blob`` as produce cuts them, then the error that stopped them (if one did)."""
    out: list = []
    start, first = 0, args["first_number"]
    try:
        while start <= len(blob):
            group = fn(blob, start, **{**args, "first_number": first})
            out.append(group)
            first += group.taken
            start = group.end
    except InvalidInput as exc:
        out.append(("error", str(exc)))
    return out


@settings(max_examples=int(os.environ.get("KAFKAFS_LINES_EXAMPLES", "300")), deadline=None)
@given(lines_blob, st.sampled_from([None, 1, 3]), st.sampled_from([None, 10, 100]),
       st.sampled_from([Codec.NONE, Codec.NONE, Codec.GZIP]), st.sampled_from([1 << 20, 200]))
def test_lines_encode_alike(blob, max_lines, max_bytes, codec, limit):
    args = {"now": 1763700000123, "codec": codec, "max_message_bytes": limit, "leader_epoch": 3, "first_number": 7,
            "max_lines": max_lines, "max_bytes": max_bytes}
    assert _groups(encode_lines, blob, args) == _groups(encode_lines, blob, {**args, "reference": True})


@given(st.lists(st.sampled_from([b'{"value":"a"}', b"plain", b'{"key":"k","value":{"x":1.25},"headers":[]}']),
                min_size=1, max_size=30).map(b"\n".join))
def test_json_lines_decode_as_the_records_they_name(blob):
    """A sanity check independent of the reference: the kernel's batch decodes to the lines' records."""
    from kafkafs.format.batch import decode_batch

    group = encode_lines(blob, now=5, max_message_bytes=1 << 20)
    batch = decode_batch(group.data)
    lines = blob.split(b"\n")
    assert len(batch) == len(lines) == group.taken
    for line, value, key in zip(lines, batch.values, batch.keys, strict=True):
        if line.startswith(b"{"):
            obj = json.loads(line)
            assert value == (obj["value"] if isinstance(obj["value"], str) else json.dumps(
                obj["value"], separators=(",", ":"))).encode()
            assert key == (obj["key"].encode() if "key" in obj else None)
        else:
            assert (key, value) == (None, line)
    assert set(batch.timestamps) == {5}


_bytes_or_none = st.one_of(st.none(), st.binary(max_size=20))
record_tuple = st.tuples(st.integers(-(2**63), 2**63 - 1), _bytes_or_none, _bytes_or_none,
                         st.lists(st.tuples(st.text(max_size=5), _bytes_or_none), max_size=3))


@given(st.lists(record_tuple, max_size=6), st.integers(-(2**63), 2**63 - 1), st.booleans())
def test_sections_encode_alike(records, first_ts, gaps):
    deltas = [i * 3 for i in range(len(records))] if gaps else None

    def run(fn):
        try:
            return bytes(fn(records, first_ts, deltas))
        except (ValueError, TypeError, UnicodeEncodeError) as exc:
            return type(exc).__name__

    assert run(encode_records) == run(encode_records_reference)


def test_common_lines_take_the_fast_path(monkeypatch):
    """Rendered records.jsonl lines, plain lines and simple objects are parsed by the kernel itself; the
    reference parser sees only what the kernel hands it (here: a value with a space to take out)."""
    import kafkafs.format.lineencode as lineencode

    seen = []
    original = lineencode._parse
    monkeypatch.setattr(lineencode, "_parse", lambda line, number: seen.append(line) or original(line, number))
    lines = [
        b'{"topic":"t","partition":0,"offset":1,"timestamp":1763700000001,"timestampType":"CreateTime",'
        b'"key":"c-1","value":{"amount":12.5,"items":[1,2],"ok":true,"n":null},"headers":[{"key":"h","value":'
        b'{"$base64":"AAE="}},{"key":"e","value":null}]}',
        b"plain text \xc3\xa9",
        b'{"value":"tab\\there","headers":{"a":"b"},"timestamp":-1}',
        b'{"value":{"amount": 12.5}}',
    ]
    group = encode_lines(b"\n".join(lines), now=1, max_message_bytes=1 << 20)
    assert group.taken == 4 and seen == [lines[3]]
    assert group == encode_lines(b"\n".join(lines), now=1, max_message_bytes=1 << 20, reference=True)


# Where a number stands in a line: the value, the key, inside an object or an array, a header's value
# (both forms), a rendered line's own field (ignored); and beside a 16-digit run, which makes the reference
# parse with the standard library (exact integers) instead of orjson.
_NUMBER_PLACES = ['{"value":%s}', '{"key":%s,"value":"v"}', '{"value":{"amount":%s,"currency":"EUR"}}',
                  '{"value":[%s,%s]}', '{"headers":{"h":%s}}', '{"headers":[{"key":"h","value":[%s]}]}',
                  '{"offset":%s,"value":"v"}', '{"key":"1234567890123456","value":{"a":%s}}',
                  '{"topic":"t","partition":0,"offset":12,"timestamp":1763700000012,"timestampType":"CreateTime",'
                  '"key":"customer-92089","value":{"order":12,"customer":"c-53396","amount":%s,"currency":"EUR",'
                  '"status":"paid","items":[46,21]},"headers":[]}']


@settings(max_examples=int(os.environ.get("KAFKAFS_LINES_EXAMPLES", "300")), deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_NUMBER_PLACES), json_number()), min_size=1, max_size=4))
def test_numbers_encode_alike(placed):
    """Every number shape, wherever it stands: the kernel's batch (or error) is the reference's."""
    blob = b"\n".join((place.replace("%s", number)).encode() for place, number in placed)
    args = {"now": 1763700000123, "codec": Codec.NONE, "max_message_bytes": 1 << 20, "leader_epoch": 3,
            "first_number": 1, "max_lines": None, "max_bytes": None}
    assert _groups(encode_lines, blob, args) == _groups(encode_lines, blob, {**args, "reference": True})


@settings(max_examples=int(os.environ.get("KAFKAFS_LINES_EXAMPLES", "300")), deadline=None)
@given(st.sampled_from(_NUMBER_PLACES), json_number().filter(_kernel_takes))
def test_numbers_as_written_take_the_fast_path(place, number):
    """A number is written as it is written (765.90 stays 765.90, 1E5 stays 1E5, -0 stays -0): the kernel
    takes every one that cannot pass a double's range without the reference parser (it handed decimals
    with a trailing zero, exponents, -0 and integers past 15 digits to it before), with its bytes."""
    import kafkafs.format.lineencode as lineencode

    line = place.replace("%s", number).encode()
    seen = []
    original = lineencode._parse
    lineencode._parse = lambda line, n: seen.append(line) or original(line, n)
    try:
        group = encode_lines(line, now=1, max_message_bytes=1 << 20)
    finally:
        lineencode._parse = original
    assert seen == []
    assert group == encode_lines(line, now=1, max_message_bytes=1 << 20, reference=True)


@pytest.mark.parametrize("value", ['{"a":1,"a":2}', '["\\u00e9","\\/","\\ud83d\\ude00","\\u0000","\\b"]',
                                   '{"\\u0061":[1,{"b":"\\"q\\""}],"a":0}'])
def test_nested_escapes_and_repeated_keys_take_the_fast_path(monkeypatch, value):
    """A value's text is written as it is, so the kernel takes \\u escapes, \\/ and repeated keys inside it
    (it handed them to the reference before); a lone surrogate escape stays the reference's error."""
    import kafkafs.format.lineencode as lineencode

    seen = []
    original = lineencode._parse
    monkeypatch.setattr(lineencode, "_parse", lambda line, number: seen.append(line) or original(line, number))
    line = b'{"key":"k","value":' + value.encode() + b"}"
    group = encode_lines(line, now=1, max_message_bytes=1 << 20)
    assert seen == []
    assert group == encode_lines(line, now=1, max_message_bytes=1 << 20, reference=True)
    for lone in ['["\\ud800"]', '["\\udc00"]', '["\\ud83dx"]', '["\\ud83d\\u0041"]']:
        line = b'{"value":' + lone.encode() + b"}"
        with pytest.raises(InvalidInput, match="line 1: "):
            encode_lines(line, now=1, max_message_bytes=1 << 20)
        with pytest.raises(InvalidInput, match="line 1: "):
            encode_lines(line, now=1, max_message_bytes=1 << 20, reference=True)


_ESCAPES = ["\\x", "\\u12", "\\u12G4", "\\ud800", "\\udc00", "\\ud83dx", "\\ud83d\\u0041", "\\ud83d\\ude00",
            "\\ud83d\\", "\\'", "\\a", "\\0", "\\U0041", "\\u0041", "\\/", "\\\\", "\\\"", "\\t", "\\uDBFF\\uDFFF"]


@pytest.mark.parametrize("escape", _ESCAPES)
@pytest.mark.parametrize("place", ['{"value":["a%sb"]}', '{"value":{"%s":1}}', '{"key":{"k":"%s"}}',
                                   '{"headers":{"h":["%s"]}}', '{"value":"%s"}', '{"offset":"%s"}'])
def test_escapes_encode_alike(place, escape):
    """Every escape, good or bad, in a value's text, a key of it, a header, a string value and a rendered
    line's own field: the kernel's batch or error is the reference's."""
    line = (place % escape).encode()
    args = {"now": 1, "codec": Codec.NONE, "max_message_bytes": 1 << 20, "leader_epoch": -1, "first_number": 1,
            "max_lines": None, "max_bytes": None}
    assert _groups(encode_lines, line, args) == _groups(encode_lines, line, {**args, "reference": True})


@pytest.mark.parametrize("number", _NEAR_MISSES + _NUMBERS)
def test_number_edges_encode_alike(number):
    """Each near miss and edge (a double's limits, exponents past 32 bits) in a value and in an object
    beside a 16-digit run: the kernel's batch or error is the reference's."""
    blob = b"\n".join((place.replace("%s", number)).encode() for place in (_NUMBER_PLACES[0], _NUMBER_PLACES[7]))
    args = {"now": 1, "codec": Codec.NONE, "max_message_bytes": 1 << 20, "leader_epoch": -1, "first_number": 1,
            "max_lines": None, "max_bytes": None}
    assert _groups(encode_lines, blob, args) == _groups(encode_lines, blob, {**args, "reference": True})
