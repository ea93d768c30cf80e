"""Spark throughput of the kafkalog source: rows/s and speed-up at local[1], local[2] and the machine's cores.

Builds (once, reused from --dir) a log directory holding, for each kind of bench/records.py (``mixed``:
JSON objects, UTF-8 text with non-ASCII, binary values, null keys, headers with binary and null values,
tombstones; ``uniform``: ~100-byte JSON objects), one topic of --partitions partitions and --records
records in all (100 records a batch, as bench/records.py encodes them), and a ``--scale`` times larger
one next to it (``DIR-xN``: N times the partitions, each a hard link of one of the first directory's, so
N times the records, read from the same page cache), then measures per kind:

- engine + Arrow: the source's own split reader (the kernel into Arrow columns) in this process, no Spark;
- Spark ``count()`` at each master, default schema (7 columns) and, for ``mixed``, with
  ``includeHeaders=true`` (8 columns); one SparkSession per master; the first job of a session warms
  the Python workers and is not measured; best of --repeat, each on a DataFrame loaded anew (every
  run plans and reads the files). ``--parquet`` adds a Parquet export per master;
- the fixed cost of a job: ``count()`` of one record per partition (same plan and tasks, no data), and
  ``count()`` on the larger directory, where that fixed cost weighs N times less.

Speed-up is against the first master of the same measurement. Splits: the source's default
``maxBytesPerPartition`` (64 MiB) unless --split-mib.

    python bench/spark.py [--records N] [--partitions P] [--scale N] [--dir DIR] [--masters local[1],local[2]]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.records import batches  # noqa: E402
from kafkafs.storage.config import Settings  # noqa: E402
from kafkafs.storage.logdir import LogDir  # noqa: E402

KINDS = ("mixed", "uniform")


def _start(path: Path, marker: str) -> bool:
    """False when ``path`` already holds what ``marker`` names; else True with ``path`` empty."""
    if (path / marker).exists():
        return False
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return True


def build(path: Path, records: int, partitions: int) -> None:
    marker = f".bench-{records}-{partitions}"
    if not _start(path, marker):
        return
    with LogDir(path, Settings({"segment.bytes": 256 * 1024 * 1024}), writable=True) as ld:
        for kind in KINDS:
            for p in range(partitions):
                log = ld.create_partition(kind, p)
                share = records // partitions + (1 if p < records % partitions else 0)
                for raw in batches(kind, share, seed=7 + p):
                    log.append_batches(raw, flush=False)
                log.flush()
    (path / marker).touch()


def build_scaled(base: Path, path: Path, records: int, partitions: int, scale: int) -> None:
    """``scale`` copies of each partition of ``base`` (hard links; copies where links fail)."""
    marker = f".bench-{records}-{partitions}-x{scale}"
    if not _start(path, marker):
        return
    for kind in KINDS:
        for p in range(partitions):
            for c in range(scale):
                target = path / f"{kind}-{c * partitions + p}"
                target.mkdir()
                for f in (base / f"{kind}-{p}").iterdir():
                    if f.suffix in (".log", ".index", ".timeindex"):
                        try:
                            os.link(f, target / f.name)
                        except OSError:
                            shutil.copy2(f, target / f.name)
    (path / marker).touch()


def best(fn, repeat: int) -> tuple[float, int]:
    times, result = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), result


def engine_arrow(path: Path, kind: str, split: dict) -> int:
    from kafkafs.spark.options import parse_read_options
    from kafkafs.spark.plan import plan_read
    from kafkafs.spark.scan import read_split

    plan = plan_read(parse_read_options({"path": str(path), "topics": kind, **split}))
    return sum(b.num_rows for s in plan.splits for b in read_split(s))


def spark_runs(master: str, args, measurements: list[tuple[str, Path, int, dict]]) -> list[tuple[float, int]]:
    """``(seconds, splits)`` of each measurement ``(name, log directory, rows expected, options)`` at ``master``."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from kafkafs.spark import register

    spark = (
        SparkSession.builder.master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    out = []
    try:
        for _name, path, rows, options in measurements:
            parquet = options.pop("_parquet", False)

            def load(options=options, path=path):
                return spark.read.format("kafkalog").options(**split_options(args), **options).load(str(path))

            load().count()  # warm-up: starts the Python workers, reads the files into the page cache
            splits = load().rdd.getNumPartitions()
            if parquet:
                target = Path(tempfile.mkdtemp(prefix="kafkafs-bench-parquet-"))

                def export(target=target, load=load, rows=rows) -> int:
                    load().write.parquet(str(target / f"run-{time.monotonic_ns()}"))
                    return rows

                secs, n = best(export, args.repeat)
                shutil.rmtree(target, ignore_errors=True)
            else:
                secs, n = best(lambda load=load: load().count(), args.repeat)
            assert n == rows, (n, rows)
            out.append((secs, splits))
    finally:
        spark.stop()
    return out


def split_options(args) -> dict:
    return {} if args.split_mib is None else {"maxBytesPerPartition": str(args.split_mib * 2**20)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000, help="records per kind")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "kafkafs-bench-spark"))
    parser.add_argument("--masters", default=f"local[1],local[2],local[{os.cpu_count()}]")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--split-mib", type=int, default=None, help="maxBytesPerPartition in MiB (default: the source's)")
    parser.add_argument("--scale", type=int, default=4, help="the larger directory holds this many times the records")
    parser.add_argument("--parquet", action="store_true", help="also a Parquet export per master")
    args = parser.parse_args()
    path = Path(args.dir)
    scaled = Path(f"{args.dir}-x{args.scale}")
    t0 = time.perf_counter()
    build(path, args.records, args.partitions)
    build_scaled(path, scaled, args.records, args.partitions, args.scale)
    size = {k: sum(f.stat().st_size for f in path.glob(f"{k}-*/*.log")) for k in KINDS}
    print(f"log: {args.records:,} records per kind in {args.partitions} partitions "
          f"({', '.join(f'{k} {v / 2**20:.0f} MiB' for k, v in size.items())}) in {path}, and {args.scale} times that "
          f"in {scaled} (built/checked in {time.perf_counter() - t0:.1f}s); load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores", file=sys.stderr)
    masters = list(dict.fromkeys(m.strip() for m in args.masters.split(",")))
    big = args.records * args.scale
    one_each = {"endingOffsets": json.dumps({"mixed": {str(p): 1 for p in range(args.partitions)}})}
    measurements: list[tuple[str, Path, int, dict]] = []
    for kind in KINDS:
        measurements.append((f"{kind}: count()", path, args.records, {"topics": kind}))
        if kind == "mixed":
            measurements.append((f"{kind}: count(), includeHeaders", path, args.records,
                                 {"topics": kind, "includeHeaders": "true"}))
        if args.parquet:
            measurements.append((f"{kind}: Parquet export", path, args.records, {"topics": kind, "_parquet": True}))
    measurements.append(("mixed: count() of 1 record per partition (a job's fixed cost)", path, args.partitions,
                         {"topics": "mixed", **one_each}))
    for kind in KINDS:
        measurements.append((f"{kind}: count(), x{args.scale} directory", scaled, big, {"topics": kind}))
    results = {m: spark_runs(m, args, [(n, p, r, dict(o)) for n, p, r, o in measurements]) for m in masters}
    print(f"load average {os.getloadavg()[0]:.1f} after the Spark runs", file=sys.stderr)
    print("| measurement | records | master | splits | seconds | rows/s | speed-up |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for kind in KINDS:
        secs, n = best(lambda kind=kind: engine_arrow(path, kind, split_options(args)), args.repeat)
        assert n == args.records
        print(f"| {kind}: engine + Arrow, 1 process (no Spark) | {n:,} | - | - | {secs:.2f} | {n / secs:,.0f} | - |")
    for i, (name, _path, rows, _options) in enumerate(measurements):
        base = results[masters[0]][i][0]
        for m in masters:
            secs, splits = results[m][i]
            print(f"| {name} | {rows:,} | {m} | {splits} | {secs:.2f} | {rows / secs:,.0f} | {base / secs:.2f}x |")


if __name__ == "__main__":
    main()
