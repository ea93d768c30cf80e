"""Records of Kafka 4.x's internal topics for tests: every record type and version that the shipped
definitions declare, built by the definitions' writer from examples made here (independently of the
reader), and a few built by hand from Kafka's documented layout; written into segments that both
kafkafs and Kafka's own ``kafka-dump-log`` read."""

from __future__ import annotations

import base64
import random
import struct
import subprocess
from pathlib import Path

from kafkafs.format.decoders.definitions import load_spec
from kafkafs.format.decoders.internal import metadata_frame, record_types, remote_log_metadata_types
from kafkafs.format.decoders.schema import message
from tests.format.test_decoders_generated import _all_versions, _example
from tests.kafka_jars import ROOT
from tests.kafka_layout import batch


def coordinator_records(kind: str, seed: int = 1) -> list[tuple[bytes, bytes | None, dict, dict | None]]:
    """(key bytes, value bytes, expected key object, expected value object) for every record type of a
    coordinator (``offsets``, ``transactions``, ``share-state``) and every version of its value, and a
    tombstone of each type."""
    rnd = random.Random(seed)
    out = []
    for record_type, base in record_types(kind).items():
        key_spec = load_spec(base + "Key")
        key_obj = _example(key_spec["fields"], 0, {}, rnd)
        key = struct.pack(">h", record_type) + message(base + "Key").write(key_obj, 0)
        expected_key = {"type": record_type, "data": key_obj}
        value_spec = load_spec(base + "Value")
        for version in _all_versions(value_spec):
            structs = {s["name"]: s["fields"] for s in value_spec.get("commonStructs", ())}
            value_obj = _example(value_spec["fields"], version, structs, rnd)
            value = struct.pack(">h", version) + message(base + "Value").write(value_obj, version)
            out.append((key, value, expected_key, {"version": version, "data": value_obj}))
        out.append((key, None, expected_key, None))
    return out


def remote_log_metadata_records(seed: int = 2, valid: bool = True) -> list[tuple[bytes, dict]]:
    """(value bytes, expected object) for every ``__remote_log_metadata`` record type and version; with
    ``valid``, fields Kafka's serde checks (offsets, states, leader epochs) are set so that it accepts them."""
    rnd = random.Random(seed)
    out = []
    types = remote_log_metadata_types()
    for _api_key, m in types.items():
        spec = load_spec(m.name)
        for version in _all_versions(spec):
            structs = {s["name"]: s["fields"] for s in spec.get("commonStructs", ())}
            data = _example(spec["fields"], version, structs, rnd)
            if valid:
                if "startOffset" in data:
                    data["startOffset"], data["endOffset"] = 100, 199
                for state in ("remoteLogSegmentState", "remotePartitionDeleteState"):
                    if state in data:
                        data[state] = 1
            out.append((metadata_frame(m.api_key, version, data, types),
                        {"type": m.type_name, "version": version, "data": data}))
    return out


