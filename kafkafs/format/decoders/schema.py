"""One generic reader (and writer) of Kafka's message schema language, driven by Kafka's own definitions.

Kafka describes every message it stores in JSON files (``messages/*.json`` here, taken from
apache/kafka under the Apache License 2.0): fields with version ranges (``"0+"``, ``"1-3"``, ``"2"``),
``nullableVersions``, ``flexibleVersions`` (compact lengths as unsigned varints of length + 1 and a
tagged-field section at the end of every struct), ``taggedVersions`` with a ``tag``, arrays of
primitives and of structs, ``commonStructs``, and the types int8..int64, uint16, uint32, float64,
bool, uuid, string, bytes and records. :func:`message` compiles a definition, once per version, into
a list of small reader functions; :meth:`Message.read` turns bytes into the object that Kafka's
generated ``JsonConverter.write`` prints (camelCase field names, a uuid as Kafka's URL-safe base64
without padding, bytes as standard base64 text, a tagged field only when it differs from its default,
fields absent from the version left out; a string that is not UTF-8 read as Java's ``new String(bytes,
UTF_8)`` reads it, each malformed sequence one U+FFFD, as Kafka's readers and ``kafka-dump-log`` do).
:meth:`Message.write` is the reverse, used to build logs.

Compiled messages are immutable and cached; they are safe to share across threads.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable
from functools import cache

from ...errors import CorruptRecordError
from ..javatext import java_utf8
from .definitions import FieldSpec, MessageSpec, load_spec
from .fields import FIXED, Field, MessageObject, Versions, compile_fields, is_default, uuid_text
from .schema_write import MessageWriter

__all__ = ["Message", "message"]

_I16 = FIXED["int16"]
_I32 = FIXED["int32"]
_F64 = FIXED["float64"]

#: Reads one field's value at the reader's position (its type is the field's definition's).
_FieldReader = Callable[["_Reader"], object]


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos

    def take(self, n: int) -> bytes:
        pos = self.pos
        end = pos + n
        if n < 0 or end > len(self.buf):
            raise CorruptRecordError(f"message truncated: {n} bytes wanted at {pos}, {len(self.buf) - pos} left")
        self.pos = end
        return self.buf[pos:end]

    def uvarint(self) -> int:
        buf = self.buf
        result = shift = 0
        pos = self.pos
        while True:
            if pos >= len(buf):
                raise CorruptRecordError("message truncated inside a varint")
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                self.pos = pos
                return result
            shift += 7
            if shift > 35:
                raise CorruptRecordError("varint too long")

    def fixed_bytes(self, n: int) -> bytes:
        """``n`` bytes of a fixed-size field (a UUID's two longs, a bool's byte): cut short, Java's
        ByteBuffer underflows (no message), not the byte array reader's "Error reading byte array"."""
        if self.pos + n > len(self.buf):
            raise CorruptRecordError(f"message truncated at {self.pos}")
        return self.take(n)

    def fixed(self, st: struct.Struct) -> int:
        """An integer of the fixed-size type ``st`` (a :data:`~.fields.FIXED` one but float64)."""
        pos = self.pos
        end = pos + st.size
        if end > len(self.buf):
            raise CorruptRecordError(f"message truncated at {pos}")
        self.pos = end
        value: int = st.unpack_from(self.buf, pos)[0]
        return value

    def float64(self) -> float:
        pos = self.pos
        if pos + 8 > len(self.buf):
            raise CorruptRecordError(f"message truncated at {pos}")
        self.pos = pos + 8
        value: float = _F64.unpack_from(self.buf, pos)[0]
        return value


def _compact_length(r: _Reader) -> int:
    """A flexible version's length: unsigned varint N+1 (0: null)."""
    return r.uvarint() - 1


def _int16_length(r: _Reader) -> int:
    """A classic string's length: int16 (-1: null)."""
    return r.fixed(_I16)


