"""The JSON view of a record (SPEC §3), and the reverse: JSON lines into records to append.

A record renders as one object with keys in this order::

    {"topic", "partition", "offset", "timestamp", "timestampType", "key", "value", "headers"}

plus ``"control"`` for a transaction marker and ``"producerId"`` for a record of a transactional batch.
Keys, values and header values render by the ``values`` mode:

* ``auto``: null for null; UTF-8 text holding a JSON object or array is embedded as JSON (compact); other
  UTF-8 text is a string; anything else is ``{"$base64": "..."}``.
* ``string``: no embedding; UTF-8 text is a string, anything else ``{"$base64": ...}``.
* ``base64``: every non-null value is ``{"$base64": ...}``.

Rendering works a whole batch per call (:func:`render_batch_jsonl`) so the callers' cost is one function
call per batch.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import threading
from collections import deque
from collections.abc import Sequence
from datetime import UTC, datetime
from itertools import chain
from typing import Literal, NamedTuple

import orjson
import simdjson

from ..errors import InvalidInput
from .batch import DecodedBatch, Header, control_type_of

__all__ = [
    "ValuesMode",
    "VALUES_MODES",
    "render_batch_jsonl",
    "render_record",
    "render_record_pretty",
    "record_object",
    "ProducerRecord",
    "parse_record_line",
    "parse_record_lines",
    "parse_lines",
    "parse_timestamp",
    "format_timestamp",
    "indent_json",
]

ValuesMode = Literal["auto", "string", "base64"]
VALUES_MODES: tuple[str, ...] = ("auto", "string", "base64")

_TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime", -1: "CreateTime"}
_Fragment = orjson.Fragment
_loads = orjson.loads
_dumps = orjson.dumps
_JSONDecodeError = orjson.JSONDecodeError


def _b64(data: bytes) -> dict:
    return {"$base64": base64.b64encode(data).decode("ascii")}


_local = threading.local()


def _parser():
    """A simdjson parser for this thread (parsers hold buffers and are not thread-safe)."""
    try:
        return _local.parser
    except AttributeError:
        _local.parser = simdjson.Parser()
        return _local.parser


def is_json(data: bytes, parser=None) -> bool:
    """Whether ``data`` is one valid JSON document (validated without building Python objects)."""
    try:
        (parser or _parser()).parse(data)
        return True
    except (ValueError, UnicodeDecodeError):
        return False
    except Exception:  # simdjson's own limits (e.g. integers past 64 bits): ask a full parser
        try:
            _loads(data)
            return True
        except _JSONDecodeError:
            return False


_STRING_OR_WHITESPACE = re.compile(rb'("(?:[^"\\]|\\.)*")|[ \t\r\n]+', re.S)
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\],:]|[^{}\[\],:"]+', re.S)


def _no_whitespace(data: bytes) -> bool:
    """True when ``data`` holds no whitespace at all (raw \\v and \\f cannot occur in valid JSON)."""
    parts = data.split()
    return len(parts) == 1 and len(parts[0]) == len(data)


def _compact(data: bytes) -> bytes:
    """Valid JSON with its insignificant whitespace removed, every token kept as written (numbers are
    not re-formatted, duplicate keys stay): the whitespace outside strings is simply cut out."""
    if _no_whitespace(data):
        return data
    return _STRING_OR_WHITESPACE.sub(rb"\1", data)


def indent_json(compact: bytes, step: bytes = b"  ") -> bytes:
    """Compact JSON laid out with ``step`` per level, like ``json.dumps(indent=2)``, every token kept
    as written. Works on the text, so large integers and exact decimals survive."""
    out = []
    add = out.append
    depth = 0
    tokens = _TOKEN.findall(compact)
    i = 0
    n = len(tokens)
    while i < n:
        token = tokens[i]
        if token == b"{" or token == b"[":
            closer = b"}" if token == b"{" else b"]"
            if i + 1 < n and tokens[i + 1] == closer:
                add(token + closer)
                i += 2
                continue
            depth += 1
            add(token + b"\n" + step * depth)
        elif token == b"}" or token == b"]":
            depth -= 1
            add(b"\n" + step * depth + token)
        elif token == b",":
            add(b",\n" + step * depth)
        elif token == b":":
            add(b": ")
        else:
            add(token)
        i += 1
    return b"".join(out)


def _embed(data: bytes):
    """JSON-object-or-array bytes as a compact embeddable value, or None when they are not JSON."""
    if not is_json(data):
        return None
    return _Fragment(_compact(data))


def view_auto(data: bytes | None):
    """A key, value or header value in ``auto`` mode (see the module docstring)."""
    if data is None:
        return None
    first = data[:1]
    if first == b"{" or first == b"[":
        embedded = _embed(data)
        if embedded is not None:
            return embedded
    elif first in b" \t\r\n" and first:
        stripped = data.lstrip()
        if stripped[:1] in (b"{", b"["):
            parsed = _embed(data)
            if parsed is not None:
                return parsed
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return _b64(data)


def view_string(data: bytes | None):
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return _b64(data)


def view_base64(data: bytes | None):
    return None if data is None else _b64(data)


_VIEWS = {"auto": view_auto, "string": view_string, "base64": view_base64}


def _view_of(mode: str):
    try:
        return _VIEWS[mode]
    except KeyError:
        raise InvalidInput(f"values mode must be one of {', '.join(VALUES_MODES)}, not {mode!r}") from None


def _headers_view(headers: Sequence[Header], view) -> list:
    return [{"key": k, "value": view(v)} for k, v in headers]


def record_object(
    topic: str, partition: int, batch: DecodedBatch, index: int, mode: str = "auto"
) -> dict:
    """The JSON object of record ``index`` of ``batch`` as a dict in SPEC key order, embedded JSON as
    ``orjson.Fragment``. A record at a time, through a dict: the plain reference that the batch renderer
    is tested against."""
    view = _view_of(mode)
    header = batch.header
    obj = {
        "topic": topic,
        "partition": partition,
        "offset": batch.offsets[index],
        "timestamp": batch.timestamps[index],
        "timestampType": _TIMESTAMP_TYPES[header.timestamp_type],
        "key": view(batch.keys[index]),
        "value": view(batch.values[index]),
        "headers": _headers_view(batch.headers[index], view),
    }
    if header.is_control:
        obj["control"] = control_type_of(batch.keys[index])
    if header.is_transactional:
        obj["producerId"] = header.producer_id
    return obj


def render_record(
    topic: str, partition: int, batch: DecodedBatch, index: int, mode: str = "auto", *, decoder=None
) -> bytes:
    """One record as one compact JSON line (with its newline), exactly as in ``records.jsonl``."""
    return render_batch_jsonl(topic, partition, batch, mode, index, index + 1, decoder=decoder)


def render_record_pretty(
    topic: str, partition: int, batch: DecodedBatch, index: int, mode: str = "auto", *, decoder=None
) -> bytes:
    """One record as indented JSON (two spaces), with a final newline; embedded values indented too,
    every token as in the record's ``records.jsonl`` line."""
    return indent_json(render_record(topic, partition, batch, index, mode, decoder=decoder)[:-1]) + b"\n"


