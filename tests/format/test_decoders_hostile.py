"""Hostile Schema Registry framed records (review10 R10-6, R10-7; SPEC §8 "bytes that do not decode under
their schema stay as section 3 shows them; nothing fails", §3 damage stays local): a record that would
have fastavro work without bound (2^40 items that take no bytes: a hang with memory growing ~50 MB/s)
or recurse past the C stack (a 5 KB linked list 5,000 deep: SIGSEGV) shows as its bytes, fast, and the
other records of its batch decode. Each hostile case renders in a child process with a time and memory
limit, so a hang or a segfault fails the test instead of stopping pytest.

Avro's binary encoding (the spec's "Binary Encoding"): long/int are zig-zag varints; an array or map is
blocks of (count, items), a negative count followed by the block's byte size, a 0 count ends it; a
union is its branch index then the value; a record is its fields in order; null takes no bytes."""

from __future__ import annotations

import base64
import json
import os
import random
import struct
import subprocess
import sys
from io import BytesIO
from pathlib import Path

import fastavro
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkafs.format.batch import decode_batch, encode_batch
from kafkafs.format.decoders import decoder_for
from kafkafs.format.decoders.registry import SchemaRegistry
from kafkafs.format.decoders.view import generic_json
from kafkafs.format.jsonview import render_batch_jsonl
from tests.kafka_layout import uvarint
from tests.kafka_layout import varint as zz  # Avro writes int and long as Kafka its varints: zig-zag

ROOT = Path(__file__).resolve().parents[2]

NULLS = {"type": "array", "items": "null"}
EMPTIES = {"type": "array", "items": {"type": "record", "name": "Empty", "fields": []}}
FIXED0 = {"type": "record", "name": "F", "fields": [
    {"name": "id", "type": "long"},
    {"name": "zs", "type": {"type": "array", "items": {"type": "fixed", "name": "Z", "size": 0}}}]}
LIST = {"type": "record", "name": "N", "fields": [{"name": "next", "type": ["null", "N"]}]}
TREE = {"type": "record", "name": "T", "namespace": "t", "fields": [
    {"name": "v", "type": "int"}, {"name": "kids", "type": {"type": "array", "items": "T"}},
    {"name": "by", "type": {"type": "map", "values": ["null", "T"]}}]}
VALUE = ["null", "boolean", "long", "double", "string",  # a JSON-like value: the usual recursive Avro schema
         {"type": "array", "items": "Value"}, {"type": "map", "values": "Value"}]
VALUE_SCHEMA = {"type": "record", "name": "Value", "fields": [{"name": "v", "type": VALUE}]}
SELF = {"type": "record", "name": "A", "fields": [{"name": "a", "type": "A"}]}  # no finite datum
INTS = {"type": "array", "items": "int"}
ORDER = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"}, {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "attrs", "type": {"type": "map", "values": "long"}}, {"name": "note", "type": ["null", "string"]},
    {"name": "f", "type": "float"}, {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}}]}


def avro(schema: object, datum: object) -> bytes:
    out = BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), datum)
    return out.getvalue()


def framed(schema_id: int, payload: bytes) -> bytes:
    return b"\x00" + struct.pack(">I", schema_id) + payload


# A child process: renders the framed values given (base64) under the schemas given (id -> [type, text])
# and prints each line; a hang is ended by the parent's timeout, memory by RLIMIT_AS.
CHILD = r"""
import base64, json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
from kafkafs.format.batch import decode_batch, encode_batch
from kafkafs.format.decoders import decoder_for
from kafkafs.format.decoders.registry import SchemaRegistry
from kafkafs.format.jsonview import render_batch_jsonl
job = json.loads(sys.stdin.read())
compiler = None
if any(t == "PROTOBUF" for t, _ in job["schemas"].values()):
    from kafkafs.storage.protoc import compile_protos as compiler
registry = SchemaRegistry(compiler)
for sid, (kind, text) in job["schemas"].items():
    registry.add(int(sid), text, kind)
values = [base64.b64decode(v) for v in job["values"]]
batch = decode_batch(encode_batch([(i, None, v, ()) for i, v in enumerate(values)]))
sys.stdout.buffer.write(render_batch_jsonl("t", 0, batch, decoder=decoder_for("t", registry)))
"""


def render_in_child(schemas: dict[int, tuple[str, object]], values: list[bytes], timeout: float = 30) -> list[dict]:
    job = {"schemas": {str(k): [kind, text if isinstance(text, str) else json.dumps(text)]
                       for k, (kind, text) in schemas.items()},
           "values": [base64.b64encode(v).decode() for v in values]}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    try:
        done = subprocess.run([sys.executable, "-c", CHILD], input=json.dumps(job).encode(), capture_output=True,
                              timeout=timeout, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"rendering did not end in {timeout} s")
    assert done.returncode == 0, f"child exit {done.returncode}: {done.stderr.decode()[-500:]}"
    return [orjson.loads(line) for line in done.stdout.splitlines()]


