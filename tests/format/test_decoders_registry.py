"""A generated Schema Registry setup (SPEC §8): a ``_schemas`` topic with several subjects, evolution,
a soft delete, a hard delete, a reference, a JSON Schema; topics with Avro keys and values and unknown
ids. Every decoded datum is checked against fastavro's own reader."""

from __future__ import annotations

import base64
import struct
from decimal import Decimal
from io import BytesIO

import fastavro
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkafs.format.decoders import decoder_for
from kafkafs.format.decoders.registry import strip_logical_types
from kafkafs.format.jsonview import render_batch_jsonl, render_record_pretty
from kafkafs.storage.logdir import LogDir
from kafkafs.storage.schemas import load_registry, registry_from_dir
from tests.registry_setup import (
    EVENT_SCHEMA,
    ORDER_KEY,
    ORDER_V1,
    ORDER_V2,
    _framed,
    build_registry_logdir,
    plain,
)


@pytest.fixture()
def registry_logdir(tmp_path):
    return build_registry_logdir(tmp_path)


def _lines(logdir_path, name, registry, mode="auto"):
    topic = name.rsplit("-", 1)[0]
    decoder = decoder_for(topic, registry)
    with LogDir(logdir_path) as logdir:
        out = b"".join(render_batch_jsonl(topic, 0, b, mode, decoder=decoder) for b in logdir.log(name).read())
    return [orjson.loads(line) for line in out.splitlines()], out


def test_avro_orders_render_as_fastavro_reads_them(registry_logdir):
    registry = load_registry(registry_logdir)
    assert registry is not None
    objs, raw = _lines(registry_logdir, "orders-0", registry)
    with LogDir(registry_logdir) as logdir:
        records = list(logdir.log("orders-0").records())
    for obj, rec in zip(objs[:12], records[:12], strict=True):
        assert list(obj) == ["topic", "partition", "offset", "timestamp", "timestampType", "key", "keySchemaId",
                             "value", "valueSchemaId", "headers"]
        assert obj["keySchemaId"] == 3 and obj["valueSchemaId"] in (1, 2)
        schema = ORDER_V1 if obj["valueSchemaId"] == 1 else ORDER_V2
        theirs = fastavro.schemaless_reader(BytesIO(rec.value[5:]), fastavro.parse_schema(strip_logical_types(schema)))
        assert obj["value"] == plain(theirs)
        assert obj["key"] == plain(fastavro.schemaless_reader(BytesIO(rec.key[5:]), fastavro.parse_schema(ORDER_KEY)))
        # logical types show their underlying primitive: fastavro's logical reading agrees on the meaning
        logical = fastavro.schemaless_reader(BytesIO(rec.value[5:]), fastavro.parse_schema(schema))
        assert int(logical["created"].timestamp() * 1000) == obj["value"]["created"]
        unscaled = int.from_bytes(base64.b64decode(obj["value"]["price"]["$base64"]), "big", signed=True)
        assert Decimal(unscaled).scaleb(-2) == logical["price"]
        # unions are the bare branch value
        assert obj["value"]["note"] == theirs["note"]
    assert objs[6]["value"]["coupon"] == "SAVE" and objs[7]["value"]["coupon"] is None  # evolution: v2
    unknown, hard_deleted, soft_deleted, truncated, left_over, unframed, tombstone = objs[12:]
    assert unknown["value"] == _framed(99, b"\x02").decode()  # valid UTF-8: a string, as SPEC §3 says
    assert "valueSchemaId" not in unknown
    assert "valueSchemaId" not in hard_deleted  # a tombstone in _schemas: the id no longer resolves
    assert soft_deleted["value"] == {"x": 5} and soft_deleted["valueSchemaId"] == 6
    assert "valueSchemaId" not in truncated and "$base64" in truncated["value"]
    assert "valueSchemaId" not in left_over
    assert unframed["key"] == "plain" and unframed["value"] == {"not": "framed"}
    assert tombstone["value"] is None and tombstone["keySchemaId"] == 3
    assert list(tombstone).index("keySchemaId") == list(tombstone).index("key") + 1


def test_reference_resolves(registry_logdir):
    objs, _ = _lines(registry_logdir, "customers-0", load_registry(registry_logdir))
    assert objs[0]["value"] == {"name": "ann", "home": {"street": "s", "zip": 1}, "other": {"street": "o", "zip": None}}
    assert objs[0]["valueSchemaId"] == 5


def test_json_schema_values(registry_logdir):
    objs, raw = _lines(registry_logdir, "events-0", load_registry(registry_logdir))
    assert b'"value":{"kind":"click","n":1.50},"valueSchemaId":8' in raw  # compacted, tokens kept
    assert objs[1]["value"] == "just a string" and objs[1]["valueSchemaId"] == 8
    assert "valueSchemaId" not in objs[2] and objs[2]["value"] == _framed(8, b"{not json").decode()


