"""Protobuf values and keys behind Schema Registry framing (SPEC §8): the JSON kafkafs shows equals what
the protobuf runtime's own ``json_format`` gives for the same message, built from a descriptor made
here by hand (``descriptor_pb2``), independently of protoc and of kafkafs's registry."""

from __future__ import annotations

import base64
import struct

import orjson
import pytest

pytest.importorskip("grpc_tools", reason="grpcio-tools (protoc) is not installed")

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory  # noqa: E402

from kafkafs.format.appendlines import ProducerRecord  # noqa: E402
from kafkafs.format.decoders import decoder_for  # noqa: E402
from kafkafs.format.decoders.protobuf import read_message_indexes  # noqa: E402
from kafkafs.format.jsonembed import render_value  # noqa: E402
from kafkafs.storage.logdir import LogDir  # noqa: E402
from kafkafs.storage.schemas import load_registry, registry_from_dir  # noqa: E402
from tests.kafka_layout import varint  # noqa: E402

COMMON_PROTO = """syntax = "proto3";
package shop.common;

message Money {
  string currency = 1;
  int64 units = 2;
  sint32 nanos = 3;
}

enum Tier {
  TIER_UNKNOWN = 0;
  GOLD = 1;
  SILVER = 2;
}
"""

ORDER_PROTO = """syntax = "proto3";
package shop;

import "common.proto";

message Order {
  message Line {
    string sku = 1;
    uint32 qty = 2;
    shop.common.Money price = 3;
  }
  enum Status {
    NEW = 0;
    PAID = 1;
  }
  int64 id = 1;
  string customer_name = 2;
  repeated Line lines = 3;
  map<string, int32> counts = 4;
  oneof payment {
    string card = 5;
    bytes token = 6;
  }
  shop.common.Tier tier = 7;
  Status status = 8;
  double total = 9;
  fixed64 big = 10;
  bool gift = 11;
  repeated string tags = 12;
}

message Click {
  int32 x = 1;
  int32 y = 2;
}
"""

F = descriptor_pb2.FieldDescriptorProto


def encode_message_indexes(indexes: list[int]) -> bytes:
    """The message-index list as a serializer writes it (``[0]`` as the single byte 0)."""
    if indexes == [0]:
        return b"\x00"
    return varint(len(indexes)) + b"".join(varint(i) for i in indexes)


def _field(name, number, kind, label=F.LABEL_OPTIONAL, type_name=None, oneof=None):
    f = F(name=name, number=number, type=kind, label=label, json_name=_camel(name))
    if type_name:
        f.type_name = type_name
    if oneof is not None:
        f.oneof_index = oneof
    return f


def _camel(name):
    head, *rest = name.split("_")
    return head + "".join(p.capitalize() for p in rest)


def _classes():
    """The schemas' message classes, from descriptors written here field by field."""
    common = descriptor_pb2.FileDescriptorProto(name="common.proto", package="shop.common", syntax="proto3")
    common.message_type.add(name="Money", field=[
        _field("currency", 1, F.TYPE_STRING), _field("units", 2, F.TYPE_INT64), _field("nanos", 3, F.TYPE_SINT32)])
    tier = common.enum_type.add(name="Tier")
    for i, n in enumerate(["TIER_UNKNOWN", "GOLD", "SILVER"]):
        tier.value.add(name=n, number=i)
    order_file = descriptor_pb2.FileDescriptorProto(name="order.proto", package="shop", syntax="proto3",
                                                    dependency=["common.proto"])
    order = order_file.message_type.add(name="Order")
    order.nested_type.add(name="Line", field=[
        _field("sku", 1, F.TYPE_STRING), _field("qty", 2, F.TYPE_UINT32),
        _field("price", 3, F.TYPE_MESSAGE, type_name=".shop.common.Money")])
    entry = order.nested_type.add(name="CountsEntry", field=[
        _field("key", 1, F.TYPE_STRING), _field("value", 2, F.TYPE_INT32)])
    entry.options.map_entry = True
    status = order.enum_type.add(name="Status")
    status.value.add(name="NEW", number=0)
    status.value.add(name="PAID", number=1)
    order.oneof_decl.add(name="payment")
    order.field.extend([
        _field("id", 1, F.TYPE_INT64), _field("customer_name", 2, F.TYPE_STRING),
        _field("lines", 3, F.TYPE_MESSAGE, F.LABEL_REPEATED, ".shop.Order.Line"),
        _field("counts", 4, F.TYPE_MESSAGE, F.LABEL_REPEATED, ".shop.Order.CountsEntry"),
        _field("card", 5, F.TYPE_STRING, oneof=0), _field("token", 6, F.TYPE_BYTES, oneof=0),
        _field("tier", 7, F.TYPE_ENUM, type_name=".shop.common.Tier"),
        _field("status", 8, F.TYPE_ENUM, type_name=".shop.Order.Status"),
        _field("total", 9, F.TYPE_DOUBLE), _field("big", 10, F.TYPE_FIXED64), _field("gift", 11, F.TYPE_BOOL),
        _field("tags", 12, F.TYPE_STRING, F.LABEL_REPEATED)])
    order_file.message_type.add(name="Click", field=[_field("x", 1, F.TYPE_INT32), _field("y", 2, F.TYPE_INT32)])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(common)
    pool.Add(order_file)
    get = message_factory.GetMessageClass
    return (get(pool.FindMessageTypeByName("shop.Order")), get(pool.FindMessageTypeByName("shop.Order.Line")),
            get(pool.FindMessageTypeByName("shop.Click")))


