"""Kafka as it is today (SPEC §8, issue 21): the definitions shipped are those of the newest Kafka 4.x
release, byte for byte; every record type and version of every internal topic decodes in the JSON view
and in ``dump``, equal to what Kafka's own ``kafka-dump-log`` prints where its jars are on this machine;
control records of any topic show their key and value decoded."""

from __future__ import annotations

import base64
import struct
import subprocess
import sys
import zipfile

import orjson
import pytest

from kafkafs.format.batch import decode_batch
from kafkafs.format.decoders import decoder_for
from kafkafs.format.decoders.definitions import MESSAGES_DIR, SOURCES, kafka_version, select_resources
from kafkafs.format.decoders.internal import TXN_STATES
from kafkafs.format.jsonrender import record_object, render_lines
from kafkafs.format.jsonview import render_batch_jsonl, render_raw_jsonl, render_span_jsonl
from tests.internal_records import (
    coordinator_records,
    hand_built_remote_segment,
    hand_built_share_snapshot,
    hand_built_streams_group,
    hand_built_transaction_v1,
    kafka_dump_log,
    remote_log_metadata_records,
    write_segment,
)
from tests.kafka_jars import find_jar
from tests.kafka_layout import batch, control_batch

TOPICS = {"offsets": "__consumer_offsets", "transactions": "__transaction_state", "share-state": "__share_group_state"}


def test_shipped_definitions_are_the_jars_own():
    version = kafka_version()
    jars = {artifact: find_jar(artifact, version) for artifact, _, _ in SOURCES}
    missing = [a for a, jar in jars.items() if jar is None]
    if missing:
        pytest.skip(f"the jars of Kafka {version} are not on this machine ({', '.join(missing)}): "
                    f"scripts/fetch_kafka.sh {version} fetches them")
    shipped = {p.name for p in MESSAGES_DIR.glob("*.json")}
    taken = set()
    for artifact, folder, names in SOURCES:
        with zipfile.ZipFile(jars[artifact]) as z:
            paths = select_resources(z.namelist(), folder, names)
            assert names is None or len(paths) == len(names), (artifact, names, paths)
            for path in paths:
                name = path.rsplit("/", 1)[1]
                taken.add(name)
                assert (MESSAGES_DIR / name).read_bytes() == z.read(path), f"{name} differs from {artifact}'s {path}"
            if artifact == "kafka-clients":
                assert (MESSAGES_DIR / "LICENSE").read_bytes() == z.read("META-INF/LICENSE.txt")
                assert (MESSAGES_DIR / "NOTICE").read_bytes() == z.read("META-INF/NOTICE.txt")
    assert shipped == taken


def _decoded(topic: str, path) -> list[dict]:
    """Every record of a segment as the JSON view shows it, by the decoded-batch and the raw-batch paths."""
    data = path.read_bytes()
    decoder = decoder_for(topic)
    out = []
    pos = 0
    while pos < len(data):
        size = struct.unpack_from(">i", data, pos + 8)[0] + 12
        raw = data[pos:pos + size]
        text = render_batch_jsonl(topic, 0, decode_batch(raw), decoder=decoder)
        assert render_raw_jsonl(topic, 0, raw, decoder=decoder) == text
        out += [orjson.loads(line) for line in text.splitlines()]
        pos += size
    return out


def _shown(kind: str, value: dict | None) -> dict | None:
    if kind == "transactions" and value is not None:  # as kafka-dump-log shows the state: by name
        status = value["data"]["transactionStatus"]
        return {"version": value["version"], "data": dict(value["data"], transactionStatus=TXN_STATES.get(status, str(status)))}
    return value


@pytest.mark.parametrize("kind", sorted(TOPICS))
def test_every_coordinator_record_and_version_in_the_json_view(kind, tmp_path):
    records = coordinator_records(kind)
    hand = {"share-state": hand_built_share_snapshot, "transactions": hand_built_transaction_v1,
            "offsets": hand_built_streams_group}.get(kind)
    if hand is not None:
        records.append(hand())
    path = write_segment(tmp_path / f"{TOPICS[kind]}-0", [(k, v) for k, v, _, _ in records])
    lines = _decoded(TOPICS[kind], path)
    assert len(lines) == len(records)
    for line, (_k, _v, key, value) in zip(lines, records, strict=True):
        assert line["key"] == key
        assert line["value"] == _shown(kind, value)
    assert "$base64" not in orjson.dumps(lines).decode()


def test_streams_share_and_consumer_group_types_are_all_there():
    from kafkafs.format.decoders.internal import record_types

    names = record_types("offsets")
    assert {names[3], names[16], names[17], names[23], names[11], names[15]} == {
        "ConsumerGroupMetadata", "ConsumerGroupRegularExpression", "StreamsGroupMetadata", "StreamsGroupTopology",
        "ShareGroupMetadata", "ShareGroupStatePartitionMetadata"}
    assert record_types("share-state") == {0: "ShareSnapshot", 1: "ShareUpdate"}
    assert record_types("transactions") == {0: "TransactionLog"}


