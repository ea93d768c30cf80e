"""How one key, value or header value renders in the JSON view (SPEC §3): the reference rules.

This module is the definition that the compiled kernel (:mod:`kafkafs.format.kernel`) reproduces byte
for byte; the differential tests hold the two together. By ``values`` mode, bytes render as:

* ``auto``: ``null`` for null; bytes that are *embeddable JSON* (below) as that JSON, compacted; other
  valid UTF-8 as a JSON string; anything else as ``{"$base64":"..."}``.
* ``string``: ``null``; valid UTF-8 as a string; anything else ``{"$base64":"..."}``.
* ``base64``: ``null``; anything else ``{"$base64":"..."}``.

**Valid UTF-8** is what Python's strict decoder accepts: no overlong forms, no encoded surrogates
(``ED A0..BF``), nothing past U+10FFFF, no truncated sequence.

**Embeddable JSON** is valid UTF-8 that is one JSON text by RFC 8259 whose top-level value is an object
or an array, with these precisions:

* whitespace is exactly RFC 8259's four bytes (space, tab, LF, CR), allowed around the text and between
  tokens; anything else (``\\v``, ``\\f``, NBSP, U+2028, a byte order mark) makes the bytes not JSON;
* nesting is at most :data:`MAX_DEPTH` (512) objects and arrays deep, so that the line holding it stays
  within the reach of ordinary recursive parsers (Python's ``json``, jq); deeper is not JSON;
* numbers follow the grammar ``-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?`` at any length and
  magnitude, and are kept exactly as written (never re-formatted, never rounded);
* strings hold no raw byte below 0x20 (a raw NUL is invalid; the escape ``\\u0000`` is fine), and their
  escapes are ``\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX``; a ``\\u`` escape of a high surrogate
  (D800-DBFF) must be followed at once by one of a low surrogate (DC00-DFFF), and a low surrogate escape
  must follow a high one: a lone surrogate would make the rendered line one that strict parsers reject;
* ``true``, ``false``, ``null`` in lower case; duplicate object keys are allowed and kept.

*Compacting* removes every whitespace byte outside strings and keeps every token as written.

A JSON **string** escapes ``"`` and ``\\`` with a backslash, ``\\b \\t \\n \\f \\r`` by those escapes,
any other byte below 0x20 as ``\\u00xx`` (lower-case hex), and writes everything else (DEL, non-ASCII)
as its UTF-8 bytes: what ``json.dumps(ensure_ascii=False)`` and orjson write. Base64 is the standard
alphabet with padding.
"""

from __future__ import annotations

import base64
import re

__all__ = [
    "MAX_DEPTH",
    "is_utf8",
    "is_json",
    "json_compact",
    "json_string",
    "json_base64",
    "render_value",
    "indent_json",
    "view_auto",
    "view_string",
    "view_base64",
]

MAX_DEPTH = 512

_TOKEN = re.compile(
    rb"[ \t\n\r]*(?:"
    rb'("(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*")'  # 1: string
    rb"|([{}\[\],:])"  # 2: punctuation
    rb"|(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)"  # 3: number
    rb"|(true|false|null)"  # 4: literal
    rb")"
)
_WS = re.compile(rb"[ \t\n\r]*")
_U_ESCAPE = re.compile(rb'\\(?:u([0-9a-fA-F]{4})|["\\/bfnrt])')


def is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _surrogates_paired(string: bytes) -> bool:
    """Whether every ``\\u`` surrogate escape of a JSON string token is half of an adjacent pair."""
    pending_high_end = -1  # where a high surrogate escape ended, waiting for its low half
    for m in _U_ESCAPE.finditer(string):
        hex_digits = m.group(1)
        code = int(hex_digits, 16) if hex_digits is not None else -1
        if pending_high_end >= 0:
            if m.start() != pending_high_end or not 0xDC00 <= code <= 0xDFFF:
                return False
            pending_high_end = -1
            continue
        if 0xD800 <= code <= 0xDBFF:
            pending_high_end = m.end()
        elif 0xDC00 <= code <= 0xDFFF:
            return False
    return pending_high_end < 0


# parser states
_VALUE, _VALUE_OR_CLOSE, _KEY, _KEY_OR_CLOSE, _COLON, _COMMA_OR_CLOSE, _DONE = range(7)


def _skip_ws(data: bytes, pos: int) -> int:
    """The position of the first non-whitespace byte at or after ``pos`` (``_WS`` matches the empty text too)."""
    m = _WS.match(data, pos)
    return m.end() if m is not None else pos


