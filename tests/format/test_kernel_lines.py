"""The compiled write path (format/_kernel_lines.h via format/lineencode.py) against the Python reference
(appendlines.parse_lines, encode.batch_groups, encode.encode_batch), byte for byte: the same batches for
any lines, or the same error naming the same line. Lines are drawn to reach every branch of the kernel's
own JSON scanner and the cases it hands to the reference: plain lines, record objects with every field
in every form (strings with escapes and surrogates, objects and arrays spaced or not, numbers orjson
writes back differently, $base64 right and wrong, both header forms, ISO and bad timestamps), repeated
and unknown fields, whitespace JSON does not allow, bad JSON. Also encode_section (encode_records) of
record tuples."""

from __future__ import annotations

import json
import os

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

json_scalar = st.one_of(st.sampled_from(_NUMBERS), st.sampled_from(_STRINGS),
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
    reference parser sees only what the kernel hands it (here: a float orjson writes differently)."""
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
        b'{"value":{"amount":12.50}}',
    ]
    group = encode_lines(b"\n".join(lines), now=1, max_message_bytes=1 << 20)
    assert group.taken == 4 and seen == [lines[3]]
    assert group == encode_lines(b"\n".join(lines), now=1, max_message_bytes=1 << 20, reference=True)
