"""``kafkafs clean`` against Kafka's own LogCleaner (SPEC §2, §9).

A broker takes keyed records, tombstones, transactions (commits and aborts), idempotent batches and
keyless records into a topic of small segments that is not compacted yet (a compacted topic refuses
keyless records; they come from before it was compacted, as in the field). The broker stops and the
log directory is copied. The broker starts again, the topic becomes ``cleanup.policy=compact``
(``kafka-configs``), and its LogCleaner cleans it (``min.cleanable.dirty.ratio=0.01``, a short
``log.cleaner.backoff.ms``). ``kafkafs clean`` cleans the copy with the same settings. Then, segment by
segment: the same segment files, the same batches (offsets, counts, producer fields, attributes), the
same records (offsets, timestamps, keys, values, headers), and the same bytes for every batch whose
bytes Kafka's rules decide: a batch given a delete horizon carries the cleaner's clock (its base
timestamp and CRC), so only its decoded records are compared.
"""

from __future__ import annotations

import shutil
import struct
import time
from pathlib import Path

from tests.kafka_layout import checkpoint_offset

from .harness import kafkafs
from .workloads import produce_transactions, wait_transactions_settled

TOPIC = "cmp"
SEGMENT_BYTES = 4096
_HEADER = struct.Struct(">qiiBIhiqqqhii")


def _batches(path: Path) -> list[dict]:
    """Every batch of a ``.log``: its header fields (read with struct from Kafka's documented layout),
    its records as kafka-python decodes them, and its bytes."""
    from kafka.record.memory_records import MemoryRecords

    data = path.read_bytes()
    out = []
    pos = 0
    records = MemoryRecords(data)
    while pos + 61 <= len(data):
        (base, length, epoch, magic, crc, attrs, last_delta, first_ts, max_ts, pid, pepoch, seq,
         count) = _HEADER.unpack_from(data, pos)
        batch = records.next_batch()
        assert batch is not None and batch.base_offset == base and magic == 2
        raw = data[pos:pos + 12 + length]
        out.append({
            "baseOffset": base, "lastOffsetDelta": last_delta, "count": count, "attributes": attrs,
            "producerId": pid, "producerEpoch": pepoch, "baseSequence": seq, "partitionLeaderEpoch": epoch,
            "maxTimestamp": max_ts, "horizon": bool(attrs & 0x40),
            "records": [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in batch],
            "bytes": raw,
        })
        pos += 12 + length
    assert pos == len(data), f"{path}: {len(data) - pos} bytes after the last batch"
    return out


def _without_clock(batch: dict) -> dict:
    """A batch as compared when its bytes carry the cleaner's clock (a delete horizon)."""
    return {k: v for k, v in batch.items() if k not in ("bytes", "maxTimestamp") or not batch["horizon"]}


def _fill(broker) -> None:
    broker.create_topic(TOPIC, configs={"internal.segment.bytes": SEGMENT_BYTES, "min.cleanable.dirty.ratio": "0.01",
                                        "segment.ms": 3_600_000})
    plain = broker.producer(linger_ms=2, batch_size=2048)
    idem = broker.producer(linger_ms=2, batch_size=2048, enable_idempotence=True, acks="all", compression_type="gzip")
    for i in range(900):
        key = b"k%d" % (i % 37)
        if i % 41 == 0:
            plain.send(TOPIC, key=key, value=None)  # a tombstone
        elif i % 29 == 0:
            plain.send(TOPIC, key=None, value=b"keyless %d" % i)
        elif i % 3 == 0:
            idem.send(TOPIC, key=key, value=b"idempotent %d" % i, headers=[("h", b"%d" % i)])
        else:
            plain.send(TOPIC, key=key, value=b"value %d " % i + b"x" * (i % 50))
        if i % 150 == 149:
            plain.flush()
            idem.flush()
            produce_transactions(broker, TOPIC, 3, 8, abort_every=2, txn_id=f"tx-{i}", seed=i)
    plain.flush()
    idem.flush()
    for i in range(20):  # the active segment's records, which no cleaner touches
        plain.send(TOPIC, key=b"k%d" % i, value=b"last %d" % i)
    plain.flush()
    wait_transactions_settled(broker, TOPIC)


def _cleaned_to(logs: Path) -> int | None:
    return checkpoint_offset(logs / "cleaner-offset-checkpoint", TOPIC, 0)


def test_clean_keeps_what_kafkas_cleaner_keeps(make_broker, kafka, tmp_path):
    broker = make_broker({"log.cleaner.backoff.ms": 200, "log.cleaner.threads": 1})
    _fill(broker)
    assert broker.stop() == 0
    part = broker.partition_dir(f"{TOPIC}-0")
    active = max(int(p.name[:20]) for p in part.glob("*.log"))
    assert len(list(part.glob("*.log"))) >= 4
    copy = tmp_path / "copy"
    shutil.copytree(broker.log_dir, copy)
    (copy / ".lock").unlink(missing_ok=True)

    # the broker's cleaner, once the topic is compacted
    broker.start()
    done = kafka.tool("kafka-configs", "--bootstrap-server", broker.bootstrap, "--alter", "--entity-type", "topics",
                      "--entity-name", TOPIC, "--add-config", "cleanup.policy=compact")
    assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + 60
    while _cleaned_to(broker.log_dir) != active:
        assert time.monotonic() < deadline, f"Kafka's cleaner did not clean {TOPIC}-0 up to {active}"
        time.sleep(0.2)
    assert broker.stop() == 0
    # what Kafka's cleaner left (aborted transactions' data gone, their .txnindex entries kept) is no damage
    checked = kafkafs("verify", broker.log_dir)
    assert checked.returncode == 0, checked.stdout + checked.stderr

    # kafkafs on the copy, with the same settings
    config = tmp_path / "kafkafs.toml"
    config.write_text(f'[topics."{TOPIC}"]\n"cleanup.policy" = "compact"\n"segment.bytes" = {SEGMENT_BYTES}\n'
                      '"min.cleanable.dirty.ratio" = 0.01\n')
    done = kafkafs("clean", copy, "--config", config)
    assert done.returncode == 0, done.stderr
    assert _cleaned_to(copy) == active, done.stdout

    theirs = sorted(p.name for p in part.glob("*.log"))
    ours = sorted(p.name for p in (copy / f"{TOPIC}-0").glob("*.log"))
    assert ours == theirs
    records = batches = byte_equal = 0
    for name in theirs:
        a, b = _batches(part / name), _batches(copy / f"{TOPIC}-0" / name)
        ca, cb = [_without_clock(x) for x in a], [_without_clock(x) for x in b]
        for i, (x, y) in enumerate(zip(ca, cb, strict=False)):
            diff = {k: (x[k], y.get(k)) for k in x if x[k] != y.get(k)}
            assert not diff, f"{name} batch {i} at offset {x['baseOffset']}: (kafka, kafkafs) {diff}"
        assert len(ca) == len(cb), (name, [x["baseOffset"] for x in ca], [y["baseOffset"] for y in cb])
        if not any(x["horizon"] for x in a):
            assert (copy / f"{TOPIC}-0" / name).read_bytes() == (part / name).read_bytes(), name
            byte_equal += 1
        records += sum(len(x["records"]) for x in a)
        batches += len(a)
    print(f"compaction vs Kafka's cleaner: {len(theirs)} segments, {batches} batches, {records} records equal; "
          f"{byte_equal} segment files byte-equal (the others hold batches with a delete horizon)")
