"""A generated metadata log with a record of every type and version Kafka defines, and every version of
the group and transaction coordinators' records: written by the package's encoder (driven by the same
definitions), read back through a real log and the decoder; a few checked against bytes built by hand."""

from __future__ import annotations

import base64
import json
import random
import struct
from pathlib import Path

import orjson
import pytest

import kafkafs.format.decoders
from kafkafs.format.batch import encode_batch
from kafkafs.format.decoders import decoder_for, metadata_record, offsets_key, offsets_value
from kafkafs.format.decoders.definitions import load_spec, strip_comments
from kafkafs.format.decoders.internal import metadata_frame, metadata_types, record_types
from kafkafs.format.decoders.schema import message
from kafkafs.format.jsonview import render_batch_jsonl
from kafkafs.storage.log import Log

_INTS = {"int8": 7, "int16": 300, "int32": 70000, "int64": 1 << 40, "uint16": 65000, "uint32": 1 << 31}


def _versions(text, default=None):
    if text is None:
        return default
    if text == "none":
        return range(0)
    if text.endswith("+"):
        return range(int(text[:-1]), 0x7FFF + 1)
    if "-" in text:
        lo, hi = text.split("-")
        return range(int(lo), int(hi) + 1)
    return range(int(text), int(text) + 1)


def _example(fields, version, structs, rnd):
    """An object with every field of ``version`` set to a non-default value, as the reader should print it;
    written from the JSON definitions here, independently of the package's reader."""
    obj = {}
    for f in fields:
        tagged = _versions(f.get("taggedVersions"), range(0))
        present = _versions(f.get("versions"), tagged)
        if version not in present:
            continue
        name = f["name"][0].lower() + f["name"][1:]
        kind = f["type"]
        nullable = version in _versions(f.get("nullableVersions"), range(0))
        if nullable and rnd.random() < 0.2 and version not in tagged:
            obj[name] = None
            continue
        obj[name] = _value(kind, f, version, structs, rnd)
    return obj


def _value(kind, f, version, structs, rnd):
    if kind.startswith("[]"):
        return [_value(kind[2:], f, version, structs, rnd) for _ in range(2)]
    if kind in _INTS:
        return _INTS[kind] - rnd.randrange(5)
    if kind == "float64":
        return 2.5
    if kind == "bool":
        return True
    if kind == "string":
        return f"{f['name']}-{rnd.randrange(1000)}-ü"
    if kind == "uuid":
        return base64.urlsafe_b64encode(rnd.randbytes(16)).rstrip(b"=").decode()
    if kind in ("bytes", "records"):
        return base64.b64encode(rnd.randbytes(5)).decode()
    sub = f.get("fields") or structs[kind]
    if "fields" in f:
        structs.setdefault(kind, f["fields"])
    return _example(sub, version, structs, rnd)


def _spec(name):
    return load_spec(name)


def _all_versions(spec):
    return list(_versions(spec["validVersions"]))


def _shipped_names() -> set[str]:
    """The name of every message definition shipped (read from the files, as the decoders find them)."""
    folder = Path(kafkafs.format.decoders.__file__).parent / "messages"
    return {json.loads(strip_comments(p.read_text("utf-8")))["name"] for p in folder.glob("*.json")}


def test_definitions_shipped_cover_kafkas_records():
    names = _shipped_names()
    assert {m.name for m in metadata_types().values()} >= {
        "TopicRecord", "PartitionRecord", "ConfigRecord", "RegisterBrokerRecord", "FeatureLevelRecord",
        "AccessControlEntryRecord", "ClientQuotaRecord", "ProducerIdsRecord", "DelegationTokenRecord",
        "UserScramCredentialRecord", "BeginTransactionRecord", "ZkMigrationStateRecord", "ClearElrRecord",
        "UnregisterControllerRecord"}
    for base in set(record_types("offsets").values()):
        assert {base + "Key", base + "Value"} <= names
    assert {"LeaderChangeMessage", "SnapshotHeaderRecord", "SnapshotFooterRecord", "KRaftVersionRecord",
            "VotersRecord", "TransactionLogKey", "TransactionLogValue", "ConsumerProtocolSubscription",
            "ConsumerProtocolAssignment", "ShareSnapshotKey", "ShareUpdateValue",
            "RemoteLogSegmentMetadataRecord", "RemotePartitionDeleteMetadataRecord"} <= names
    assert set(record_types("offsets")) >= {0, 1, 2, 3, 8, 10, 15, 16, 17, 23}


def _metadata_examples():
    rnd = random.Random(10)
    out = []
    for _api_key, m in sorted(metadata_types().items()):
        spec = _spec(m.name)
        for version in _all_versions(spec):
            structs = {s["name"]: s["fields"] for s in spec.get("commonStructs", ())}
            out.append((m.type_name, version, _example(spec["fields"], version, structs, rnd)))
    return out


