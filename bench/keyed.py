"""A keyed partition for the key benchmarks and the slow key tests: bench/records.py's ``mixed`` records
(JSON, text, binary values, headers, keyless records, tombstones), each keyed record's key drawn from a
space of ``keys`` keys of every kind a key index must name: plain UTF-8, UTF-8 with ``/``, ``%``, a
leading ``.`` or ``$`` and non-ASCII letters, binary (not UTF-8), the empty key, and huge keys (300
bytes and more: their names are digests).

    from bench.keyed import build, key_bytes
    build(Path("/tmp/logs"), records=10_000_000, keys=1_000_000)   # topic kv, partition 0
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

from bench.records import records as mixed_records
from kafkafs.format.batch import encode_batch

__all__ = ["key_bytes", "keyed_rows", "build", "TOPIC"]

TOPIC = "kv"


def key_bytes(k: int) -> bytes:
    """Key number ``k`` of the space (the same bytes for the same number, always)."""
    kind = k % 20
    if k == 0:
        return b""
    if kind == 1:
        return bytes([0xFF, 0xFE]) + k.to_bytes(4, "big")  # not UTF-8
    if kind == 2:
        return f"Zürich/{k}%".encode()
    if kind == 3:
        return b".hidden-%d" % k
    if kind == 4:
        return b"$dollar-%d" % k
    if kind == 5 and k % 100 == 5:
        return b"huge-%d-" % k + b"x" * 300 + ("é" * 20).encode()
    return b"customer-%07d" % k


def keyed_rows(records: int, keys: int, seed: int = 1, start: int = 0) -> Iterator[tuple]:
    """``(timestamp, key, value, headers)`` rows: mixed records, keyed ones re-keyed from the space."""
    rng = random.Random(seed)
    for ts, key, value, headers in mixed_records("mixed", records, start, seed):
        if key is not None:
            key = key_bytes(rng.randrange(keys))
        yield ts, key, value, headers


def build(logdir: Path, records: int, keys: int, *, segment_bytes: int = 256 * 1024 * 1024, seed: int = 1,
          batch: int = 100) -> None:
    """Write ``kv-0`` under ``logdir``: ``records`` rows in batches of ``batch``, then a roll and one more
    batch (so nearly everything is in sealed segments, and the active segment is small)."""
    from kafkafs.storage.config import Settings
    from kafkafs.storage.logdir import LogDir

    logdir.mkdir(parents=True, exist_ok=True)
    settings = Settings({"segment.bytes": segment_bytes}, {TOPIC: {"cleanup.policy": "compact"}})
    with LogDir(logdir, settings, writable=True) as d:
        log = d.create_partition(TOPIC, 0)
        rows: list[tuple] = []
        pending: list[bytes] = []
        for row in keyed_rows(records, keys, seed):
            rows.append(row)
            if len(rows) == batch:
                pending.append(encode_batch(rows))
                rows = []
                if len(pending) == 100:
                    log.append_batches(b"".join(pending))
                    pending = []
        if rows:
            pending.append(encode_batch(rows))
        if pending:
            log.append_batches(b"".join(pending))
        log.roll()
        log.append_records([(None, key_bytes(7), b"after the roll", ())])