def shown_as_bytes(obj: dict, value: bytes) -> bool:
    return "valueSchemaId" not in obj and orjson.dumps(obj["value"]) == generic_json(value)


HOSTILE = {
    "array<null> x 2^40 (R10-6)": (NULLS, zz(2**40) + zz(0)),
    "array<record without fields> x 2^40": (EMPTIES, zz(2**40) + zz(0)),
    "fixed(0) items, negative block count -2^40": (FIXED0, zz(7) + zz(-(2**40)) + zz(0) + zz(0)),
    "array<null> in 1,024 blocks of 2^20": (NULLS, (zz(2**20) * 2**10) + zz(0)),
    "linked list 5,000 deep, 5 KB (R10-7)": (LIST, b"\x02" * 5000 + b"\x00"),
    "tree 6,000 deep": (TREE, (zz(1) + zz(1)) * 6000 + (zz(1) + zz(0) + zz(0)) + (zz(0) + zz(0)) * 6000),
    "JSON-like value 4,000 arrays deep": (VALUE_SCHEMA, (zz(5) + zz(1)) * 4000 + zz(0) + zz(0) * 4000),
    "array<int> counts of 2^40 (reads past the datum)": (INTS, zz(2**40) + zz(1) + b"\x02" * 40),
}


def test_hostile_avro_records_show_as_bytes_and_their_batch_decodes():
    """Every HOSTILE case in one batch, a good record before and after each run of copies. Failed before
    (main 9b1c0fc): the child ended with SIGSEGV (-11) on the deep cases; alone, the 2^40 cases hung
    (timeout, memory growing) and 1,000 array<int> records with 2^40 counts in one batch took 28 s."""
    good_schema, good = ORDER, {"id": 1, "tags": ["a"], "attrs": {"k": 2}, "note": None, "f": 1.5, "e": "B"}
    good_value = framed(99, avro(good_schema, good))
    schemas: dict[int, tuple[str, object]] = {99: ("AVRO", good_schema)}
    values, expected = [good_value], [None]
    for n, (case, (schema, payload)) in enumerate(HOSTILE.items(), 1):
        schemas[n] = ("AVRO", schema)
        copies = 1000 if schema is INTS else 5  # the one that read on into the next records: many of them
        values += [framed(n, payload)] * copies + [good_value]
        expected += [case] * copies + [None]
    lines = render_in_child(schemas, values)
    assert len(lines) == len(values)
    for line, value, case in zip(lines, values, expected, strict=True):
        if case is None:
            assert line["value"] == good and line["valueSchemaId"] == 99
        else:
            assert shown_as_bytes(line, value), case


def test_a_record_holding_itself_decodes_nothing_and_crashes_nothing():
    """A record that holds itself through record fields alone has no finite datum; fastavro accepts the
    schema and recursed without end on ANY bytes (SIGSEGV, even on an empty datum): its values stay bytes."""
    values = [framed(1, b""), framed(1, b"\x00\x02"), framed(2, avro(INTS, [1, 2]))]
    lines = render_in_child({1: ("AVRO", SELF), 2: ("AVRO", INTS)}, values)
    assert shown_as_bytes(lines[0], values[0]) and shown_as_bytes(lines[1], values[1])
    assert lines[2]["value"] == [1, 2]
    from kafkafs.format.decoders.avro_bounds import datum_bounds

    with pytest.raises(ValueError, match="no datum"):
        datum_bounds(fastavro.parse_schema(SELF), {})
    mutual = {"type": "record", "name": "B", "fields": [{"name": "c", "type": {
        "type": "record", "name": "C", "fields": [{"name": "x", "type": "int"}, {"name": "b", "type": "B"}]}}]}
    with pytest.raises(ValueError, match="no datum"):
        datum_bounds(fastavro.parse_schema(mutual), {})


