"""What an append may hold, against a Kafka 4.4 broker (SPEC §3, §9): a compacted topic
(``cleanup.policy=compact`` or ``compact,delete``) refuses a record without a key, a tombstone
included (``INVALID_RECORD``), and a ``CreateTime`` topic refuses a timestamp more than
``message.timestamp.after.max.ms`` (one hour by default in Kafka 4) ahead of now (``INVALID_TIMESTAMP``).

The broker judges each case over the wire (kafka-python); then, on a copy of its log directory (the
topics' settings come from its ``ConfigRecord``s), ``kafkafs produce`` and a ``--rw`` mount's
``append`` take or refuse the same, and a refused one appends nothing."""

from __future__ import annotations

import errno
import json
import os
import shutil
import time

import pytest

from .harness import kafkafs

HOUR = 3600 * 1000
TOPICS = {
    "ck": {"cleanup.policy": "compact"},
    "cd": {"cleanup.policy": "compact,delete"},
    "plain": {},
    "late": {"message.timestamp.after.max.ms": 7 * 24 * HOUR},
}


def _cases(now: int) -> list[tuple[str, dict]]:
    """(topic, record as an append line's object); timestamps relative to ``now``."""
    return [
        ("ck", {"value": "no key"}),
        ("ck", {"value": None}),  # a tombstone without a key
        ("ck", {"key": "k", "value": "v"}),
        ("ck", {"key": "k", "value": None}),  # a tombstone
        ("cd", {"value": "no key"}),
        ("cd", {"key": "k", "value": "v"}),
        ("plain", {"value": "in two hours", "timestamp": now + 2 * HOUR}),
        ("plain", {"value": "in ten minutes", "timestamp": now + HOUR // 6}),
        ("plain", {"value": "in 2001", "timestamp": 1_000_000_000_000}),
        ("late", {"value": "in two hours", "timestamp": now + 2 * HOUR}),
    ]


def _kafka_says(broker, kafka, topic: str, record: dict) -> str:
    from kafka.errors import InvalidRecordError, InvalidTimestampError

    key = None if record.get("key") is None else record["key"].encode()
    value = None if record["value"] is None else record["value"].encode()
    if key is None and value is None:  # kafka-python sends no such record: Kafka's console producer does
        out = kafka.tool("kafka-console-producer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                         "--reader-property", "null.marker=~", input=b"~\n")
        if "Compacted topic cannot accept message without key" in out.stderr + out.stdout:
            return "INVALID_RECORD"
        assert out.returncode == 0 and "rror" not in out.stderr, out.stderr
        return "appended"
    producer = broker.producer()  # a refusal is fatal to a kafka-python producer: one for each record
    try:
        producer.send(topic, key=key, value=value, timestamp_ms=record.get("timestamp")).get(timeout=30)
    except InvalidRecordError:
        return "INVALID_RECORD"
    except InvalidTimestampError:
        return "INVALID_TIMESTAMP"
    return "appended"


def _records(logdir, topic: str) -> int:
    """How many records ``topic-0`` holds now (read afresh, as another process would)."""
    from kafkafs.storage.logdir import LogDir

    with LogDir(logdir) as d:
        log = d.log(f"{topic}-0")
        return sum(1 for _ in log.records())


def test_produce_and_append_refuse_what_kafka_refuses(kafka, broker, mounted, tmp_path):
    for topic, configs in TOPICS.items():
        broker.create_topic(topic, configs=configs)
    now = int(time.time() * 1000)
    cases = _cases(now)
    said = [_kafka_says(broker, kafka, topic, record) for topic, record in cases]
    assert said == ["INVALID_RECORD", "INVALID_RECORD", "appended", "appended", "INVALID_RECORD", "appended",
                    "INVALID_TIMESTAMP", "appended", "appended", "appended"]
    broker.stop()
    copy = tmp_path / "copy"
    shutil.copytree(broker.log_dir, copy)

    # kafkafs produce: one line and exit 1 for what the broker refused, nothing appended
    for (topic, record), kafka in zip(_cases(int(time.time() * 1000)), said, strict=True):
        before = _records(copy, topic)
        out = kafkafs("produce", copy, f"{topic}-0", input=json.dumps(record).encode() + b"\n")
        if kafka == "appended":
            assert out.returncode == 0, (topic, record, out.stderr)
            assert _records(copy, topic) == before + 1
            continue
        assert out.returncode == 1, (topic, record, out.stdout, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("kafkafs: error: line 1: "), out.stderr
        expected = ("Compacted topic cannot accept message without key in topic partition "
                    f"{topic}-0" if kafka == "INVALID_RECORD" else "INVALID_TIMESTAMP")
        assert expected in lines[0], lines[0]
        assert _records(copy, topic) == before

    # the mount: the write that carries a refused line fails whole with EINVAL, nothing appended
    m = mounted(copy, "--rw")
    m.allow_errors = True  # a refused write is logged
    for (topic, record), kafka in zip(_cases(int(time.time() * 1000)), said, strict=True):
        before = _records(copy, topic)
        fd = os.open(m / f"{topic}-0/append", os.O_WRONLY | os.O_APPEND)
        try:
            data = b'{"key": "first", "value": "fine"}\n' + json.dumps(record).encode() + b"\n"
            if kafka == "appended":
                os.write(fd, data)
                os.fsync(fd)
            else:
                with pytest.raises(OSError) as info:
                    os.write(fd, data)
                assert info.value.errno == errno.EINVAL, (topic, record)
        finally:
            os.close(fd)
        assert _records(copy, topic) == before + (2 if kafka == "appended" else 0), (topic, record)
