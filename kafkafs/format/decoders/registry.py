"""Values framed for a Confluent Schema Registry (SPEC §8): byte 0 is 0, bytes 1-4 the schema id (big
endian), then the datum, shown as its writer meant it when the schema is known.

A :class:`SchemaRegistry` holds schemas by id. It is filled from the registry's own storage, the
``_schemas`` topic (:meth:`SchemaRegistry.apply` replays its records: a ``SCHEMA`` key with a value
registers ``subject`` version ``version`` as ``id``, soft-deleted or not; a tombstone is a hard delete,
after which an id no other subject version holds no longer resolves), or from files (:meth:`add`).
A framed id is unqualified, so it resolves in the registry's default context only, as the registry's
``/schemas/ids/{id}`` does: from subjects without a context prefix (or with the default's, ``:.:``);
a subject of another context (``:.ctx:subject``, as Schema Linking writes them, ids numbered per
context) never lends its schema to a framed id.
Reading the ``_schemas`` topic or a directory is the storage layer's work (:mod:`kafkafs.storage.schemas`).

* **Avro** (``schemaType`` absent or ``AVRO``; ``.avsc`` files) decodes through fastavro. A datum is shown
  as plain JSON: records as objects, maps as objects, arrays as arrays, enums as their symbol, a union as
  its bare branch value, ``bytes`` and ``fixed`` as ``{"$base64": ...}``, a ``float`` as the shortest
  decimal that reads back as the same 32-bit float (1.1, as written; fastavro widens it to the double
  1.100000023841858; in a union of ``float`` and ``double`` it stays as read; in a record branch of a
  union whose branches a value cannot tell apart, a record and a map or two records, fastavro names the
  branch it read: ``return_record_name``). Logical types show their
  underlying primitive (a ``timestamp-millis`` is its long, a ``decimal`` its bytes, a ``uuid`` its
  string): exact, and what the writer wrote. NaN and infinities (not JSON) show as null. A datum must
  use its bytes exactly; one that does not decode, or leaves bytes over, is shown as SPEC §3 says. So
  is one that would have fastavro work without bound (:mod:`.avro_bounds`: nested past orjson's 254
  levels, more than 10,000 array items that take no bytes), checked before fastavro reads it; a schema
  with no finite datum (a record holding itself through records alone) decodes nothing. Each datum is
  read from a stream of its own bytes, so a count that runs past its end stops there.
* **JSON Schema** (``schemaType`` ``JSON``) values are their JSON text (compacted, tokens kept).
* **Protobuf** (``schemaType`` ``PROTOBUF``; ``.proto`` files) decodes through the protobuf runtime
  (:mod:`.protobuf`): the message-index list picks the message, shown as the runtime's JSON conversion
  shows it. The ``.proto`` text is compiled by a compiler the storage layer gives the registry
  (protoc); without one, Protobuf values stay as SPEC §3 shows them.

References (``references``: ``name``, ``subject``, ``version``) resolve through the registered subject
versions: an Avro schema that names a type of another subject is parsed after it; a ``.proto`` imports
each reference by its ``name``, recursively. The ``.proto`` files of a ``--schemas DIR``
(:meth:`SchemaRegistry.add_import`) can be imported by their names too.

A registry is filled once and then only read; readers are compiled on first use under a lock, so one
registry and its decoder are safe to share across threads.
"""

from __future__ import annotations

import math
import struct
import threading
from collections.abc import Callable
from io import BytesIO
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from ..jsonembed import json_compact
from ..records import DecodedBatch
from .avro_bounds import datum_bounds
from .view import Decoder, _bytes_default, generic_json

if TYPE_CHECKING:
    from .protobuf import ProtoCompiler

__all__ = ["Schema", "SchemaRegistry", "RegistryDecoder", "strip_logical_types"]


