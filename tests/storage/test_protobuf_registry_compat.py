"""Protobuf schemas as Confluent's Schema Registry reads them (SPEC §8), beyond plain messages: which
message a message-index list names when protoc adds types the registered text does not declare (map
entries, proto2 groups). The expected JSON is the protobuf runtime's own ``json_format`` of a message
built here from a hand-written descriptor, independently of protoc and of kafkafs's registry."""

from __future__ import annotations

import orjson
import pytest

pytest.importorskip("grpc_tools", reason="grpcio-tools (protoc) is not installed")

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # noqa: E402

from kafkafs.format.jsonembed import render_value  # noqa: E402
from kafkafs.storage.schemas import registry_from_dir  # noqa: E402
from tests.storage.test_protobuf_values import F, _field, _frame, _json, _lines, _write  # noqa: E402

MAP_FIRST_PROTO = """syntax = "proto3";
package p;

message Outer {
  map<string, string> tags = 1;
  message Inner {
    string x = 1;
    map<int32, string> m = 2;
    message Deep {
      int32 n = 1;
    }
  }
  Inner inner = 2;
}
"""

GROUP_PROTO = """syntax = "proto2";
package g;

message Outer {
  optional group Grp = 1 {
    optional string a = 2;
  }
  message Inner {
    optional string x = 1;
  }
  optional Inner inner = 3;
}
"""


def _pool_classes(file):
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return lambda name: message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def _map_first_classes():
    f = descriptor_pb2.FileDescriptorProto(name="o.proto", package="p", syntax="proto3")
    outer = f.message_type.add(name="Outer")
    entry = outer.nested_type.add(name="TagsEntry", field=[_field("key", 1, F.TYPE_STRING), _field("value", 2, F.TYPE_STRING)])
    entry.options.map_entry = True
    inner = outer.nested_type.add(name="Inner")
    entry = inner.nested_type.add(name="MEntry", field=[_field("key", 1, F.TYPE_INT32), _field("value", 2, F.TYPE_STRING)])
    entry.options.map_entry = True
    inner.nested_type.add(name="Deep", field=[_field("n", 1, F.TYPE_INT32)])
    inner.field.extend([_field("x", 1, F.TYPE_STRING),
                        _field("m", 2, F.TYPE_MESSAGE, F.LABEL_REPEATED, ".p.Outer.Inner.MEntry")])
    outer.field.extend([_field("tags", 1, F.TYPE_MESSAGE, F.LABEL_REPEATED, ".p.Outer.TagsEntry"),
                        _field("inner", 2, F.TYPE_MESSAGE, type_name=".p.Outer.Inner")])
    get = _pool_classes(f)
    return get("p.Outer"), get("p.Outer.Inner"), get("p.Outer.Inner.Deep")


def test_message_indexes_skip_map_entry_types(tmp_path):
    """review14 R14-8: [0, 0] is Outer.Inner (the first message declared in Outer), not protoc's
    TagsEntry; [0, 0, 0] is Inner.Deep, past Inner's own map entry."""
    Outer, Inner, Deep = _map_first_classes()
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "9.proto").write_text(MAP_FIRST_PROTO)
    messages = [(Outer(tags={"k": "v"}, inner={"x": "in"}), [0]), (Inner(x="hello", m={3: "c"}), [0, 0]),
                (Deep(n=-4), [0, 0, 0])]
    logdir = tmp_path / "logs"
    logdir.mkdir()
    values = [_frame(9, indexes, m.SerializeToString()) for m, indexes in messages]
    values.append(_frame(9, [0, 1], Inner(x="h").SerializeToString()))  # Outer declares one message only
    _write(logdir, "t", values)
    lines = _lines(logdir, "t", registry_from_dir(schemas))
    assert [x["value"] for x in lines[:3]] == [_json(m) for m, _ in messages]
    assert lines[1]["value"] == {"x": "hello", "m": {"3": "c"}}
    assert [x.get("valueSchemaId") for x in lines] == [9, 9, 9, None]


