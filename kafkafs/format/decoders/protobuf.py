"""Protobuf values and keys framed for a Confluent Schema Registry (SPEC §8).

After the registry's 5-byte frame (magic 0, schema id) a Protobuf datum carries the message-index list
that picks its message type among the schema's: a zig-zag varint count, then that many zig-zag varint
indexes (the first a top-level message of the schema's file, each next one a message nested in the
previous); a count of 0 (a single 0 byte) means ``[0]``, the file's first message. The message's bytes
follow to the end of the record's key or value.

A datum is shown as the protobuf runtime's JSON conversion shows the message
(``google.protobuf.json_format``), as the registry's own ``ProtobufSchemaUtils.toJson`` does: fields
with no presence shown with their default values, enums by name, 64-bit integers as strings, bytes as
base64, well-known types in their JSON forms; field names as written in the ``.proto`` (SPEC §8).

The ``.proto`` text is compiled into descriptors by ``protoc`` (a
:data:`ProtoCompiler` that the storage layer supplies: it needs files); this module builds the message
classes from the descriptor set and reads datums, in memory. A compiled :class:`ProtobufSchema` is
immutable and safe to share across threads (the protobuf runtime's parsing is thread-safe).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the protobuf runtime has no type hints: these name what a value is (mypy sees Any)
    from google.protobuf.descriptor import Descriptor, FieldDescriptor
    from google.protobuf.descriptor_pb2 import FileDescriptorProto
    from google.protobuf.message import Message

__all__ = ["ProtoCompiler", "ProtobufSchema", "read_message_indexes"]

#: ``compiler(files, main)``: the serialized ``FileDescriptorSet`` of ``main`` and everything it imports,
#: ``files`` mapping import names (``"orders.proto"``, ``"common/money.proto"``) to their text; raises
#: ValueError with protoc's message when the text does not compile.
ProtoCompiler = Callable[[dict[str, str], str], bytes]

#: A protobuf runtime value (a message, a field's value) to its JSON-ready object (the runtime is
#: untyped, and what a field holds is its descriptor's to say: both sides are Any).
Converter = Callable[[Any], Any]

_FIRST = [0]


def _zigzag(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("message indexes truncated")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long in the message indexes")


def read_message_indexes(buf: bytes, pos: int = 0) -> tuple[list[int], int]:
    """The message-index list at ``buf[pos:]`` and where the message starts (ValueError when it is cut
    or makes no sense)."""
    count, pos = _zigzag(buf, pos)
    if count == 0:
        return [0], pos
    if count < 0 or count > len(buf) - pos:
        raise ValueError(f"{count} message indexes")
    indexes = []
    for _ in range(count):
        index, pos = _zigzag(buf, pos)
        indexes.append(index)
    return indexes, pos


class ProtobufSchema:
    """The message types of one registered ``.proto`` (its file, compiled with what it imports)."""

    def __init__(self, descriptor_set: bytes, main: str) -> None:
        from google.protobuf import descriptor_pb2, descriptor_pool

        files = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set)
        self._pool = descriptor_pool.DescriptorPool()
        by_name = {}
        for file in files.file:
            self._pool.Add(file)
            by_name[file.name] = file
        effective = by_name.get(main)
        if effective is not None and _public_import_wrapper(effective):
            effective = by_name.get(effective.dependency[0])
        top: list[str] = []
        if effective is not None:
            prefix = f"{effective.package}." if effective.package else ""
            top = [prefix + m.name for m in effective.message_type]
        known = {file.name for file in files.file}
        for wkt in _well_known_files():  # what an Any may pack besides the schema's own types
            if wkt.name not in known and all(dep in known for dep in wkt.dependency):
                try:
                    self._pool.Add(wkt)
                except Exception:  # noqa: BLE001 - the schema defines such a name itself: its own wins
                    continue
                known.add(wkt.name)
        if not top:
            raise ValueError(f"{main} defines no message")
        #: the full names of the file's top-level messages, in the order they are written (index 0 first)
        self._top = top
        self._classes: dict[tuple[int, ...], type[Message]] = {}
        self._readers: dict[tuple[int, ...], tuple[Callable[[bytes], Message], Converter]] = {}

    def message_class(self, indexes: list[int]) -> type[Message]:
        """The message class at ``indexes`` (IndexError when the schema has no such message)."""
        key = tuple(indexes)
        cls = self._classes.get(key)
        if cls is None:
            from google.protobuf import message_factory

            if not indexes or any(i < 0 for i in indexes):
                raise IndexError(indexes)
            desc = self._pool.FindMessageTypeByName(self._top[indexes[0]])
            for i in indexes[1:]:
                desc = _declared_nested(desc)[i]
            cls = self._classes[key] = message_factory.GetMessageClass(desc)  # a dict set: thread-safe
        return cls

    def read(self, data: bytes) -> Any:
        """The JSON-ready object of a datum (message indexes, then the message); ValueError (or the
        runtime's DecodeError, IndexError) when it does not decode."""
        if data[:1] == b"\x00":  # [0], the usual case, as one byte
            indexes, pos = _FIRST, 1
        else:
            indexes, pos = read_message_indexes(data)
        key = tuple(indexes)
        entry = self._readers.get(key)
        if entry is None:
            cls = self.message_class(indexes)
            entry = self._readers[key] = (cls.FromString, _converter(cls.DESCRIPTOR))  # a dict set: thread-safe
        parse, convert = entry
        return convert(parse(data[pos:]))


def _public_import_wrapper(file: FileDescriptorProto) -> bool:
    """Whether ``file`` only re-exports one other: no types, services or extensions of its own and a
    single import, ``import public``. The registry then numbers the messages of the imported file
    (Confluent's ``ProtobufSchema.effectiveFile``, one level deep)."""
    return (not file.message_type and not file.enum_type and not file.service and not file.extension
            and len(file.dependency) == 1 and list(file.public_dependency) == [0])


@functools.cache
def _well_known_files() -> tuple[FileDescriptorProto, ...]:
    """The protobuf runtime's well-known type files (``google/protobuf/*.proto``), each after the files
    it imports: the types a ``google.protobuf.Any`` may pack in any schema, as the runtime's own JSON
    conversion knows them."""
    from google.protobuf import (
        any_pb2,
        api_pb2,
        descriptor_pb2,
        duration_pb2,
        empty_pb2,
        field_mask_pb2,
        source_context_pb2,
        struct_pb2,
        timestamp_pb2,
        type_pb2,
        wrappers_pb2,
    )

    out = []
    for module in (descriptor_pb2, any_pb2, duration_pb2, empty_pb2, field_mask_pb2, source_context_pb2,
                   struct_pb2, timestamp_pb2, wrappers_pb2, type_pb2, api_pb2):
        proto = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(proto)
        out.append(proto)
    return tuple(out)


def _declared_nested(desc: Descriptor) -> list[Descriptor]:
    """The messages declared in ``desc``'s body, in the order they are written: what a message index
    counts. The registry numbers the messages of the registered text (Confluent's
    ``ProtobufSchema.toMessageIndexes``), where a ``map<>`` field or a proto2 ``group`` declares no
    message, so the entry types protoc makes for them (``TagsEntry``, among the declared ones in source
    order) are not counted."""
    from google.protobuf.descriptor import FieldDescriptor

    groups = {f.message_type for f in desc.fields
              if f.type == FieldDescriptor.TYPE_GROUP and f.message_type is not None
              and f.message_type.containing_type is desc and f.message_type.name.lower() == f.name}
    return [n for n in desc.nested_types if not n.GetOptions().map_entry and n not in groups]


def to_json_object(message: Message) -> Any:
    """``message`` as ``json_format.MessageToDict(message, always_print_fields_with_no_presence=True,
    preserving_proto_field_name=True)`` gives it (the definition; :func:`_converter` is the fast way),
    with the types a ``google.protobuf.Any`` packs looked up among the schema's own (the pool of
    ``message``'s file); an ``Any`` of a type the schema does not know raises, as the runtime does."""
    from google.protobuf import json_format

    return json_format.MessageToDict(message, always_print_fields_with_no_presence=True,
                                     preserving_proto_field_name=True, descriptor_pool=message.DESCRIPTOR.file.pool)


_CONVERTERS: dict[Descriptor, Converter] = {}


def _converter(desc: Descriptor) -> Converter:
    """A function from a message of ``desc`` to what :func:`to_json_object` gives, made once per
    descriptor: the runtime's own rules (``json_format._RegularMessageToJsonObject`` and
    ``_FieldToJsonObject``) without their per-field dispatch. A message that needs more than those
    rules (well-known types, extensions, closed enums, enum values with JSON names, or that reaches
    one) is left to :func:`to_json_object` itself. Safe to share across threads."""
    conv = _CONVERTERS.get(desc)
    if conv is None:
        conv = _fast(desc, set()) or to_json_object
        _CONVERTERS[desc] = conv
    return conv


def _each(conv: Converter) -> Converter:
    """A repeated field's converter: ``conv`` over each value."""
    return lambda values: [conv(v) for v in values]


def _constant(value: Any) -> Callable[[], Any]:
    return lambda: value


def _plain(desc: Descriptor, seen: set[Descriptor]) -> bool:
    """Whether every message reachable from ``desc`` follows only the plain rules."""
    if desc in seen:
        return True
    seen.add(desc)
    if desc.full_name.startswith("google.protobuf.") or desc.extension_ranges:
        return False
    for field in desc.fields:
        if field.enum_type is not None:
            if field.enum_type.is_closed or any(v.GetOptions().ListFields() for v in field.enum_type.values):
                return False
        if field.message_type is not None and not _plain(field.message_type, seen):
            return False
    return True


def _fast(desc: Descriptor, seen: set[Descriptor]) -> Converter | None:
    import base64
    import math

    from google.protobuf import descriptor
    from google.protobuf.internal import type_checkers

    if not _plain(desc, seen):
        return None
    FD = descriptor.FieldDescriptor
    b64 = base64.b64encode
    shortest = type_checkers.ToShortestFloat
    isinf = math.isinf

    def special(value: float) -> str:
        if isinf(value):
            return "-Infinity" if value < 0 else "Infinity"
        return "NaN"

    def value_of(field: FieldDescriptor) -> Converter | None:
        """The converter of one value of ``field``, or None where the value is its own JSON."""
        cpp = field.cpp_type
        if cpp == FD.CPPTYPE_MESSAGE:
            inner = field.message_type
            return lambda m: _converter(inner)(m)
        if cpp == FD.CPPTYPE_ENUM:
            names = {v.number: v.name for v in field.enum_type.values}
            return lambda v: names.get(v, v)
        if cpp == FD.CPPTYPE_STRING:
            return (lambda v: b64(v).decode("ascii")) if field.type == FD.TYPE_BYTES else None
        if cpp in (FD.CPPTYPE_INT64, FD.CPPTYPE_UINT64):
            return str
        if cpp == FD.CPPTYPE_DOUBLE:
            return lambda v: v if v - v == 0 else special(v)
        if cpp == FD.CPPTYPE_FLOAT:
            return lambda v: shortest(v) if v - v == 0 else special(v)
        return None  # int32, uint32, bool: as they are

    convs: dict[int, Callable[[Any], Any] | None] = {}
    defaults: list[tuple[str, Callable[[], Any]]] = []
    for field in desc.fields:
        name = field.name
        one = value_of(field)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            key_f, value_f = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
            map_value = value_of(value_f)
            bool_keys = key_f.cpp_type == FD.CPPTYPE_BOOL

            def mapping(m: Any, conv: Converter | None = map_value, bool_keys: bool = bool_keys) -> dict[str, Any]:
                out: dict[str, Any] = {}
                for k in m:
                    key = ("true" if k else "false") if bool_keys else str(k)
                    out[key] = m[k] if conv is None else conv(m[k])
                return out

            convs[field.number] = mapping
            if not field.has_presence:
                defaults.append((name, dict))
        elif field.is_repeated:
            convs[field.number] = list if one is None else _each(one)
            if not field.has_presence:
                defaults.append((name, list))
        else:
            convs[field.number] = one
            if not field.has_presence:
                default = field.default_value if one is None else one(field.default_value)
                defaults.append((name, _constant(default)))
    # by field descriptor: the (name, converter) of each field, looked up without attribute access
    by_field = {field: (field.name, convs[field.number]) for field in desc.fields}
    count = len(by_field)
    missing_possible = bool(defaults)

    def convert(message: Message) -> dict[str, Any]:
        js: dict[str, Any] = {}
        for field, value in message.ListFields():
            name, conv = by_field[field]
            js[name] = value if conv is None else conv(value)
        if missing_possible and len(js) < count:
            for name, default in defaults:
                if name not in js:
                    js[name] = default()
        return js

    return convert