def json_compact(data: bytes) -> bytes | None:
    """``data`` compacted when it is embeddable JSON (see the module docstring), else None.

    ``data`` must already be valid UTF-8 (the caller checks it once for every mode).
    """
    pos = _skip_ws(data, 0)
    if pos == len(data) or data[pos] not in b"{[":
        return None
    match = _TOKEN.match
    out: list[bytes] = []
    add = out.append
    stack: list[bytes] = []  # b"{" or b"[" per open container
    state = _VALUE
    n = len(data)
    while True:
        m = match(data, pos)
        if m is None:
            # only whitespace may remain, and only once the text is complete
            return b"".join(out) if state == _DONE and _skip_ws(data, pos) == n else None
        pos = m.end()
        if state == _DONE:
            return None
        string, punct, number, literal = m.groups()
        if punct is not None:
            if punct == b"{" or punct == b"[":
                if state != _VALUE and state != _VALUE_OR_CLOSE:
                    return None
                if len(stack) == MAX_DEPTH:
                    return None
                stack.append(punct)
                state = _KEY_OR_CLOSE if punct == b"{" else _VALUE_OR_CLOSE
            elif punct == b"}" or punct == b"]":
                opener = b"{" if punct == b"}" else b"["
                if not stack or stack[-1] != opener:
                    return None
                if not (
                    state == _COMMA_OR_CLOSE
                    or (punct == b"}" and state == _KEY_OR_CLOSE)
                    or (punct == b"]" and state == _VALUE_OR_CLOSE)
                ):
                    return None
                stack.pop()
                state = _COMMA_OR_CLOSE if stack else _DONE
            elif punct == b",":
                if state != _COMMA_OR_CLOSE:
                    return None
                state = _KEY if stack[-1] == b"{" else _VALUE
            else:  # ":"
                if state != _COLON:
                    return None
                state = _VALUE
            add(punct)
            continue
        if string is not None:
            if b"\\u" in string and not _surrogates_paired(string):
                return None
            if state == _KEY or state == _KEY_OR_CLOSE:
                state = _COLON
            elif state == _VALUE or state == _VALUE_OR_CLOSE:
                state = _COMMA_OR_CLOSE
            else:
                return None
            add(string)
            continue
        if state != _VALUE and state != _VALUE_OR_CLOSE:
            return None
        add(number if number is not None else literal)
        state = _COMMA_OR_CLOSE


def is_json(data: bytes) -> bool:
    """Whether ``data`` is embeddable JSON (valid UTF-8, an object or array, see the module docstring)."""
    return is_utf8(data) and json_compact(data) is not None


_ESCAPES = {i: f"\\u{i:04x}" for i in range(0x20)}
_ESCAPES.update({0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r", 0x22: '\\"', 0x5C: "\\\\"})
_NEEDS_ESCAPE = re.compile(rb'["\\\x00-\x1f]')


def json_string(text: bytes) -> bytes:
    """Valid UTF-8 bytes as a JSON string (quotes included), escaped as the module docstring says."""
    if _NEEDS_ESCAPE.search(text) is None:
        return b'"' + text + b'"'
    return b'"' + text.decode("utf-8").translate(_ESCAPES).encode("utf-8") + b'"'


def json_base64(data: bytes) -> bytes:
    return b'{"$base64":"' + base64.b64encode(data) + b'"}'


def render_value(data: bytes | None, mode: str) -> bytes:
    """A key, value or header value as the JSON bytes the ``mode`` renders (``auto``, ``string`` or
    ``base64``; the caller has checked the name)."""
    if data is None:
        return b"null"
    if mode == "base64":
        return json_base64(data)
    if not is_utf8(data):
        return json_base64(data)
    if mode == "auto":
        compact = json_compact(data)
        if compact is not None:
            return compact
    return json_string(data)


# ----------------------------------------------------------------------------------- Python objects
# The same rules as values for a dict (:func:`~kafkafs.format.jsonrender.record_object`): embedded
# JSON as an ``orjson.Fragment`` holding its compact bytes, strings as ``str``.


def _b64(data: bytes) -> dict[str, str]:
    return {"$base64": base64.b64encode(data).decode("ascii")}


def view_auto(data: bytes | None) -> object:
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return _b64(data)
    compact = json_compact(data)
    if compact is not None:
        import orjson

        return orjson.Fragment(compact)
    return text


def view_string(data: bytes | None) -> str | dict[str, str] | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return _b64(data)


def view_base64(data: bytes | None) -> dict[str, str] | None:
    return None if data is None else _b64(data)


# ----------------------------------------------------------------------------------- indentation

_INDENT_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\],:]|[^{}\[\],:"]+', re.S)


def indent_json(compact: bytes, step: bytes = b"  ") -> bytes:
    """Compact JSON laid out with ``step`` per level, like ``json.dumps(indent=2)``, every token kept
    as written. Works on the text, so large integers and exact decimals survive."""
    out: list[bytes] = []
    add = out.append
    depth = 0
    tokens = _INDENT_TOKEN.findall(compact)
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