def test_protobuf_and_json_schema_deep_or_many_stay_bounded():
    """The same shapes under Protobuf (the runtime refuses nesting past 100: DecodeError) and JSON Schema
    (nesting past 512 is not embeddable JSON; orjson refuses past 1,024): bytes, fast, no crash. Protobuf
    has no counts in its wire format: 100,000 empty repeated messages are 200 KB and decode in linear time."""
    pytest.importorskip("grpc_tools")
    proto = 'syntax = "proto3"; message N { N next = 1; repeated E es = 2; } message E {}'
    deep = b""
    for _ in range(10_000):  # 10,000 nested messages, field 1 (tag 0x0a), length-delimited
        deep = b"\x0a" + uvarint(len(deep)) + deep
    values = [framed(1, b"\x00" + deep), framed(1, b"\x00" + b"\x12\x00" * 100_000),
              framed(2, b"[" * 100_000 + b"]" * 100_000), framed(2, b'{"a": [1, 2]}')]
    lines = render_in_child({1: ("PROTOBUF", proto), 2: ("JSON", "{}")}, values, timeout=60)
    assert shown_as_bytes(lines[0], values[0])
    assert lines[1]["valueSchemaId"] == 1 and len(lines[1]["value"]["es"]) == 100_000
    assert shown_as_bytes(lines[2], values[2])
    assert lines[3]["value"] == {"a": [1, 2]} and lines[3]["valueSchemaId"] == 2


def _render(registry: SchemaRegistry, values: list[bytes]) -> list[dict]:
    batch = decode_batch(encode_batch([(i, None, v, ()) for i, v in enumerate(values)]))
    return [orjson.loads(line) for line in render_batch_jsonl("t", 0, batch, decoder=decoder_for("t", registry))
            .splitlines()]


def _linked(depth: int) -> dict | None:
    datum = None
    for _ in range(depth):
        datum = {"next": datum}
    return datum


def test_the_limits_are_where_they_say():
    """MAX_NESTING is orjson's own limit (it writes 254 nested containers and refuses 255), so no datum
    that decoded before the bound is shown as bytes now; MAX_EMPTY_ITEMS zero-width items decode, one
    more does not. Deep lists are long enough to be walked (not waved through by the length bound)."""
    from kafkafs.format.decoders.avro_bounds import MAX_EMPTY_ITEMS, MAX_NESTING
    nest: list = []
    for _ in range(MAX_NESTING - 1):
        nest = [nest]
    orjson.dumps(nest)
    with pytest.raises(orjson.JSONEncodeError):
        orjson.dumps([nest])
    registry = SchemaRegistry()
    registry.add(1, json.dumps(LIST))
    registry.add(2, json.dumps(NULLS))
    values = [framed(1, avro(LIST, _linked(MAX_NESTING))), framed(1, avro(LIST, _linked(MAX_NESTING + 1))),
              framed(2, zz(MAX_EMPTY_ITEMS) + zz(0)), framed(2, zz(MAX_EMPTY_ITEMS) + zz(1) + zz(0)),
              framed(2, zz(-5000) + zz(0) + zz(5000) + zz(0))]
    deep, deeper, most, more, blocks = _render(registry, values)
    assert deep["value"] == _linked(MAX_NESTING) and deep["valueSchemaId"] == 1
    assert shown_as_bytes(deeper, values[1])
    assert most["value"] == [None] * MAX_EMPTY_ITEMS
    assert shown_as_bytes(more, values[3])
    assert blocks["value"] == [None] * MAX_EMPTY_ITEMS


def test_schemas_that_bound_themselves_are_not_walked():
    """No check for a schema whose datums its own bytes bound (no array of zero-width items, nesting
    bounded by the schema): the usual case pays nothing."""
    from kafkafs.format.decoders.avro_bounds import datum_bounds
    assert datum_bounds(fastavro.parse_schema(ORDER), {}) is None
    assert datum_bounds(fastavro.parse_schema({"type": "map", "values": "null"}), {}) is None  # keys take bytes
    assert datum_bounds(fastavro.parse_schema(NULLS), {}) is not None
    assert datum_bounds(fastavro.parse_schema(LIST), {}) is not None


def _tree(draw_depth: int, rng: random.Random) -> dict:
    kids = [] if draw_depth == 0 else [_tree(draw_depth - 1, rng) for _ in range(rng.randrange(3))]
    by = {} if draw_depth == 0 or rng.random() < 0.5 else {"x": None, "y": _tree(draw_depth - 1, rng)}
    return {"v": rng.randrange(-(2**31), 2**31), "kids": kids, "by": by}


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32), st.integers(0, 6))
def test_the_walk_agrees_with_fastavro_on_what_it_writes(seed, depth):
    """A datum fastavro writes (a tree with arrays, maps and unions; a linked list) walks to its end and
    decodes as fastavro reads it; the walk agrees with fastavro on its length (the datum followed by
    anything still fits: the walk stops where the datum does)."""
    from kafkafs.format.decoders.avro_bounds import datum_bounds

    rng = random.Random(seed)
    tree = _tree(depth, rng)
    payload = avro(TREE, tree)
    fits = datum_bounds(fastavro.parse_schema(TREE), {})
    assert fits is not None
    framed_tree = framed(1, payload)
    assert fits(framed_tree, 5) and fits(framed_tree + b"\x00\xff", 5)
    if len(payload) > 1:
        assert not fits(framed_tree[:-1], 5) or fastavro_fails(TREE, payload[:-1])
    registry = SchemaRegistry()
    registry.add(1, json.dumps(TREE))
    (line,) = _render(registry, [framed_tree])
    assert line["value"] == fastavro.schemaless_reader(BytesIO(payload), fastavro.parse_schema(TREE), None)