def test_message_indexes_skip_proto2_group_types(tmp_path):
    f = descriptor_pb2.FileDescriptorProto(name="g.proto", package="g", syntax="proto2")
    outer = f.message_type.add(name="Outer")
    outer.nested_type.add(name="Grp", field=[_field("a", 2, F.TYPE_STRING)])
    outer.nested_type.add(name="Inner", field=[_field("x", 1, F.TYPE_STRING)])
    outer.field.extend([_field("grp", 1, F.TYPE_GROUP, type_name=".g.Outer.Grp"),
                        _field("inner", 3, F.TYPE_MESSAGE, type_name=".g.Outer.Inner")])
    Inner = _pool_classes(f)("g.Outer.Inner")
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "4.proto").write_text(GROUP_PROTO)
    logdir = tmp_path / "logs"
    logdir.mkdir()
    _write(logdir, "t", [_frame(4, [0, 0], Inner(x="hello").SerializeToString())])
    lines = _lines(logdir, "t", registry_from_dir(schemas))
    assert lines[0]["value"] == _json(Inner(x="hello")) == {"x": "hello"} and lines[0]["valueSchemaId"] == 4


ANY_PROTO = """syntax = "proto3";
package p;

import "google/protobuf/any.proto";

message W {
  google.protobuf.Any a = 1;
  string n = 2;
  repeated google.protobuf.Any more = 3;
}

message P {
  string s = 1;
}
"""


def test_any_fields_unpack_the_schemas_own_types_and_well_known_ones(tmp_path):
    """review14 R14-11: an Any that packs a message of the schema (or a well-known type) is shown as
    the runtime's JSON conversion shows it, {"@type": ..., fields}; an Any of a type nobody knows
    makes the runtime raise, so that value stays as SPEC §3 shows bytes."""
    from google.protobuf import any_pb2, json_format, timestamp_pb2

    pool = descriptor_pool.DescriptorPool()
    for module in (any_pb2, timestamp_pb2):
        proto = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(proto)
        pool.Add(proto)
    f = descriptor_pb2.FileDescriptorProto(name="w.proto", package="p", syntax="proto3",
                                           dependency=["google/protobuf/any.proto"])
    f.message_type.add(name="W", field=[_field("a", 1, F.TYPE_MESSAGE, type_name=".google.protobuf.Any"),
                                        _field("n", 2, F.TYPE_STRING),
                                        _field("more", 3, F.TYPE_MESSAGE, F.LABEL_REPEATED, ".google.protobuf.Any")])
    f.message_type.add(name="P", field=[_field("s", 1, F.TYPE_STRING)])
    pool.Add(f)
    W, P = (message_factory.GetMessageClass(pool.FindMessageTypeByName(n)) for n in ("p.W", "p.P"))
    Timestamp = message_factory.GetMessageClass(pool.FindMessageTypeByName("google.protobuf.Timestamp"))
    one, two, unknown = W(n="one"), W(n="two"), W(n="three")
    one.a.Pack(P(s="x"))
    one.more.add().Pack(P(s="y"))
    two.a.Pack(Timestamp(seconds=5))
    unknown.a.type_url, unknown.a.value = "type.googleapis.com/p.Nope", b"\x0a\x01z"
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "3.proto").write_text(ANY_PROTO)
    logdir = tmp_path / "logs"
    logdir.mkdir()
    values = [_frame(3, [0], m.SerializeToString()) for m in (one, two, unknown)]
    _write(logdir, "t", values)
    lines = _lines(logdir, "t", registry_from_dir(schemas))

    def judged(m):
        return json_format.MessageToDict(m, always_print_fields_with_no_presence=True,
                                         preserving_proto_field_name=True, descriptor_pool=pool)

    assert [x["value"] for x in lines[:2]] == [judged(one), judged(two)]
    assert lines[0]["value"]["a"] == {"@type": "type.googleapis.com/p.P", "s": "x"}
    assert lines[1]["value"]["a"] == {"@type": "type.googleapis.com/google.protobuf.Timestamp",
                                      "value": "1970-01-01T00:00:05Z"}
    with pytest.raises(TypeError):
        judged(unknown)
    assert [x.get("valueSchemaId") for x in lines] == [3, 3, None]
    assert lines[2]["value"] == orjson.loads(render_value(values[2], "auto"))


