"""Helpers shared by the Spark tests that need no Spark session."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from kafkafs.spark.options import parse_read_options
from kafkafs.spark.plan import Plan, plan_read
from kafkafs.spark.predicates import NO_PREDICATES, Predicates
from kafkafs.spark.scan import read_split


def flip_byte(segment: Path, position: int) -> Path:
    """Spoil the byte at ``position`` of ``segment`` (a ``.log``: that batch's CRC fails); return the path."""
    data = bytearray(segment.read_bytes())
    data[position] ^= 0xFF
    segment.write_bytes(bytes(data))
    return segment


def arrow_rows(batches) -> list[tuple]:
    """Arrow batches of the kafkalog schema as the tuples of ``conftest.df_rows``."""
    batches = list(batches)
    if not batches:
        return []
    table = pa.Table.from_batches(batches)
    millis = table.column("timestamp").cast(pa.int64()).to_pylist()
    out = []
    for i, r in enumerate(table.to_pylist()):
        hs = None if r.get("headers") is None else [(h["key"], h["value"]) for h in r["headers"]]
        out.append((r["topic"], r["partition"], r["offset"], millis[i] // 1000, r["timestampType"], r["key"], r["value"], hs))
    return sorted(out, key=lambda r: (r[0], r[1], r[2]))


def plan(path: Path | str, predicates: Predicates = NO_PREDICATES, **options) -> Plan:
    """The plan of a read with headers (as ``conftest.engine_rows`` has them) unless told otherwise."""
    opts = {"path": str(path), "includeHeaders": "true", **{k: str(v) for k, v in options.items()}}
    return plan_read(parse_read_options(opts), predicates)


def read_plan(p: Plan) -> list[tuple]:
    return arrow_rows(b for s in p.splits for b in read_split(s))


def kafka_python_decode(logdir: Path | str) -> list[tuple]:
    """(topic, partition, offset, timestamp, key, value, headers) of every record in every segment file,
    decoded by kafka-python, each batch's CRC checked by it."""
    from kafka.record.memory_records import MemoryRecords

    from kafkafs.storage.names import parse_partition_dir_name

    out = []
    for part in sorted(Path(logdir).iterdir()):
        if not part.is_dir() or part.name.startswith("."):
            continue
        topic, partition = parse_partition_dir_name(part.name)
        for seg in sorted(part.glob("*.log")):
            data = seg.read_bytes()
            records = MemoryRecords(data)
            while records.has_next():
                batch = records.next_batch()
                assert batch.validate_crc(), f"{seg}: CRC of the batch at {batch.base_offset}"
                for r in batch:
                    out.append((topic, partition, r.offset, r.timestamp, r.key, r.value, list(r.headers)))
            assert records.valid_bytes() == len(data), f"{seg}: trailing bytes"
    return out