def _json(message):
    """The protobuf runtime's JSON conversion (the registry's toJson: default values included), with
    field names as written."""
    return json_format.MessageToDict(message, always_print_fields_with_no_presence=True,
                                     preserving_proto_field_name=True)


def _messages():
    Order, Line, Click = _classes()
    orders = [
        Order(id=2**40 + 5, customer_name="Zoë", lines=[Line(sku="a-1", qty=3), Line(sku="b", price={"currency": "EUR", "units": -7, "nanos": -5})],
              counts={"x": 1, "y": -2}, card="4111", tier=1, status=1, total=12.5, big=2**63 + 1, gift=True, tags=["t1", "t2"]),
        Order(token=b"\x00\xff", tier=2),  # the other oneof branch, defaults elsewhere
        Order(),  # every field at its default
    ]
    return orders, Line(sku="nested", qty=1), Click(x=-1, y=2**31 - 1)


def _frame(schema_id, indexes, payload):
    return b"\x00" + struct.pack(">I", schema_id) + encode_message_indexes(indexes) + payload


def _write(logdir, topic, values, keys=None):
    keys = keys or [None] * len(values)
    with LogDir(logdir, writable=True) as ld:
        ld.create_partition(topic, 0).append_records(
            [ProducerRecord(1_700_000_000_000 + i, k, v, ()) for i, (k, v) in enumerate(zip(keys, values, strict=True))])


def _lines(logdir, topic, registry):
    from kafkafs.storage.log import Log

    decoder = decoder_for(topic, registry)
    log = Log.open(logdir / f"{topic}-0")
    try:
        from kafkafs.format.jsonview import render_batch_jsonl

        return [orjson.loads(line) for batch in log.read()
                for line in render_batch_jsonl(topic, 0, batch, decoder=decoder).splitlines()]
    finally:
        log.close()


def test_message_indexes():
    assert read_message_indexes(b"\x00rest") == ([0], 1)
    assert read_message_indexes(encode_message_indexes([1, 0, 2])) == ([1, 0, 2], 4)
    assert encode_message_indexes([1]) == b"\x02\x02"  # zig-zag: count 1, index 1
    with pytest.raises(ValueError):
        read_message_indexes(b"\x04\x02")  # two indexes announced, one there


def test_protobuf_values_from_a_schemas_dir(tmp_path):
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "common.proto").write_text(COMMON_PROTO)
    (schemas / "7.proto").write_text(ORDER_PROTO)
    orders, line, click = _messages()
    values = [_frame(7, [0], m.SerializeToString()) for m in orders]
    values += [_frame(7, [0, 0], line.SerializeToString()), _frame(7, [1], click.SerializeToString())]
    truncated = _frame(7, [0], orders[0].SerializeToString()[:-3])
    unknown = _frame(99, [0], click.SerializeToString())
    bad_index = _frame(7, [5], click.SerializeToString())
    values += [truncated, unknown, bad_index]
    keys = [_frame(7, [1], click.SerializeToString())] + [None] * (len(values) - 1)
    logdir = tmp_path / "logs"
    logdir.mkdir()
    _write(logdir, "orders", values, keys)
    registry = registry_from_dir(schemas)
    lines = _lines(logdir, "orders", registry)
    expected = [_json(m) for m in orders] + [_json(line), _json(click)]
    assert [x["value"] for x in lines[:5]] == expected
    assert all(x["valueSchemaId"] == 7 for x in lines[:5])
    assert lines[0]["key"] == _json(click) and lines[0]["keySchemaId"] == 7
    assert lines[0]["value"]["id"] == str(2**40 + 5) and lines[0]["value"]["tier"] == "GOLD"
    assert lines[0]["value"]["lines"][1]["price"] == {"currency": "EUR", "units": "-7", "nanos": -5}
    assert lines[1]["value"]["token"] == base64.b64encode(b"\x00\xff").decode() and "card" not in lines[1]["value"]
    # a truncated message, an unknown id, a message index the schema does not have: the bytes, as SPEC §3
    for x, raw in zip(lines[5:], values[5:], strict=True):
        assert "valueSchemaId" not in x
        assert x["value"] == orjson.loads(render_value(raw, "auto"))