def test_generated_metadata_log_decodes_every_type_and_version(tmp_path):
    examples = _metadata_examples()
    assert len(examples) >= 34 and len({t for t, _, _ in examples}) == len(metadata_types())
    (tmp_path / "__cluster_metadata-0").mkdir()
    log_ = Log.open(tmp_path / "__cluster_metadata-0", writable=True)
    try:
        for start in range(0, len(examples), 7):
            chunk = examples[start:start + 7]
            records = [(1700000000000 + i, None, metadata_frame(t, v, d), ()) for i, (t, v, d) in enumerate(chunk)]
            log_.append_batches(encode_batch(records))
        decoder = decoder_for("__cluster_metadata")
        lines = [line for batch in log_.read() for line in
                 render_batch_jsonl("__cluster_metadata", 0, batch, decoder=decoder).splitlines()]
    finally:
        log_.close()
    assert len(lines) == len(examples)
    for line, (type_name, version, data) in zip(lines, examples, strict=True):
        assert orjson.loads(line)["value"] == {"type": type_name, "version": version, "data": data}


@pytest.mark.parametrize("base", sorted(set(record_types("offsets").values())))
def test_every_group_coordinator_record_and_version(base):
    rnd = random.Random(base)
    kinds = [k for k, v in record_types("offsets").items() if v == base]
    for kind in kinds:
        key_spec = _spec(base + "Key")
        key_obj = _example(key_spec["fields"], 0, {}, rnd)
        key = struct.pack(">h", kind) + message(base + "Key").write(key_obj, 0)
        assert offsets_key(key) == {"type": kind, "data": key_obj}
        value_spec = _spec(base + "Value")
        for version in _all_versions(value_spec):
            structs = {s["name"]: s["fields"] for s in value_spec.get("commonStructs", ())}
            value_obj = _example(value_spec["fields"], version, structs, rnd)
            value = struct.pack(">h", version) + message(base + "Value").write(value_obj, version)
            assert offsets_value(value, key) == {"version": version, "data": value_obj}, (base, version)


def test_hand_built_metadata_records():
    # FeatureLevelRecord (apiKey 12) v0: frame 1, key 12, version 0, compact string, int16, no tags
    raw = bytes([1, 12, 0]) + bytes([len("metadata.version") + 1]) + b"metadata.version" + struct.pack(">h", 20) + b"\0"
    assert metadata_record(raw) == {"type": "FEATURE_LEVEL_RECORD", "version": 0,
                                    "data": {"name": "metadata.version", "featureLevel": 20}}
    # PartitionRecord (3) v2 with tagged LeaderRecoveryState (tag 0) and EligibleLeaderReplicas (tag 1)
    topic_id = bytes(range(16))
    body = struct.pack(">i", 5) + topic_id + b"\x02" + struct.pack(">i", 1) + b"\x02" + struct.pack(">i", 1)
    body += b"\x01\x01" + struct.pack(">i", 1) + struct.pack(">ii", 3, 4) + b"\x01"  # no directories
    body += b"\x02" + b"\x00\x01\x01" + b"\x01\x05\x02" + struct.pack(">i", 1)
    got = metadata_record(bytes([1, 3, 2]) + body)
    assert got["data"] == {
        "partitionId": 5, "topicId": base64.urlsafe_b64encode(topic_id).rstrip(b"=").decode(), "replicas": [1],
        "isr": [1], "removingReplicas": [], "addingReplicas": [], "leader": 1, "leaderRecoveryState": 1,
        "leaderEpoch": 3, "partitionEpoch": 4, "directories": [], "eligibleLeaderReplicas": [1]}
    # the same record through the encoder gives the same bytes
    assert metadata_frame("PARTITION_RECORD", 2, got["data"]) == bytes([1, 3, 2]) + body
    # an unknown type keeps its bytes in a rendered line
    decoder = decoder_for("__cluster_metadata")
    from kafkafs.format.batch import decode_batch

    batch = decode_batch(encode_batch([(1, None, b"\x01\x7f\x00\x00", ())]))
    line = orjson.loads(render_batch_jsonl("__cluster_metadata", 0, batch, decoder=decoder))
    assert line["value"] == {"$base64": base64.b64encode(b"\x01\x7f\x00\x00").decode()}


def test_raw_batches_render_as_decoded_batches():
    from kafkafs.format.batch import decode_batch
    from kafkafs.format.jsonview import raw_jsonl_lengths, render_raw_jsonl

    examples = _metadata_examples()[:9]
    raw = encode_batch([(1700000000000 + i, None, metadata_frame(t, v, d), ()) for i, (t, v, d) in enumerate(examples)],
                       base_offset=100)
    decoder = decoder_for("__cluster_metadata")
    whole = render_batch_jsonl("__cluster_metadata", 0, decode_batch(raw), decoder=decoder)
    assert render_raw_jsonl("__cluster_metadata", 0, raw, decoder=decoder) == whole
    lines = whole.splitlines(keepends=True)
    assert render_raw_jsonl("__cluster_metadata", 0, raw, decoder=decoder, lo=102, hi=104) == b"".join(lines[2:5])
    assert raw_jsonl_lengths("__cluster_metadata", 0, raw, decoder=decoder) == [len(line) for line in lines]
    assert render_raw_jsonl("__cluster_metadata", 0, raw, "base64", decoder=decoder) == render_raw_jsonl(
        "__cluster_metadata", 0, raw, "base64")
