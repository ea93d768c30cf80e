"""Writing a message by its definition: the reverse of :meth:`~.schema.Message.read`, used to build
logs (tests, benchmarks, the metadata records of a generated log). A mixin of
:class:`~.schema.Message`, which supplies ``name``, ``valid``, ``flexible`` and the compiled fields."""

from __future__ import annotations

import base64
from typing import Any

from ..varint import encode_uvarint
from .fields import FIXED, Field, MessageObject, Versions, is_default, uuid_bytes

__all__ = ["MessageWriter", "put_uvarint"]

_I16 = FIXED["int16"]
_I32 = FIXED["int32"]


def put_uvarint(out: bytearray, value: int) -> None:
    out += encode_uvarint(value)


class MessageWriter:
    """Stateless; safe to share across threads."""

    # what the message definition (schema.Message, built on this class) holds, which writing reads
    name: str
    valid: Versions
    flexible: Versions
    _fields: list[Field]

    def write(self, obj: MessageObject, version: int) -> bytes:
        """``obj`` (as :meth:`read` returns it; missing fields take their defaults) at ``version``."""
        if version not in self.valid:
            raise ValueError(f"{self.name} has no version {version}")
        out = bytearray()
        self._write_struct(out, self._fields, obj, version, version in self.flexible)
        return bytes(out)

    def _write_struct(self, out: bytearray, fields: list[Field], obj: MessageObject, version: int,
                      flexible: bool) -> None:
        tagged: list[tuple[int, Field, object]] = []
        for f in fields:
            if version not in f.versions:
                continue
            value = obj.get(f.json_name, self._default_value(f))
            if flexible and version in f.tagged:
                if f.json_name in obj and not is_default(f, value):
                    assert f.tag is not None  # a field with tagged versions has its tag
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
    def _default_value(f: Field) -> object:
        if f.default is ...:
            return [] if f.kind == "array" else "" if f.kind == "bytes" else {}
        return f.default

    def _write_value(self, out: bytearray, f: Field, kind: str, value: Any, version: int, flexible: bool,
                     tagged: bool = False) -> None:
        # value: what ``kind`` holds in a MessageObject (a number, text, a list, an object or None)
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
                assert f.element is not None  # an array of anything but structs names its element type
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
            assert f.struct is not None  # a struct field has its fields
            self._write_struct(out, f.struct, value, version, flexible)
        else:
            raise ValueError(f"unknown field type {kind}")


