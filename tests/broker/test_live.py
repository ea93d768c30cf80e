"""Beside a live broker (the everyday use, SPEC §3 and §9): a read-only kafkafs mount of a running
broker's log directory serves what a consumer fetches over the wire.

kafka-python producers write every codec, idempotent and transactional batches (commits and aborts),
headers, null keys and values, a LogAppendTime topic, small segments (they roll). Then, while the broker
runs: every record a consumer fetched (read_uncommitted, and read_committed against the aborted ranges
of the broker's own ``.txnindex`` files) equals ``records.jsonl``; ``by-offset/`` and ``by-time/``
answer as the broker does (``by-time`` against the broker's ``offsetsForTimes``); ``kafkafs consume``
prints records.jsonl; ``tail -f`` shows a new record within a second; the mount writes no byte into
the broker's directory.

The slow run (``-m slow``, ``LIVE_RECORDS``, default 1,000,000) does the same over many more records.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from pathlib import Path

import pytest

from .harness import Broker, file_digests, kafkafs, new_workdir
from .livecheck import aborted_ranges, committed, data_lines, expected_line
from .workloads import CODECS, SMALL_SEGMENTS, produce_mix, produce_transactions

TOPICS = {"live": 3, "lat": 1, "txn": 2}


def _fill(broker: Broker, per_codec: int) -> int:
    broker.create_topic("live", partitions=3, configs=SMALL_SEGMENTS)
    broker.create_topic("lat", configs={**SMALL_SEGMENTS, "message.timestamp.type": "LogAppendTime"})
    broker.create_topic("txn", partitions=2, configs=SMALL_SEGMENTS)
    total = 0
    for n, codec in enumerate(CODECS):
        total += produce_mix(broker, "live", per_codec, codec=codec, partitions=3, seed=n, start=n * per_codec,
                             idempotent=n % 2 == 0)
    total += produce_mix(broker, "lat", max(per_codec // 4, 50), codec="zstd")
    committed_n, aborted_n = produce_transactions(broker, "txn", max(per_codec // 100, 6), 25, partitions=2,
                                                  codec="gzip")
    return total + committed_n + aborted_n


@pytest.fixture(scope="module")
def live(kafka, tmp_path_factory):
    broker = Broker(kafka, new_workdir(tmp_path_factory.mktemp("live")))
    try:
        broker.start()
        _fill(broker, int(os.environ.get("LIVE_PER_CODEC", "600")))
        yield broker
    finally:
        broker.close()


def _partitions() -> list[tuple[str, int]]:
    return [(t, p) for t, n in TOPICS.items() for p in range(n)]


def _wire(broker: Broker, isolation: str) -> dict[tuple[str, int], list[dict]]:
    out = {}
    for topic, n in TOPICS.items():
        records = broker.consume_all(topic, isolation_level=isolation)
        for p in range(n):
            out[(topic, p)] = [expected_line(r) for r in records if r.partition == p]
    return out


def _check_mount_equals_wire(broker: Broker, mnt: Path) -> int:
    """The comparisons of the module docstring, on the mount ``mnt``; returns the records compared."""
    uncommitted = _wire(broker, "read_uncommitted")
    read_committed = _wire(broker, "read_committed")
    compared = 0
    for topic, p in _partitions():
        name = f"{topic}-{p}"
        text = (mnt / name / "records.jsonl").read_text()
        lines = data_lines(text)
        wire = uncommitted[(topic, p)]
        assert len(lines) == len(wire), name
        for ours, theirs in zip(lines, wire, strict=True):
            assert ours == theirs, name
        with_pid = [json.loads(line) for line in text.splitlines() if "control" not in json.loads(line)]
        assert committed(with_pid, aborted_ranges(broker.partition_dir(name))) == read_committed[(topic, p)], name
        compared += len(wire)
    return compared


def test_the_mount_serves_what_the_broker_serves(live, mounted, kafka):
    broker = live
    before = {n: d for n, d in file_digests(broker.log_dir).items() if n.split("/")[0].split("-")[0] in TOPICS}
    m = mounted(broker.log_dir)
    compared = _check_mount_equals_wire(broker, m.path)
    assert compared > 3000
    print(f"records compared with the wire: {compared}")

    # by-offset and by-time, against the records and the broker's own offsetsForTimes
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    try:
        for topic, p in _partitions():
            name = f"{topic}-{p}"
            lines = [json.loads(line) for line in (m / name / "records.jsonl").read_text().splitlines()]
            for obj in lines[:: max(1, len(lines) // 25)]:
                one = json.loads((m / name / "by-offset" / f"{obj['offset']}.json").read_text())
                assert one == obj, (name, obj["offset"])
                ts = obj["timestamp"]
                want = consumer.offsets_for_times({TopicPartition(topic, p): ts})[TopicPartition(topic, p)]
                got = json.loads((m / name / "by-time" / f"{ts}.json").read_text())
                assert want is not None and got["offset"] == want.offset and got["timestamp"] == want.timestamp, name
    finally:
        consumer.close()

    # kafkafs consume prints records.jsonl, byte for byte
    for topic, p in _partitions():
        name = f"{topic}-{p}"
        done = kafkafs("consume", broker.log_dir, name)
        assert done.returncode == 0, done.stderr
        assert done.stdout == (m / name / "records.jsonl").read_text(), name

    after = {n: d for n, d in file_digests(broker.log_dir).items() if n.split("/")[0].split("-")[0] in TOPICS}
    assert after == before  # nothing produced meanwhile: every byte as the broker left it, no file added


@pytest.mark.slow
def test_a_million_records_beside_the_broker(kafka, make_broker, mounted):
    """The slow run: ``LIVE_RECORDS`` (default 1,000,000) records of every codec through the broker,
    the same comparisons on all of them, and the broker's directory unchanged by the mount."""
    broker = make_broker()
    total = _fill(broker, int(os.environ.get("LIVE_RECORDS", "1000000")) // len(CODECS))
    before = {n: d for n, d in file_digests(broker.log_dir).items() if n.split("/")[0].split("-")[0] in TOPICS}
    m = mounted(broker.log_dir)
    compared = _check_mount_equals_wire(broker, m.path)
    m.stop()
    after = {n: d for n, d in file_digests(broker.log_dir).items() if n.split("/")[0].split("-")[0] in TOPICS}
    assert after == before
    print(f"slow run: {total} records produced, {compared} compared with the wire, 0 mismatches; "
          f"{len(before)} files of the broker's partitions byte-unchanged")


def test_tail_follows_the_broker_within_a_second(live, mounted):
    broker = live
    m = mounted(broker.log_dir)
    path = m / "live-1" / "records.jsonl"
    tail = subprocess.Popen(["tail", "-n", "0", "-f", str(path)], stdout=subprocess.PIPE)
    try:
        time.sleep(0.5)  # tail has opened the file and reached its end
        producer = broker.producer(linger_ms=0)
        marker = f"tail-marker-{time.time_ns()}"
        sent = time.monotonic()
        producer.send("live", value=marker.encode(), partition=1).get(timeout=10)
        seen = ""
        deadline = sent + 5
        while marker not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([tail.stdout], [], [], 0.05)
            if ready:
                seen += os.read(tail.stdout.fileno(), 65536).decode()
        delay = time.monotonic() - sent
        assert marker in seen, seen
        line = json.loads(next(ln for ln in seen.splitlines() if marker in ln))
        assert line["value"] == marker and line["partition"] == 1
        print(f"tail -f showed the record {delay * 1000:.0f} ms after the broker acknowledged it")
        assert delay < 1.0
    finally:
        tail.kill()
        tail.wait()