@pytest.mark.parametrize("mode", ["string", "base64"])
def test_string_and_base64_show_raw_bytes(registry_logdir, mode):
    registry = load_registry(registry_logdir)
    for name in ("orders-0", "events-0", "customers-0"):
        with_registry, raw = _lines(registry_logdir, name, registry, mode)
        _, plain = _lines(registry_logdir, name, None, mode)
        assert raw == plain and b"SchemaId" not in raw


def test_pretty_record_and_no_registry(registry_logdir):
    registry = load_registry(registry_logdir)
    decoder = decoder_for("orders", registry)
    with LogDir(registry_logdir) as logdir:
        batch = next(logdir.log("orders-0").read())
    pretty = render_record_pretty("orders", 0, batch, 0, decoder=decoder)
    assert orjson.loads(pretty)["valueSchemaId"] == 1 and b'\n  "valueSchemaId": 1,\n' in pretty
    assert decoder_for("orders", None) is None
    assert load_registry(registry_logdir / "orders-0") is None  # no _schemas there: nothing to decode


def test_schemas_dir(tmp_path, registry_logdir):
    d = tmp_path / "schemas"
    d.mkdir()
    (d / "1.avsc").write_bytes(orjson.dumps(ORDER_V1))
    (d / "8.json").write_bytes(orjson.dumps(EVENT_SCHEMA))
    (d / "3.json").write_bytes(orjson.dumps(ORDER_KEY))  # an Avro schema in a .json file
    (d / "notes.txt").write_text("ignored")
    registry = registry_from_dir(d)
    assert len(registry) == 3
    assert registry.schema(8).schema_type == "JSON" and registry.schema(3).schema_type == "AVRO"
    objs, _ = _lines(registry_logdir, "orders-0", registry)
    assert objs[0]["valueSchemaId"] == 1 and objs[0]["keySchemaId"] == 3
    assert "valueSchemaId" not in objs[6]  # id 2 is not in the directory


def test_unframed_batches_take_the_generic_path(registry_logdir):
    registry = load_registry(registry_logdir)
    decoder = decoder_for("orders", registry)
    from kafkafs.format.batch import decode_batch, encode_batch

    batch = decode_batch(encode_batch([(5, b"k", b'{"a": 1}', (("h", b"\xff"),)), (6, None, b"text", ())]))
    assert not decoder.wants(batch)
    assert render_batch_jsonl("orders", 0, batch, decoder=decoder) == render_batch_jsonl("orders", 0, batch)
    # record_object: the line's object, plain JSON values
    with LogDir(registry_logdir) as logdir:
        framed = next(logdir.log("orders-0").read())
    obj = decoder.record_object("orders", 0, framed, 1)
    assert obj == orjson.loads(render_batch_jsonl("orders", 0, framed, "auto", 1, 2, decoder=decoder))
    assert obj["valueSchemaId"] == 1 and obj["value"]["blob"] == {"$base64": "AQD/"}


FLOATS = {"type": "record", "name": "Reading", "namespace": "t", "fields": [
    {"name": "f", "type": "float"}, {"name": "d", "type": "double"}, {"name": "maybe", "type": ["null", "float"]},
    {"name": "series", "type": {"type": "array", "items": "float"}},
    {"name": "by", "type": {"type": "map", "values": {"type": "float"}}},
    {"name": "next", "type": ["null", "Reading"]},  # recursive: its floats too
]}


def test_avro_floats_show_as_written_not_widened():
    """An Avro float is a 32-bit float; fastavro reads it widened to a double (1.1 -> 1.100000023841858).
    Shown: the shortest decimal that reads back as the same float (Java's Float.toString: 1.4E-45,
    3.4028235E38), in records, unions, arrays, maps and a recursive record; a double is untouched."""
    from kafkafs.format.batch import decode_batch, encode_batch
    from kafkafs.format.decoders.registry import SchemaRegistry

    registry = SchemaRegistry()
    registry.add(7, orjson.dumps(FLOATS).decode())
    inner = {"f": 0.1, "d": 0.1, "maybe": None, "series": [], "by": {}, "next": None}
    datum = {"f": 1.1, "d": 1.1, "maybe": 3.14, "series": [1.4e-45, 3.4028235e38, -2.5e-7, 100.0, float("inf")],
             "by": {"x": 0.3}, "next": inner}
    out = BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(FLOATS), datum)
    batch = decode_batch(encode_batch([(5, None, _framed(7, out.getvalue()), ())]))
    line = render_batch_jsonl("readings", 0, batch, decoder=decoder_for("readings", registry))
    value = orjson.loads(line)["value"]
    assert value == {"f": 1.1, "d": 1.1, "maybe": 3.14, "series": [1.4e-45, 3.4028235e38, -2.5e-7, 100.0, None],
                     "by": {"x": 0.3}, "next": {**inner, "f": 0.1}}
    assert b'"f":1.1,"d":1.1,"maybe":3.14,"series":[1.4e-45,3.4028235e+38,-2.5e-7,100.0,null]' in line
    widened = fastavro.schemaless_reader(BytesIO(out.getvalue()), fastavro.parse_schema(FLOATS))
    assert widened["f"] == 1.100000023841858  # what fastavro gives; each shown value is that same float
    for shown, read in [(value["f"], widened["f"]), (value["maybe"], widened["maybe"]),
                        *zip(value["series"][:4], widened["series"][:4], strict=True)]:
        assert struct.unpack("<f", struct.pack("<f", shown))[0] == read


