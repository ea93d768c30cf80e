"""Lines written to ``append`` or to ``kafkafs produce`` into records (SPEC §3 "Writes").

A line whose first non-blank character is ``{`` is a record object ``{"key", "value", "headers",
"timestamp"}`` (every field optional; the fields a rendered line adds are accepted and ignored, so a
line of ``records.jsonl`` appends as the record it shows); any other line is the value of a record
with no key, byte for byte.
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

__all__ = ["ProducerRecord", "parse_record_line", "parse_record_lines", "parse_lines"]

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


def _to_bytes(value: object, what: str) -> bytes | None:
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
    # objects, arrays, numbers and booleans are written as their compact JSON text
    try:
        return _dumps(value)
    except TypeError:  # an integer past 64 bits, parsed exactly by the standard library
        return _utf8(json.dumps(value, separators=(",", ":"), ensure_ascii=False), what)


def _utf8(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate escape, which only the exact parser lets through
        raise InvalidInput(f"invalid JSON: a lone surrogate escape in the {what} (not text)") from None


def _headers_from(value: object) -> tuple[Header, ...]:
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
    out = []
    for k, v in items:
        if not isinstance(k, str):
            raise InvalidInput("a header key must be a string")
        out.append(Header(k, _to_bytes(v, f"header {k!r}")))
    return tuple(out)


def parse_record_line(line: bytes) -> ProducerRecord:
    """One line of ``append`` or ``kafkafs produce`` (without its newline) as a record.

    A line whose first non-blank character is ``{`` must be a record object; any other line is the
    value of a record with no key, byte for byte. Raises :class:`InvalidInput` for a bad object.
    """
    if line.lstrip()[:1] != b"{":
        return ProducerRecord(None, None, bytes(line), ())
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
            raise InvalidInput(f"timestamp {timestamp} is out of range (epoch milliseconds, 0 or later)")
    return ProducerRecord(
        timestamp,
        _to_bytes(obj.get("key"), "key"),
        _to_bytes(obj.get("value"), "value"),
        _headers_from(obj.get("headers")),
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