BUILTIN_IMPORTS_PROTO = """syntax = "proto3";
package p;

import "confluent/meta.proto";
import "confluent/type/decimal.proto";
import "google/type/money.proto";
import "google/type/date.proto";
import "google/type/datetime.proto";
import "google/type/dayofweek.proto";
import "google/type/phone_number.proto";

message V {
  option (confluent.message_meta) = { doc: "a value", params: [{ key: "k" value: "v" }] };
  string name = 1 [(confluent.field_meta) = { tags: ["PII"] }];
  google.type.Money price = 2;
  google.type.Date day = 3;
  google.type.DayOfWeek dow = 4;
  confluent.type.Decimal amount = 5;
  google.type.DateTime at = 6;
  google.type.PhoneNumber phone = 7;
}
"""


def _builtin_classes():
    """V and the registry's built-in types it uses, written here from their documented fields."""
    from google.protobuf import duration_pb2

    pool = descriptor_pool.DescriptorPool()
    duration = descriptor_pb2.FileDescriptorProto()
    duration_pb2.DESCRIPTOR.CopyToProto(duration)
    pool.Add(duration)
    gt = descriptor_pb2.FileDescriptorProto(name="gt.proto", package="google.type", syntax="proto3",
                                            dependency=["google/protobuf/duration.proto"])
    gt.message_type.add(name="Money", field=[_field("currency_code", 1, F.TYPE_STRING), _field("units", 2, F.TYPE_INT64),
                                             _field("nanos", 3, F.TYPE_INT32)])
    gt.message_type.add(name="Date", field=[_field(n, i, F.TYPE_INT32) for i, n in enumerate(["year", "month", "day"], 1)])
    dt = gt.message_type.add(name="DateTime", field=[
        _field(n, i, F.TYPE_INT32) for i, n in enumerate(["year", "month", "day", "hours", "minutes", "seconds", "nanos"], 1)])
    dt.oneof_decl.add(name="time_offset")
    dt.field.extend([_field("utc_offset", 8, F.TYPE_MESSAGE, type_name=".google.protobuf.Duration", oneof=0),
                     _field("time_zone", 9, F.TYPE_MESSAGE, type_name=".google.type.TimeZone", oneof=0)])
    gt.message_type.add(name="TimeZone", field=[_field("id", 1, F.TYPE_STRING), _field("version", 2, F.TYPE_STRING)])
    phone = gt.message_type.add(name="PhoneNumber")
    phone.nested_type.add(name="ShortCode", field=[_field("region_code", 1, F.TYPE_STRING), _field("number", 2, F.TYPE_STRING)])
    phone.oneof_decl.add(name="kind")
    phone.field.extend([_field("e164_number", 1, F.TYPE_STRING, oneof=0),
                        _field("short_code", 2, F.TYPE_MESSAGE, type_name=".google.type.PhoneNumber.ShortCode", oneof=0),
                        _field("extension", 3, F.TYPE_STRING)])
    dow = gt.enum_type.add(name="DayOfWeek")
    for i, n in enumerate(["DAY_OF_WEEK_UNSPECIFIED", "MONDAY", "TUESDAY", "WEDNESDAY", "THURSDAY", "FRIDAY", "SATURDAY", "SUNDAY"]):
        dow.value.add(name=n, number=i)
    pool.Add(gt)
    cd = descriptor_pb2.FileDescriptorProto(name="cd.proto", package="confluent.type", syntax="proto3")
    cd.message_type.add(name="Decimal", field=[_field("value", 1, F.TYPE_BYTES), _field("precision", 2, F.TYPE_UINT32),
                                               _field("scale", 3, F.TYPE_INT32)])
    pool.Add(cd)
    f = descriptor_pb2.FileDescriptorProto(name="v.proto", package="p", syntax="proto3", dependency=["gt.proto", "cd.proto"])
    f.message_type.add(name="V", field=[
        _field("name", 1, F.TYPE_STRING), _field("price", 2, F.TYPE_MESSAGE, type_name=".google.type.Money"),
        _field("day", 3, F.TYPE_MESSAGE, type_name=".google.type.Date"),
        _field("dow", 4, F.TYPE_ENUM, type_name=".google.type.DayOfWeek"),
        _field("amount", 5, F.TYPE_MESSAGE, type_name=".confluent.type.Decimal"),
        _field("at", 6, F.TYPE_MESSAGE, type_name=".google.type.DateTime"),
        _field("phone", 7, F.TYPE_MESSAGE, type_name=".google.type.PhoneNumber")])
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("p.V"))


