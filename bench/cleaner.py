"""Compaction benchmark: N records over K keys (100-byte values), compacted with the default settings.

One run prints one table: the time to write the input (batches straight through ``Log.append_batches``),
the time of ``clean_logdir`` (``kafkafs clean``) in a fresh process and its peak resident memory
(``VmHWM``), the bytes before and after, and whether the records kept are exactly the latest record of
every key, as a brute-force computation during the generation says (checked by reading the segment files
with kafka-python's record reader, not with kafkafs).

    .venv/bin/python bench/cleaner.py [--records 10000000] [--keys 1000000] [--batch 1000] [--dir D]
                                      [--dedupe-mib 128] [--quick] [--compare]

``--compare`` also cleans a copy of the same input with the offset map's Python loops (the reference of
the kernel's ``omap_put`` / ``omap_retain``) first, in a fresh process too, and prints both and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from array import array
from pathlib import Path

VALUE = 100
T0 = 1_763_700_000_000


def generate(directory: Path, records: int, keys: int, batch: int, seed: int) -> array:
    """Write the input; return, for every key, the offset of its latest record (the brute force)."""
    from kafkafs.format.batch import encode_batch
    from kafkafs.storage.config import Settings
    from kafkafs.storage.logdir import LogDir

    rng = random.Random(seed)
    latest = array("q", [-1]) * keys
    filler = rng.randbytes(VALUE - 12)
    settings = Settings({}, {"kv": {"cleanup.policy": "compact"}})
    with LogDir(directory, settings, writable=True) as logdir:
        log = logdir.create_partition("kv", 0)
        offset = 0
        randrange = rng.randrange
        while offset < records:
            n = min(batch, records - offset)
            rows = []
            for i in range(offset, offset + n):
                k = randrange(keys)
                latest[k] = i
                rows.append((T0 + i, b"key-%08d" % k, b"%012d" % i + filler, ()))
            log.append_batches(encode_batch(rows))
            offset += n
        log.roll()  # everything written is sealed, so all of it is cleanable
    return latest


def clean(directory: Path, dedupe_mib: int, python_map: bool = False) -> dict:
    """Run in a fresh process: ``clean_logdir`` with the defaults; time and peak memory. ``python_map``:
    the offset map's loops in Python, not in the kernel."""
    import kafkafs.storage.offset_map as offset_map
    from kafkafs.storage.cleaner import clean_logdir

    if python_map:
        offset_map._OMAP_PUT = offset_map._OMAP_RETAIN = None
    from kafkafs.storage.config import Settings
    from kafkafs.storage.logdir import LogDir

    settings = Settings({"log.cleaner.dedupe.buffer.size": dedupe_mib * 1024 * 1024},
                        {"kv": {"cleanup.policy": "compact"}})
    t = time.perf_counter()
    with LogDir(directory, settings, writable=True) as logdir:
        lines = clean_logdir(logdir, progress=sys.stderr)
    elapsed = time.perf_counter() - t
    usage = resource.getrusage(resource.RUSAGE_SELF)
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return {"seconds": elapsed, "cpu_seconds": usage.ru_utime + usage.ru_stime, "vmhwm_kib": int(status["VmHWM"].split()[0]), "lines": lines}


