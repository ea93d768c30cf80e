"""R15-7, Kafka as the judge: a record whose batch inflates past 64 MiB (80 MiB of one byte, a few KB
compressed: ``max.message.bytes`` bounds the compressed batch) is data Kafka accepts, stores and serves.
kafkafs calls it no damage: ``verify`` checks its records a piece at a time (exit 0), ``recover`` keeps it (exit 0, nothing cut, and
the broker loads the directory again and serves every offset), ``consume`` reads it a piece at a time and
prints every record as the wire has it, the 80 MiB ones too (exit 0)."""

from __future__ import annotations

import json

import pytest

from tests.broker.harness import file_digests, kafkafs

BIG = 80 << 20
CODECS = ("zstd", "gzip", "lz4")
FETCH = {"fetch_max_bytes": 200 << 20, "max_partition_fetch_bytes": 200 << 20}


@pytest.mark.slow
def test_kafka_serves_a_batch_past_64_mib_and_kafkafs_reads_around_it(broker):
    broker.create_topic("big", 1, configs={"compression.type": "producer"})
    for codec in CODECS:
        producer = broker.producer(compression_type=codec, max_request_size=200 << 20,
                                   acks="all", batch_size=1 << 20)
        producer.send("big", key=codec.encode(), value=b"A" * BIG)
        producer.send("big", key=b"after-" + codec.encode(), value=b"small")
        producer.flush()
        producer.close()
    wire = broker.consume_all("big", 0, **FETCH)
    assert [(r.offset, r.key, len(r.value)) for r in wire] == [
        (2 * i + j, key, size) for i, codec in enumerate(CODECS)
        for j, (key, size) in enumerate(((codec.encode(), BIG), (b"after-" + codec.encode(), 5)))]
    assert broker.stop() == 0
    logdir = broker.log_dir

    verified = kafkafs("verify", logdir)  # their records decoded a piece at a time: checked, no note
    assert verified.returncode == 0, verified.stdout
    assert "big-0: 1 segment(s), 6 records" in verified.stdout, verified.stdout
    assert "inflates past" not in verified.stdout and "not decoded" not in verified.stdout, verified.stdout

    # read a piece at a time (R15-7 step 2): every record as the wire has it, the 80 MiB ones too
    consumed = kafkafs("consume", logdir, "big-0")
    assert (consumed.returncode, consumed.stderr) == (0, "")
    shown = [json.loads(line) for line in consumed.stdout.splitlines()]
    assert [(r["offset"], r["key"], r["value"]) for r in shown] == [
        (r.offset, r.key.decode(), r.value.decode()) for r in wire]

    before = file_digests(broker.partition_dir("big-0"))
    recovered = kafkafs("recover", logdir)
    assert recovered.returncode == 0, (recovered.stdout, recovered.stderr)
    assert "kept" not in recovered.stdout
    after = file_digests(broker.partition_dir("big-0"))
    logs = sorted(name for name in before if name.endswith(".log"))
    assert logs and all(after[name] == before[name] for name in logs)  # no byte of the data changed

    broker.start()  # Kafka loads what recover left and serves every offset again
    broker.assert_no_log_lines(r"ERROR|Corrupt", partition="big-0")
    again = broker.consume_all("big", 0, **FETCH)
    assert [(r.offset, r.key, len(r.value)) for r in again] == [(r.offset, r.key, len(r.value)) for r in wire]