IN = {"type": "record", "name": "In", "namespace": "u", "fields": [
    {"name": "x", "type": "float"}, {"name": "tag", "type": ["null", {"type": "enum", "name": "Tag", "symbols": ["A", "B"]}]}]}
OTHER = {"type": "record", "name": "Other", "namespace": "u", "fields": [
    {"name": "x", "type": "double"}, {"name": "id", "type": ["null", {"type": "fixed", "name": "Id", "size": 2}]}]}
UNIONS = {"type": "record", "name": "Top", "namespace": "u", "fields": [
    {"name": "a", "type": IN},
    {"name": "u", "type": ["null", "In", {"type": "map", "values": "string"}]},  # a record or a map
    {"name": "two", "type": ["In", OTHER]},  # two records
    {"name": "named", "type": ["null", "Tag", "Id", "Other"]},  # named branches without floats
    {"name": "deep", "type": {"type": "array", "items": ["null", "Top"]}},
]}


def test_avro_floats_in_a_record_branch_beside_a_map_or_a_record():
    """A float in a record branch of a union that also has a map (or another record) branch shows as
    written too, as the same record does outside a union (review14 R14-5: it showed 1.100000023841858);
    the other named branches (enum, fixed, a record without floats) show as fastavro reads them."""
    from kafkafs.format.batch import decode_batch, encode_batch
    from kafkafs.format.decoders.registry import SchemaRegistry

    registry = SchemaRegistry()
    registry.add(8, orjson.dumps(UNIONS).decode())
    parsed = fastavro.parse_schema(UNIONS)
    leaf = {"a": {"x": 0.3, "tag": None}, "u": None, "two": ("u.Other", {"x": 0.1, "id": b"\x00\x01"}),
            "named": "B", "deep": []}
    datums = [
        {"a": {"x": 1.1, "tag": "A"}, "u": {"x": 1.1, "tag": "B"}, "two": {"x": 2.2, "tag": None},
         "named": None, "deep": [None, leaf]},
        {"a": {"x": 1.1, "tag": None}, "u": {"x": "1.1"}, "two": ("u.Other", {"x": 1.1, "id": None}),
         "named": b"\xff\xfe", "deep": []},
        {"a": {"x": -7.7, "tag": None}, "u": {}, "two": {"x": 3.3, "tag": "A"},
         "named": ("u.Other", {"x": 0.1, "id": None}), "deep": [leaf, None]},
    ]

    def as_written(datum):  # the datum, a (name, record) branch as its record
        if isinstance(datum, tuple):
            return as_written(datum[1])
        if isinstance(datum, dict):
            return {k: as_written(v) for k, v in datum.items()}
        if isinstance(datum, list):
            return [as_written(v) for v in datum]
        return datum

    records = []
    for i, datum in enumerate(datums):
        out = BytesIO()
        fastavro.schemaless_writer(out, parsed, datum)
        records.append((i, None, _framed(8, out.getvalue()), ()))
    batch = decode_batch(encode_batch(records))
    lines = render_batch_jsonl("u", 0, batch, decoder=decoder_for("u", registry)).splitlines()
    values = [orjson.loads(line)["value"] for line in lines]
    read = [fastavro.schemaless_reader(BytesIO(r[2][5:]), parsed) for r in records]
    assert read[0]["u"]["x"] == 1.100000023841858  # fastavro widens the float
    assert values == [plain(as_written(d)) for d in datums]  # every float as written, wherever it is
    assert b'"u":{"x":1.1,"tag":"B"}' in lines[0] and b'"a":{"x":1.1,"tag":"A"}' in lines[0]
    assert values[1]["u"] == {"x": "1.1"} and values[1]["named"] == {"$base64": "//4="}
    assert values[2]["named"] == {"x": 0.1, "id": None} and read[2]["named"]["x"] == 0.1  # a double: as read