def verify(directory: Path, latest: array) -> tuple[int, int]:
    """Read the compacted segments with kafka-python; return (records found, mismatches)."""
    from kafka.record.memory_records import MemoryRecords

    expected = {}
    for k, off in enumerate(latest):
        if off >= 0:
            expected[off] = b"key-%08d" % k
    found = 0
    bad = 0
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".log"):
            continue
        with open(directory / name, "rb") as f:
            data = f.read()
        records = MemoryRecords(data)
        while (b := records.next_batch()) is not None:
            for r in b:
                found += 1
                if expected.get(r.offset) != r.key or int(r.value[:12]) != r.offset:
                    bad += 1
    return found, bad + abs(len(expected) - found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--dedupe-mib", type=int, default=128)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="1M records over 100k keys")
    parser.add_argument("--compare", action="store_true", help="also clean a copy with the Python offset map")
    parser.add_argument("--clean-only", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--python-map", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.clean_only:
        print(json.dumps(clean(args.clean_only, args.dedupe_mib, args.python_map)))
        return 0
    if args.quick:
        args.records, args.keys = 1_000_000, 100_000
    root = Path(args.dir or tempfile.mkdtemp(prefix="kafkafs-cleaner-bench-"))
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    load_start = os.getloadavg()[0]
    try:
        t = time.perf_counter()
        latest = generate(root, args.records, args.keys, args.batch, args.seed)
        write_s = time.perf_counter() - t
        part = root / "kv-0"
        before = sum(os.path.getsize(part / n) for n in os.listdir(part) if n.endswith(".log"))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parent.parent)] + sys.path))

        def run_clean(directory: Path, *extra: str) -> dict:
            out = subprocess.run(
                [sys.executable, __file__, "--clean-only", str(directory), "--dedupe-mib", str(args.dedupe_mib), *extra],
                check=True, stdout=subprocess.PIPE, env=env, text=True,
            )
            return json.loads(out.stdout.strip().splitlines()[-1])

        reference = None
        if args.compare:
            copy = root / "python-map"
            shutil.copytree(root, copy / root.name, ignore=shutil.ignore_patterns("python-map"))
            reference = run_clean(copy / root.name, "--python-map")
            ref_found, ref_mismatches = verify(copy / root.name / "kv-0", latest)
            shutil.rmtree(copy)
        result = run_clean(root)
        after = sum(os.path.getsize(part / n) for n in os.listdir(part) if n.endswith(".log"))
        t = time.perf_counter()
        found, mismatches = verify(part, latest)
        verify_s = time.perf_counter() - t
        distinct = sum(1 for o in latest if o >= 0)
        mib = 1024 * 1024
        rows = [
            ("records written / distinct keys", f"{args.records:,} / {distinct:,}"),
            ("write input (append_batches)", f"{write_s:.1f} s ({args.records / write_s:,.0f} records/s)"),
            ("clean (fresh process), wall", f"{result['seconds']:.1f} s ({args.records / result['seconds']:,.0f} records/s)"),
            ("clean, CPU (user + system)", f"{result['cpu_seconds']:.1f} s ({args.records / result['cpu_seconds']:,.0f} records/s)"),
            ("peak RSS of the clean (VmHWM)", f"{result['vmhwm_kib'] / 1024:.0f} MiB (dedupe buffer {args.dedupe_mib} MiB)"),
            (".log bytes before / after", f"{before / mib:,.0f} MiB / {after / mib:,.0f} MiB"),
            ("records kept", f"{found:,}"),
            ("kept == brute-force latest per key", f"{'yes' if mismatches == 0 else f'NO ({mismatches} differ)'}"
                                                   f" (checked with kafka-python in {verify_s:.0f} s)"),
        ]
        rows.append(("load average (1 min), start / end", f"{load_start:.2f} / {os.getloadavg()[0]:.2f}"))
        if reference is not None:
            rows[3:3] = [
                ("clean, Python offset map, wall", f"{reference['seconds']:.1f} s "
                 f"({args.records / reference['seconds']:,.0f} records/s): kernel {reference['seconds'] / result['seconds']:.2f}x"),
                ("clean, Python offset map, CPU", f"{reference['cpu_seconds']:.1f} s "
                 f"({args.records / reference['cpu_seconds']:,.0f} records/s): kernel {reference['cpu_seconds'] / result['cpu_seconds']:.2f}x"),
                ("Python offset map: kept == brute force", f"{'yes' if ref_mismatches == 0 else 'NO'} ({ref_found:,} records)"),
            ]
            mismatches += ref_mismatches
        width = max(len(r[0]) for r in rows)
        print(f"{'measure':<{width}}  value")
        for name, value in rows:
            print(f"{name:<{width}}  {value}")
        for line in result["lines"][:5]:
            print("  " + line)
        return 0 if mismatches == 0 else 1
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
