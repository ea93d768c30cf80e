"""The benchmarks' mixed records (bench/records.py) written by a real Kafka broker: a log directory as a
broker leaves it (its segments, rolls, indexes, producer snapshots, checkpoints, ``__cluster_metadata``),
for the benchmarks to run on what brokers write, not only on what kafkafs writes.

A single-node KRaft broker of the fetched Kafka (tests/broker/harness.py; ``scripts/fetch_kafka.sh``)
takes one topic of ``--partitions`` partitions (default 200) and ``--records`` records (default
5,000,000) over its own protocol: the batches are encoded once (a pool of distinct mixed batches of 100
records, each partition cycling through it from its own place, timestamps moved forward so that every
partition's times increase, CRC made again) and sent in Produce requests (v3, acks=1) carrying one
batch per partition; the broker validates every batch, assigns offsets and leader epochs, appends,
indexes and rolls (``--segment-bytes``, default 64 MiB), then stops cleanly. The directory is kept in
``--out`` (default ``bench/out/broker-mixed``; an existing one is replaced).

    .venv/bin/python bench/broker_data.py [--partitions 200] [--records 5000000] [--out DIR]

Then, e.g. ``kafkafs mount --cache-dir /tmp/c bench/out/broker-mixed/logs /mnt/x``. Prints the time taken
and the load average.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import struct
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.records import batches  # noqa: E402
from kafkafs.format.crc import crc32c  # noqa: E402
from tests.broker.harness import Broker, find_kafka, why_missing  # noqa: E402

TOPIC = "mixed"
PER_BATCH = 100
_FIRST_TS_AT = 27  # baseOffset 8, batchLength 4, leaderEpoch 4, magic 1, crc 4, attributes 2, lastOffsetDelta 4
_CRC_AT = 17
_ATTRIBUTES_AT = 21


def shifted(batch: bytes, delta: int) -> bytes:
    """``batch`` with its base and max timestamps moved by ``delta`` ms (its records' timestamps are
    deltas from the base, so they move too) and its CRC-32C made again; base offset 0, as Kafka 4 wants
    a producer's batch (the broker assigns the offsets)."""
    out = bytearray(batch)
    out[0:8] = bytes(8)
    first, last = struct.unpack_from(">qq", out, _FIRST_TS_AT)
    struct.pack_into(">qq", out, _FIRST_TS_AT, first + delta, last + delta)
    struct.pack_into(">I", out, _CRC_AT, crc32c(memoryview(out)[_ATTRIBUTES_AT:]))
    return bytes(out)


def _string(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def produce_request(correlation: int, topic: str, parts: list[tuple[int, bytes]]) -> bytes:
    """A Produce request, version 3 (Kafka's ProduceRequest.json: transactionalId, acks, timeoutMs,
    topicData [name, partitionData [index, records]]), request header v1, with its size prefix."""
    body = bytearray(struct.pack(">hhi", 0, 3, correlation) + _string("kafkafs-bench"))
    body += _string(None) + struct.pack(">hi", 1, 60_000) + struct.pack(">i", 1) + _string(topic)
    body += struct.pack(">i", len(parts))
    for index, records in parts:
        body += struct.pack(">ii", index, len(records)) + records
    return struct.pack(">i", len(body)) + bytes(body)


def _read_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        buf += chunk
    return bytes(buf)


def read_produce_response(sock: socket.socket) -> list[tuple[int, int]]:
    """(partition, error code) of every partition of a Produce v3 response."""
    (size,) = struct.unpack(">i", _read_exact(sock, 4))
    data = _read_exact(sock, size)
    pos = 4  # correlation id
    (topics,) = struct.unpack_from(">i", data, pos)
    pos += 4
    out = []
    for _ in range(topics):
        (n,) = struct.unpack_from(">h", data, pos)
        pos += 2 + n
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for _ in range(count):
            index, error = struct.unpack_from(">ih", data, pos)
            pos += 4 + 2 + 8 + 8
            out.append((index, error))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=200)
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--pool", type=int, default=1000, help="distinct batches of 100 records (default 1000)")
    parser.add_argument("--segment-bytes", type=int, default=64 * 1024 * 1024)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "broker-mixed")
    args = parser.parse_args()
    kafka = find_kafka()
    if kafka is None:
        raise SystemExit(f"bench/broker_data.py: {why_missing()}")
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    started = time.monotonic()
    pool = list(batches("mixed", args.pool * PER_BATCH, per_batch=PER_BATCH))
    print(f"encoded {len(pool)} distinct batches in {time.monotonic() - started:.1f} s", file=sys.stderr)
    per_partition = args.records // args.partitions // PER_BATCH  # batches a partition
    broker = Broker(kafka, args.out, config={"log.segment.bytes": max(args.segment_bytes, 1 << 20),
                                             "num.io.threads": 2, "log.flush.interval.messages": 10**9})
    try:
        broker.start()
        broker.create_topic(TOPIC, args.partitions, configs={"retention.ms": -1, "retention.bytes": -1,
                                                             "message.timestamp.type": "CreateTime",
                                                             "message.timestamp.before.max.ms": 2**63 - 1})
        t0 = time.monotonic()
        sent = 0
        with socket.create_connection(("127.0.0.1", broker.port)) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            inflight = 0
            for k in range(per_partition):
                parts = []
                for p in range(args.partitions):
                    j = (p * 7 + k) % len(pool)
                    # batch j holds timestamps BASE + j*100 ..: moved to BASE + k*100 .. in this partition
                    parts.append((p, shifted(pool[j], (k - j) * PER_BATCH)))
                sock.sendall(produce_request(k, TOPIC, parts))
                inflight += 1
                if inflight == 4:  # a few requests in flight keep the broker busy while we encode
                    errors = [e for _, e in read_produce_response(sock) if e]
                    inflight -= 1
                    if errors:
                        raise SystemExit(f"the broker refused batches: error codes {sorted(set(errors))}")
                sent += args.partitions * PER_BATCH
                if k % 25 == 24:
                    rate = sent / (time.monotonic() - t0)
                    print(f"  {sent:,}/{per_partition * args.partitions * PER_BATCH:,} records ({rate:,.0f}/s)",
                          file=sys.stderr)
            while inflight:
                errors = [e for _, e in read_produce_response(sock) if e]
                inflight -= 1
                if errors:
                    raise SystemExit(f"the broker refused batches: error codes {sorted(set(errors))}")
        produced = time.monotonic() - t0
        assert broker.stop() == 0
    finally:
        broker.close()
    size = sum(f.stat().st_size for f in (args.out / "logs").rglob("*.log"))
    load = os.getloadavg()
    print(f"{sent:,} mixed records in {args.partitions} partitions through Kafka {kafka.version}: "
          f"{produced:.1f} s producing ({sent / produced:,.0f} records/s), {time.monotonic() - started:.1f} s in all, "
          f"{size / 2**20:,.0f} MiB of segments in {args.out / 'logs'} (load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f})")


if __name__ == "__main__":
    main()