def test_protobuf_with_a_reference_from_the_schemas_topic(tmp_path):
    logdir = tmp_path / "logs"
    logdir.mkdir()

    def key(subject, version):
        return orjson.dumps({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1})

    def value(subject, version, schema_id, text, references=None):
        return orjson.dumps({"subject": subject, "version": version, "id": schema_id, "schema": text,
                             "schemaType": "PROTOBUF", "references": references or [], "deleted": False})

    _write(logdir, "_schemas", [value("common", 1, 10, COMMON_PROTO),
                                value("orders-value", 1, 11, ORDER_PROTO,
                                      [{"name": "common.proto", "subject": "common", "version": 1}])],
           [key("common", 1), key("orders-value", 1)])
    orders, _line, click = _messages()
    _write(logdir, "orders", [_frame(11, [0], orders[0].SerializeToString()), _frame(11, [1], click.SerializeToString())])
    registry = load_registry(logdir)
    lines = _lines(logdir, "orders", registry)
    assert [x["value"] for x in lines] == [_json(orders[0]), _json(click)]
    assert [x["valueSchemaId"] for x in lines] == [11, 11]


def test_a_proto_that_does_not_compile_leaves_the_bytes(tmp_path):
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "3.proto").write_text('syntax = "proto3"; message A { strin x = 1; }')
    logdir = tmp_path / "logs"
    logdir.mkdir()
    raw = _frame(3, [0], b"\x0a\x01x")
    _write(logdir, "t", [raw])
    lines = _lines(logdir, "t", registry_from_dir(schemas))
    assert lines[0]["value"] == orjson.loads(render_value(raw, "auto")) and "valueSchemaId" not in lines[0]


EDGE_PROTO = """syntax = "proto3";
package edge;

message Inner {
  int32 n = 1;
}

message Edge {
  enum Color {
    RED = 0;
    BLUE = 1;
  }
  float f = 1;
  double d = 2;
  map<bool, Inner> by_flag = 3;
  map<int64, string> by_number = 4;
  Color color = 5;
  repeated Color colors = 6;
  optional string maybe = 7;
  repeated bytes blobs = 8;
  uint64 u = 9;
  sint64 s = 10;
  Inner inner = 11;
}
"""


def _edge_class():
    f = descriptor_pb2.FileDescriptorProto(name="edge.proto", package="edge", syntax="proto3")
    f.message_type.add(name="Inner", field=[_field("n", 1, F.TYPE_INT32)])
    edge = f.message_type.add(name="Edge")
    for entry_name, key_type, value in (("ByFlagEntry", F.TYPE_BOOL, _field("value", 2, F.TYPE_MESSAGE, type_name=".edge.Inner")),
                                        ("ByNumberEntry", F.TYPE_INT64, _field("value", 2, F.TYPE_STRING))):
        entry = edge.nested_type.add(name=entry_name, field=[_field("key", 1, key_type), value])
        entry.options.map_entry = True
    color = edge.enum_type.add(name="Color")
    color.value.add(name="RED", number=0)
    color.value.add(name="BLUE", number=1)
    edge.oneof_decl.add(name="_maybe")
    maybe = _field("maybe", 7, F.TYPE_STRING, oneof=0)
    maybe.proto3_optional = True
    edge.field.extend([
        _field("f", 1, F.TYPE_FLOAT), _field("d", 2, F.TYPE_DOUBLE),
        _field("by_flag", 3, F.TYPE_MESSAGE, F.LABEL_REPEATED, ".edge.Edge.ByFlagEntry"),
        _field("by_number", 4, F.TYPE_MESSAGE, F.LABEL_REPEATED, ".edge.Edge.ByNumberEntry"),
        _field("color", 5, F.TYPE_ENUM, type_name=".edge.Edge.Color"),
        _field("colors", 6, F.TYPE_ENUM, F.LABEL_REPEATED, ".edge.Edge.Color"), maybe,
        _field("blobs", 8, F.TYPE_BYTES, F.LABEL_REPEATED), _field("u", 9, F.TYPE_UINT64),
        _field("s", 10, F.TYPE_SINT64), _field("inner", 11, F.TYPE_MESSAGE, type_name=".edge.Inner")])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("edge.Edge"))


