import base64

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkafs.errors import InvalidInput
from kafkafs.format.batch import decode_batch, encode_batch, encode_control_batch
from kafkafs.format.jsonview import (
    format_timestamp,
    parse_record_line,
    parse_record_lines,
    parse_timestamp,
    record_object,
    render_batch_jsonl,
    render_record,
    render_record_pretty,
)


def _batch(records, **kw):
    return decode_batch(encode_batch(records, **kw))


def _one(key, value, headers=(), mode="auto", **kw):
    batch = _batch([(1763700000000, key, value, headers)], base_offset=42, **kw)
    return render_record("orders", 0, batch, 0, mode)


def test_spec_example_shape():
    line = _one(b"k1", b'{"a":1}', (("trace", b"abc"),))
    assert line == (
        b'{"topic":"orders","partition":0,"offset":42,"timestamp":1763700000000,"timestampType":"CreateTime",'
        b'"key":"k1","value":{"a":1},"headers":[{"key":"trace","value":"abc"}]}\n'
    )


@pytest.mark.parametrize(
    "raw, expected",
    [
        (None, None),
        (b"", ""),
        (b"plain text", "plain text"),
        (b"42", "42"),  # JSON, but not an object or array: a string
        (b'"quoted"', '"quoted"'),
        (b"[1, 2,\n 3]", [1, 2, 3]),  # embedded compact
        (b'{"broken": ', '{"broken": '),
        (b"\xff\xfe", {"$base64": base64.b64encode(b"\xff\xfe").decode()}),
        ("h\u00e9llo".encode(), "h\u00e9llo"),
    ],
)
def test_auto_values(raw, expected):
    assert orjson.loads(_one(None, raw))["value"] == expected


def test_embedded_json_is_compact_and_keeps_numbers_as_written():
    line = _one(None, b'{"price":1.10,"big":123456789012345678901234567890}')
    assert b'"value":{"price":1.10,"big":123456789012345678901234567890}' in line
    spaced = _one(None, b'{ "a" : [1, 2], "s": " keep  this ", "big": 123456789012345678901234567890 }')
    assert b'"value":{"a":[1,2],"s":" keep  this ","big":123456789012345678901234567890}' in spaced


@pytest.mark.parametrize("raw", [b' {"x":1}', b'{"x":1} ', b'\n[1]\n', b'{"x":\t1}'])
def test_whitespace_around_embedded_json_goes(raw):
    line = _one(None, raw)
    assert b'"value":' + raw.strip().replace(b"\t", b"") + b',' in line


def test_pretty_keeps_tokens_and_handles_json_header_values():
    batch = _batch([(1, None, b'{"n": 123456789012345678901234567890, "p": 1.10}', (("h", b'{"a": [1, {}]}'),))])
    pretty = render_record_pretty("t", 0, batch, 0)
    assert b'"n": 123456789012345678901234567890' in pretty and b'"p": 1.10' in pretty
    assert b'"value": {\n        "a": [\n          1,\n          {}\n        ]\n      }' in pretty
    assert orjson.loads(pretty)["headers"][0]["value"] == {"a": [1, {}]}


def test_string_and_base64_modes():
    assert orjson.loads(_one(b"k", b'{"a":1}', mode="string"))["value"] == '{"a":1}'
    obj = orjson.loads(_one(b"k", b'{"a":1}', (("h", b"x"),), mode="base64"))
    assert obj["value"] == {"$base64": base64.b64encode(b'{"a":1}').decode()}
    assert obj["key"] == {"$base64": "aw=="}
    assert obj["headers"][0]["value"] == {"$base64": "eA=="}
    with pytest.raises(InvalidInput):
        _one(b"k", b"v", mode="hex")


def test_log_append_time_and_transactional_fields():
    batch = _batch(
        [(1, b"k", b"v", ())], log_append_time=5, transactional=True, producer_id=9, producer_epoch=0
    )
    obj = orjson.loads(render_record("t", 1, batch, 0))
    assert obj["timestampType"] == "LogAppendTime" and obj["timestamp"] == 5
    assert obj["producerId"] == 9 and "control" not in obj


def test_control_marker():
    batch = decode_batch(encode_control_batch("ABORT", producer_id=3, producer_epoch=0, timestamp=7))
    obj = orjson.loads(render_record("t", 0, batch, 0))
    assert obj["control"] == "ABORT" and obj["producerId"] == 3
    assert list(obj)[-2:] == ["control", "producerId"]


def test_batch_rendering_equals_the_dict_reference():
    records = [
        (i, b"k%d" % i if i % 4 else None, [b'{"i":%d}' % i, b"[1, 2]", b"\xff", b"t\"x", b"\x01"][i % 5],
         (("h", b'{"a": 1}'),) if i % 3 else ())
        for i in range(20)
    ]
    batch = _batch(records, base_offset=100)
    whole = render_batch_jsonl("t", 3, batch)
    for mode in ("auto", "string", "base64"):
        assert render_batch_jsonl("t", 3, batch, mode) == b"".join(
            orjson.dumps(record_object("t", 3, batch, i, mode)) + b"\n" for i in range(20)
        )
    assert whole == b"".join(render_record("t", 3, batch, i) for i in range(20))
    assert render_batch_jsonl("t", 3, batch, start=5, stop=7) == whole.splitlines(keepends=True)[5] + (
        whole.splitlines(keepends=True)[6]
    )


