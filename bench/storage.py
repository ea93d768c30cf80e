"""Storage engine benchmark: appends, random reads against a linear scan, opening many segments, and
memory while reading a large partition end to end.

One run prints one table:

- appends/s with 100-byte values, batches of 1, 100 and 1000 records (``Log.append_records``, no
  fsync), and batches of 1 and 100 with ``flush=True`` (durable: one fsync each);
- ``Log.locate(offset).decode()`` latency, median and p99, at random offsets of a 1,000,000-record partition
  (batches of 100 records), against finding the same offsets by a linear scan of the segment;
- the time to open a 10,000-segment partition (read-only and writable), cold (first open) and warm
  (the target, once a timed test's: well under a second);
- resident memory (``VmRSS`` sampled while reading, ``VmHWM`` at the end, from ``/proc/self/status``) of
  a fresh process reading a 1 GiB partition end to end with ``Log.read`` (every batch decoded). It must
  stay flat: segments are read with bounded ``pread`` chunks and the indexes are memory-mapped.

    .venv/bin/python bench/storage.py [--records N] [--segments N] [--size-mib N] [--quick] [--dir D]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kafkafs.format.batch import encode_batch, set_base_offset
from kafkafs.format.jsonview import ProducerRecord
from kafkafs.storage.config import LogConfig
from kafkafs.storage.log import Log

VALUE = 100
T0 = 1_763_700_000_000


def rss_kib() -> tuple[int, int]:
    """``(VmRSS, VmHWM)`` of this process in KiB."""
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                name, value = line.split(":", 1)
                fields[name] = int(value.split()[0])
    return fields["VmRSS"], fields["VmHWM"]


def fresh(directory: Path) -> Path:
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    return directory


def records(n: int, rng: random.Random) -> list[ProducerRecord]:
    return [ProducerRecord(T0 + i, None, rng.randbytes(VALUE), ()) for i in range(n)]


# -- appends --------------------------------------------------------------------------------------------


def bench_appends(work: Path, per_batch: int, total: int, durable: bool) -> float:
    """Records appended per second, in batches of ``per_batch``."""
    rng = random.Random(per_batch)
    batch = records(per_batch, rng)
    log = Log.open(fresh(work / "append-0"), LogConfig(), writable=True, clean_shutdown=True)
    appends = max(1, total // per_batch)
    started = time.perf_counter()
    for _ in range(appends):
        log.append_records(batch, flush=durable or None)
    elapsed = time.perf_counter() - started
    log.close()
    return appends * per_batch / elapsed


# -- reads ----------------------------------------------------------------------------------------------


def build_partition(directory: Path, n: int, per_batch: int = 100) -> Log:
    log = Log.open(fresh(directory), LogConfig(), writable=True, clean_shutdown=True)
    rng = random.Random(1)
    template = bytearray(encode_batch([(T0 + i, None, rng.randbytes(VALUE), ()) for i in range(per_batch)]))
    written = 0
    while written < n:
        log.append_batches(template)  # offsets assigned by the log: the same bytes, a new base offset
        written += per_batch
    log.close()
    return Log.open(directory)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def bench_reads(log: Log, reads: int, scans: int) -> dict[str, float]:
    rng = random.Random(2)
    end = log.log_end_offset
    for offset in rng.sample(range(end), min(200, end)):  # warm the page cache and the maps
        log.locate(offset).decode()  # type: ignore[union-attr]
    lat = []
    for offset in [rng.randrange(end) for _ in range(reads)]:
        started = time.perf_counter()
        batch = log.locate(offset).decode()  # type: ignore[union-attr]
        lat.append(time.perf_counter() - started)
        assert offset in batch.offsets
    segment = log.segments.first()  # type: ignore[index]
    last = segment.next_offset
    scan = []
    for offset in [rng.randrange(last) for _ in range(scans)]:
        started = time.perf_counter()
        for view in segment.batches(0):  # no index: every header from the segment's start
            if view.header.last_offset >= offset:
                batch = view.decode()
                assert offset in batch.offsets
                break
        scan.append(time.perf_counter() - started)
    return {
        "read_median": statistics.median(lat),
        "read_p99": percentile(lat, 0.99),
        "scan_median": statistics.median(scan),
        "scan_p99": percentile(scan, 0.99),
        "segments": len(log.segments),
        "size": log.size_in_bytes(),
    }


# -- opening many segments ------------------------------------------------------------------------------


def build_segments(directory: Path, segments: int) -> None:
    """Sealed segments as a broker leaves them: one batch of 10 records each, trimmed indexes."""
    fresh(directory)
    rng = random.Random(3)
    template = bytearray(encode_batch([(T0 + i, None, rng.randbytes(VALUE), ()) for i in range(10)]))
    for i in range(segments):
        base = 10 * i
        set_base_offset(template, 0, base)
        prefix = str(directory / f"{base:020d}")
        for suffix, data in ((".log", template), (".index", b""), (".timeindex", struct.pack(">qI", T0 + 9, 9))):
            fd = os.open(prefix + suffix, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.write(fd, data)
            os.close(fd)


def bench_open(directory: Path, segments: int) -> dict[str, float]:
    build_segments(directory, segments)
    out = {}
    for writable in (False, True):
        times = []
        for _ in range(5):
            started = time.perf_counter()
            log = Log.open(directory, LogConfig(), writable=writable, clean_shutdown=True)
            times.append(time.perf_counter() - started)
            assert log.log_end_offset == 10 * segments
            log.close()
        key = "rw" if writable else "ro"
        out[f"open_{key}_first"] = times[0]
        out[f"open_{key}_median"] = statistics.median(times[1:])
    return out


# -- memory while reading a large partition -------------------------------------------------------------


def build_large(directory: Path, size: int, segment_bytes: int = 128 << 20) -> int:
    """``size`` bytes of 100-record batches in segments of ``segment_bytes``, written directly."""
    fresh(directory)
    rng = random.Random(4)
    template = encode_batch([(T0 + i, None, rng.randbytes(VALUE), ()) for i in range(100)])
    offset = 0
    written = 0
    while written < size:
        base = offset
        per_segment = max(1, min(segment_bytes, size - written) // len(template))
        chunk = bytearray(template * per_segment)
        for j in range(per_segment):
            set_base_offset(chunk, j * len(template), offset)
            offset += 100
        with open(directory / f"{base:020d}.log", "wb") as f:
            f.write(chunk)
        written += len(chunk)
    return written


def read_end_to_end(directory: str) -> dict[str, float]:
    """Run in a fresh process, so that VmHWM is this read's peak alone."""
    before = rss_kib()[0]
    log = Log.open(directory)
    samples = []
    n = 0
    started = time.perf_counter()
    for i, batch in enumerate(log.read()):
        n += len(batch)
        if i % 500 == 0:
            samples.append(rss_kib()[0])
    elapsed = time.perf_counter() - started
    rss, hwm = rss_kib()
    return {
        "records": n,
        "seconds": elapsed,
        "rss_before": before,
        "rss_min": min(samples),
        "rss_max": max(samples),
        "rss_end": rss,
        "hwm": hwm,
        "size": log.size_in_bytes(),
    }