def test_edge_values_as_json_format_shows_them(tmp_path):
    Edge = _edge_class()
    edges = [
        Edge(f=0.1, d=float("nan"), by_flag={True: {"n": 1}, False: {}}, by_number={-5: "minus", 2**62: "big"},
             color=7, colors=[1, 9, 0], maybe="", blobs=[b"", b"\x01"], u=2**64 - 1, s=-(2**63), inner={}),
        Edge(f=float("-inf"), d=float("inf")),
        Edge(d=1e300, f=3.4e38, maybe="x"),
    ]
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "5.proto").write_text(EDGE_PROTO)
    logdir = tmp_path / "logs"
    logdir.mkdir()
    _write(logdir, "edges", [_frame(5, [1], e.SerializeToString()) for e in edges])
    lines = _lines(logdir, "edges", registry_from_dir(schemas))
    assert [x["value"] for x in lines] == [_json(e) for e in edges]
    # the same keys in the same order as json_format writes them
    assert [list(x["value"]) for x in lines] == [list(_json(e)) for e in edges]
    assert lines[0]["value"]["color"] == 7 and lines[0]["value"]["colors"] == ["BLUE", 9, "RED"]
    assert lines[1]["value"]["f"] == "-Infinity" and lines[0]["value"]["d"] == "NaN"


WIRE_ORDER_PROTO = """syntax = "proto3";
package wire;

import "google/protobuf/struct.proto";
import "google/protobuf/timestamp.proto";

message Tagged {
  map<string, int32> counts = 1;
  google.protobuf.Timestamp at = 2;
  google.protobuf.Struct attrs = 3;
  map<int64, Tagged> children = 4;
}
"""


def _tagged_class():
    from google.protobuf import struct_pb2, timestamp_pb2

    f = descriptor_pb2.FileDescriptorProto(name="wire.proto", package="wire", syntax="proto3",
                                           dependency=["google/protobuf/struct.proto", "google/protobuf/timestamp.proto"])
    tagged = f.message_type.add(name="Tagged")
    for entry_name, key_type, value in (("CountsEntry", F.TYPE_STRING, _field("value", 2, F.TYPE_INT32)),
                                        ("ChildrenEntry", F.TYPE_INT64, _field("value", 2, F.TYPE_MESSAGE, type_name=".wire.Tagged"))):
        entry = tagged.nested_type.add(name=entry_name, field=[_field("key", 1, key_type), value])
        entry.options.map_entry = True
    tagged.field.extend([
        _field("counts", 1, F.TYPE_MESSAGE, F.LABEL_REPEATED, ".wire.Tagged.CountsEntry"),
        _field("at", 2, F.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp"),
        _field("attrs", 3, F.TYPE_MESSAGE, type_name=".google.protobuf.Struct"),
        _field("children", 4, F.TYPE_MESSAGE, F.LABEL_REPEATED, ".wire.Tagged.ChildrenEntry")])
    pool = descriptor_pool.DescriptorPool()
    for module in (struct_pb2, timestamp_pb2):
        pool.Add(descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb))
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("wire.Tagged"))


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out) + bytes([n])


def _map_entry(number: int, key: bytes, value: bytes) -> bytes:
    """A map entry of field ``number`` as the wire has it: its key's bytes (tag included), then the value
    as field 2, length-delimited."""
    entry = key + b"\x12" + _uvarint(len(value)) + value
    return _uvarint(number << 3 | 2) + _uvarint(len(entry)) + entry


