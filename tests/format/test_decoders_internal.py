"""Kafka's internal topics decoded (SPEC §8), checked against decodings written here from Kafka's
documented layouts (not through the package's schema reader) and against kafka-python's consumer
protocol classes."""

from __future__ import annotations

import base64
import struct

import orjson
import pytest
from kafka.protocol.consumer import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from kafkafs.errors import CorruptRecordError
from kafkafs.format.batch import control_type_of
from kafkafs.format.decoders import (
    control_key,
    control_value,
    decoder_for,
    metadata_record,
    offsets_key,
    offsets_value,
    transaction_key,
    transaction_value,
)
from kafkafs.format.jsonview import render_batch_jsonl
from kafkafs.storage.log import Log


class Buf:
    """A cursor over big-endian bytes: Kafka's classic and flexible (compact) primitives."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def fixed(self, fmt: str):
        value = struct.unpack_from(">" + fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(">" + fmt)
        return value

    def string(self) -> str | None:
        n = self.fixed("h")
        if n < 0:
            return None
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            b = self.data[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def compact_string(self) -> str | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def uuid(self) -> str:
        raw = self.data[self.pos:self.pos + 16]
        self.pos += 16
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    def compact_int32s(self) -> list[int]:
        return [self.fixed("i") for _ in range(self.uvarint() - 1)]

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()


def _records(path):
    log_ = Log.open(path)
    try:
        for batch in log_.read():
            for i in range(len(batch)):
                yield batch, i
    finally:
        log_.close()


OFFSETS = ["kafka-logs-a/__consumer_offsets-12", "kafka-logs-c/__consumer_offsets-6"]


@pytest.mark.parametrize("partition", OFFSETS)
def test_every_offset_commit_matches_kafkas_layout(fixtures_dir, partition):
    commits = groups = 0
    for batch, i in _records(fixtures_dir / partition):
        key, value = batch.keys[i], batch.values[i]
        b = Buf(key)
        kind = b.fixed("h")
        decoded_key = offsets_key(key)
        assert decoded_key["type"] == kind
        if kind in (0, 1):  # OffsetCommitKey: group string, topic string, partition int32
            expected = {"group": b.string(), "topic": b.string(), "partition": b.fixed("i")}
            assert decoded_key["data"] == expected
            decoded = offsets_value(value, key)
            if value is None:
                assert decoded is None
                continue
            v = Buf(value)
            version = v.fixed("h")
            offset = v.fixed("q")
            leader_epoch = v.fixed("i") if version >= 3 else None
            metadata = v.string()
            commit_ts = v.fixed("q")
            assert decoded["version"] == version
            assert decoded["data"]["offset"] == offset
            assert decoded["data"]["metadata"] == metadata
            assert decoded["data"]["commitTimestamp"] == commit_ts
            if leader_epoch is not None:
                assert decoded["data"]["leaderEpoch"] == leader_epoch
            commits += 1
        elif kind == 2:  # GroupMetadataKey: group string
            assert decoded_key["data"] == {"group": b.string()}
            decoded = offsets_value(value, key)
            if value is None:
                assert decoded is None
                continue
            _check_group_metadata(value, decoded)
            groups += 1
    assert commits > 0 and groups > 0


def _check_group_metadata(value: bytes, decoded: dict) -> None:
    v = Buf(value)
    version = v.fixed("h")
    assert decoded["version"] == version and version in (0, 1, 2, 3)
    data = decoded["data"]
    assert data["protocolType"] == v.string()
    assert data["generation"] == v.fixed("i")
    assert data["protocol"] == v.string()
    assert data["leader"] == v.string()
    if version >= 2:
        assert data["currentStateTimestamp"] == v.fixed("q")
    members = v.fixed("i")
    assert len(data["members"]) == members
    for member in data["members"]:
        assert member["memberId"] == v.string()
        if version >= 3:
            assert member["groupInstanceId"] == v.string()
        assert member["clientId"] == v.string()
        assert member["clientHost"] == v.string()
        if version >= 1:
            assert member["rebalanceTimeout"] == v.fixed("i")
        assert member["sessionTimeout"] == v.fixed("i")
        for field, cls in (("subscription", ConsumerProtocolSubscription),
                           ("assignment", ConsumerProtocolAssignment)):
            n = v.fixed("i")
            raw = value[v.pos:v.pos + n]
            v.pos += n
            theirs = cls.decode(raw)
            ours = member[field]
            if field == "subscription":
                assert ours["topics"] == list(theirs.topics)
            else:
                assert {(tp["topic"], p) for tp in ours["assignedPartitions"] for p in tp["partitions"]} == {
                    (tp.topic, p) for tp in theirs.assigned_partitions for p in tp.partitions
                }
    assert v.pos == len(value)


def test_group_metadata_members_are_decoded(fixtures_dir):
    found = []
    for batch, i in _records(fixtures_dir / "kafka-logs-a/__consumer_offsets-12"):
        value = offsets_value(batch.values[i], batch.keys[i])
        if value and "members" in value["data"] and value["data"]["members"]:
            found.append(value)
    assert found
    member = found[0]["data"]["members"][0]
    assert member["subscription"]["topics"] == ["my-first-topic", "my-second-topic"]
    assert {tp["topic"] for tp in member["assignment"]["assignedPartitions"]} == {"my-first-topic", "my-second-topic"}


def test_offsets_partition_renders_decoded_lines(fixtures_dir):
    decoder = decoder_for("__consumer_offsets")
    lines = []
    for batch, i in _records(fixtures_dir / "kafka-logs-c/__consumer_offsets-6"):
        if i == 0:
            lines += render_batch_jsonl("__consumer_offsets", 6, batch, "auto", decoder=decoder).splitlines()
    objs = [orjson.loads(line) for line in lines]
    assert len(objs) == 13
    assert list(objs[0]) == ["topic", "partition", "offset", "timestamp", "timestampType", "key", "value", "headers"]
    commit = next(o for o in objs if o["key"]["type"] == 1)
    assert commit["key"]["data"]["group"] == "DEVSmileCDR"
    assert set(commit["value"]) == {"version", "data"} and isinstance(commit["value"]["version"], int)
    assert b"$base64" not in b"".join(lines)


def test_values_modes_string_and_base64_ignore_the_decoder(fixtures_dir):
    decoder = decoder_for("__consumer_offsets")
    for batch, i in _records(fixtures_dir / "kafka-logs-c/__consumer_offsets-6"):
        if i:
            continue
        for mode in ("string", "base64"):
            assert render_batch_jsonl("__consumer_offsets", 6, batch, mode, decoder=decoder) == render_batch_jsonl(
                "__consumer_offsets", 6, batch, mode
            )
        base = orjson.loads(render_batch_jsonl("__consumer_offsets", 6, batch, "base64", 0, 1))
        assert base64.b64decode(base["key"]["$base64"]) == batch.keys[0]


# ------------------------------------------------------------------------------------ cluster metadata


def _metadata_lines(fixtures_dir):
    decoder = decoder_for("__cluster_metadata")
    out = []
    for batch, i in _records(fixtures_dir / "kafka-logs-c/__cluster_metadata-0"):
        if i == 0:
            out.append((batch, render_batch_jsonl("__cluster_metadata", 0, batch, decoder=decoder)))
    return out


def test_every_metadata_record_decodes(fixtures_dir):
    rendered = _metadata_lines(fixtures_dir)
    lines = [line for _, text in rendered for line in text.splitlines()]
    assert len(lines) == 4929
    assert not any(b"$base64" in line for line in lines)
    types = set()
    for line in lines:
        obj = orjson.loads(line)
        if "control" in obj:
            assert obj["control"] == "LEADER_CHANGE"
            assert obj["key"] == {"version": 0, "type": 2}
            assert obj["value"]["leaderId"] == 1
            continue
        assert set(obj["value"]) == {"type", "version", "data"}
        types.add(obj["value"]["type"])
    assert {"TOPIC_RECORD", "PARTITION_RECORD", "CONFIG_RECORD", "REGISTER_BROKER_RECORD",
            "FEATURE_LEVEL_RECORD", "PRODUCER_IDS_RECORD", "NO_OP_RECORD"} <= types


def test_metadata_spot_checks_against_kafkas_layout(fixtures_dir):
    seen = set()
    for batch, i in _records(fixtures_dir / "kafka-logs-c/__cluster_metadata-0"):
        if batch.header.is_control:
            assert control_type_of(batch.keys[i]) == "LEADER_CHANGE"
            continue
        value = batch.values[i]
        got = metadata_record(value)
        b = Buf(value)
        assert b.uvarint() == 1  # frame version
        api_key, version = b.uvarint(), b.uvarint()
        assert got["version"] == version
        if api_key == 2:  # TopicRecord v0: compact name, uuid, tags
            assert got["type"] == "TOPIC_RECORD"
            assert got["data"] == {"name": b.compact_string(), "topicId": b.uuid()}
        elif api_key == 3:  # PartitionRecord v1
            expected = {"partitionId": b.fixed("i"), "topicId": b.uuid(), "replicas": b.compact_int32s(),
                        "isr": b.compact_int32s(), "removingReplicas": b.compact_int32s(),
                        "addingReplicas": b.compact_int32s(), "leader": b.fixed("i"),
                        "leaderEpoch": b.fixed("i"), "partitionEpoch": b.fixed("i")}
            expected["directories"] = [b.uuid() for _ in range(b.uvarint() - 1)]
            assert got["type"] == "PARTITION_RECORD" and version == 1
            assert got["data"] == expected
        elif api_key == 4:  # ConfigRecord v0: int8 resource type, compact strings
            assert got["type"] == "CONFIG_RECORD"
            assert got["data"] == {"resourceType": b.fixed("b"), "resourceName": b.compact_string(),
                                   "name": b.compact_string(), "value": b.compact_string()}
        elif api_key == 0:  # RegisterBrokerRecord: brokerId, isMigratingZkBroker (v2+ in front), ...
            assert got["type"] == "REGISTER_BROKER_RECORD"
            assert got["data"]["brokerId"] == b.fixed("i")
            if version >= 2:
                assert got["data"]["isMigratingZkBroker"] is bool(b.fixed("b"))
            assert got["data"]["incarnationId"] == b.uuid()
            assert got["data"]["brokerEpoch"] == b.fixed("q")
            endpoints = b.uvarint() - 1
            assert len(got["data"]["endPoints"]) == endpoints
            for ep in got["data"]["endPoints"]:
                assert ep["name"] == b.compact_string() and ep["host"] == b.compact_string()
                assert ep["port"] == b.fixed("H") and ep["securityProtocol"] == b.fixed("h")
                b.skip_tags()
        elif api_key == 12:  # FeatureLevelRecord v0
            assert got["data"] == {"name": b.compact_string(), "featureLevel": b.fixed("h")}
        else:
            continue
        seen.add(api_key)
    assert seen == {0, 2, 3, 4, 12}


def test_leader_change_control_record(fixtures_dir):
    batch, i = next(_records(fixtures_dir / "kafka-logs-c/__cluster_metadata-0"))
    assert batch.header.is_control and control_type_of(batch.keys[0]) == "LEADER_CHANGE"
    assert control_key(batch.keys[0]) == {"version": 0, "type": 2}
    assert control_value(batch.keys[0], batch.values[0]) == {
        "version": 0, "leaderId": 1, "voters": [{"voterId": 1}], "grantingVoters": [{"voterId": 1}]
    }


def test_control_type_names():
    for kind, name in enumerate(["ABORT", "COMMIT", "LEADER_CHANGE", "SNAPSHOT_HEADER", "SNAPSHOT_FOOTER",
                                 "KRAFT_VERSION", "KRAFT_VOTERS"]):
        assert control_type_of(struct.pack(">hh", 0, kind)) == name
    assert control_type_of(struct.pack(">hh", 0, 7)) == "UNKNOWN"
    assert control_type_of(struct.pack(">hh", 0, -1)) == "UNKNOWN"


# ------------------------------------------------------------------------------------ transactions


def test_transaction_state_by_hand():
    key = struct.pack(">hh", 0, 3) + b"tx1"
    assert transaction_key(key) == {"type": 0, "data": {"transactionalId": "tx1"}}
    # v0 (not flexible): producerId, epoch, timeout, status, partitions[], lastUpdate, start
    value = struct.pack(">hqhib", 0, 42, 1, 60000, 2) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
    value += struct.pack(">i", 2) + struct.pack(">ii", 0, 3) + struct.pack(">qq", 1000, 900)
    assert transaction_value(value) == {"version": 0, "data": {
        "producerId": 42, "producerEpoch": 1, "transactionTimeoutMs": 60000, "transactionStatus": 2,
        "transactionPartitions": [{"topic": "t", "partitionIds": [0, 3]}],
        "transactionLastUpdateTimestampMs": 1000, "transactionStartTimestampMs": 900}}
    # v1 (flexible): compact arrays and strings, a null partition list, tagged previousProducerId (tag 0)
    value = struct.pack(">hqhib", 1, 42, 1, 60000, 0) + b"\x00" + struct.pack(">qq", 1000, 900)
    value += b"\x01\x00\x08" + struct.pack(">q", 41)
    assert transaction_value(value)["data"] == {
        "producerId": 42, "previousProducerId": 41, "producerEpoch": 1, "transactionTimeoutMs": 60000,
        "transactionStatus": 0, "transactionPartitions": None, "transactionLastUpdateTimestampMs": 1000,
        "transactionStartTimestampMs": 900}
    assert transaction_value(None) is None


def test_bad_bytes_raise_corrupt_record():
    for fn, data in ((offsets_key, b"\x00"), (offsets_key, b"\x00\x63abc"), (metadata_record, b"\x00\x01\x00"),
                     (metadata_record, b"\x01\x7f\x00"), (transaction_value, b"\x00\x00\x01")):
        with pytest.raises(CorruptRecordError):
            fn(data)
    # bytes after the last field: Kafka's CoordinatorRecordSerde reads the message and ignores them (as
    # kafka-dump-log --offsets-decoder / --transaction-log-decoder print it); a metadata record's are
    # damage (AbstractApiMessageSerde: "Found N byte(s) of garbage after")
    good = struct.pack(">hhs", 1, 1, b"g") + struct.pack(">hsi", 1, b"t", 0)
    assert offsets_key(good)["data"] == {"group": "g", "topic": "t", "partition": 0}
    assert offsets_key(good + b"x") == offsets_key(good)
    commit = struct.pack(">hqhsq", 1, 42, 0, b"", 1700000000000) + struct.pack(">q", -1)
    assert offsets_value(commit + b"xyz", good) == offsets_value(commit, good)
    assert offsets_value(commit, good)["data"]["offset"] == 42
    tx_key = struct.pack(">hh", 0, 3) + b"tx1"
    assert transaction_key(tx_key + b"\x00") == transaction_key(tx_key)
    feature = bytes([1, 12, 0, 17]) + b"metadata.version" + struct.pack(">h", 20) + b"\x00"  # flexible: tags
    record = metadata_record(feature)
    assert record["type"] == "FEATURE_LEVEL_RECORD" and record["data"]["featureLevel"] == 20
    with pytest.raises(CorruptRecordError):
        metadata_record(feature + b"x")


def test_clear_elr_record_of_kafka_4():
    """ClearElrRecord (apiKey 28, KIP-966, Kafka 4.x): frame version 1, apiKey 28, version 0, then a
    flexible message: TopicName as a compact string, no tagged fields."""
    name = b"orders"
    frame = bytes([1, 28, 0, len(name) + 1]) + name + bytes([0])
    assert metadata_record(frame) == {"type": "CLEAR_ELR_RECORD", "version": 0, "data": {"topicName": "orders"}}
    assert metadata_record(bytes([1, 28, 0, 1, 0]))["data"] == {"topicName": ""}  # every topic's ELRs