def test_imports_the_registry_resolves_itself(tmp_path):
    """review14 R14-7: a schema importing confluent/meta.proto (data-contract tags),
    confluent/type/decimal.proto or google/type/*.proto with no references compiles, as the registry
    resolves those files itself, and its values decode."""
    V = _builtin_classes()
    values = [V(name="bob", price={"currency_code": "EUR", "units": -(2**40), "nanos": -5}, day={"year": 2026, "month": 11, "day": 27},
                dow=5, amount={"value": b"\x01\x00", "precision": 5, "scale": 2},
                at={"year": 2026, "hours": 16, "utc_offset": {"seconds": -14400}},
                phone={"short_code": {"region_code": "BE", "number": "1234"}, "extension": "7"}),
              V(name="ann", dow=9, at={"time_zone": {"id": "Europe/Brussels"}}, phone={"e164_number": "+3225550100"}),
              V()]
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "21.proto").write_text(BUILTIN_IMPORTS_PROTO)
    logdir = tmp_path / "logs"
    logdir.mkdir()
    _write(logdir, "t", [_frame(21, [0], m.SerializeToString()) for m in values])
    lines = _lines(logdir, "t", registry_from_dir(schemas))
    assert [x["value"] for x in lines] == [_json(m) for m in values]
    assert [x.get("valueSchemaId") for x in lines] == [21, 21, 21]
    assert lines[0]["value"]["price"] == {"currency_code": "EUR", "units": str(-(2**40)), "nanos": -5}
    assert lines[0]["value"]["dow"] == "FRIDAY" and lines[0]["value"]["at"]["utc_offset"] == "-14400s"


MONEY_PROTO = """syntax = "proto3";
package common;

message Money {
  string currency = 1;
  int64 units = 2;
}

message Other {
  bool b = 1;
}
"""


def test_a_public_import_wrapper_numbers_the_imported_files_messages(tmp_path):
    """review14 R14-12: a schema that only says ``import public "common/money.proto";`` has the
    messages of that file (Confluent's effectiveFile); one that also imports another file privately
    is no wrapper and defines no message (its values stay bytes)."""
    f = descriptor_pb2.FileDescriptorProto(name="m.proto", package="common", syntax="proto3")
    f.message_type.add(name="Money", field=[_field("currency", 1, F.TYPE_STRING), _field("units", 2, F.TYPE_INT64)])
    f.message_type.add(name="Other", field=[_field("b", 1, F.TYPE_BOOL)])
    get = _pool_classes(f)
    Money, Other = get("common.Money"), get("common.Other")
    logdir = tmp_path / "logs"
    logdir.mkdir()

    def key(subject):
        return orjson.dumps({"keytype": "SCHEMA", "subject": subject, "version": 1, "magic": 1})

    def value(subject, schema_id, text, references=()):
        return orjson.dumps({"subject": subject, "version": 1, "id": schema_id, "schema": text, "schemaType": "PROTOBUF",
                             "references": [{"name": n, "subject": s, "version": 1} for n, s in references],
                             "deleted": False})

    wrapper = 'syntax = "proto3";\nimport public "common/money.proto";\n'
    not_wrapper = wrapper + 'import "google/protobuf/empty.proto";\n'
    _write(logdir, "_schemas", [value("money", 1, MONEY_PROTO), value("w-value", 2, wrapper, [("common/money.proto", "money")]),
                                value("x-value", 3, not_wrapper, [("common/money.proto", "money")])],
           [key("money"), key("w-value"), key("x-value")])
    messages = [(Money(currency="EUR", units=5), [0]), (Other(b=True), [1])]
    values = [_frame(2, indexes, m.SerializeToString()) for m, indexes in messages]
    values.append(_frame(3, [0], Money(currency="EUR").SerializeToString()))
    _write(logdir, "t", values)
    from kafkafs.storage.schemas import load_registry

    lines = _lines(logdir, "t", load_registry(logdir))
    assert [x["value"] for x in lines[:2]] == [_json(m) for m, _ in messages]
    assert lines[0]["value"] == {"currency": "EUR", "units": "5"}
    assert [x.get("valueSchemaId") for x in lines] == [2, 2, None]
    assert lines[2]["value"] == orjson.loads(render_value(values[2], "auto"))
