"""The names of keys as files (SPEC §3, ``by-key/``; group and transactional ids in ``groups/`` and
``transactions/`` are named the same way).

- a key that is valid UTF-8: its text, with ``%``, ``/`` and NUL written ``%25``, ``%2F``, ``%00``
  wherever they are, and a leading ``.`` or ``$`` written ``%2E`` or ``%24``;
- the empty key: ``$empty``;
- any other key (not UTF-8): ``$base64:`` and its base64url, without padding;
- a name that would pass :data:`NAME_MAX` bytes: ``$sha256:`` and the hex of the key's SHA-256;
- a null key has no name.

Every key has exactly one name, and :func:`parse_key_name` accepts only that one (a name written
another way, ``%2f`` for ``/`` or a ``$base64:`` form of UTF-8 text, names nothing). A ``$sha256:``
name cannot give its key back: it gives the digest, which the key index resolves.

Pure functions, thread-safe.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from typing import NamedTuple

__all__ = ["NAME_MAX", "key_name", "parse_key_name", "KeyName", "key_sha256", "name_length", "split_suffix"]

#: The longest name a key keeps (bytes of UTF-8); a longer one becomes ``$sha256:<hex>`` (a file name
#: then stays under the 255 bytes file systems allow, with ``.jsonl`` after it).
NAME_MAX = 240
_EMPTY = "$empty"
_BASE64 = "$base64:"
_SHA256 = "$sha256:"
_ESCAPES = {"%": "%25", "/": "%2F", "\0": "%00"}
_ESCAPED = re.compile(r"[%/\x00]")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_PERCENT = re.compile(r"%(25|2F|00)")


class KeyName(NamedTuple):
    """What a name says: the key itself (``key``), or only its SHA-256 (``sha256``, a long key)."""

    key: bytes | None
    sha256: bytes | None = None


def key_sha256(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()


def _plain_name(key: bytes) -> str:
    """The name before the length rule."""
    if not key:
        return _EMPTY
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        return _BASE64 + base64.urlsafe_b64encode(key).rstrip(b"=").decode("ascii")
    text = _ESCAPED.sub(lambda m: _ESCAPES[m.group()], text)
    if text[0] == ".":
        text = "%2E" + text[1:]
    elif text[0] == "$":
        text = "%24" + text[1:]
    return text


def name_length(key: bytes) -> int:
    """The length in bytes of the key's name before the length rule (what the kernel computes for each
    key while it indexes, to note the keys whose name is a digest)."""
    return len(_plain_name(key).encode("utf-8"))


def key_name(key: bytes | None) -> str | None:
    """The name of ``key`` (None for a null key)."""
    if key is None:
        return None
    name = _plain_name(key)
    if len(name.encode("utf-8")) > NAME_MAX:
        return _SHA256 + key_sha256(key).hex()
    return name


def parse_key_name(name: str) -> KeyName | None:
    """The key (or, for a ``$sha256:`` name, the digest) a name stands for; None when no key has that
    name."""
    if name.startswith(_SHA256):
        digest = name[len(_SHA256):]
        return KeyName(None, bytes.fromhex(digest)) if _HEX64.fullmatch(digest) else None
    if name == _EMPTY:
        return KeyName(b"")
    if name.startswith(_BASE64):
        text = name[len(_BASE64):]
        try:
            key = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except (binascii.Error, ValueError):
            return None
    else:
        if name.startswith("%2E"):
            head, rest = ".", name[3:]
        elif name.startswith("%24"):
            head, rest = "$", name[3:]
        else:
            head, rest = "", name
        try:
            key = (head + _PERCENT.sub(lambda m: chr(int(m.group(1), 16)), rest)).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (from a file name that is not UTF-8)
            return None
    return KeyName(key) if key_name(key) == name else None


def split_suffix(name: str, suffixes: tuple[str, ...] = (".jsonl", ".json")) -> tuple[str, str] | None:
    """``("<name>", ".json")`` for ``<name>.json`` (the first of ``suffixes`` that ends it)."""
    for suffix in suffixes:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)], suffix
    return None