def test_pretty_is_indented_json_of_the_same_object():
    batch = _batch([(1, b"k", b'{"a":[1,2]}', ())])
    pretty = render_record_pretty("t", 0, batch, 0)
    assert pretty.startswith(b'{\n  "topic": "t"')
    assert b'"a": [\n' in pretty
    assert orjson.loads(pretty) == orjson.loads(render_record("t", 0, batch, 0))


# ------------------------------------------------------------------------------------ append lines


def test_plain_lines_are_values_byte_for_byte():
    assert parse_record_lines(b"hello\n  spaced \n\n") == [
        (None, None, b"hello", ()),
        (None, None, b"  spaced ", ()),
        (None, None, b"", ()),
    ]


def test_record_objects():
    rec = parse_record_line(
        b'{"key": "k", "value": {"a": [1, 2]}, "headers": [{"key": "h", "value": {"$base64": "/w=="}}],'
        b' "timestamp": 1763700000000}'
    )
    assert rec == (1763700000000, b"k", b'{"a":[1,2]}', (("h", b"\xff"),))
    assert parse_record_line(b'{"value": null}') == (None, None, None, ())
    assert parse_record_line(b'{"timestamp": "2026-11-21T10:00:00.123Z"}').timestamp == 1795255200123


@pytest.mark.parametrize(
    "line",
    [
        b'{"value": ',
        b'{"vaule": "typo"}',
        b'{"headers": 5}',
        b'{"timestamp": "yesterday"}',
        b'{"value": {"$base64": "!!"}}',
        b'{"headers": [{"key": 1, "value": "x"}]}',
        b'{"timestamp": -5}',
        b'{"timestamp": "1969-12-31T00:00:00Z"}',
    ],
)
def test_bad_objects_are_invalid_input(line):
    with pytest.raises(InvalidInput):
        parse_record_line(line)


def test_large_integers_are_written_exactly():
    rec = parse_record_line(b'{"value": {"id": 123456789012345678901234567890, "n": 18446744073709551616}}')
    assert rec.value == b'{"id":123456789012345678901234567890,"n":18446744073709551616}'
    with pytest.raises(InvalidInput):
        parse_record_line(b'{"value": {"id": 1234567890123456789, "x": NaN}}')


@pytest.mark.parametrize("line", [
    b'{"key": [99999999999999999999, "\\ud800"]}',  # hypothesis found it (test_kernel_lines)
    b'{"value": "\\udc00", "timestamp": 12345678901234567}',
    b'{"value": "\\ud800"}',  # the usual parser (orjson) refuses it too
])
def test_a_lone_surrogate_is_invalid_input_with_or_without_long_integers(line):
    """A line with a 16-digit run goes through the standard library's parser (exact integers), which
    takes a lone surrogate escape that orjson refuses; it is not text, and is refused as one line."""
    with pytest.raises(InvalidInput, match="surrogate"):
        parse_record_line(line)


def test_one_bad_line_fails_the_whole_write():
    with pytest.raises(InvalidInput, match="line 2"):
        parse_record_lines(b'ok\n{"bad\nok\n')


def test_rendered_lines_append_back_to_the_same_record():
    records = [(5, b"k", b'{"a":1}', (("h", b"\x00\xff"),)), (6, None, b"\xfe", ())]
    for line in render_batch_jsonl("t", 0, _batch(records)).splitlines():
        rec = parse_record_line(line)
        assert rec in [(r[0], r[1], r[2], r[3]) for r in records]


@given(st.integers(-(2**40), 2**45))
def test_timestamps_round_trip(ms):
    assert parse_timestamp(format_timestamp(ms)) == ms
    assert parse_timestamp(str(ms)) == ms


def test_iso_timestamps():
    assert parse_timestamp("2026-11-21T10:00:00Z") == 1795255200000
    assert parse_timestamp("1970-01-01T00:00:00.001Z") == 1
    with pytest.raises(InvalidInput):
        parse_timestamp("tomorrow")


def test_iso_bounds_round_sub_millisecond_digits_up():
    # a bound (first record at or after; a range's end, before): 10:01:00.0015 is first met at .002
    at = parse_timestamp("2026-11-21T10:01:00Z")
    assert parse_timestamp("2026-11-21T10:01:00.0015Z") == at + 1  # a record's own timestamp: cut
    assert parse_timestamp("2026-11-21T10:01:00.0015Z", round_up=True) == at + 2
    assert parse_timestamp("2026-11-21T10:01:00.0010001Z", round_up=True) == at + 2  # past microseconds
    for whole in ("2026-11-21T10:01:00.001Z", "2026-11-21T10:01:00.001000Z", "2026-11-21T10:01:00.0010000Z"):
        assert parse_timestamp(whole, round_up=True) == at + 1, whole
    assert parse_timestamp("2026-11-21T10:01:00Z", round_up=True) == at
    assert parse_timestamp(str(at), round_up=True) == at
    assert parse_timestamp("1969-12-31T23:59:59.9995Z", round_up=True) == 0
    assert parse_timestamp("1969-12-31T23:59:59.9995Z") == -1