def _json_auto(data: bytes | None) -> bytes:
    """``view_auto`` rendered straight to JSON bytes: the hot path of :func:`render_batch_jsonl`."""
    if data is None:
        return b"null"
    first = data[:1]
    if first == b"{" or first == b"[":
        if is_json(data):
            return _compact(data)
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return _dumps(_b64(data))
        if text.isprintable() and '"' not in text and "\\" not in text:
            return b'"' + data + b'"'  # nothing to escape
    return _dumps(view_auto(data))


def _json_via(view):
    def render(data: bytes | None) -> bytes:
        if data is None:
            return b"null"
        return _dumps(view(data))

    return render


_JSON_RENDERERS = {"auto": _json_auto, "string": _json_via(view_string), "base64": _json_via(view_base64)}


def _render_column(items: list, mode: str, parser) -> tuple[list[bytes], bool]:
    """Every key (or value) of a batch as JSON bytes, and whether each still needs its quotes (the
    format string adds them: the fast path for plain text); the batch-wide fast paths live here."""
    if mode != "auto":
        render = _JSON_RENDERERS[mode]
        return [render(item) for item in items], False
    # Fast path: every item printable ASCII with nothing to escape and not JSON-looking: quote as is.
    if None not in items:
        joined = b"".join(items)
        if (
            joined.isascii()
            and b'"' not in joined
            and b"{" not in joined
            and b"[" not in joined
            and b"\\" not in joined
            and joined.decode("ascii").isprintable()
        ):
            return items, True
        no_whitespace = _no_whitespace(joined)
        # Fast path: every item looks like a JSON object or array; validate them all in one C loop
        # (the deque drops each parse result before the next parse, as the parser requires)
        starts = b"".join([item[:1] for item in items])
        if starts.count(b"{") + starts.count(b"[") == len(items):
            try:
                deque(map(parser.parse, items), maxlen=0)
            except Exception:  # noqa: BLE001 - one is not valid (or too big for simdjson): item by item
                pass
            else:
                return (items if no_whitespace else [_compact(item) for item in items]), False
    else:
        no_whitespace = False
    out = []
    add = out.append
    parse = parser.parse
    for data in items:
        if data is None:
            add(b"null")
            continue
        if data and (data[0] == 0x7B or data[0] == 0x5B):  # { or [
            try:
                parse(data)
                valid = True
            except (ValueError, UnicodeDecodeError):
                valid = False
            except Exception:
                valid = is_json(data)
            if valid:
                add(data if no_whitespace else _compact(data))
                continue
        add(_json_auto(data))
    return out, False


