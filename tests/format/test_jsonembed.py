"""The reference JSON rules (format/jsonembed.py) against an independent oracle: the standard
library's ``json`` parser plus the precisions the module states (objects and arrays only, depth, no
lone surrogate escapes, no NaN/Infinity)."""

import base64
import json
from decimal import Decimal

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from kafkafs.format.jsonembed import MAX_DEPTH, json_compact, json_string, render_value


def _reject(name):
    raise ValueError(name)


def _decimal(text: str):
    """Numbers compared exactly; an exponent past what Decimal takes is compared as its text."""
    try:
        return Decimal(text)
    except ArithmeticError:
        return text


def _depth(obj) -> int:
    if isinstance(obj, dict):
        return 1 + max((_depth(v) for v in obj.values()), default=0)
    if isinstance(obj, list):
        return 1 + max((_depth(v) for v in obj), default=0)
    return 0


def _strings(obj):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield k
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)
    elif isinstance(obj, str):
        yield obj


def oracle(data: bytes):
    """The parsed object when ``data`` is embeddable JSON by the module's definition, else None."""
    try:
        text = data.decode("utf-8")
        obj = json.loads(text, parse_constant=_reject, parse_float=_decimal)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, (dict, list)) or _depth(obj) > MAX_DEPTH:
        return None
    for s in _strings(obj):
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate escape
            return None
    return obj


JSONISH = st.lists(
    st.sampled_from(
        ['{', '}', '[', ']', ',', ':', '"', '"a"', '"\\u00e9"', '"\\ud83d\\ude00"', '"\\ud800"', '"\\udc00"',
         '\\', '\\n', '\\/', '\\x', '1', '-0', '0.5', '1e400', '01', '-', '.', 'e5', 'E+2',
         '123456789012345678901234567890', 'true', 'false', 'null', 'nul', 'NaN', 'Infinity',
         ' ', '\t', '\n', '\r', '\x0b', '\x0c', '\x00', '\x1f', '\x7f', '\u00a0', '\u2028', '\ufeff', 'é', '😀']
    ),
    max_size=24,
).map(lambda parts: "".join(parts).encode("utf-8"))


@given(JSONISH)
@example(b'{"a":1}')
@example(b'[1, 2,\n 3]')
@example(b'["\\ud800\\udc00"]')
@example(b'["\\ud800"]')
@example(b'["\\udc00\\ud800"]')
@example(b'[1]\x0b')
@example(b'\xef\xbb\xbf[1]')
@example(b'["a\x00"]')
@example(b'["\\u0000"]')
def test_acceptance_matches_the_oracle(data):
    expected = oracle(data)
    compact = json_compact(data)
    assert (compact is not None) == (expected is not None), (data, compact)
    if compact is not None:
        assert json.loads(compact, parse_float=_decimal) == expected
        assert len(compact) <= len(data) and not compact[:1].isspace() and not compact[-1:].isspace()


def test_depth_limit():
    assert json_compact(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH) is not None
    assert json_compact(b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1)) is None


@pytest.mark.parametrize(
    "data, out",
    [
        (b" {\"a\" : [1 ,2 ] }\r\n", b'{"a":[1,2]}'),
        (b'{"s":" keep  this "}', b'{"s":" keep  this "}'),
        (b'[1.10,1E+2,-0]', b'[1.10,1E+2,-0]'),
        (b'[123456789012345678901234567890]', b'[123456789012345678901234567890]'),
        (b'{"a":1,"a":2}', b'{"a":1,"a":2}'),
    ],
)
def test_compaction_keeps_tokens(data, out):
    assert json_compact(data) == out


@given(st.text())
def test_strings_escape_as_json_dumps(text):
    assert json_string(text.encode()) == json.dumps(text, ensure_ascii=False).encode()


@given(st.binary(max_size=64))
def test_values_by_mode(data):
    b64 = b'{"$base64":"' + base64.b64encode(data) + b'"}'
    assert render_value(data, "base64") == b64
    assert render_value(None, "auto") == b"null"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        assert render_value(data, "auto") == render_value(data, "string") == b64
        return
    assert json.loads(render_value(data, "string")) == text
    auto = render_value(data, "auto")
    if oracle(data) is None:
        assert json.loads(auto) == text
    else:
        assert auto == json_compact(data)
