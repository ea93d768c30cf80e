"""storage/protoc.py: .proto text compiled by the protoc that grpcio-tools carries."""

from __future__ import annotations

import pytest

pytest.importorskip("grpc_tools", reason="grpcio-tools (protoc) is not installed")

from google.protobuf import descriptor_pb2  # noqa: E402

from kafkafs.storage.protoc import compile_protos, protoc_available  # noqa: E402


def test_a_schema_with_imports_compiles_into_one_descriptor_set():
    assert protoc_available()
    files = {
        "shop/money.proto": 'syntax = "proto3"; package shop; message Money { int64 units = 1; }',
        "1.proto": 'syntax = "proto3"; import "shop/money.proto"; import "google/protobuf/timestamp.proto";\n'
                   "message Order { shop.Money price = 1; google.protobuf.Timestamp at = 2; }",
    }
    out = descriptor_pb2.FileDescriptorSet.FromString(compile_protos(files, "1.proto"))
    names = [f.name for f in out.file]
    assert names[-1] == "1.proto" and {"shop/money.proto", "google/protobuf/timestamp.proto"} <= set(names)
    assert [m.name for m in out.file[-1].message_type] == ["Order"]


def test_what_does_not_compile_says_why():
    with pytest.raises(ValueError, match="protoc: .*strin"):
        compile_protos({"2.proto": 'syntax = "proto3"; message A { strin x = 1; }'}, "2.proto")
    with pytest.raises(ValueError, match="not a .proto import name"):
        compile_protos({"../escape.proto": 'syntax = "proto3";'}, "../escape.proto")
