"""The mount shows records as their writers meant them (SPEC §8): Kafka's internal topics and values
framed for a Schema Registry, with ``--values string|base64`` still showing the bytes."""

from __future__ import annotations

import os
import shutil

import orjson
import pytest

from tests.registry_setup import build_registry_logdir

pytestmark = pytest.mark.fuse

if not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None:
    pytest.skip("FUSE is not available", allow_module_level=True)


def _jsonl(path):
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def test_internal_topics_in_the_mount(mounted, fixtures_dir, tmp_path):
    logdir = tmp_path / "logs"
    shutil.copytree(fixtures_dir / "kafka-logs-c", logdir)
    m = mounted(logdir)
    metadata = _jsonl(m / "__cluster_metadata-0" / "records.jsonl")
    assert len(metadata) == 4929
    assert metadata[0]["control"] == "LEADER_CHANGE" and metadata[0]["key"] == {"version": 0, "type": 2}
    assert metadata[2]["value"] == {"type": "FEATURE_LEVEL_RECORD", "version": 0,
                                    "data": {"name": "metadata.version", "featureLevel": 19}}
    assert not any("$base64" in orjson.dumps(o).decode() for o in metadata)
    offsets = _jsonl(m / "__consumer_offsets-6" / "records.jsonl")
    assert offsets[1]["key"]["data"]["group"] == "DEVSmileCDR" and offsets[1]["value"]["version"] == 3
    pretty = orjson.loads((m / "__consumer_offsets-6" / "by-offset" / "1.json").read_bytes())
    assert pretty == offsets[1]
    assert (m / "__consumer_offsets-6" / "records.jsonl").stat().st_size == len(
        (m / "__consumer_offsets-6" / "records.jsonl").read_bytes())
    # the topic settings the broker recorded in its metadata log (ConfigRecords) are the topic's
    described = orjson.loads((m / "__consumer_offsets-6" / "partition.json").read_bytes())
    assert described["config"]["segment.bytes"] == 104857600 and described["config"]["cleanup.policy"] == "compact"


def test_registry_values_in_the_mount(mounted, tmp_path):
    logdir = build_registry_logdir(tmp_path / "logs")
    m = mounted(logdir)
    orders = _jsonl(m / "orders-0" / "records.jsonl")
    assert orders[0]["valueSchemaId"] == 1 and orders[0]["keySchemaId"] == 3 and orders[0]["key"] == {"id": 0}
    assert orders[0]["value"]["blob"] == {"$base64": "AAD/"}
    events = (m / "events-0" / "records.jsonl").read_bytes()
    assert b'"value":{"kind":"click","n":1.50},"valueSchemaId":8' in events
    raw = mounted(logdir, "--values", "base64")
    lines = _jsonl(raw / "orders-0" / "records.jsonl")
    assert "valueSchemaId" not in lines[0] and "$base64" in lines[0]["value"]


def test_schemas_dir_option(mounted, tmp_path):
    from tests.registry_setup import ORDER_V1

    logdir = build_registry_logdir(tmp_path / "logs")
    shutil.rmtree(logdir / "_schemas-0")
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "1.avsc").write_bytes(orjson.dumps(ORDER_V1))
    m = mounted(logdir, "--schemas", str(schemas))
    orders = _jsonl(m / "orders-0" / "records.jsonl")
    assert orders[0]["valueSchemaId"] == 1 and "keySchemaId" not in orders[0]


def test_kafka_4_topics_and_markers_in_the_mount(mounted, tmp_path):
    # __share_group_state, __remote_log_metadata and a transactional topic's markers, in records.jsonl,
    # by-offset/ and by-time/ (SPEC §8)
    from tests.internal_records import hand_built_remote_segment, hand_built_share_snapshot, write_segment
    from tests.kafka_layout import batch, control_batch

    logdir = tmp_path / "logs"
    key, value, shown_key, shown_value = hand_built_share_snapshot()
    write_segment(logdir / "__share_group_state-0", [(key, value)])
    remote, remote_shown, _line = hand_built_remote_segment()
    write_segment(logdir / "__remote_log_metadata-0", [(None, remote)])
    (logdir / "orders-0").mkdir()
    (logdir / "orders-0" / "00000000000000000000.log").write_bytes(
        batch(0, [(b"k", b"v", ())], producer_id=9, producer_epoch=3, attributes=0x10, first_ts=1_700_000_000_000)
        + control_batch(1, 0, 6, 9, 3, 1_700_000_000_010))
    m = mounted(logdir)
    share = _jsonl(m / "__share_group_state-0" / "records.jsonl")
    assert (share[0]["key"], share[0]["value"]) == (shown_key, shown_value)
    assert orjson.loads((m / "__share_group_state-0" / "by-offset" / "0.json").read_bytes()) == share[0]
    assert _jsonl(m / "__remote_log_metadata-0" / "records.jsonl")[0]["value"] == remote_shown
    orders = _jsonl(m / "orders-0" / "records.jsonl")
    marker = {"key": {"version": 0, "type": 0}, "value": {"version": 0, "coordinatorEpoch": 6}, "control": "ABORT"}
    assert {k: orders[1][k] for k in marker} == marker
    assert orjson.loads((m / "orders-0" / "by-offset" / "1.json").read_bytes()) == orders[1]
    assert orjson.loads((m / "orders-0" / "by-time" / "1700000000010.json").read_bytes()) == orders[1]
