"""Writing a message by its definition: the reverse of :meth:`~.schema.Message.read`, used to build
logs (tests, benchmarks, the metadata records of a generated log). A mixin of
:class:`~.schema.Message`, which supplies ``name``, ``valid``, ``flexible`` and the compiled fields."""

from __future__ import annotations

import base64
import struct
from typing import Any, Protocol

from ..varint import encode_uvarint

__all__ = ["MessageWriter", "FIXED", "put_uvarint", "is_default", "uuid_text", "uuid_bytes"]

#: The fixed-size types of Kafka's schema language.
FIXED = {
    "int8": struct.Struct(">b"),
    "int16": struct.Struct(">h"),
    "int32": struct.Struct(">i"),
    "int64": struct.Struct(">q"),
    "uint16": struct.Struct(">H"),
    "uint32": struct.Struct(">I"),
    "float64": struct.Struct(">d"),
}
_I16 = FIXED["int16"]
_I32 = FIXED["int32"]


def uuid_text(raw: bytes) -> str:
    """A uuid as Kafka's ``Uuid.toString()`` prints it: URL-safe base64, no padding."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def uuid_bytes(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def put_uvarint(out: bytearray, value: int) -> None:
    out += encode_uvarint(value)


def is_default(field, value) -> bool:
    """Whether a tagged field holds its default (then it is not written, and not printed)."""
    if field.kind == "struct":
        return False
    if field.default is ...:
        return value == "" or value == []
    return value == field.default and type(value) is type(field.default)


class _Versions(Protocol):
    """What a version range (schema.Versions) offers."""

    lo: int
    hi: int

    def __contains__(self, version: int) -> bool: ...


class MessageWriter:
    # what the message definition (schema.Message, built on this class) holds, which writing reads;
    # named by what it does, not by schema's classes (that module imports this one)
    name: str
    valid: _Versions
    flexible: _Versions
    _fields: list[Any]  # schema._Field

    """Stateless; safe to share across threads."""

    def write(self, obj: dict, version: int) -> bytes:
        """``obj`` (as :meth:`read` returns it; missing fields take their defaults) at ``version``."""
        if version not in self.valid:
            raise ValueError(f"{self.name} has no version {version}")
        out = bytearray()
        self._write_struct(out, self._fields, obj, version, version in self.flexible)
        return bytes(out)

    def _write_struct(self, out: bytearray, fields: list, obj: dict, version: int, flexible: bool) -> None:
        tagged = []
        for f in fields:
            if version not in f.versions:
                continue
            value = obj.get(f.json_name, self._default_value(f))
            if flexible and version in f.tagged:
                if f.json_name in obj and not is_default(f, value):
                    tagged.append((f.tag, f, value))
                continue
            self._write_value(out, f, f.kind, value, version, flexible)
        if flexible:
            put_uvarint(out, len(tagged))
            for tag, f, value in sorted(tagged, key=lambda t: t[0]):
                body = bytearray()
                self._write_value(body, f, f.kind, value, version, flexible, tagged=True)
                put_uvarint(out, tag)
                put_uvarint(out, len(body))
                out += body

    @staticmethod
    def _default_value(f):
        if f.default is ...:
            return [] if f.kind == "array" else "" if f.kind == "bytes" else {}
        return f.default

    def _write_value(self, out: bytearray, f, kind: str, value, version: int, flexible: bool,
                     tagged: bool = False) -> None:
        st = FIXED.get(kind)
        if st is not None:
            out += st.pack(value)
        elif kind in ("string", "bytes", "records", "array"):
            if value is None:
                if flexible:
                    out.append(0)
                else:
                    out += (_I16 if kind == "string" else _I32).pack(-1)
                return
            if kind == "string":
                data = value.encode("utf-8")
            elif kind == "array":
                data = None
            else:
                data = base64.b64decode(value)
            n = len(value) if data is None else len(data)
            if flexible:
                put_uvarint(out, n + 1)
            else:
                out += (_I16 if kind == "string" else _I32).pack(n)
            if data is not None:
                out += data
            elif f.struct is not None:
                for item in value:
                    self._write_struct(out, f.struct, item, version, flexible)
            else:
                for item in value:
                    self._write_value(out, f, f.element, item, version, flexible)
        elif kind == "bool":
            out.append(1 if value else 0)
        elif kind == "uuid":
            out += uuid_bytes(value)
        elif kind == "struct":
            if version in f.nullable:  # the marker: a varint 0/1 in a tagged field, else int8 -1/1
                out += (b"\x00" if value is None else b"\x01") if tagged else (b"\xff" if value is None else b"\x01")
                if value is None:
                    return
            self._write_struct(out, f.struct, value, version, flexible)
        else:
            raise ValueError(f"unknown field type {kind}")


