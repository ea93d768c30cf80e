"""Lines written to ``append`` or to ``kafkafs produce`` into records (SPEC §3 "Writes").

A line whose first non-blank character is ``{`` is a record object ``{"key", "value", "headers",
"timestamp"}`` (every field optional; the fields a rendered line adds are accepted and ignored, so a
line of ``records.jsonl`` appends as the record it shows); any other line is the value of a record
with no key, byte for byte. A key, value or header value that is a JSON object, array, number or
boolean is written as its own text with the whitespace between tokens taken out: numbers and string
escapes stay as written (``225.30`` stays ``225.30``), as the rendering shows them.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Sequence
from typing import NamedTuple, NoReturn

import orjson

from ..errors import InvalidInput
from .records import Header
from .timestamps import parse_timestamp

__all__ = ["ProducerRecord", "parse_record_line", "parse_record_lines", "parse_lines", "timestamp_out_of_range"]

_loads = orjson.loads
_dumps = orjson.dumps


class ProducerRecord(NamedTuple):
    """A record to append; ``timestamp`` None means "now", which the caller (with a clock) fills in."""

    timestamp: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


_RENDERED_ONLY = {"topic", "partition", "offset", "timestampType", "control", "producerId"}
_WRITABLE = {"key", "value", "headers", "timestamp"}


_LONG_DIGITS = re.compile(rb"\d{16,}")


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def _loads_exact(line: bytes) -> object:
    """The standard library's parser, which keeps integers of any size exact (orjson turns integers
    past 64 bits into floats); used only for lines with long digit runs."""
    return json.loads(line, parse_constant=_reject_constant)


_JSON_WS = " \t\n\r"
#: The parts of JSON text between its whitespace: strings (escapes included) and runs of other bytes.
_NOT_SPACE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[^ \t\n\r"]+', re.S)
_DECODER = json.JSONDecoder()


_SPACE = re.compile(r"[ \t\n\r]*")


def _skip(text: str, i: int) -> int:
    found = _SPACE.match(text, i)
    return found.end() if found else i


def _spans(text: str, i: int) -> list[tuple[str | None, int, int]]:
    """The members of the JSON object (or the elements of the array) at ``text[i]``, valid JSON, as
    (name or None, start, end) of each value's text."""
    close = "}" if text[i] == "{" else "]"
    out: list[tuple[str | None, int, int]] = []
    i = _skip(text, i + 1)
    while text[i] != close:
        name = None
        if close == "}":
            name, i = _DECODER.raw_decode(text, i)
            i = _skip(text, _skip(text, i) + 1)  # the colon
        _, end = _DECODER.raw_decode(text, i)
        out.append((name, i, end))
        i = _skip(text, end)
        if text[i] == ",":
            i = _skip(text, i + 1)
    return out


def _last(spans: list[tuple[str | None, int, int]], name: str) -> tuple[int, int] | None:
    found = None
    for n, start, end in spans:
        if n == name:
            found = (start, end)  # a repeated name: the last counts, as the parsers take it
    return found


class _Texts:
    """Where the key, the value and each header value of a record object are in its line (found only
    when one of them is written as its JSON text, and only when the line is not, once compacted,
    the text orjson gives of what it parsed: then orjson's text of each part is the line's own)."""

    def __init__(self, line: bytes, parsed: object) -> None:
        self.line, self.parsed = line, parsed
        self.text: str | None = None
        self.members: list[tuple[str | None, int, int]] = []

    def _load(self) -> str | None:
        if self.text is None:
            self.text = ""
            try:
                # orjson writes no whitespace between tokens, and inside strings the same spaces as the
                # line (raw tabs and newlines are not JSON there): equal without any, equal compacted
                if self.line.translate(None, b" \t\n\r") == _dumps(self.parsed).translate(None, b" \t\n\r"):
                    return None  # every part as orjson writes it: its text is the line's
            except TypeError:  # an integer past 64 bits: not orjson's
                pass
            try:
                self.text = self.line.decode("utf-8")
                self.members = _spans(self.text, _skip(self.text, 0))
            except (UnicodeDecodeError, ValueError, IndexError):
                self.text = ""
        return self.text or None

    def of(self, name: str) -> str | None:
        text = self._load()
        span = None if text is None else _last(self.members, name)
        return None if text is None or span is None else text[span[0]:span[1]]

    def header_values(self) -> list[str] | None:
        """The text of each header's value, in the order of the headers (list or object form)."""
        text = self._load()
        span = None if text is None else _last(self.members, "headers")
        if text is None or span is None or text[span[0]] not in "[{":
            return None
        try:
            if text[span[0]] == "{":
                return [text[s:e] for _, s, e in _spans(text, span[0])]
            values = []
            for _, s, _e in _spans(text, span[0]):
                inner = _last(_spans(text, s), "value")
                values.append("null" if inner is None else text[inner[0]:inner[1]])
            return values
        except (ValueError, IndexError):
            return None


def _compact(text: str) -> bytes:
    """JSON text without the whitespace between its tokens; strings (and so escapes) and numbers as written."""
    if not any(c in text for c in _JSON_WS):
        return text.encode("utf-8")
    return "".join(_NOT_SPACE.findall(text)).encode("utf-8")