def test_every_remote_log_metadata_record_and_version(tmp_path):
    records = remote_log_metadata_records()
    value, expected, _line = hand_built_remote_segment()
    records.append((value, expected))
    assert {r[1]["type"] for r in records} == {
        "REMOTE_LOG_SEGMENT_METADATA_RECORD", "REMOTE_LOG_SEGMENT_METADATA_UPDATE_RECORD",
        "REMOTE_PARTITION_DELETE_METADATA_RECORD", "REMOTE_LOG_SEGMENT_METADATA_SNAPSHOT_RECORD"}
    path = write_segment(tmp_path / "__remote_log_metadata-0", [(None, v) for v, _ in records])
    lines = _decoded("__remote_log_metadata", path)
    assert [line["value"] for line in lines] == [e for _, e in records]
    assert lines[0]["key"] is None


def test_remote_log_metadata_dump_line(tmp_path):
    from kafkafs.dump.remote import remote_log_metadata_text

    value, _expected, line = hand_built_remote_segment()
    assert remote_log_metadata_text(value) == line
    with pytest.raises(ValueError, match="Unknown metadata id 9"):
        remote_log_metadata_text(bytes([1, 9, 0]))


def _markers(tmp_path):
    """A transactional topic: a data batch, a COMMIT marker, an ABORT marker (Kafka's layout)."""
    data = (batch(0, [(b"k", b"v", ())], producer_id=9, producer_epoch=3, attributes=0x10)
            + control_batch(1, 1, 5, 9, 3, 1_700_000_000_010)
            + control_batch(2, 0, 6, 9, 4, 1_700_000_000_020))
    return data


def test_transaction_markers_show_their_key_and_value(tmp_path):
    data = _markers(tmp_path)
    expected = [({"version": 0, "type": 1}, {"version": 0, "coordinatorEpoch": 5}, "COMMIT"),
                ({"version": 0, "type": 0}, {"version": 0, "coordinatorEpoch": 6}, "ABORT")]
    # the span renderer (compiled kernel, or its Python reference), the raw and the decoded batch paths
    span = render_span_jsonl("orders", 0, data)
    assert span.consumed == len(data)
    lines = [orjson.loads(line) for line in span.data.splitlines()]
    first = struct.unpack_from(">i", data, 8)[0] + 12
    second = first + struct.unpack_from(">i", data, first + 8)[0] + 12
    for raw in (data[first:second], data[second:]):
        assert render_raw_jsonl("orders", 0, raw) == render_batch_jsonl("orders", 0, decode_batch(raw))
        b = decode_batch(raw)
        assert b"".join(render_lines("orders", 0, b, "auto", [0])) == render_batch_jsonl("orders", 0, b)
        assert orjson.dumps(record_object("orders", 0, b, 0)) + b"\n" == render_batch_jsonl("orders", 0, b)
    for line, (key, value, name) in zip(lines[1:], expected, strict=True):
        assert (line["key"], line["value"], line["control"], line["producerId"]) == (key, value, name, 9)
    # --values string / base64 show the bytes, as for any record
    b64 = orjson.loads(render_raw_jsonl("orders", 0, data[first:second], "base64"))
    assert b64["key"] == {"$base64": base64.b64encode(struct.pack(">hh", 0, 1)).decode()}
    # inside an internal topic's decoder and a registry's the same
    for topic in ("__consumer_offsets", "__transaction_state"):
        text = render_batch_jsonl(topic, 0, decode_batch(data[first:second]), decoder=decoder_for(topic))
        assert orjson.loads(text)["value"] == {"version": 0, "coordinatorEpoch": 5}


