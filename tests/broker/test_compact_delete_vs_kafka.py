"""``kafkafs clean`` of a ``cleanup.policy=compact,delete`` topic against Kafka's LogCleaner (SPEC §9;
review17 R17-1).

Keys written once, then many updates of three hot keys, a record a batch, into a topic of 2 KiB
segments that is not compacted yet. The broker stops and its log directory is copied. The broker starts
again, the topic becomes ``compact,delete`` with a ``retention.bytes`` that the log as written passes
by far and the compacted log passes by a segment or two; its LogCleaner compacts and then deletes by
size (Kafka's retention task leaves compacted logs to the cleaner). ``kafkafs clean --dry-run``, then
``kafkafs clean``, on the copy with the same settings: the dry run says what the run does, and the
segments, batches, records and log start offset are Kafka's. kafkafs used to delete by size first, by
the sizes as written, and lost every key written once. tests/storage/test_compact_then_delete.py
holds the order without a broker. And with ``log.cleaner.enable=false`` a broker applies no retention
to a compacted log at all (its retention task skips them; their retention is the cleaner's), nor does
``kafkafs clean``.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from tests.kafka_layout import checkpoint_offset

from .harness import kafkafs
from .test_compaction_vs_kafka import _batches, _without_clock

TOPIC = "cd"
SEGMENT_BYTES = 2048
UNIQUE, HOT = 80, 240
RETENTION_BYTES = 6000


def _checkpoint(logs: Path, name: str) -> int | None:
    return checkpoint_offset(logs / name, TOPIC, 0)


def _settled(part: Path, seconds: float = 2.0, limit: float = 60) -> None:
    """Until the partition's files (what the cleaner's deletions leave) stay the same ``seconds``."""
    deadline = time.monotonic() + limit
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        names = sorted(p.name for p in part.iterdir())
        if names != last:
            last, since = names, time.monotonic()
        elif time.monotonic() - since >= seconds and not any(n.endswith((".cleaned", ".swap")) for n in names):
            return
        time.sleep(0.2)
    raise AssertionError(f"{part}: still changing after {limit} s")


@pytest.mark.slow  # two broker runs and 320 one-record batches: about half a minute
def test_clean_compacts_then_deletes_as_kafkas_cleaner_does(make_broker, kafka, tmp_path):
    broker = make_broker({"log.cleaner.backoff.ms": 200, "log.retention.check.interval.ms": 500,
                          "log.segment.delete.delay.ms": 0})
    broker.create_topic(TOPIC, configs={"internal.segment.bytes": SEGMENT_BYTES, "segment.ms": 3_600_000,
                                        "retention.ms": -1})
    producer = broker.producer(linger_ms=0, batch_size=1)
    for i in range(UNIQUE):
        producer.send(TOPIC, partition=0, key=b"u%03d" % i, value=b"only value of u%03d" % i)
    for i in range(HOT):
        producer.send(TOPIC, partition=0, key=b"hot%d" % (i % 3), value=b"update %d " % i + b"h" * 40)
    producer.flush()
    assert broker.stop() == 0
    part = broker.partition_dir(f"{TOPIC}-0")
    active = max(int(p.name[:20]) for p in part.glob("*.log"))
    written = sum(p.stat().st_size for p in part.glob("*.log"))
    assert written > 4 * RETENTION_BYTES
    copy = tmp_path / "copy"
    shutil.copytree(broker.log_dir, copy)
    (copy / ".lock").unlink(missing_ok=True)

    broker.start()
    done = kafka.tool("kafka-configs", "--bootstrap-server", broker.bootstrap, "--alter", "--entity-type", "topics",
                      "--entity-name", TOPIC, "--add-config",
                      f"cleanup.policy=[compact,delete],min.cleanable.dirty.ratio=0.01,retention.bytes={RETENTION_BYTES}")
    assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + 60
    while _checkpoint(broker.log_dir, "cleaner-offset-checkpoint") != active:
        assert time.monotonic() < deadline, f"Kafka's cleaner did not clean {TOPIC}-0 up to {active}"
        time.sleep(0.2)
    _settled(part)
    assert broker.stop() == 0

    config = tmp_path / "kafkafs.toml"  # the topic's own settings come from the copy's __cluster_metadata
    config.write_text(f'[topics."{TOPIC}"]\n"cleanup.policy" = "compact,delete"\n"min.cleanable.dirty.ratio" = 0.01\n'
                      f'"retention.bytes" = {RETENTION_BYTES}\n')
    predicted = kafkafs("clean", copy, "--config", config, "--dry-run")
    assert predicted.returncode == 0, predicted.stderr
    done = kafkafs("clean", copy, "--config", config)
    assert done.returncode == 0, done.stderr
    said = done.stdout.splitlines()
    assert [line.replace("would delete", "deleted").replace("would compact", "compacted")
            for line in predicted.stdout.splitlines()] == said
    assert any(" deleted " in line for line in said) and any(" compacted " in line for line in said), said

    theirs = sorted(p.name for p in part.glob("*.log"))
    ours = sorted(p.name for p in (copy / f"{TOPIC}-0").glob("*.log"))
    assert ours == theirs, said
    start = int(theirs[0][:20])
    assert start > 0, "Kafka deleted no segment by size"
    assert _checkpoint(copy, "log-start-offset-checkpoint") == _checkpoint(broker.log_dir, "log-start-offset-checkpoint")
    keys = set()
    for name in theirs:
        a, b = _batches(part / name), _batches(copy / f"{TOPIC}-0" / name)
        assert [_without_clock(x) for x in b] == [_without_clock(x) for x in a], name
        keys |= {r[2] for x in a for r in x["records"]}
    once = [k for k in keys if k.startswith(b"u")]
    assert 0 < len(once) < UNIQUE, f"the size retention Kafka applied kept {len(once)} of the {UNIQUE} keys written once"
    print(f"compact,delete vs Kafka's cleaner: {len(theirs)} segments equal, log start {start}, "
          f"{len(once)} of {UNIQUE} keys written once kept, as Kafka")


@pytest.mark.slow  # a broker run with three retention checks' wait: about 15 s
def test_without_a_cleaner_kafka_applies_no_retention_to_a_compacted_log(make_broker, kafka, tmp_path):
    """log.cleaner.enable=false: the broker's retention task still skips compacted logs (their retention
    is the cleaner's), so a compact,delete topic keeps every segment while a delete topic beside it with
    the same retention.bytes loses its old ones; kafkafs clean does as the broker did."""
    broker = make_broker({"log.cleaner.enable": "false", "log.retention.check.interval.ms": 300,
                          "log.segment.delete.delay.ms": 0, "log.initial.task.delay.ms": 0})
    configs = {"internal.segment.bytes": SEGMENT_BYTES, "segment.ms": 3_600_000, "retention.bytes": 2000}
    broker.create_topic(TOPIC, configs=dict(configs, **{"cleanup.policy": "compact,delete"}))
    broker.create_topic("plain", configs=configs)
    producer = broker.producer(linger_ms=0, batch_size=1)
    for topic in (TOPIC, "plain"):
        for i in range(60):
            producer.send(topic, partition=0, key=b"k%d" % (i % 3), value=b"value %d " % i + b"v" * 40)
    producer.flush()
    plain = broker.partition_dir("plain-0")
    deadline = time.monotonic() + 60
    while min(int(p.name[:20]) for p in plain.glob("*.log")) == 0:
        assert time.monotonic() < deadline, "the broker's retention task did not delete by size"
        time.sleep(0.2)
    time.sleep(1.5)  # five more retention checks
    assert broker.stop() == 0
    part = broker.partition_dir(f"{TOPIC}-0")
    theirs = sorted(p.name for p in part.glob("*.log"))
    assert theirs[0] == "00000000000000000000.log" and len(theirs) > 2

    copy = tmp_path / "copy"  # the topics' settings come with it, in __cluster_metadata
    shutil.copytree(broker.log_dir, copy)
    (copy / ".lock").unlink(missing_ok=True)
    done = kafkafs("clean", copy, "--set", "log.cleaner.enable=false")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (copy / f"{TOPIC}-0").glob("*.log")) == theirs, done.stdout
    assert f"{TOPIC}-0:" not in done.stdout
