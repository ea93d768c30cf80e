"""The mount's part of bench/keys.py (``--mount``): by-key/<name>.json against by-offset/N.json, and
``cat table.jsonl`` with the daemon's peak RSS, on the keyed partition with its key indexes built."""

from __future__ import annotations

import os
import random
import statistics
import time
from pathlib import Path

from bench.fs import Mounted, by_offset_latency, cat
from bench.keyed import key_bytes
from kafkafs.format.keynames import key_name
from kafkafs.storage.logdir import LogDir

__all__ = ["measure_mount"]


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _existing_keys(logs: Path, keys: int, want: int, seed: int) -> list[bytes]:
    """``want`` keys of the space that have a record (drawn at random, checked through the engine's
    key index, which the mount shares)."""
    from kafkafs.storage.keyindex import KeyIndexStore
    from kafkafs.storage.keytable import PartitionKeys

    rng = random.Random(seed)
    out: list[bytes] = []
    with LogDir(logs) as logdir:
        found = PartitionKeys(logdir.log("kv-0"), KeyIndexStore(None), build=False)
        while len(out) < want:
            key = key_bytes(rng.randrange(keys))
            if found.latest(key) is not None:
                out.append(key)
    return out


def by_key_latency(part: Path, names: list[str]) -> tuple[float, float]:
    for name in names[:50]:  # warm-up: the loop, the workers, each segment's index opened
        (part / "by-key" / f"{name}.json").read_bytes()
    lat = []
    for name in names[50:]:
        start = time.perf_counter()
        with open(part / "by-key" / f"{name}.json", "rb") as f:
            f.read()
        lat.append(time.perf_counter() - start)
    lat.sort()
    return statistics.median(lat) * 1e3, lat[int(len(lat) * 0.99) - 1] * 1e3


def measure_mount(logs: Path, cache: Path, args) -> list[tuple[str, str, str]]:
    rows = []
    with LogDir(logs) as logdir:
        records = logdir.log("kv-0").log_end_offset
    samples = 2000
    keys = _existing_keys(logs, args.keys, samples + 50, 11)
    names = [key_name(k) for k in keys]
    work = logs.parent
    before = _load()
    m = Mounted(logs, work / "mnt", "--cache-dir", str(cache))
    try:
        part = work / "mnt" / "kv-0"
        off50, off99 = by_offset_latency(part, records, samples)
        key50, key99 = by_key_latency(part, names)
    finally:
        m.close()
    rows.append(("by-key/<name>.json vs by-offset/N.json, open+read, p50 / p99",
                 f"{key50:.2f} / {key99:.2f} ms vs {off50:.2f} / {off99:.2f} ms: p50 ratio {key50 / off50:.2f}x",
                 f"load {before} -> {_load()}"))
    before = _load()
    m = Mounted(logs, work / "mnt", "--cache-dir", str(cache))
    try:
        rss_before = m.status("VmRSS")
        seconds, nbytes = cat(work / "mnt" / "kv-0" / "table.jsonl")
        lines = nbytes and sum(1 for _ in open(work / "mnt" / "kv-0" / "table.jsonl", "rb"))
        hwm = m.status("VmHWM")
    finally:
        m.close()
    rows.append((f"cat table.jsonl ({records} records), a fresh mount, indexes built",
                 f"{nbytes / 1e6:.0f} MB, {lines} records in {seconds:.1f} s; daemon peak RSS {hwm:.0f} MiB "
                 f"(at start {rss_before:.0f} MiB)", f"load {before} -> {_load()}"))
    return rows