def test_consume_shows_markers_and_share_state(tmp_path):
    logdir = tmp_path / "logs"
    (logdir / "orders-0").mkdir(parents=True)
    (logdir / "orders-0" / "00000000000000000000.log").write_bytes(_markers(tmp_path))
    key, value, _k, _v = hand_built_share_snapshot()
    write_segment(logdir / "__share_group_state-0", [(key, value)])
    for target, check in (("orders-0", lambda lines: lines[1]["value"] == {"version": 0, "coordinatorEpoch": 5}),
                          ("__share_group_state-0", lambda lines: lines[0]["value"]["data"]["deliveryCompleteCount"] == 7)):
        proc = subprocess.run([sys.executable, "-m", "kafkafs.cli", "consume", str(logdir), target],
                              capture_output=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert check([orjson.loads(line) for line in proc.stdout.splitlines()])


DUMP_CASES = [
    ("offsets", "--offsets-decoder"),
    ("transactions", "--transaction-log-decoder"),
    ("share-state", "--share-group-state-decoder"),
    ("remote", "--remote-log-metadata-decoder"),
]


def _segment_for(case: str, tmp_path):
    if case == "remote":
        value, _e, _l = hand_built_remote_segment()
        records = [(None, v) for v, _ in remote_log_metadata_records()] + [(None, value)]
        records += [(None, v) for v, _ in remote_log_metadata_records(3, valid=False)]
        return write_segment(tmp_path / "__remote_log_metadata-0", records)
    records = [(k, v) for k, v, _, _ in coordinator_records(case)]
    hand = {"share-state": hand_built_share_snapshot, "transactions": hand_built_transaction_v1,
            "offsets": hand_built_streams_group}.get(case)
    if hand is not None:
        records.append(hand()[:2])
    return write_segment(tmp_path / f"{TOPICS[case]}-0", records)


def _kafkafs_dump(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "kafkafs.cli", "dump", *args], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize(("case", "flag"), DUMP_CASES)
def test_decoder_flags_print_what_kafka_dump_log_prints(case, flag, tmp_path):
    path = _segment_for(case, tmp_path)
    version = kafka_version()
    for extra in ((), ("--skip-record-metadata",)):
        ours = _kafkafs_dump("--files", str(path), flag, *extra)
        assert "$base64" not in ours and "Unknown record type" not in ours
        kafka = kafka_dump_log(version, "--files", str(path), flag, *extra)
        if kafka is None:
            pytest.skip(f"Kafka {version}'s jars are not on this machine (scripts/fetch_kafka.sh fetches them)")
        assert kafka.returncode == 0, kafka.stderr
        assert ours.splitlines() == kafka.stdout.splitlines()


def test_control_records_dump_as_kafka_dump_log_prints(tmp_path, fixtures_dir):
    folder = tmp_path / "orders-0"
    folder.mkdir()
    path = folder / "00000000000000000000.log"
    path.write_bytes(_markers(tmp_path))
    metadata = fixtures_dir / "kafka-logs-c/__cluster_metadata-0/00000000000000000000.log"
    version = kafka_version()
    for target, flags in ((path, ("--print-data-log",)), (path, ("--print-data-log", "--skip-record-metadata")),
                          (metadata, ("--cluster-metadata-decoder", "--skip-record-metadata")),
                          (metadata, ("--deep-iteration",))):
        ours = _kafkafs_dump("--files", str(target), *flags)
        kafka = kafka_dump_log(version, "--files", str(target), *flags)
        if kafka is None:
            pytest.skip(f"Kafka {version}'s jars are not on this machine (scripts/fetch_kafka.sh fetches them)")
        assert ours.splitlines() == kafka.stdout.splitlines(), flags


def test_a_tagged_nullable_struct_as_a_broker_writes_it():
    # ConsumerGroupMemberMetadataValue v0 as a Kafka 4.4.0 broker wrote it for a KIP-848 console consumer:
    # the tagged ClassicMemberMetadata (tag 0) is written even when null, its body the unsigned varint 0
    # (present: 1, then the struct), unlike a regular nullable struct's int8 -1 / 1
    from kafkafs.format.decoders.schema import message

    raw = base64.b64decode("AAAAABFjb25zb2xlLWNvbnN1bWVyCy8xMjcuMC4wLjECB29yZGVycwEABJPgAAEAAQA=")
    key = struct.pack(">h", 5) + struct.pack(">h", 4) + b"g848" + struct.pack(">h", 22) + b"wm8gLQ70RrCSDxTGzQrUEg"
    decoded = decoder_for("__consumer_offsets").value(key, raw, False)[0]
    assert decoded == {"version": 0, "data": {
        "instanceId": None, "rackId": None, "clientId": "console-consumer", "clientHost": "/127.0.0.1",
        "subscribedTopicNames": ["orders"], "subscribedTopicRegex": "", "rebalanceTimeoutMs": 300000,
        "serverAssignor": None, "classicMemberMetadata": None}}
    m = message("ConsumerGroupMemberMetadataValue")
    assert m.write(decoded["data"], 0) == raw[2:]
    present = dict(decoded["data"], classicMemberMetadata={
        "sessionTimeoutMs": 45000, "supportedProtocols": [{"name": "range", "metadata": "AAE="}]})
    body = m.write(present, 0)
    tags = body[body.index(b"\x04\x93\xe0") + 3 + 1:]  # after rebalanceTimeoutMs and serverAssignor
    assert tags[:4] == b"\x01\x00" + bytes([len(tags) - 3]) + b"\x01"  # one tag, 0, its size, marker 1
    assert m.read(struct.pack(">h", 0) + body, 0, 2) == present
