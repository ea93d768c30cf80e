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

Map fields (and ``google.protobuf.Struct``) keep their entries in wire order, as Java's ``JsonFormat``
(the registry's ``toJson``) prints them: the runtime's own map iterates in an order seeded per process
(upb), which would make the same record render differently from run to run. A map is read as what it
is on the wire, a repeated message of key/value entries: the schema is loaded twice, once as written
and once with its map-entry types as plain messages (:class:`ProtobufSchema`), and the datum parsed
with the second. A key that comes more than once keeps the position of its first entry and the value
of its last (last wins, as the runtime's map and Java's generated messages keep it).

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
        #: the schema as written: message indexes, message classes, the runtime's json_format
        self._pool = descriptor_pool.DescriptorPool()
        #: the same schema with its map-entry types as plain messages: a map field is a repeated
        #: field of entries, in wire order (what datums are parsed with)
        self._wire_pool = descriptor_pool.DescriptorPool()
        entries: set[str] = set()
        by_name = {}
        for file in files.file:
            self._pool.Add(file)
            self._wire_pool.Add(_entries_as_messages(file, entries))
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
        #: the full names of the map-entry types
        self._entries = frozenset(entries)
        self._classes: dict[tuple[int, ...], type[Message]] = {}
        self._readers: dict[tuple[int, ...], Callable[[bytes], Any]] = {}

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
        reader = self._readers.get(key)
        if reader is None:
            reader = self._readers[key] = self._reader(indexes)  # a dict set: thread-safe
        return reader(data[pos:])

    def _reader(self, indexes: list[int]) -> Callable[[bytes], Any]:
        """A function from the bytes of a message at ``indexes`` to its JSON-ready object."""
        from google.protobuf import message_factory

        cls = self.message_class(indexes)
        wire_cls = message_factory.GetMessageClass(self._wire_pool.FindMessageTypeByName(cls.DESCRIPTOR.full_name))
        entries = self._entries
        fast = _converter(wire_cls.DESCRIPTOR, entries)
        if fast is not None:
            parse_wire = wire_cls.FromString
            return lambda data: fast(parse_wire(data))
        # the runtime's json_format on the message as written, its maps then put in wire order
        parse = cls.FromString
        if not _reaches_a_map(wire_cls.DESCRIPTOR, entries, set()):
            return lambda data: to_json_object(parse(data))
        return lambda data: _wire_order(to_json_object(parse(data)), wire_cls.FromString(data), entries)


def _entries_as_messages(file: Any, entries: set[str]) -> Any:
    """A copy of ``file`` (a ``FileDescriptorProto``) whose map-entry types are plain messages (a map
    field then reads as the repeated field of entries it is on the wire); adds their full names to
    ``entries``."""
    copy = type(file)()
    copy.CopyFrom(file)
    prefix = f".{file.package}" if file.package else ""

    def walk(messages: Any, scope: str) -> None:
        for m in messages:
            name = f"{scope}.{m.name}"
            if m.options.map_entry:
                m.options.ClearField("map_entry")
                entries.add(name[1:])
            walk(m.nested_type, name)

    walk(copy.message_type, prefix)
    return copy


def _reaches_a_map(desc: Descriptor, entries: frozenset[str], seen: set[Descriptor]) -> bool:
    if desc in seen:
        return False
    seen.add(desc)
    for field in desc.fields:
        inner = field.message_type
        if inner is not None and (inner.full_name in entries or _reaches_a_map(inner, entries, seen)):
            return True
    return False


def _map_key(key: Any) -> str:
    """A map key as json_format writes it."""
    if key is True or key is False:
        return "true" if key else "false"
    return str(key)


def _wire_order(js: Any, message: Any, entries: frozenset[str]) -> Any:
    """``js`` (json_format's object of a message) with every map's keys in the order of ``message``'s
    entries (the same bytes parsed with map entries as plain messages); ``js`` is changed in place."""
    name = message.DESCRIPTOR.full_name
    if name.startswith("google.protobuf."):
        if name == "google.protobuf.Struct" and isinstance(js, dict):
            return _map_in_wire_order(js, message.fields, entries)
        if name == "google.protobuf.ListValue" and isinstance(js, list) and len(js) == len(message.values):
            return [_wire_order(j, v, entries) for j, v in zip(js, message.values, strict=True)]
        if name == "google.protobuf.Value":
            kind = message.WhichOneof("kind")
            if kind in ("struct_value", "list_value"):
                return _wire_order(js, getattr(message, kind), entries)
        return js  # the other well-known types hold no map (Any's contents are left as they are)
    if not isinstance(js, dict):
        return js
    for field, value in message.ListFields():
        inner = field.message_type
        if inner is None or field.is_extension or field.name not in js:
            continue
        if inner.full_name in entries:
            js[field.name] = _map_in_wire_order(js[field.name], value, entries)
        elif field.is_repeated:
            items = js[field.name]
            if isinstance(items, list) and len(items) == len(value):
                js[field.name] = [_wire_order(j, v, entries) for j, v in zip(items, value, strict=True)]
        else:
            js[field.name] = _wire_order(js[field.name], value, entries)
    return js


def _map_in_wire_order(js: Any, items: Any, entries: frozenset[str]) -> Any:
    """A map's JSON object ``js`` with its keys in the order of the wire's entries ``items`` (first
    position, last value)."""
    if not isinstance(js, dict):
        return js
    last: dict[str, Any] = {}
    for item in items:
        last[_map_key(item.key)] = item
    out = {key: js[key] for key in last if key in js}
    if len(out) != len(js):
        return js  # an entry the runtime left out of the map shares its key: leave the runtime's object
    if items and items[0].DESCRIPTOR.fields_by_name["value"].message_type is not None:
        for key, item in last.items():
            out[key] = _wire_order(out[key], item.value, entries)
    return out


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


_CONVERTERS: dict[Descriptor, Converter | None] = {}


def _converter(desc: Descriptor, entries: frozenset[str]) -> Converter | None:
    """A function from a message of ``desc`` (its map fields read as repeated fields of the entry types
    named in ``entries``) to what :func:`to_json_object` gives for the message as written, its maps in
    wire order; made once per descriptor: the runtime's own rules (``json_format``'s regular messages
    and fields) without their per-field dispatch. None for a message that needs more than those rules
    (well-known types, extensions, closed enums, enum values with JSON names, or that reaches one):
    :func:`to_json_object` shows it. Safe to share across threads."""
    if desc in _CONVERTERS:
        return _CONVERTERS[desc]
    conv = _fast(desc, entries, set())
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


def _shortest_float(value: float) -> float:
    """The shortest decimal that reads back as the same 32-bit float: json_format's rule for float
    fields (6 to 9 significant digits)."""
    import struct

    for precision in range(6, 10):
        rounded = float(f"{value:.{precision}g}")
        if struct.unpack("<f", struct.pack("<f", rounded))[0] == value:
            return rounded
    return value


def _fast(desc: Descriptor, entries: frozenset[str], seen: set[Descriptor]) -> Converter | None:
    import base64
    import math

    from google.protobuf import descriptor

    if not _plain(desc, seen):
        return None
    FD = descriptor.FieldDescriptor
    b64 = base64.b64encode
    shortest = _shortest_float
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

            def message(m: Any) -> Any:
                conv = _converter(inner, entries)
                assert conv is not None  # _plain: every message reachable is plain
                return conv(m)

            return message
        if cpp == FD.CPPTYPE_ENUM:
            # as json_format (values_by_number.get): with allow_alias, the FIRST name declared for a number
            # (upb's values_by_number.items() yields every alias, so a dict made from it keeps the last)
            by_number = field.enum_type.values_by_number
            names = {v.number: by_number[v.number].name for v in field.enum_type.values}
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
        if field.message_type is not None and field.message_type.full_name in entries:
            key_f, value_f = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
            map_value = value_of(value_f)
            bool_keys = key_f.cpp_type == FD.CPPTYPE_BOOL

            def mapping(items: Any, conv: Converter | None = map_value, bool_keys: bool = bool_keys) -> dict[str, Any]:
                # the entries in wire order; a key seen again keeps its first position, takes the last value
                out: dict[str, Any] = {}
                for item in items:
                    k = item.key
                    key = ("true" if k else "false") if bool_keys else str(k)
                    out[key] = item.value if conv is None else conv(item.value)
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
