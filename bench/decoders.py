"""How fast decoded partitions render (SPEC §8), in-process: records/s of the JSON view.

* ``avro``: mixed Avro records behind a Schema Registry (three schemas: an order with a union, an
  enum, an array, a map and bytes; a click event; a small key record), keys and values framed, some
  records not framed or with unknown ids (generic rendering), 500 records a batch;
* ``protobuf``: Protobuf values behind a Schema Registry (an order like the Avro one: a nested message,
  an enum, a repeated field, a map, a oneof, bytes; a click; message indexes ``[0]`` and ``[1]``), the
  ``.proto`` compiled by protoc from grpcio-tools, keys as plain strings;
* ``offsets``: ``__consumer_offsets``-like offset commits (group, topic, partition keys, v3 values);
* ``metadata``: ``__cluster_metadata``-like PartitionRecord/ConfigRecord/NoOp values;
* ``generic``: the same Avro batches without a registry (the generic fast path), for the ratio.

Each row renders already-decoded batches (``render_batch_jsonl(..., decoder=...)``) and whole raw
batches (``render_raw_jsonl``, which also checks the CRC and decodes); the best of ``--repeat`` runs,
in CPU seconds of this process (records per CPU second).

    .venv/bin/python bench/decoders.py [--records 200000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import random
import struct
import sys
import time
from io import BytesIO
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fastavro  # noqa: E402

from kafkafs.format.batch import decode_batch, encode_batch  # noqa: E402
from kafkafs.format.decoders import SchemaRegistry, decoder_for  # noqa: E402
from kafkafs.format.decoders.internal import metadata_frame  # noqa: E402
from kafkafs.format.decoders.schema import message  # noqa: E402
from kafkafs.format.jsonview import render_batch_jsonl, render_raw_jsonl  # noqa: E402

ORDER = {"type": "record", "name": "Order", "namespace": "bench", "fields": [
    {"name": "id", "type": "long"}, {"name": "customer", "type": "string"}, {"name": "amount", "type": "double"},
    {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SHIPPED"]}},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "items", "type": {"type": "array", "items": "int"}},
    {"name": "attrs", "type": {"type": "map", "values": "string"}},
    {"name": "sig", "type": "bytes"},
]}
CLICK = {"type": "record", "name": "Click", "namespace": "bench", "fields": [
    {"name": "x", "type": "int"}, {"name": "y", "type": "int"}, {"name": "page", "type": "string"},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
KEY = {"type": "record", "name": "Key", "namespace": "bench", "fields": [{"name": "customer", "type": "string"}]}
PER_BATCH = 500


def _avro(parsed, datum) -> bytes:
    out = BytesIO()
    fastavro.schemaless_writer(out, parsed, datum)
    return out.getvalue()


def _frame(schema_id: int, payload: bytes) -> bytes:
    return b"\0" + struct.pack(">I", schema_id) + payload


def avro_records(n: int) -> list:
    rng = random.Random(10)
    order, click, key = (fastavro.parse_schema(s) for s in (ORDER, CLICK, KEY))
    out = []
    for i in range(n):
        kind = i % 10
        k = _frame(3, _avro(key, {"customer": f"c-{rng.randrange(100000):05d}"}))
        if kind < 6:
            v = _frame(1, _avro(order, {
                "id": i, "customer": f"c-{rng.randrange(100000):05d}", "amount": rng.random() * 1000,
                "status": ["NEW", "PAID", "SHIPPED"][i % 3], "note": None if i % 2 else "gift wrap, «ü»",
                "items": [rng.randrange(50) for _ in range(i % 4)], "attrs": {"channel": "web"} if i % 3 else {},
                "sig": rng.randbytes(8)}))
        elif kind < 9:
            v = _frame(2, _avro(click, {"x": rng.randrange(2000), "y": rng.randrange(2000), "page": f"/p/{i}",
                                        "ts": 1763700000000 + i}))
        elif i % 20 == 9:
            v, k = b'{"plain":"json, not framed"}', None
        else:
            v = _frame(77, b"unknown id")
        out.append((1763700000000 + i, k, v, ()))
    return out


PROTO = """syntax = "proto3";
package bench;
message Order {
  message Money { string currency = 1; int64 units = 2; }
  enum Status { NEW = 0; PAID = 1; SHIPPED = 2; }
  int64 id = 1;
  string customer = 2;
  double amount = 3;
  Status status = 4;
  repeated int32 items = 5;
  map<string, string> attrs = 6;
  oneof note { string text = 7; bytes sig = 8; }
  Money price = 9;
}
message Click { int32 x = 1; int32 y = 2; string page = 3; int64 ts = 4; }
"""


def protobuf_registry():
    from kafkafs.format.decoders.protobuf import ProtobufSchema
    from kafkafs.storage.protoc import compile_protos

    registry = SchemaRegistry(compile_protos)
    registry.add(4, PROTO, "PROTOBUF")
    schema = ProtobufSchema(compile_protos({"4.proto": PROTO}, "4.proto"), "4.proto")
    return registry, schema.message_class([0]), schema.message_class([1])


def protobuf_records(n: int) -> list:
    _registry, order, click = protobuf_registry()
    rng = random.Random(11)
    out = []
    for i in range(n):
        if i % 10 < 7:
            m = order(id=i, customer=f"c-{rng.randrange(100000):05d}", amount=rng.random() * 1000, status=i % 3,
                      items=[rng.randrange(50) for _ in range(i % 4)], attrs={"channel": "web"} if i % 3 else {},
                      price={"currency": "EUR", "units": i})
            if i % 2:
                m.text = "gift wrap, «ü»"
            else:
                m.sig = rng.randbytes(8)
            v = b"\0" + struct.pack(">I", 4) + b"\0" + m.SerializeToString()
        else:
            m = click(x=rng.randrange(2000), y=rng.randrange(2000), page=f"/p/{i}", ts=1763700000000 + i)
            v = b"\0" + struct.pack(">I", 4) + b"\x02\x02" + m.SerializeToString()
        out.append((1763700000000 + i, f"c-{i % 1000}".encode(), v, ()))
    return out


def offsets_records(n: int) -> list:
    key_m, value_m = message("OffsetCommitKey"), message("OffsetCommitValue")
    out = []
    for i in range(n):
        key = struct.pack(">h", 1) + key_m.write({"group": f"group-{i % 7}", "topic": "orders", "partition": i % 12}, 0)
        value = struct.pack(">h", 3) + value_m.write(
            {"offset": i, "leaderEpoch": 3, "metadata": "", "commitTimestamp": 1763700000000 + i}, 3)
        out.append((1763700000000 + i, key, value, ()))
    return out


def metadata_records(n: int) -> list:
    import base64

    out = []
    for i in range(n):
        if i % 3 == 0:
            v = metadata_frame("PARTITION_RECORD", 1, {
                "partitionId": i % 50, "topicId": base64.urlsafe_b64encode(bytes(16)).rstrip(b"=").decode(),
                "replicas": [1, 2, 3], "isr": [1, 2, 3], "removingReplicas": [], "addingReplicas": [], "leader": 1,
                "leaderEpoch": 0, "partitionEpoch": 0, "directories": []})
        elif i % 3 == 1:
            v = metadata_frame("CONFIG_RECORD", 0, {"resourceType": 2, "resourceName": "orders",
                                                    "name": "retention.ms", "value": str(i)})
        else:
            v = metadata_frame("NO_OP_RECORD", 0, {})
        out.append((1763700000000 + i, None, v, ()))
    return out


def _batches(records: list) -> list[bytes]:
    return [encode_batch(records[i:i + PER_BATCH], base_offset=i) for i in range(0, len(records), PER_BATCH)]


def _time(fn, repeat: int) -> float:
    """The best CPU time of ``repeat`` runs (this process's: on a loaded machine, wall time mostly
    measures the others)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    registry = SchemaRegistry()
    for schema_id, schema in ((1, ORDER), (2, CLICK), (3, KEY)):
        import json

        registry.add(schema_id, json.dumps(schema))
    cases = [
        ("avro (registry)", "orders", avro_records, registry),
        ("protobuf (registry)", "orders", protobuf_records, protobuf_registry()[0]),
        ("generic (same bytes, no registry)", "orders", avro_records, None),
        ("__consumer_offsets", "__consumer_offsets", offsets_records, None),
        ("__cluster_metadata", "__cluster_metadata", metadata_records, None),
    ]
    print(f"{args.records} records, {PER_BATCH} a batch, best of {args.repeat}, records per CPU second")
    print(f"{'case':36} {'decoded batches':>18} {'raw batches':>18} {'MB/s out':>9}")
    for name, topic, make, reg in cases:
        raws = _batches(make(args.records))
        decoded = [decode_batch(raw) for raw in raws]
        decoder = decoder_for(topic, reg)
        out_size = sum(len(render_batch_jsonl(topic, 0, b, decoder=decoder)) for b in decoded)
        # the loop's values bound as defaults: each lambda is timed within its own iteration anyway
        t1 = _time(lambda topic=topic, decoder=decoder, decoded=decoded:
                   [render_batch_jsonl(topic, 0, b, decoder=decoder) for b in decoded], args.repeat)
        t2 = _time(lambda topic=topic, decoder=decoder, raws=raws:
                   [render_raw_jsonl(topic, 0, raw, decoder=decoder) for raw in raws], args.repeat)
        print(f"{name:36} {args.records / t1:>14,.0f} r/s {args.records / t2:>14,.0f} r/s {out_size / t2 / 1e6:>9.1f}")


if __name__ == "__main__":
    main()