def _to_bytes(value: object, what: str, text: str | None = None) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return _utf8(value, what)
    if isinstance(value, dict) and len(value) == 1 and "$base64" in value:
        encoded = value["$base64"]
        if not isinstance(encoded, str):
            raise InvalidInput(f"{what}: $base64 must be a string")
        try:
            return base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidInput(f"{what}: $base64 is not valid base64") from None
    # objects, arrays, numbers and booleans are written as their compact JSON text: the line's own text
    # (numbers and escapes as written) once the parsed value has shown it is text (no lone surrogate)
    try:
        compact = _dumps(value)
    except TypeError:  # an integer past 64 bits, parsed exactly by the standard library
        compact = _utf8(json.dumps(value, separators=(",", ":"), ensure_ascii=False), what)
    return compact if text is None else _compact(text)


def _utf8(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate escape, which only the exact parser lets through
        raise InvalidInput(f"invalid JSON: a lone surrogate escape in the {what} (not text)") from None


def _headers_from(value: object, texts: _Texts) -> tuple[Header, ...]:
    if value is None:
        return ()
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list):
        items = []
        for h in value:
            if not isinstance(h, dict) or "key" not in h or not set(h) <= {"key", "value"}:
                raise InvalidInput('each header must be an object {"key": ..., "value": ...}')
            items.append((h["key"], h.get("value")))
    else:
        raise InvalidInput("headers must be a list of {key, value} objects")
    spans = texts.header_values() if any(_as_text(v) for _, v in items) else None
    if spans is not None and len(spans) != len(items):  # an object form with a repeated name
        spans = None
    out = []
    for i, (k, v) in enumerate(items):
        if not isinstance(k, str):
            raise InvalidInput("a header key must be a string")
        out.append(Header(k, _to_bytes(v, f"header {k!r}", spans[i] if spans and _as_text(v) else None)))
    return tuple(out)


def _as_text(value: object) -> bool:
    """Whether a field's value is written as its JSON text (an object other than {"$base64": ..}, an
    array, a number or a boolean)."""
    if value is None or isinstance(value, str):
        return False
    return not (isinstance(value, dict) and len(value) == 1 and "$base64" in value)


def parse_record_line(line: bytes) -> ProducerRecord:
    """One line of ``append`` or ``kafkafs produce`` (without its newline) as a record.

    A line whose first non-blank character is ``{`` must be a record object; any other line is the
    value of a record with no key, byte for byte. Raises :class:`InvalidInput` for a bad object.
    """
    if line.lstrip()[:1] != b"{":
        return ProducerRecord(None, None, bytes(line), ())
    try:
        return _record_object(line)
    except RecursionError:  # the standard library's parser and encoder recurse (orjson stops at 1024)
        raise InvalidInput("invalid JSON: nested too deeply") from None


def timestamp_out_of_range(timestamp: int) -> str:
    """The words of the refusal of a timestamp no producer may send (shared with Spark's writer)."""
    return f"timestamp {timestamp} is out of range (epoch milliseconds, 0 or later)"


def _record_object(line: bytes) -> ProducerRecord:
    try:
        obj = _loads(line) if _LONG_DIGITS.search(line) is None else _loads_exact(line)
    except ValueError as exc:
        raise InvalidInput(f"invalid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise InvalidInput("a line starting with { must be a JSON object")
    unknown = set(obj) - _WRITABLE - _RENDERED_ONLY
    if unknown:
        raise InvalidInput(
            f"unknown field(s) {', '.join(sorted(unknown))}; a record takes key, value, headers, timestamp"
        )
    timestamp = obj.get("timestamp")
    if timestamp is not None:
        if isinstance(timestamp, str):
            timestamp = parse_timestamp(timestamp)
        elif not isinstance(timestamp, int) or isinstance(timestamp, bool):
            raise InvalidInput("timestamp must be epoch milliseconds or an ISO-8601 string")
        if not -1 <= timestamp < (1 << 63):
            # Kafka rejects negative timestamps other than -1 ("none") in what producers send
            raise InvalidInput(timestamp_out_of_range(timestamp))
    texts = _Texts(line, obj)
    key, value = obj.get("key"), obj.get("value")
    return ProducerRecord(
        timestamp,
        _to_bytes(key, "key", texts.of("key") if _as_text(key) else None),
        _to_bytes(value, "value", texts.of("value") if _as_text(value) else None),
        _headers_from(obj.get("headers"), texts),
    )


def parse_record_lines(data: bytes) -> list[ProducerRecord]:
    """Every complete line of ``data`` (which must end with a newline, or be one line) as records.

    Any bad line raises :class:`InvalidInput` naming its line number, so the caller appends nothing.
    """
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return parse_lines(lines)


def parse_lines(lines: Sequence[bytes], first_number: int = 1) -> list[ProducerRecord]:
    """Lines (without newlines) as records; a bad one raises :class:`InvalidInput` with its number,
    counting from ``first_number``."""
    out = []
    for number, line in enumerate(lines, first_number):
        try:
            out.append(parse_record_line(line))
        except InvalidInput as exc:
            raise InvalidInput(f"line {number}: {exc}") from None
    return out