@given(st.integers(0, 2**32 - 1).filter(lambda b: (b >> 23) & 0xFF != 0xFF))
def test_a_float_is_shown_by_its_shortest_decimal(bits):
    from kafkafs.format.decoders.registry import float32_shortest

    value = struct.unpack("<f", struct.pack("<I", bits))[0]
    shown = float32_shortest(value)
    assert struct.unpack("<f", struct.pack("<f", shown))[0] == value  # reads back as the same float
    digits = len(f"{Decimal(repr(shown)):e}".split("e")[0].replace(".", "").replace("-", "").rstrip("0"))
    if digits > 2:  # no decimal with fewer digits reads back (Java gives 2 at least: 1.4E-45)
        fewer = float(f"{value:.{digits - 1}g}")
        assert struct.unpack("<f", struct.pack("<f", fewer))[0] != value


ADDRESS = {"type": "record", "name": "Address", "namespace": "com.acme", "fields": [{"name": "city", "type": "string"}]}


def _schema_record(subject: str, version: int, schema_id: int, schema: object) -> tuple[bytes, bytes]:
    key = orjson.dumps({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1})
    value = orjson.dumps({"subject": subject, "version": version, "id": schema_id,
                          "schema": orjson.dumps(schema).decode(), "deleted": False})
    return key, value


@pytest.mark.parametrize("default_subject", ["data-value", ":.:data-value"])
@pytest.mark.parametrize("other_first", [True, False])
def test_a_framed_id_resolves_in_the_default_context_only(default_subject, other_first):
    """review10 R10-2: a registry with contexts (Schema Linking's ':.ctx:subject' subjects, ids numbered per
    context) holds id 1 in context .other and id 1 in the default context. A framed id is unqualified: it
    is the default context's (the registry's /schemas/ids/{id}), whichever was registered first; an id
    only another context holds does not resolve."""
    from kafkafs.format.batch import decode_batch, encode_batch
    from kafkafs.format.decoders.registry import SchemaRegistry

    registry = SchemaRegistry()
    records = [_schema_record(":.other:data-value", 1, 1, "string"), _schema_record(":.other:x-value", 1, 2, "string"),
               _schema_record(default_subject, 1, 1, ADDRESS)]
    for key, value in (records if other_first else records[::-1]):
        registry.apply(key, value)
    out = BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(ADDRESS), {"city": "Oslo"})
    batch = decode_batch(encode_batch([(0, None, _framed(1, out.getvalue()), ()),
                                       (1, None, _framed(2, b"\x08Oslo"), ())]))
    lines = render_batch_jsonl("data", 0, batch, decoder=decoder_for("data", registry)).splitlines()
    first, second = (orjson.loads(line) for line in lines)
    assert first["value"] == {"city": "Oslo"} and first["valueSchemaId"] == 1
    assert "valueSchemaId" not in second and registry.schema(2) is None  # only context .other has id 2
    assert len(registry) == 1


def test_a_json_schema_scalar_keeps_its_token():
    """review10 R10-3: a JSON Schema value that is a top-level number is shown as written, as the same
    number inside an array is (it was read as a float: 12345678901234567890123 -> 1.2345678901234568e+22,
    0.10000000000000000000001 -> 0.1, 1.0e2 -> 100.0, -0 -> 0); strings and literals as written too."""
    from kafkafs.format.batch import decode_batch, encode_batch
    from kafkafs.format.decoders.registry import SchemaRegistry

    registry = SchemaRegistry()
    registry.add(20, orjson.dumps({"type": ["number", "string", "boolean", "null", "array"]}).decode(), "JSON")
    written = [b"12345678901234567890123", b"[12345678901234567890123]", b"0.10000000000000000000001", b"1.0e2",
               b"-0", b' \t1.50\r\n', b'"caf\\u00e9 \\"x\\""', b"true", b"null", b"[1, 2.50,\n 3]"]
    shown = [b"12345678901234567890123", b"[12345678901234567890123]", b"0.10000000000000000000001", b"1.0e2",
             b"-0", b"1.50", b'"caf\\u00e9 \\"x\\""', b"true", b"null", b"[1,2.50,3]"]
    batch = decode_batch(encode_batch([(i, None, _framed(20, w), ()) for i, w in enumerate(written)]))
    lines = render_batch_jsonl("j", 0, batch, decoder=decoder_for("j", registry)).splitlines()
    for line, want in zip(lines, shown, strict=True):
        assert line.split(b'"value":', 1)[1] == want + b',"valueSchemaId":20,"headers":[]}', line
        orjson.loads(line)
    bad = decode_batch(encode_batch([(0, None, _framed(20, b"1.0e"), ()), (1, None, _framed(20, b"12 13"), ())]))
    for line in render_batch_jsonl("j", 0, bad, decoder=decoder_for("j", registry)).splitlines():
        assert b"valueSchemaId" not in line  # not JSON: shown as SPEC section 3 shows bytes