def bench_memory(directory: Path, size: int) -> dict[str, float]:
    build_large(directory, size)
    out = subprocess.run(
        [sys.executable, __file__, "--read-end-to-end", str(directory)], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout)


# -- main -----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records in the read partition")
    parser.add_argument("--segments", type=int, default=10_000, help="segments in the partition to open")
    parser.add_argument("--size-mib", type=int, default=1024, help="MiB in the partition read end to end")
    parser.add_argument("--append-records", type=int, default=200_000, help="records per append run")
    parser.add_argument("--reads", type=int, default=5000, help="random locate+decode calls")
    parser.add_argument("--scans", type=int, default=30, help="linear scans")
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one, removed)")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--read-end-to-end", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.read_end_to_end:
        print(json.dumps(read_end_to_end(args.read_end_to_end)))
        return
    if args.quick:
        args.records, args.segments, args.size_mib = 50_000, 100, 32
        args.append_records, args.reads, args.scans = 10_000, 500, 5
    work = args.dir or Path(tempfile.mkdtemp(prefix="kafkafs-bench-"))
    rows: list[tuple[str, str]] = []
    try:
        for per_batch in (1, 100, 1000):
            total = args.append_records if per_batch > 1 else max(1, args.append_records // 10)
            rate = bench_appends(work, per_batch, total, durable=False)
            rows.append((f"append, batches of {per_batch} (no fsync)", f"{rate:,.0f} records/s ({rate / per_batch:,.0f} batches/s)"))
        for per_batch in (1, 100):
            total = max(per_batch, args.append_records // (100 if per_batch == 1 else 10))
            rate = bench_appends(work, per_batch, total, durable=True)
            rows.append((f"append, batches of {per_batch}, flush=True", f"{rate:,.0f} records/s ({rate / per_batch:,.0f} fsyncs/s)"))
        log = build_partition(work / "reads-0", args.records)
        r = bench_reads(log, args.reads, args.scans)
        log.close()
        shutil.rmtree(work / "reads-0")
        where = f"{args.records:,} records, {r['segments']} segment(s), {r['size'] / 2**20:,.0f} MiB"
        rows.append((f"locate+decode, random ({where})", f"median {r['read_median'] * 1e6:,.0f} µs, p99 {r['read_p99'] * 1e6:,.0f} µs"))
        rows.append(("same offsets by a linear scan of the segment", f"median {r['scan_median'] * 1e3:,.1f} ms, p99 {r['scan_p99'] * 1e3:,.1f} ms"))
        o = bench_open(work / "many-0", args.segments)
        shutil.rmtree(work / "many-0")
        rows.append((f"open {args.segments:,}-segment partition, read-only", f"first {o['open_ro_first'] * 1e3:,.0f} ms, then {o['open_ro_median'] * 1e3:,.0f} ms"))
        rows.append((f"open {args.segments:,}-segment partition, writable", f"first {o['open_rw_first'] * 1e3:,.0f} ms, then {o['open_rw_median'] * 1e3:,.0f} ms"))
        m = bench_memory(work / "large-0", args.size_mib << 20)
        shutil.rmtree(work / "large-0")
        rows.append((
            f"read {m['size'] / 2**30:.2f} GiB end to end ({m['records']:,} records)",
            f"{m['seconds']:.1f} s, {m['size'] / 2**20 / m['seconds']:,.0f} MiB/s, {m['records'] / m['seconds']:,.0f} records/s",
        ))
        rows.append((
            "  resident memory while reading",
            f"VmRSS {m['rss_before'] / 1024:.0f} MiB before, {m['rss_min'] / 1024:.0f}-{m['rss_max'] / 1024:.0f} MiB "
            f"during, VmHWM {m['hwm'] / 1024:.0f} MiB",
        ))
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    width = max(len(name) for name, _ in rows)
    print(f"{'measurement':<{width}}  result")
    print(f"{'-' * width}  {'-' * 60}")
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