def fastavro_fails(schema: object, payload: bytes) -> bool:
    stream = BytesIO(payload)
    try:
        fastavro.schemaless_reader(stream, fastavro.parse_schema(schema), None)
    except Exception:  # noqa: BLE001 - any failure is one
        return True
    return stream.tell() != len(payload)


FUZZ_CHILD = r"""
import base64, json, random, resource, struct, sys, time
from io import BytesIO
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
import fastavro, orjson
from kafkafs.format.batch import decode_batch, encode_batch
from kafkafs.format.decoders import decoder_for
from kafkafs.format.decoders.registry import SchemaRegistry
from kafkafs.format.jsonview import render_batch_jsonl
job = json.loads(sys.stdin.read())
registry = SchemaRegistry()
for sid, text in job["schemas"].items():
    registry.add(int(sid), text)
decoder = decoder_for("t", registry)
rng = random.Random(job["seed"])
seeds = [base64.b64decode(s) for s in job["seeds"]]
from tests.kafka_layout import varint as zz
def mutate(data):
    data = bytearray(data)
    for _ in range(rng.randrange(1, 4)):
        what = rng.random()
        at = rng.randrange(len(data) + 1)
        if what < 0.3 and data:
            data[min(at, len(data) - 1)] = rng.randrange(256)
        elif what < 0.6:  # a huge count or length
            data[at:at] = zz(rng.choice([2**40, -(2**40), 2**62, 2**31, -1, 10**6]))
        elif what < 0.8:
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 8)))
        else:
            data[at:at] = bytes([rng.choice([2, 10])]) * rng.randrange(100, 3000)  # deep: union 1, count 5
    return bytes(data)
ids = [int(s) for s in job["schemas"]]
start, rendered = time.time(), 0
while time.time() - start < job["seconds"]:
    values = []
    for _ in range(50):
        sid = rng.choice(ids)
        base = rng.choice(seeds) if rng.random() < 0.7 else bytes(rng.randrange(256) for _ in range(rng.randrange(40)))
        values.append(b"\x00" + struct.pack(">I", sid) + mutate(base))
    batch = decode_batch(encode_batch([(i, None, v, ()) for i, v in enumerate(values)]))
    for line in render_batch_jsonl("t", 0, batch, decoder=decoder).splitlines():
        orjson.loads(line)
        rendered += 1
print(rendered)
"""


def test_random_framed_bytes_never_hang_or_crash():
    """Fuzz-ish: for a few seconds, valid datums of a few schemas (zero-width items, recursion, a usual
    record) mutated with random bytes, huge counts and deep runs render in a child process (time and
    memory limits): it ends, exit 0, every line JSON."""
    schemas = {1: NULLS, 2: EMPTIES, 3: FIXED0, 4: LIST, 5: TREE, 6: VALUE_SCHEMA, 7: ORDER}
    rng = random.Random(16)
    seeds = [avro(NULLS, [None] * 3), avro(EMPTIES, [{}, {}]), avro(FIXED0, {"id": 5, "zs": [b"", b""]}),
             avro(LIST, _linked(30)), avro(TREE, _tree(4, rng)),
             avro(VALUE_SCHEMA, {"v": {"a": {"v": [{"v": 1}, {"v": "x"}, {"v": None}, {"v": {"b": {"v": True}}}]}}}),
             avro(ORDER, {"id": 1, "tags": ["a", "b"], "attrs": {"k": 2}, "note": "n", "f": 1.5, "e": "A"})]
    job = {"schemas": {str(k): json.dumps(v) for k, v in schemas.items()}, "seed": 16, "seconds": 3,
           "seeds": [base64.b64encode(s).decode() for s in seeds]}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    try:
        done = subprocess.run([sys.executable, "-c", FUZZ_CHILD], input=json.dumps(job).encode(),
                              capture_output=True, timeout=60, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail("the fuzz run did not end in 60 s (a hang)")
    assert done.returncode == 0, f"child exit {done.returncode}: {done.stderr.decode()[-500:]}"
    assert int(done.stdout) > 500
