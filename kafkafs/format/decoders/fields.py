"""The parts of Kafka's message schema language that reading and writing share: version ranges
(:class:`Versions`), the fixed-size types (:data:`FIXED`), uuids as Kafka prints them, and a
definition's fields compiled once (:class:`Field`, :func:`compile_fields`).

A message read by its definition is a JSON object whose shape the definition gives at run time:
:data:`MessageObject`. Compiled fields are not changed after :func:`compile_fields` returns; they are
safe to share across threads.
"""

from __future__ import annotations

import base64
import struct
from types import EllipsisType
from typing import Any

from .definitions import FieldSpec

__all__ = ["FIXED", "Versions", "Field", "MessageObject", "compile_fields", "is_default", "uuid_text",
           "uuid_bytes"]

#: A message as :meth:`~.schema.Message.read` returns it and :meth:`~.schema.Message.write` takes it:
#: which type each field holds is its definition's to say, at run time, so the values are Any.
MessageObject = dict[str, Any]

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
#: The other types a field may hold without being a struct.
_SIMPLE = ("bool", "uuid", "string", "bytes", "records")

_INF = 0x7FFF
_ZERO_UUID = bytes(16)


def uuid_text(raw: bytes) -> str:
    """A uuid as Kafka's ``Uuid.toString()`` prints it: URL-safe base64, no padding."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def uuid_bytes(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Versions:
    """A version range as Kafka writes it: ``"0+"``, ``"1-3"``, ``"2"`` or ``"none"``."""

    __slots__ = ("lo", "hi")
    lo: int
    hi: int

    def __init__(self, text: str | None, default: Versions | None = None) -> None:
        if text is None:
            self.lo, self.hi = (default.lo, default.hi) if default is not None else (1, 0)
            return
        text = str(text).strip()
        if text == "none":
            self.lo, self.hi = 1, 0
        elif text.endswith("+"):
            self.lo, self.hi = int(text[:-1]), _INF
        elif "-" in text:
            lo, hi = text.split("-")
            self.lo, self.hi = int(lo), int(hi)
        else:
            self.lo = self.hi = int(text)

    def __contains__(self, version: int) -> bool:
        return self.lo <= version <= self.hi

    def __repr__(self) -> str:
        return f"Versions({self.lo}..{self.hi})"


def _camel(name: str) -> str:
    return name[:1].lower() + name[1:]


#: A field's default: a number, bool, text or None from its definition, or ``...`` when the definition
#: gives none and the type's own empty value applies (an empty array, bytes or struct).
Default = int | float | bool | str | None | EllipsisType


def _default_of(field: FieldSpec, kind: str, nullable_default: bool) -> Default:
    raw = field.get("default")
    if raw is None or raw == "":
        if kind in FIXED:
            return 0 if kind != "float64" else 0.0
        empty: dict[str, Default] = {"bool": False, "uuid": uuid_text(_ZERO_UUID), "string": ""}
        return empty.get(kind, ...)
    if raw == "null" and nullable_default:
        return None
    if kind == "bool":
        return str(raw).lower() == "true"
    if kind == "float64":
        return float(raw)
    if kind in FIXED:
        text = str(raw)
        return int(text, 16) if text.lower().startswith("0x") else int(text)
    return raw


class Field:
    """One field of a definition, compiled: ``kind`` is a type of :data:`FIXED`, one of bool, uuid,
    string, bytes, records, or ``"array"`` (of ``element``; of structs when ``struct`` is set) or
    ``"struct"`` (``struct``: its fields)."""

    __slots__ = ("name", "json_name", "kind", "element", "struct", "versions", "nullable", "tagged", "tag",
                 "default")

    def __init__(self, spec: FieldSpec, structs: dict[str, list[FieldSpec]]) -> None:
        self.name = spec["name"]
        self.json_name = _camel(self.name)
        tagged = Versions(spec.get("taggedVersions"), Versions("none"))
        self.tagged = tagged
        self.versions = Versions(spec.get("versions"), tagged if tagged.lo <= tagged.hi else None)
        self.nullable = Versions(spec.get("nullableVersions"), Versions("none"))
        tag = spec.get("tag")
        self.tag = None if tag is None else int(tag)
        kind = spec["type"]
        self.element: str | None = None
        self.struct: list[Field] | None = None
        if kind.startswith("[]"):
            element = kind[2:]
            self.element = element
            kind = "array"
            if element not in FIXED and element not in _SIMPLE:
                self.struct = compile_fields(_struct_fields(element, spec, structs), structs)
        elif kind not in FIXED and kind not in _SIMPLE:
            self.struct = compile_fields(_struct_fields(kind, spec, structs), structs)
            kind = "struct"
        self.kind = kind
        self.default = _default_of(spec, kind, True)


def _struct_fields(name: str, spec: FieldSpec, structs: dict[str, list[FieldSpec]]) -> list[FieldSpec]:
    if "fields" in spec:
        structs.setdefault(name, spec["fields"])
        return spec["fields"]
    try:
        return structs[name]
    except KeyError:
        raise ValueError(f"unknown struct type {name}") from None


def compile_fields(specs: list[FieldSpec], structs: dict[str, list[FieldSpec]]) -> list[Field]:
    """The fields ``specs`` compiled; ``structs``: the struct types known by name (``commonStructs``
    first; each struct a field defines inline is added as it is met)."""
    return [Field(spec, structs) for spec in specs]


def is_default(field: Field, value: object) -> bool:
    """Whether a tagged field holds its default (then it is not written, and not printed)."""
    if field.kind == "struct":
        return False
    if field.default is ...:
        return value == "" or value == []
    return value == field.default and type(value) is type(field.default)