def test_map_entries_render_in_wire_order(tmp_path):
    """A map (and a Struct) shows its entries in the order they are on the wire, as Java's JsonFormat
    prints them, not in the runtime's map order (upb's, seeded per process: review14 R14-4); a key that
    comes twice keeps its first position and its last value (the runtime's value). Both ways a message
    is shown: kafkafs's own converter (Order: plain) and json_format (Tagged: well-known types)."""
    import random

    Order, _line, _click = _classes()
    Tagged = _tagged_class()
    rng = random.Random(14)
    keys = [f"k{i:02d}" for i in range(40)]
    rng.shuffle(keys)
    # a map on the wire is a repeated field of entries: messages of one entry each, concatenated, keep
    # the entries in the order written (as a merge appends them)
    dup = keys[3]
    order_wire = b"".join(Order(counts={k: i}).SerializeToString() for i, k in enumerate(keys))
    order_wire += Order(counts={dup: -1}, id=5).SerializeToString()
    child_keys = [rng.randrange(-2**40, 2**40) for _ in range(20)]
    tagged_wire = b"".join(Tagged(counts={k: i}, attrs={k: i}).SerializeToString() for i, k in enumerate(keys))
    tagged_wire += Tagged(at={"seconds": 1_700_000_000}, attrs={dup: {"in": [1, {"z": None}]}}).SerializeToString()
    child_wire = b"".join(Tagged(counts={k: 1}).SerializeToString() for k in keys[:10])
    tagged_wire += b"".join(_map_entry(4, b"\x08" + _uvarint(c % 2**64), child_wire)
                            for c in child_keys)
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "common.proto").write_text(COMMON_PROTO)
    (schemas / "7.proto").write_text(ORDER_PROTO)
    (schemas / "8.proto").write_text(WIRE_ORDER_PROTO)
    logdir = tmp_path / "logs"
    logdir.mkdir()
    _write(logdir, "m", [_frame(7, [0], order_wire), _frame(8, [0], tagged_wire)])
    order_line, tagged_line = (x["value"] for x in _lines(logdir, "m", registry_from_dir(schemas)))
    order, tagged = Order.FromString(order_wire), Tagged.FromString(tagged_wire)
    # the runtime's values (the duplicate's last value) ...
    assert order_line == _json(order) and tagged_line == _json(tagged)
    assert order_line["counts"][dup] == -1 and tagged_line["attrs"][dup] == {"in": [1, {"z": None}]}
    # ... in wire order
    assert list(order_line["counts"]) == keys
    assert list(tagged_line["counts"]) == keys and list(tagged_line["attrs"]) == keys
    assert list(tagged_line["children"]) == [str(c) for c in child_keys]
    assert all(list(child["counts"]) == keys[:10] for child in tagged_line["children"].values())


ALIAS_PROTO = """syntax = "proto3";
package alias;

enum Color {
  option allow_alias = true;
  UNKNOWN = 0;
  RED = 1;
  CRIMSON = 1;
}

message M {
  Color c = 1;
  repeated Color cs = 2;
  map<string, Color> cm = 3;
}
"""


def test_enum_alias_shows_the_first_declared_name(tmp_path):
    """R14-14: with allow_alias, json_format (and Java's JsonFormat) name a number by the FIRST value declared
    with it (RED), not by the last (CRIMSON)."""
    f = descriptor_pb2.FileDescriptorProto(name="alias.proto", package="alias", syntax="proto3")
    color = f.enum_type.add(name="Color")
    color.options.allow_alias = True
    for n, number in (("UNKNOWN", 0), ("RED", 1), ("CRIMSON", 1)):
        color.value.add(name=n, number=number)
    m = f.message_type.add(name="M")
    entry = m.nested_type.add(name="CmEntry", field=[
        _field("key", 1, F.TYPE_STRING), _field("value", 2, F.TYPE_ENUM, type_name=".alias.Color")])
    entry.options.map_entry = True
    m.field.extend([_field("c", 1, F.TYPE_ENUM, type_name=".alias.Color"),
                    _field("cs", 2, F.TYPE_ENUM, F.LABEL_REPEATED, ".alias.Color"),
                    _field("cm", 3, F.TYPE_MESSAGE, F.LABEL_REPEATED, ".alias.M.CmEntry")])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    M = message_factory.GetMessageClass(pool.FindMessageTypeByName("alias.M"))
    messages = [M(c=1, cs=[1, 0], cm={"k": 1}), M(cs=[1])]
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "5.proto").write_text(ALIAS_PROTO)
    logdir = tmp_path / "logs"
    logdir.mkdir()
    _write(logdir, "alias", [_frame(5, [0], x.SerializeToString()) for x in messages])
    lines = _lines(logdir, "alias", registry_from_dir(schemas))
    assert [x["value"] for x in lines] == [_json(x) for x in messages]
    assert lines[0]["value"] == {"c": "RED", "cs": ["RED", "UNKNOWN"], "cm": {"k": "RED"}}