class DatumReader(NamedTuple):
    """How the datums of one schema are read, to their JSON-ready object (or an ``orjson.Fragment``);
    each raises when its datum does not decode. One of the first two is set."""

    from_bytes: Callable[[bytes], object] | None  # JSON Schema, Protobuf: the bytes after the frame
    from_stream: Callable[[BytesIO], object] | None  # Avro: a stream positioned at the datum
    #: Avro: whether ``fits(framed, 5)``, the datum after the frame, is one fastavro may read (its nesting
    #: and zero-width items bounded, :mod:`.avro_bounds`); None when its own bytes bound every datum
    fits: Callable[[bytes, int], bool] | None = None


class Schema(NamedTuple):
    id: int
    schema_type: str  # AVRO, JSON or PROTOBUF
    text: str
    references: tuple[tuple[str, str, int], ...] = ()


def in_default_context(subject: object) -> bool:
    """Whether a registry subject is in the default context: no context prefix (``orders-value``) or
    the default's (``:.:orders-value``); ``:.ctx:orders-value`` is in context ``.ctx``."""
    return not (isinstance(subject, str) and subject.startswith(":.") and not subject.startswith(":.:"))


def strip_logical_types(schema: Any) -> Any:
    """An Avro schema (parsed JSON) with every ``logicalType`` removed: its datums read as their
    underlying primitives."""
    if isinstance(schema, dict):
        return {k: strip_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [strip_logical_types(v) for v in schema]
    return schema



class SchemaRegistry:
    """Schemas by id, and the compiled reader of each (see the module docstring)."""

    def __init__(self, protobuf_compiler: ProtoCompiler | None = None) -> None:
        self._versions: dict[tuple[str, int], Schema] = {}  # (subject, version) -> schema
        self._files: dict[int, Schema] = {}
        self._imports: dict[str, str] = {}  # .proto import name -> text (a --schemas DIR's files)
        self._compiler = protobuf_compiler
        self._readers: dict[int, DatumReader | None] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ filling

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """Replay one record of the ``_schemas`` topic (records that are not schemas are ignored)."""
        try:
            k = orjson.loads(key) if key else None
        except orjson.JSONDecodeError:
            return
        if not isinstance(k, dict) or k.get("keytype") != "SCHEMA":
            return
        where: tuple[str, int] = (k.get("subject"), k.get("version"))  # type: ignore[assignment]  # from JSON: what it holds is the key
        if value is None:
            self._versions.pop(where, None)
            self._readers.clear()
            return
        try:
            v = orjson.loads(value)
            schema = Schema(
                int(v["id"]),
                str(v.get("schemaType") or "AVRO").upper(),
                v["schema"],
                tuple((r["name"], r["subject"], int(r["version"])) for r in v.get("references") or ()),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return
        self._versions[where] = schema
        self._readers.clear()

    def add(self, schema_id: int, text: str, schema_type: str = "AVRO",
            references: tuple[tuple[str, str, int], ...] = ()) -> None:
        """A schema known by id alone (``--schemas DIR``)."""
        self._files[schema_id] = Schema(schema_id, schema_type.upper(), text, tuple(references))
        self._readers.clear()

    def add_import(self, name: str, text: str) -> None:
        """A ``.proto`` file that Protobuf schemas may import by ``name`` (a ``--schemas DIR``'s files)."""
        self._imports[name] = text
        self._readers.clear()

    # ------------------------------------------------------------------ looking up

    def __len__(self) -> int:
        return len(self._ids())

    def _ids(self) -> dict[int, Schema]:
        ids = dict(self._files)
        for (subject, _version), schema in self._versions.items():
            if in_default_context(subject):
                ids.setdefault(schema.id, schema)
        return ids

    def schema(self, schema_id: int) -> Schema | None:
        """The schema registered as ``schema_id`` in the default context (a hard-deleted one no longer
        resolves; another context's ids are its own)."""
        found = self._files.get(schema_id)
        if found is not None:
            return found
        for (subject, _version), schema in self._versions.items():
            if schema.id == schema_id and in_default_context(subject):
                return schema
        return None

    def _referenced(self, subject: str, version: int) -> Schema | None:
        if version == -1:
            versions = [v for (s, v) in self._versions if s == subject]
            version = max(versions) if versions else -2
        return self._versions.get((subject, version))

    def reader(self, schema_id: int) -> DatumReader | None:
        """How the datums of schema ``schema_id`` are read; None for an unknown id (or a schema that
        does not compile)."""
        try:
            return self._readers[schema_id]
        except KeyError:
            pass
        with self._lock:
            if schema_id not in self._readers:
                self._readers[schema_id] = self._compile(schema_id)
            return self._readers[schema_id]

    def _compile(self, schema_id: int) -> DatumReader | None:
        schema = self.schema(schema_id)
        if schema is None:
            return None
        try:
            if schema.schema_type == "AVRO":
                named: dict[str, Any] = {}
                parsed = self._avro_parsed(schema, named, set())
                # a schema with no finite datum raises here: fastavro would recurse without end on any bytes
                return DatumReader(None, _avro_reader(parsed, named), datum_bounds(parsed, named))
            if schema.schema_type == "JSON":
                return DatumReader(_json_reader, None)
            if schema.schema_type == "PROTOBUF" and self._compiler is not None:
                return self._protobuf_reader(schema)
        except Exception:  # noqa: BLE001 - a schema fastavro or protoc rejects: its values stay bytes
            return None
        return None

    def _protobuf_reader(self, schema: Schema) -> DatumReader:
        from .protobuf import ProtobufSchema

        files = dict(self._imports)
        main = f"{schema.id}.proto" if self._files.get(schema.id) is schema else f"kafkafs-registry-{schema.id}.proto"
        files[main] = schema.text
        pending, seen = list(schema.references), set[tuple[str, int]]()
        while pending:  # each reference is imported by its name, and may have references of its own
            name, subject, version = pending.pop()
            ref = self._referenced(subject, version)
            if ref is None or (subject, version) in seen:
                continue
            seen.add((subject, version))
            files[name] = ref.text
            pending.extend(ref.references)
        assert self._compiler is not None
        compiled = ProtobufSchema(self._compiler(files, main), main)
        return DatumReader(compiled.read, None)

    def _avro_parsed(self, schema: Schema, named: dict[str, Any], seen: set[tuple[str, int]]) -> Any:
        """The parsed Avro schema (fastavro's: parsed JSON), after the references it names."""
        import fastavro

        for _name, subject, version in schema.references:
            ref = self._referenced(subject, version)
            if ref is not None and (subject, version) not in seen:
                seen.add((subject, version))
                self._avro_parsed(ref, named, seen)
        return fastavro.parse_schema(strip_logical_types(orjson.loads(schema.text)), named_schemas=named)

    def fingerprint(self) -> str:
        """A digest of every schema known (by id and by subject version): equal registries render alike."""
        import hashlib

        digest = hashlib.sha256()
        for key, schema in sorted(self._versions.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
            digest.update(orjson.dumps([list(key), list(schema)]))
        for schema_id, schema in sorted(self._files.items()):
            digest.update(orjson.dumps([schema_id, list(schema)]))
        for name, text in sorted(self._imports.items()):
            digest.update(orjson.dumps([name, text]))
        return digest.hexdigest()[:32]

    def decoder(self) -> RegistryDecoder:
        return RegistryDecoder(self)


def _avro_reader(parsed: Any, named: dict[str, Any]) -> Callable[[BytesIO], object]:
    """A reader of one datum at the stream's position, through fastavro's public ``schemaless_reader``
    (its private datum reader would save about 1.5 us a datum; the project uses no package's private
    modules). ``named``: the named types the references defined, already in ``parsed``. A schema with
    ``float`` fields has them shown as written (:func:`float32_shortest`), not widened to a double."""
    import fastavro

    reader = fastavro.schemaless_reader
    # a union whose record branch holds a float, beside a map or another record: only the name of the
    # branch fastavro read says which it was, so it is asked for the names (every union with a named
    # branch then gives (name, datum), which the fixer unwraps)
    names = _ambiguous(parsed, named, set())
    fix = _float_fixer(parsed, named, {}, names)
    if fix is None:
        return lambda stream: reader(stream, parsed, None)
    if names:
        return lambda stream: fix(reader(stream, parsed, None, return_record_name=True))
    return lambda stream: fix(reader(stream, parsed, None))


_F32 = struct.Struct("<f")


def float32_shortest(value: float) -> float:
    """An Avro ``float`` (a 32-bit float that fastavro hands over widened to a double, 1.100000023841858)
    as the shortest decimal that reads back as the same 32-bit float (1.1): what Java's
    ``Float.toString`` prints (it gives at least two digits: 1.4E-45, not 1E-45) and what a writer of
    1.1 wrote. NaN and infinities stay as they are."""
    if value != value or value in (math.inf, -math.inf):
        return value
    pack, unpack = _F32.pack, _F32.unpack
    for digits in range(2, 10):  # the closest 2 digits read back whenever 1 does; 9 always do
        short = float(f"{value:.{digits}g}")
        try:
            if unpack(pack(short))[0] == value:
                return short
        except OverflowError:  # rounded up past the largest float
            continue
    return value


def _named_branch(schema: Any) -> str | None:
    """The name a union branch has (a record, enum or fixed, written out or named), else None."""
    if isinstance(schema, str):
        return None if schema in AVRO_PRIMITIVES else schema
    if isinstance(schema, dict) and schema.get("type") in ("record", "error", "enum", "fixed"):
        name = schema.get("name")
        return name if isinstance(name, str) else None
    return None


AVRO_PRIMITIVES = frozenset(("null", "boolean", "int", "long", "float", "double", "bytes", "string"))


def _ambiguous(schema: Any, named: dict[str, Any], seen: set[str]) -> bool:
    """Whether a datum of ``schema`` can hold a union whose branches include a record that holds a
    float and another branch read as an object too (a map, another record): a value cannot say which."""
    if isinstance(schema, str):
        if schema in named and schema not in seen:
            seen.add(schema)
            return _ambiguous(named[schema], named, seen)
        return False
    if isinstance(schema, list):
        objects = [b for b in schema if _branch_kind(b, named) == "dict"]
        if len(objects) > 1 and any(_has_float(b, named, set()) for b in objects):
            return True
        return any(_ambiguous(branch, named, seen) for branch in schema)
    if isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "error"):
            name = schema.get("name")
            if name in seen:
                return False
            if name is not None:
                seen.add(name)
            return any(_ambiguous(f["type"], named, seen) for f in schema.get("fields", ()))
        if kind == "array":
            return _ambiguous(schema["items"], named, seen)
        if kind == "map":
            return _ambiguous(schema["values"], named, seen)
        if kind in ("enum", "fixed"):
            return False
        return _ambiguous(kind, named, seen)
    return False


def _has_float(schema: Any, named: dict[str, Any], seen: set[str], names: bool = False) -> bool:
    """Whether a datum of the (fastavro-parsed) ``schema`` can hold an Avro ``float`` anywhere (or, with
    ``names``, a union with a named branch, which fastavro then reads as (name, datum))."""
    if isinstance(schema, str):
        if schema == "float":
            return True
        return schema in named and _has_float(named[schema], named, seen, names)  # seen guards recursion
    if isinstance(schema, list):
        if names and any(_named_branch(branch) is not None for branch in schema):
            return True
        return any(_has_float(branch, named, seen, names) for branch in schema)
    if isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "error"):
            name = schema.get("name")
            if name in seen:
                return False
            if name is not None:
                seen.add(name)
            return any(_has_float(f["type"], named, seen, names) for f in schema.get("fields", ()))
        if kind == "array":
            return _has_float(schema["items"], named, seen, names)
        if kind == "map":
            return _has_float(schema["values"], named, seen, names)
        if kind in ("enum", "fixed"):
            return False
        return _has_float(kind, named, seen, names)
    return False


def _float_fixer(schema: Any, named: dict[str, Any], made: dict[str, Any],
                 names: bool = False) -> Callable[[Any], Any] | None:
    """A function that puts :func:`float32_shortest` in place of every ``float`` of a datum fastavro read
    with ``schema`` (records changed in place), or None when the schema holds no ``float``. ``made``:
    the functions of named records being built (a recursive record calls itself through it). In a union
    a value is matched to its branch by its kind: a float to a ``float`` branch when the union has no
    ``double`` (with both, a value cannot say which it was, and stays as fastavro reads it), an object to
    the one record or map branch, a list to the array branch. With ``names`` (fastavro read with
    ``return_record_name``) a union's (name, datum) goes to the branch of that name, and is unwrapped."""
    if not _has_float(schema, named, set(), names):
        return None
    if isinstance(schema, str):
        if schema == "float":
            return float32_shortest
        if schema in made:
            return lambda datum: made[schema](datum)
        return _float_fixer(named[schema], named, made, names)
    if isinstance(schema, list):
        return _union_fixer(schema, named, made, names)
    kind = schema["type"]
    if kind in ("record", "error"):
        name = schema.get("name")
        if name is not None and name in made:
            return lambda datum: made[name](datum)
        if name is not None:
            made[name] = None
        fields: list[tuple[str, Callable[[Any], Any]]] = []
        for field in schema["fields"]:
            fix = _float_fixer(field["type"], named, made, names)
            if fix is not None:
                fields.append((field["name"], fix))

        def record(datum: dict[str, Any]) -> dict[str, Any]:
            for field_name, fix in fields:
                datum[field_name] = fix(datum[field_name])
            return datum

        if name is not None:
            made[name] = record
        return record
    if kind == "array":
        items = _float_fixer(schema["items"], named, made, names)
        assert items is not None
        return lambda datum: [items(x) for x in datum]
    if kind == "map":
        values = _float_fixer(schema["values"], named, made, names)
        assert values is not None
        return lambda datum: {k: values(v) for k, v in datum.items()}
    return _float_fixer(kind, named, made, names)


def _branch_kind(schema: Any, named: dict[str, Any]) -> str:
    """What Python value fastavro reads a union branch to: "float", "double", "dict", "list" or "other"."""
    if isinstance(schema, dict):
        kind = schema["type"]
        if kind in ("record", "error", "map"):
            return "dict"
        if kind == "array":
            return "list"
        if kind in ("enum", "fixed"):
            return "other"
        return _branch_kind(kind, named)
    if isinstance(schema, str):
        if schema in ("float", "double"):
            return schema
        if schema in named:
            return _branch_kind(named[schema], named)
    return "other"


def _union_fixer(branches: list[Any], named: dict[str, Any], made: dict[str, Any],
                 names: bool = False) -> Callable[[Any], Any] | None:
    by_name: dict[str, Callable[[Any], Any] | None] = {}
    if names:  # fastavro gives (name, datum) for a named branch: its fixer by that name
        for branch in branches:
            name = _named_branch(branch)
            if name is not None:
                by_name[name] = _float_fixer(branch, named, made, names)
    # the branches a bare value can come from (with names, the named ones come as (name, datum))
    bare = [b for b in branches if not (names and _named_branch(b) is not None)]
    bare_kinds = [_branch_kind(b, named) for b in bare]
    by_kind: dict[type, Callable[[Any], Any]] = {}
    if bare_kinds.count("float") == 1 and "double" not in bare_kinds:
        by_kind[float] = float32_shortest
    for kind, python_type in (("dict", dict), ("list", list)):
        if bare_kinds.count(kind) == 1:
            fix = _float_fixer(bare[bare_kinds.index(kind)], named, made, names)
            if fix is not None:
                by_kind[python_type] = fix
    if not by_kind and not by_name:
        return None

    def union(datum: Any) -> Any:
        if type(datum) is tuple:  # (name, datum): only with names
            name, value = datum
            fix = by_name.get(name)
            return value if fix is None else fix(value)
        fix = by_kind.get(type(datum))
        return datum if fix is None else fix(datum)

    return union


def _json_reader(payload: bytes) -> object:
    """A JSON Schema datum: its JSON text, compacted, every token as written (a number keeps its
    digits: 12345678901234567890123 and 1.0e2 are not floats here)."""
    compact = json_compact(payload)
    if compact is not None:
        return orjson.Fragment(compact)
    document = orjson.loads(payload)  # raises ValueError when not JSON
    if isinstance(document, (dict, list)):
        return document  # deeper than json_compact embeds: as orjson reads it
    return orjson.Fragment(payload.strip(b" \t\r\n"))  # a scalar: its one token, as written



class RegistryDecoder(Decoder):
    """Keys and values framed for the registry, decoded by their schemas; anything else generic."""

    def __init__(self, registry: SchemaRegistry) -> None:
        self.registry = registry
        #: names what this decoder renders, for caches of rendered sizes (the mount's ``--cache-dir``); the
        #: number is how it renders (2: Avro floats as written, where 1 showed their double; 3: JSON Schema
        #: scalars as written, and ids of the default context only; 4: Avro floats in a record branch beside
        #: a map or a record as written, Protobuf maps in wire order)
        self.identity = "kafkafs.registry:4:" + registry.fingerprint()

    def wants(self, batch: DecodedBatch) -> bool:
        for data in batch.values:
            if data is not None and len(data) > 4 and data[0] == 0:
                return True
        for data in batch.keys:
            if data is not None and len(data) > 4 and data[0] == 0:
                return True
        return False

    def _column(self, batch: DecodedBatch, keys: list[bytes | None], values: list[bytes | None],
                which: str) -> list[bytes]:
        """A whole column at once: each Avro datum is read from a stream of its item's bytes (so a block
        count that runs past the datum stops at its end, not in the next items) and checked to end
        exactly where its item ends. Per frame prefix (magic byte and id) the reader and the
        ``"...SchemaId"`` text are looked up once a column."""
        items = keys if which == "key" else values
        if batch.header.is_control:
            return Decoder._column(self, batch, keys, values, which)
        suffix = b',"keySchemaId":%d' if which == "key" else b',"valueSchemaId":%d'
        lookup = self.registry.reader
        dumps, default = orjson.dumps, _bytes_default
        known: dict[bytes, tuple[DatumReader | None, bytes]] = {}
        out: list[bytes] = []
        add = out.append
        stream = BytesIO()
        # each datum gets the stream afresh (BytesIO's constructor, run again, holds the new bytes without
        # a copy: cheaper than a new stream a datum, which cost ~5% of Avro rendering)
        restart, seek, tell = BytesIO.__init__, stream.seek, stream.tell
        for data in items:
            if data is None:
                add(b"null")
                continue
            prefix = data[:5]
            entry = known.get(prefix)
            if entry is None:
                read = lookup(int.from_bytes(prefix[1:], "big")) if len(data) >= 5 and data[0] == 0 else None
                entry = known[prefix] = (read, suffix % int.from_bytes(prefix[1:], "big") if read else b"")
            read, tail = entry
            if read is None:
                add(generic_json(data))
                continue
            try:
                if read.from_bytes is not None:  # JSON and Protobuf: the rest of the item
                    obj = read.from_bytes(data[5:])
                else:
                    assert read.from_stream is not None
                    if read.fits is not None and not read.fits(data, 5):
                        raise ValueError("nested too deep, or too many items that take no bytes")
                    restart(stream, data)
                    seek(5)
                    obj = read.from_stream(stream)
                    if tell() != len(data):
                        raise ValueError("bytes left over after the datum")
                add(dumps(obj, default=default) + tail)
            except Exception:  # noqa: BLE001 - bytes that do not decode under their schema stay bytes
                add(generic_json(data))
        return out
