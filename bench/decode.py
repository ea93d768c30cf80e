"""Decode throughput: kafkafs vs kafka-python (and aiokafka when installed).

Builds a 1,000,000-record segment (about 100-byte JSON values, 100 records a batch), uncompressed and
lz4, in memory, then measures records/s for: our decode, our decode plus compact JSON rendering,
kafka-python's decoder, aiokafka's decoder if installed. Each figure is the best of --repeat runs.

    .venv/bin/python bench/decode.py [--records N] [--repeat R]
"""

from __future__ import annotations

import argparse
import random
import time

from kafkafs.format.batch import Codec, decode_batch, encode_batch, scan_batches
from kafkafs.format.jsonview import render_batch_jsonl


def build_segment(records: int, per_batch: int, codec: Codec) -> bytes:
    rng = random.Random(7)
    out = bytearray()
    ts = 1_763_700_000_000
    offset = 0
    while offset < records:
        n = min(per_batch, records - offset)
        batch = []
        for i in range(n):
            value = (
                b'{"order":%d,"customer":"c-%05d","amount":%d.%02d,"currency":"EUR","status":"paid","n":%d}'
                % (offset + i, rng.randrange(100000), rng.randrange(1000), rng.randrange(100), i)
            )
            batch.append((ts + offset + i, b"c-%05d" % rng.randrange(100000), value, ()))
        out += encode_batch(batch, base_offset=offset, compression=codec, partition_leader_epoch=0)
        offset += n
    return bytes(out)


def ours_decode(data: bytes) -> int:
    n = 0
    for header in scan_batches(data):
        batch = decode_batch(data, header)
        n += len(batch)
    return n


def ours_json(data: bytes) -> int:
    n = 0
    for header in scan_batches(data):
        batch = decode_batch(data, header)
        render_batch_jsonl("orders", 0, batch)
        n += len(batch)
    return n


def _count_with(memory_records_class, data: bytes) -> int:
    """Iterate every record with a client library's MemoryRecords, touching every field."""
    records = memory_records_class(data)
    n = 0
    while True:
        batch = records.next_batch()
        if batch is None:
            return n
        for r in batch:
            r.offset, r.timestamp, r.key, r.value, r.headers  # noqa: B018 - touch every field
            n += 1


def kafka_python(data: bytes) -> int:
    from kafka.record.memory_records import MemoryRecords

    return _count_with(MemoryRecords, data)


def aiokafka(data: bytes) -> int:
    from aiokafka.record.memory_records import MemoryRecords

    return _count_with(MemoryRecords, data)


def best_rate(fn, data: bytes, repeat: int) -> float:
    best = float("inf")
    count = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        count = fn(data)
        best = min(best, time.perf_counter() - t0)
    return count / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--per-batch", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    contenders = [("kafkafs decode", ours_decode), ("kafkafs decode + JSON", ours_json), ("kafka-python", kafka_python)]
    try:
        import aiokafka as _  # noqa: F401

        contenders.append(("aiokafka", aiokafka))
    except ImportError:
        pass

    print(f"{args.records:,} records, {args.per_batch} a batch, best of {args.repeat}")
    print(f"{'codec':<6} {'decoder':<24} {'records/s':>12} {'vs kafka-python':>16}")
    for codec in (Codec.NONE, Codec.LZ4):
        data = build_segment(args.records, args.per_batch, codec)
        rates = {name: best_rate(fn, data, args.repeat) for name, fn in contenders}
        base = rates["kafka-python"]
        for name, rate in rates.items():
            print(f"{codec.name.lower():<6} {name:<24} {rate:>12,.0f} {rate / base:>15.2f}x")
        print(f"{'':<6} segment size {len(data) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
