"""The ``.proto`` files a Schema Registry resolves by itself (:mod:`kafkafs.storage.registry_protos`):
every one compiles alone with protoc and declares the types the registry's own files do (names, field
numbers and types, as documented; the values' bytes and JSON depend on nothing else)."""

from __future__ import annotations

import pytest

pytest.importorskip("grpc_tools", reason="grpcio-tools (protoc) is not installed")

from google.protobuf import descriptor_pb2  # noqa: E402

from kafkafs.storage.protoc import compile_protos  # noqa: E402
from kafkafs.storage.registry_protos import BUILTIN_PROTOS  # noqa: E402

#: the registry's built-in locations (Confluent ProtobufSchema's *_LOCATION constants) besides google/protobuf/*
REGISTRY_LOCATIONS = {
    "confluent/meta.proto", "confluent/type/decimal.proto", "confluent/type/variant.proto",
    *(f"google/type/{n}.proto" for n in ("calendar_period", "color", "date", "datetime", "dayofweek", "decimal",
                                          "expr", "fraction", "interval", "latlng", "money", "month", "phone_number",
                                          "postal_address", "quaternion", "timeofday")),
}

F = descriptor_pb2.FieldDescriptorProto
#: a few types field by field: (file, message) -> [(name, number, type)]
EXPECTED = {
    ("google/type/money.proto", "Money"): [("currency_code", 1, F.TYPE_STRING), ("units", 2, F.TYPE_INT64),
                                          ("nanos", 3, F.TYPE_INT32)],
    ("google/type/date.proto", "Date"): [("year", 1, F.TYPE_INT32), ("month", 2, F.TYPE_INT32), ("day", 3, F.TYPE_INT32)],
    ("google/type/latlng.proto", "LatLng"): [("latitude", 1, F.TYPE_DOUBLE), ("longitude", 2, F.TYPE_DOUBLE)],
    ("confluent/type/decimal.proto", "Decimal"): [("value", 1, F.TYPE_BYTES), ("precision", 2, F.TYPE_UINT32),
                                                  ("scale", 3, F.TYPE_INT32)],
    ("google/type/color.proto", "Color"): [("red", 1, F.TYPE_FLOAT), ("green", 2, F.TYPE_FLOAT), ("blue", 3, F.TYPE_FLOAT),
                                          ("alpha", 4, F.TYPE_MESSAGE)],
}


def test_every_location_the_registry_resolves_is_there_and_compiles():
    assert set(BUILTIN_PROTOS) == REGISTRY_LOCATIONS
    files = {}
    for name in BUILTIN_PROTOS:
        compiled = descriptor_pb2.FileDescriptorSet.FromString(compile_protos({}, name))
        files[name] = [f for f in compiled.file if f.name == name][0]
        expected_package = "google.type" if name.startswith("google/") else name.rsplit("/", 1)[0].replace("/", ".")
        assert files[name].package == expected_package
        assert files[name].message_type or files[name].enum_type
    for (name, message), fields in EXPECTED.items():
        desc = next(m for m in files[name].message_type if m.name == message)
        assert [(f.name, f.number, f.type) for f in desc.field] == fields
    meta = files["confluent/meta.proto"]
    assert {(e.extendee, e.name, e.number) for e in meta.extension} == {
        (f".google.protobuf.{o}Options", f"{n}_meta", 1088)
        for o, n in (("File", "file"), ("Message", "message"), ("Field", "field"), ("Enum", "enum"),
                     ("EnumValue", "enum_value"))}
    month = files["google/type/month.proto"].enum_type[0]
    assert (month.name, month.value[0].name, month.value[12].name, month.value[12].number) == (
        "Month", "MONTH_UNSPECIFIED", "DECEMBER", 12)


def test_a_schemas_own_file_of_the_same_name_wins():
    mine = 'syntax = "proto3";\npackage google.type;\nmessage Money {\n  string mine = 1;\n}\n'
    compiled = descriptor_pb2.FileDescriptorSet.FromString(compile_protos({"google/type/money.proto": mine},
                                                                          "google/type/money.proto"))
    assert [f.name for f in compiled.file[-1].message_type[0].field] == ["mine"]