class Message(MessageWriter):
    """A message definition (``spec``) compiled for reading and writing; immutable, thread-safe."""

    def __init__(self, spec: MessageSpec) -> None:
        self.spec = spec
        self.name: str = spec["name"]
        self.api_key: int | None = spec.get("apiKey")
        self.valid = Versions(spec.get("validVersions"))
        self.flexible = Versions(spec.get("flexibleVersions", "none"))
        structs: dict[str, list[FieldSpec]] = {}
        for common in spec.get("commonStructs", ()):
            structs[common["name"]] = common["fields"]
        self._fields = compile_fields(spec["fields"], structs)
        self._plans: dict[tuple[int, int, bool], tuple[list[tuple[str, _FieldReader]], dict[int, Field]]] = {}

    @property
    def type_name(self) -> str:
        """Kafka's enum name for the message, e.g. ``FEATURE_LEVEL_RECORD`` (MessageGenerator.toSnakeCase)."""
        out = []
        prev_upper = True
        for c in self.name:
            if c.isupper():
                if not prev_upper:
                    out.append("_")
                out.append(c)
                prev_upper = True
            else:
                out.append(c.upper())
                prev_upper = False
        return "".join(out)

    # ------------------------------------------------------------------ reading

    def read(
        self, buf: bytes, version: int, pos: int = 0, whole: bool = True, any_version: bool = False
    ) -> MessageObject:
        """The object of this message at ``version`` from ``buf[pos:]``; with ``whole``, bytes left over
        are an error (as Kafka's serdes say). Raises :class:`CorruptRecordError`. ``any_version`` reads a
        version past the definition's as Kafka's generated readers do (each field by its version range;
        what ``kafka-dump-log`` prints for a metadata record of a newer version)."""
        if version not in self.valid and not (any_version and version >= 0):
            raise CorruptRecordError(f"{self.name} has no version {version}")
        reader = _Reader(buf if type(buf) is bytes else bytes(buf), pos)
        try:
            obj = self._read_struct(reader, self._fields, version, version in self.flexible)
        except (IndexError, ValueError, UnicodeDecodeError, struct.error) as exc:
            raise CorruptRecordError(f"{self.name} v{version}: {exc}") from None
        if whole and reader.pos != len(reader.buf):
            raise CorruptRecordError(
                f"{self.name} v{version}: {len(reader.buf) - reader.pos} byte(s) left over at the end"
            )
        return obj

    def _plan(self, fields: list[Field], version: int, flexible: bool
              ) -> tuple[list[tuple[str, _FieldReader]], dict[int, Field]]:
        """The fields of a struct at ``version``: (json name, reader) of each regular one in order, and
        the tagged ones by tag; made once per struct and version (a dict set is atomic: thread-safe)."""
        key = (id(fields), version, flexible)
        plan = self._plans.get(key)
        if plan is None:
            regular: list[tuple[str, _FieldReader]] = []
            tagged: dict[int, Field] = {}
            for f in fields:
                if version not in f.versions:
                    continue
                if flexible and version in f.tagged:
                    assert f.tag is not None  # a field with tagged versions has its tag
                    tagged[f.tag] = f
                    continue
                regular.append((f.json_name, self._reader_of(f, version, flexible)))
            plan = self._plans[key] = (regular, tagged)
        return plan

    def _reader_of(self, f: Field, version: int, flexible: bool) -> _FieldReader:
        st = FIXED.get(f.kind)
        if st is not None:
            unpack, size = st.unpack_from, st.size

            def fixed(r: _Reader) -> object:
                pos = r.pos
                end = pos + size
                if end > len(r.buf):
                    raise CorruptRecordError(f"message truncated at {pos}")
                r.pos = end
                return unpack(r.buf, pos)[0]

            return fixed
        nullable = version in f.nullable
        if f.kind == "string":
            read_length = _compact_length if flexible else _int16_length

            def string(r: _Reader) -> str | None:
                n = read_length(r)
                if n < 0:
                    if not nullable:
                        raise CorruptRecordError(f"non-nullable field {f.name} was serialized as null")
                    return None
                return java_utf8(r.take(n))  # as Kafka's readers: new String(bytes, UTF_8)

            return string
        read_value = self._read_value
        kind = f.kind
        return lambda r: read_value(r, f, kind, version, flexible, nullable)

    def _read_struct(self, r: _Reader, fields: list[Field], version: int, flexible: bool) -> MessageObject:
        regular, tagged = self._plan(fields, version, flexible)
        obj = {name: read(r) for name, read in regular}
        if flexible:
            found: MessageObject = {}
            for _ in range(r.uvarint()):
                tag = r.uvarint()
                size = r.uvarint()
                f = tagged.get(tag)
                if f is None:
                    r.take(size)  # an unknown tag: Kafka keeps it as unknown tagged fields, not printed
                    continue
                end = r.pos + size
                found[f.json_name] = self._read_value(r, f, f.kind, version, flexible, version in f.nullable,
                                                      tagged=True)
                if r.pos != end:
                    raise CorruptRecordError(f"tagged field {f.name} has {size} bytes, read {r.pos - end + size}")
            if tagged:
                # Kafka's JsonConverter puts every field in definition order, tagged ones where defined
                ordered: MessageObject = {}
                for f in fields:
                    if version not in f.versions:
                        continue
                    if version in f.tagged:
                        if f.json_name in found and not is_default(f, found[f.json_name]):
                            ordered[f.json_name] = found[f.json_name]
                    else:
                        ordered[f.json_name] = obj[f.json_name]
                obj = ordered
        return obj

    def _read_value(self, r: _Reader, f: Field, kind: str, version: int, flexible: bool, nullable: bool,
                    tagged: bool = False) -> object:
        st = FIXED.get(kind)
        if st is not None:
            return r.float64() if kind == "float64" else r.fixed(st)
        if kind == "bool":
            return r.fixed_bytes(1) != b"\x00"
        if kind == "uuid":
            return uuid_text(r.fixed_bytes(16))
        if kind in ("string", "bytes", "records", "array"):
            # a length (element count for an array) first; below zero: null
            n = r.uvarint() - 1 if flexible else r.fixed(_I16 if kind == "string" else _I32)
            if n < 0:
                if not nullable:
                    raise CorruptRecordError(f"non-nullable field {f.name} was serialized as null")
                return None
            if kind == "string":
                return java_utf8(r.take(n))
            if kind != "array":
                return base64.b64encode(r.take(n)).decode("ascii")
            if n > len(r.buf) - r.pos:
                raise CorruptRecordError(  # the generated Java reader's words
                    f"Tried to allocate a collection of size {n}, but there are only {len(r.buf) - r.pos} bytes remaining."
                )
            if f.struct is not None:
                return [self._read_struct(r, f.struct, version, flexible) for _ in range(n)]
            assert f.element is not None  # an array of anything but structs names its element type
            return [self._read_value(r, f, f.element, version, flexible, False) for _ in range(n)]
        if kind == "struct":
            # a nullable struct's marker: int8 -1 (null) or 1; in a tagged field an unsigned varint, 0
            # for null (Kafka's generated readers)
            if nullable and (r.uvarint() == 0 if tagged else r.fixed(FIXED["int8"]) < 0):
                return None
            assert f.struct is not None  # a struct field has its fields
            return self._read_struct(r, f.struct, version, flexible)
        raise CorruptRecordError(f"unknown field type {kind}")

@cache
def message(name: str) -> Message:
    """The compiled definition named ``name`` (e.g. ``"PartitionRecord"``), loaded from package data."""
    return Message(load_spec(name))
