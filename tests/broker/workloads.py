"""What the broker tests write through a real broker with kafka-python: every codec, idempotent and
transactional producers (commits and aborts), headers, null keys and values, a LogAppendTime topic,
small segments, consumer group commits. The values are a fixed mix (text, compact JSON, binary, empty,
null), so that the JSON view's rules all show.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable

from .harness import Broker

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")

#: small segments for Kafka 4 (it refuses segment.bytes below 1 MiB; Kafka's own tests use this one)
SMALL_SEGMENTS = {"internal.segment.bytes": 16384, "index.interval.bytes": 1024}


def value_of(i: int, rng: random.Random) -> bytes | None:
    kind = i % 9
    if kind == 0:
        return b"plain text %d" % i
    if kind == 1:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))) + b"\xff"
    if kind == 2:
        return None
    if kind == 3:
        return b""
    if kind == 4:
        return b'["list",%d,true,null]' % i
    if kind == 5:
        return f"unicode é ✓ {i}".encode()
    return b'{"order":%d,"amount":%d,"tags":["a","b"],"note":"q\\"uote"}' % (i, rng.randrange(10**6))


def key_of(i: int) -> bytes | None:
    if i % 5 == 0:
        return None
    if i % 11 == 0:
        return b'{"id":%d}' % (i % 17)
    return b"key-%d" % (i % 23)


def headers_of(i: int) -> list[tuple[str, bytes]] | None:
    if i % 4 == 0:
        return [("trace", b"t-%d" % i), ("bin", b"\x00\x01\xfe")]
    if i % 13 == 0:
        return [("empty", b"")]
    return None


def record_of(i: int, rng: random.Random) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes]] | None]:
    """Record ``i`` of the mix: (key, value, headers); never both key and value null (kafka-python
    refuses that)."""
    key, value = key_of(i), value_of(i, rng)
    if key is None and value is None:
        value = b"no key %d" % i
    return key, value, headers_of(i)


def produce_mix(broker: Broker, topic: str, count: int, *, codec: str = "none", partitions: int = 1,
                seed: int = 1, start: int = 0, idempotent: bool = False, batch_size: int = 16384,
                linger_ms: int = 5, keyed: bool = False, **producer_kw) -> int:
    """``count`` records of the fixed mix to ``topic`` (round robin over ``partitions``); ``keyed``: no
    null key (a compacted topic refuses them)."""
    rng = random.Random(seed)
    producer = broker.producer(compression_type=None if codec == "none" else codec, batch_size=batch_size,
                               linger_ms=linger_ms, enable_idempotence=idempotent,
                               acks="all" if idempotent else 1, **producer_kw)
    for i in range(start, start + count):
        key, value, headers = record_of(i, rng)
        if keyed and key is None:
            key = b"key-none-%d" % (i % 7)
        producer.send(topic, key=key, value=value, headers=headers, partition=i % partitions)
    producer.flush()
    return count


def produce_transactions(broker: Broker, topic: str, transactions: int, per_txn: int, *, codec: str = "none",
                         partitions: int = 1, abort_every: int = 3, txn_id: str = "tx-1", seed: int = 2) -> tuple[int, int]:
    """Transactions of ``per_txn`` records each; every ``abort_every``-th is aborted. Returns
    (committed, aborted) record counts."""
    rng = random.Random(seed)
    producer = broker.producer(transactional_id=txn_id, enable_idempotence=True, acks="all",
                               compression_type=None if codec == "none" else codec, linger_ms=2)
    producer.init_transactions()
    committed = aborted = 0
    i = 0
    for t in range(transactions):
        producer.begin_transaction()
        for _ in range(per_txn):
            key, value, headers = record_of(i, rng)
            producer.send(topic, key=key, value=value, headers=headers, partition=i % partitions)
            i += 1
        producer.flush()
        if abort_every and t % abort_every == abort_every - 1:
            producer.abort_transaction()
            aborted += per_txn
        else:
            producer.commit_transaction()
            committed += per_txn
    return committed, aborted


def wait_transactions_settled(broker: Broker, topic: str, partitions: Iterable[int] = (0,),
                              timeout: float = 60.0) -> None:
    """Wait until every transaction on ``topic``'s ``partitions`` has its marker in the log (the last
    stable offset, what a read_committed consumer may read to, equals the log end offset).
    ``commit_transaction``/``abort_transaction`` return once the coordinator has decided; it writes
    the markers after that. A broker stopped before they are written writes them when it starts
    again, so its log would no longer be the one copied at the stop."""
    from kafka import TopicPartition

    tps = [TopicPartition(topic, p) for p in partitions]
    committed = broker.consumer(isolation_level="read_committed")
    uncommitted = broker.consumer(isolation_level="read_uncommitted")
    deadline = time.monotonic() + timeout
    while True:
        stable, end = committed.end_offsets(tps), uncommitted.end_offsets(tps)
        if stable == end:
            return
        assert time.monotonic() < deadline, f"transactions on {topic} still open: stable {stable}, end {end}"
        time.sleep(0.1)


def commit_group_offsets(broker: Broker, topics: Iterable[str], group: str = "readers") -> None:
    """A consumer group reads the topics and commits: ``__consumer_offsets`` gets its records."""
    from kafka import TopicPartition

    consumer = broker.consumer(group_id=group, enable_auto_commit=False)
    tps = []
    for topic in topics:
        tps += [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    for _ in range(3):
        consumer.poll(timeout_ms=500, max_records=200)
        consumer.commit()
    consumer.close()