def test_raw_rendering_contract():
    from kafkafs.format.jsonview import raw_jsonl_lengths, render_raw_jsonl, render_raw_jsonl_lines

    records = [(1000 + i, b"k%d" % i, b'{"n": %d}' % i, (("h", b"\xff"),) if i % 2 else ()) for i in range(10)]
    raw = encode_batch(records, base_offset=100)
    batch = decode_batch(raw)
    whole = render_raw_jsonl("t", 3, raw)
    assert whole == render_batch_jsonl("t", 3, batch)
    lines = whole.splitlines(keepends=True)
    assert raw_jsonl_lengths("t", 3, raw) == [len(x) for x in lines]
    some = render_raw_jsonl("t", 3, raw, lo=102, hi=107, ts_lo=1003, ts_hi=1006)
    assert some == b"".join(lines[3:6])
    out, offsets, ends = render_raw_jsonl_lines("t", 3, raw, "base64", lo=104)
    assert offsets == list(range(104, 110))
    assert out == render_batch_jsonl("t", 3, batch, "base64", 4) and ends[-1] == len(out)
    assert render_raw_jsonl("t", 3, raw, hi=50) == b"" and raw_jsonl_lengths("t", 3, raw, lo=200) == []


def test_raw_rendering_checks_the_crc_and_takes_compressed_batches():
    from kafkafs.errors import CorruptRecordError
    from kafkafs.format.batch import Codec
    from kafkafs.format.jsonview import render_raw_jsonl

    records = [(5 + i, None, b"v%d" % i, ()) for i in range(5)]
    for codec in (Codec.NONE, Codec.GZIP, Codec.LZ4):
        raw = encode_batch(records, compression=codec)
        assert render_raw_jsonl("t", 0, raw, "string") == render_batch_jsonl("t", 0, decode_batch(raw), "string")
        damaged = bytearray(raw)
        damaged[-1] ^= 1
        with pytest.raises(CorruptRecordError, match="CRC mismatch"):
            render_raw_jsonl("t", 0, bytes(damaged))
        with pytest.raises(CorruptRecordError):
            render_raw_jsonl("t", 0, raw[:-1])


@pytest.mark.parametrize(("line", "key", "value", "header"), [
    # numbers as written: a decimal's trailing zero, an exponent, -0 (orjson wrote 225.3, 100.0, 0)
    (b'{"value": {"amount": 225.30, "e": 1E2, "z": -0}}', None, b'{"amount":225.30,"e":1E2,"z":-0}', None),
    (b'{"key": 1.50, "value": [1.0e-3, 10]}', b"1.50", b"[1.0e-3,10]", None),
    # escapes as written, whitespace outside strings gone, inside strings kept
    (b'{"value": { "s" : "a \\u00e9\\/ b" , "t":"x  y" }}', None, b'{"s":"a \\u00e9\\/ b","t":"x  y"}', None),
    (b'{"headers": [{"key": "h", "value": {"n": 2.50}}]}', None, None, b'{"n":2.50}'),
    (b'{"headers": {"h": [1.10]}}', None, None, b"[1.10]"),
    # a repeated name: the last one counts, as the parsers take it
    (b'{"value": {"a": 1}, "value": {"b": 2.0}}', None, b'{"b":2.0}', None),
])
def test_json_values_are_written_as_their_text_compacted(line, key, value, header):
    """SPEC §3: object or array -> compact JSON, as the rendering shows it (numbers and escapes kept as
    written, only the whitespace between tokens taken out), so that a line of records.jsonl appends as the
    record it shows (the rendering keeps "amount":225.30); orjson's re-serialisation rewrote numbers."""
    rec = parse_record_line(line)
    assert rec.key == key
    assert rec.value == value
    if header is not None:
        assert rec.headers == (("h", header),)


def test_a_rendered_line_with_trailing_zeros_appends_back_byte_for_byte():
    records = [(5, b"k", b'{"amount":225.30,"n":1E2}', (("h", b'[0.10]'),))]
    (line,) = render_batch_jsonl("t", 0, _batch(records)).splitlines()
    assert b'"amount":225.30' in line
    assert parse_record_line(line) == records[0]


@pytest.mark.parametrize("depth", [1000, 1023])
def test_json_nested_past_the_standard_librarys_recursion_is_invalid_input(depth):
    """orjson takes 1,023 levels of nesting; the standard library's parser and encoder, which the writer
    also uses, recurse and raised RecursionError (a traceback from ``kafkafs produce``) below that."""
    import sys

    line = b'{"value": ' + b"[" * depth + b"]" * depth + b"}"
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(900)  # as deep in the stack as produce's own call path leaves
    try:
        try:
            rec = parse_record_line(line)
        except InvalidInput as exc:
            assert "nested too deeply" in str(exc)
        else:
            assert rec.value == b"[" * depth + b"]" * depth
    finally:
        sys.setrecursionlimit(limit)