def write_segment(folder: Path, records: list[tuple[bytes | None, bytes | None]], per_batch: int = 5) -> Path:
    """A ``.log`` of ``records`` (key, value) in ``folder``, ``per_batch`` records a batch."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "00000000000000000000.log"
    data = b""
    for start in range(0, len(records), per_batch):
        chunk = records[start:start + per_batch]
        data += batch(start, [(k, v, ()) for k, v in chunk], first_ts=1_700_000_000_000 + start)
    path.write_bytes(data)
    return path


def hand_built_share_snapshot() -> tuple[bytes, bytes, dict, dict]:
    """A ShareSnapshot record (type 0) from Kafka's layout: the key is ``i16 type`` then ShareSnapshotKey v0 (string groupId as i16 length + bytes, 16-byte uuid, int32
    partition); the value ``i16 version 0`` then ShareSnapshotValue v0, a flexible version: int32
    snapshotEpoch, int32 stateEpoch, int32 leaderEpoch, int64 startOffset, int64 createTimestamp, int64
    writeTimestamp, compact array (count + 1) of StateBatch {int64 firstOffset, int64 lastOffset, int8
    deliveryState, int16 deliveryCount, tagged fields}, then the tagged fields, here tag 0
    (DeliveryCompleteCount, int32)."""
    topic_id = bytes(range(1, 17))
    key = struct.pack(">h", 0) + struct.pack(">h", 2) + b"sg" + topic_id + struct.pack(">i", 3)
    state_batch = struct.pack(">qqbh", 10, 19, 2, 1) + b"\x00"
    value = (struct.pack(">h", 0) + struct.pack(">iiiq", 1, 2, 3, 10) + struct.pack(">qq", 1_700_000_000_001, 1_700_000_000_002)
             + b"\x02" + state_batch + b"\x01" + b"\x00\x04" + struct.pack(">i", 7))
    topic_text = base64.urlsafe_b64encode(topic_id).rstrip(b"=").decode()
    return key, value, {"type": 0, "data": {"groupId": "sg", "topicId": topic_text, "partition": 3}}, {
        "version": 0, "data": {"snapshotEpoch": 1, "stateEpoch": 2, "leaderEpoch": 3, "startOffset": 10,
                               "deliveryCompleteCount": 7, "createTimestamp": 1_700_000_000_001,
                               "writeTimestamp": 1_700_000_000_002,
                               "stateBatches": [{"firstOffset": 10, "lastOffset": 19, "deliveryState": 2,
                                                 "deliveryCount": 1}]}}


def hand_built_streams_group() -> tuple[bytes, bytes, dict, dict]:
    """A StreamsGroupMetadata record (type 17, KIP-1071) from Kafka's layout: the key ``i16 17`` then
    StreamsGroupMetadataKey v0 (i16-length string groupId); the value ``i16 0`` then
    StreamsGroupMetadataValue v0, flexible: int32 epoch, int64 metadataHash, then the tagged fields in
    tag order: 0 ValidatedTopologyEpoch (int32), 1 LastAssignmentConfigs (a compact array of {compact
    string key, compact string value, tags})."""
    key = struct.pack(">h", 17) + struct.pack(">h", 7) + b"streams"
    configs = b"\x02" + b"\x0anum.tasks" + b"\x023" + b"\x00"
    value = (struct.pack(">h", 0) + struct.pack(">iq", 4, -99) + b"\x02"
             + b"\x00\x04" + struct.pack(">i", 3) + b"\x01" + bytes([len(configs)]) + configs)
    return key, value, {"type": 17, "data": {"groupId": "streams"}}, {"version": 0, "data": {
        "epoch": 4, "metadataHash": -99, "validatedTopologyEpoch": 3,
        "lastAssignmentConfigs": [{"key": "num.tasks", "value": "3"}]}}


def hand_built_transaction_v1() -> tuple[bytes, bytes, dict, dict]:
    """A TransactionLogValue v1 (transactions v2, KIP-890) from Kafka's layout: flexible, so compact
    strings and arrays and a tagged-field section, in tag order: 0 PreviousProducerId (int64), 1
    NextProducerId (int64), 2 ClientTransactionVersion (int16); 3 NextProducerEpoch left at its default."""
    key = struct.pack(">h", 0) + struct.pack(">h", 3) + b"tx2"
    partitions = b"\x02" + b"\x07orders" + b"\x02" + struct.pack(">i", 4) + b"\x00"
    tags = (b"\x03" + b"\x00\x08" + struct.pack(">q", 41) + b"\x01\x08" + struct.pack(">q", 43)
            + b"\x02\x02" + struct.pack(">h", 2))
    value = (struct.pack(">h", 1) + struct.pack(">qhib", 42, 6, 60000, 4) + partitions
             + struct.pack(">qq", 1_700_000_000_123, 1_700_000_000_000) + tags)
    return key, value, {"type": 0, "data": {"transactionalId": "tx2"}}, {"version": 1, "data": {
        "producerId": 42, "previousProducerId": 41, "nextProducerId": 43, "producerEpoch": 6,
        "transactionTimeoutMs": 60000, "transactionStatus": 4,
        "transactionPartitions": [{"topic": "orders", "partitionIds": [4]}],
        "transactionLastUpdateTimestampMs": 1_700_000_000_123, "transactionStartTimestampMs": 1_700_000_000_000,
        "clientTransactionVersion": 2}}


def hand_built_remote_segment() -> tuple[bytes, dict, str]:
    """A RemoteLogSegmentMetadataRecord v0 (apiKey 0) from Kafka's layout: frame 1, apiKey 0, version 0,
    then (flexible) a RemoteLogSegmentIdEntry {TopicIdPartitionEntry {compact string name, uuid id,
    int32 partition, tags}, uuid id, tags}, int64 startOffset, int64 endOffset, int32 brokerId, int64
    maxTimestampMs, int64 eventTimestampMs, compact array of SegmentLeaderEpochEntry {int32 leaderEpoch,
    int64 offset, tags}, int32 segmentSizeInBytes, compact nullable bytes customMetadata (0: null),
    int8 state, then tags: tag 0 TxnIndexEmpty (bool). With the line ``kafka-dump-log`` prints."""
    topic_id, segment_id = bytes(range(16)), bytes(range(16, 32))
    tip = b"\x07orders" + topic_id + struct.pack(">i", 2) + b"\x00"
    body = (tip + segment_id + b"\x00" + struct.pack(">qqiqq", 0, 99, 1, 1_700_000_000_999, 1_700_000_001_000)
            + b"\x03" + struct.pack(">iq", 0, 0) + b"\x00" + struct.pack(">iq", 4, 50) + b"\x00"
            + struct.pack(">i", 4096) + b"\x04abc" + b"\x01" + b"\x01\x00\x01\x01")
    value = bytes([1, 0, 0]) + body

    def text(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    data = {"remoteLogSegmentId": {"topicIdPartition": {"name": "orders", "id": text(topic_id), "partition": 2},
                                   "id": text(segment_id)},
            "startOffset": 0, "endOffset": 99, "brokerId": 1, "maxTimestampMs": 1_700_000_000_999,
            "eventTimestampMs": 1_700_000_001_000,
            "segmentLeaderEpochs": [{"leaderEpoch": 0, "offset": 0}, {"leaderEpoch": 4, "offset": 50}],
            "segmentSizeInBytes": 4096, "customMetadata": base64.b64encode(b"abc").decode(),
            "remoteLogSegmentState": 1, "txnIndexEmpty": True}
    line = (f"RemoteLogSegmentMetadata{{remoteLogSegmentId=RemoteLogSegmentId{{topicIdPartition={text(topic_id)}:"
            f"orders-2, id={text(segment_id)}}}, startOffset=0, endOffset=99, brokerId=1, maxTimestampMs=1700000000999, "
            "eventTimestampMs=1700000001000, segmentLeaderEpochs={0=0, 4=50}, segmentSizeInBytes=4096, "
            "customMetadata=Optional[CustomMetadata{3 bytes}], state=COPY_SEGMENT_FINISHED, txnIdxEmpty=true}")
    return value, {"type": "REMOTE_LOG_SEGMENT_METADATA_RECORD", "version": 0, "data": data}, line


def kafka_dump_log(version: str, *args: str) -> subprocess.CompletedProcess | None:
    """Kafka's own ``kafka-dump-log`` (``org.apache.kafka.tools.DumpLogSegments``) of release
    ``version`` from the project's fetch of its jars, or None when they are not on this machine."""
    import os
    import shutil

    home = Path(os.environ.get("KAFKAFS_KAFKA_HOME") or ROOT / ".kafka")
    libs = home / version / "libs"
    if not libs.is_dir() or shutil.which("java") is None:
        return None
    return subprocess.run(["java", "-cp", f"{libs}/*", "org.apache.kafka.tools.DumpLogSegments", *args],
                          capture_output=True, text=True, timeout=300)