def render_batch_jsonl(
    topic: str,
    partition: int,
    batch: DecodedBatch,
    mode: str = "auto",
    start: int = 0,
    stop: int | None = None,
    *,
    decoder=None,
) -> bytes:
    """Records ``start:stop`` of ``batch`` as JSON lines, one call for the whole batch.

    Keys and values are rendered a column at a time and lines are assembled from one format string per
    batch rather than through a dict per record; the output is byte-identical to :func:`render_record`
    (a test holds them together). With a ``decoder`` (:func:`kafkafs.format.decoders.decoder_for`) and
    mode ``auto`` the decoder renders the batch (SPEC §8); ``string`` and ``base64`` ignore it.
    """
    _view_of(mode)
    if decoder is not None and mode == "auto":
        return decoder.render_batch_jsonl(topic, partition, batch, start, stop)
    header = batch.header
    n = len(batch.offsets)
    if stop is None or stop > n:
        stop = n
    if start >= stop:
        return b""
    whole = start == 0 and stop == n
    offsets = batch.offsets if whole else batch.offsets[start:stop]
    timestamps = batch.timestamps if whole else batch.timestamps[start:stop]
    keys = batch.keys if whole else batch.keys[start:stop]
    values = batch.values if whole else batch.values[start:stop]
    headers = batch.headers if whole else batch.headers[start:stop]
    parser = _parser()
    rendered_keys, quote_keys = _render_column(keys, mode, parser)
    rendered_values, quote_values = _render_column(values, mode, parser)
    return assemble_jsonl(
        topic, partition, header, offsets, timestamps, keys, headers, rendered_keys, rendered_values,
        quote_keys, quote_values, _JSON_RENDERERS[mode],
    )


def assemble_jsonl(
    topic: str,
    partition: int,
    header,
    offsets: Sequence[int],
    timestamps: Sequence[int],
    keys: Sequence[bytes | None],
    headers: Sequence[Sequence[Header]],
    rendered_keys: Sequence[bytes],
    rendered_values: Sequence[bytes],
    quote_keys: bool = False,
    quote_values: bool = False,
    render_header_value=_json_auto,
) -> bytes:
    """JSON lines from rendered key and value columns (JSON text, or text to quote when ``quote_*``);
    the raw ``keys`` name a control record's type. Shared by this module and the decoders."""
    columns = [offsets, timestamps, rendered_keys, rendered_values]
    render = render_header_value
    if any(headers):
        columns.append([
            b"[" + b",".join(b'{"key":' + _dumps(k) + b',"value":' + render(v) + b"}" for k, v in hs) + b"]"
            if hs
            else b"[]"
            for hs in headers
        ])
        headers_slot = b"%b"
    else:
        headers_slot = b"[]"
    tail = b',"producerId":%d' % header.producer_id if header.is_transactional else b""
    if header.is_control:
        columns.append([b',"control":' + _dumps(control_type_of(k)) + tail for k in keys])
        tail = b"%b"
    else:
        tail = tail.replace(b"%", b"%%")
    fmt = (
        (b'{"topic":' + _dumps(topic) + b',"partition":%d,"offset":' % partition).replace(b"%", b"%%")
        + b'%d,"timestamp":%d,"timestampType":"'
        + _TIMESTAMP_TYPES[header.timestamp_type].encode()
        + (b'","key":"%b"' if quote_keys else b'","key":%b')
        + (b',"value":"%b"' if quote_values else b',"value":%b')
        + b',"headers":'
        + headers_slot
        + tail
        + b"}\n"
    )
    # one format string for the whole batch: a single formatting call instead of one per record
    return (fmt * len(offsets)) % tuple(chain.from_iterable(zip(*columns, strict=True)))


# --------------------------------------------------------------------------------------- timestamps


def parse_timestamp(text: str) -> int:
    """Epoch milliseconds from ``1763700000000`` or ISO-8601 UTC (``2026-11-21T10:00:00[.123]Z``)."""
    text = text.strip()
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    iso = text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        raise InvalidInput(
            f"not a timestamp: {text!r} (use epoch milliseconds or ISO-8601 UTC such as 2026-11-21T10:00:00Z)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def format_timestamp(ms: int) -> str:
    """ISO-8601 UTC with milliseconds, e.g. ``2026-11-21T10:00:00.123Z``."""
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


# --------------------------------------------------------------------------------------- writing


class ProducerRecord(NamedTuple):
    """A record to append; ``timestamp`` None means "now", which the caller (with a clock) fills in."""

    timestamp: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


_RENDERED_ONLY = {"topic", "partition", "offset", "timestampType", "control", "producerId"}
_WRITABLE = {"key", "value", "headers", "timestamp"}


_LONG_DIGITS = re.compile(rb"\d{16,}")


def _reject_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _loads_exact(line: bytes):
    """The standard library's parser, which keeps integers of any size exact (orjson turns integers
    past 64 bits into floats); used only for lines with long digit runs."""
    return json.loads(line, parse_constant=_reject_constant)


def _to_bytes(value, what: str) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode("utf-8")
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
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _headers_from(value) -> tuple[Header, ...]:
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
