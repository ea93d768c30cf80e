"""Spark throughput of the kafkalog source: rows/s and speed-up at local[1], local[2] and the machine's cores.

Builds (once, reused from --dir) a log directory holding, for each kind of bench/records.py (``mixed``:
JSON objects, UTF-8 text with non-ASCII, binary values, null keys, headers with binary and null values,
tombstones; ``uniform``: ~100-byte JSON objects), one topic of --partitions partitions and --records
records in all (100 records a batch, as bench/records.py encodes them), then measures per kind:

- engine + Arrow: the source's own split reader (decode and Arrow columns) in this process, no Spark;
- Spark ``count()`` at each master, default schema (7 columns) and, for ``mixed``, with
  ``includeHeaders=true`` (8 columns); one SparkSession per master; the first job of a session warms
  the Python workers and is not measured; best of --repeat, each on a DataFrame loaded anew (every
  run plans and reads the files). ``--parquet`` adds a Parquet export per master.

Speed-up is against local[1] of the same measurement. Splits: ``maxBytesPerPartition`` (--split-mib).

    python bench/spark.py [--records N] [--partitions P] [--dir DIR] [--masters local[1],local[2],local[*]]
"""

from __future__ import annotations

import argparse
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


def build(path: Path, records: int, partitions: int) -> None:
    marker = path / f".bench-{records}-{partitions}"
    if marker.exists():
        return
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    with LogDir(path, Settings({"segment.bytes": 256 * 1024 * 1024}), writable=True) as ld:
        for kind in KINDS:
            for p in range(partitions):
                log = ld.create_partition(kind, p)
                share = records // partitions + (1 if p < records % partitions else 0)
                for raw in batches(kind, share, seed=7 + p):
                    log.append_batches(raw, flush=False)
                log.flush()
    marker.touch()


def best(fn, repeat: int) -> tuple[float, int]:
    times, result = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), result


def engine_arrow(path: Path, kind: str, split_bytes: int) -> int:
    from kafkafs.spark.options import parse_read_options
    from kafkafs.spark.plan import plan_read
    from kafkafs.spark.scan import read_split

    plan = plan_read(parse_read_options({"path": str(path), "topics": kind, "maxBytesPerPartition": split_bytes}))
    return sum(b.num_rows for s in plan.splits for b in read_split(s))


def spark_runs(path: Path, master: str, args, measurements: list[tuple[str, dict]]) -> list[tuple[float, int]]:
    """``(seconds, splits)`` of each measurement at ``master``."""
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
    split = str(args.split_mib * 1024 * 1024)
    out = []
    try:
        for _name, options in measurements:
            parquet = options.pop("_parquet", False)

            def load(options=options):
                return spark.read.format("kafkalog").options(maxBytesPerPartition=split, **options).load(str(path))

            load().count()  # warm-up: starts the Python workers, reads the files into the page cache
            splits = load().rdd.getNumPartitions()
            if parquet:
                target = Path(tempfile.mkdtemp(prefix="kafkafs-bench-parquet-"))

                def export(target=target, load=load) -> int:
                    load().write.parquet(str(target / f"run-{time.monotonic_ns()}"))
                    return args.records

                secs, n = best(export, args.repeat)
                shutil.rmtree(target, ignore_errors=True)
            else:
                secs, n = best(lambda load=load: load().count(), args.repeat)
            assert n == args.records, (n, args.records)
            out.append((secs, splits))
    finally:
        spark.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000, help="records per kind")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "kafkafs-bench-spark"))
    parser.add_argument("--masters", default=f"local[1],local[2],local[{os.cpu_count()}]")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--split-mib", type=int, default=16, help="maxBytesPerPartition in MiB")
    parser.add_argument("--parquet", action="store_true", help="also a Parquet export per master")
    args = parser.parse_args()
    path = Path(args.dir)
    t0 = time.perf_counter()
    build(path, args.records, args.partitions)
    size = {k: sum(f.stat().st_size for f in path.glob(f"{k}-*/*.log")) for k in KINDS}
    print(f"log: {args.records:,} records per kind in {args.partitions} partitions "
          f"({', '.join(f'{k} {v / 2**20:.0f} MiB' for k, v in size.items())}) in {path} "
          f"(built/checked in {time.perf_counter() - t0:.1f}s); load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores", file=sys.stderr)
    masters = list(dict.fromkeys(m.strip() for m in args.masters.split(",")))
    measurements: list[tuple[str, dict]] = []
    for kind in KINDS:
        measurements.append((f"{kind}: count()", {"topics": kind}))
        if kind == "mixed":
            measurements.append((f"{kind}: count(), includeHeaders", {"topics": kind, "includeHeaders": "true"}))
        if args.parquet:
            measurements.append((f"{kind}: Parquet export", {"topics": kind, "_parquet": True}))
    results = {m: spark_runs(path, m, args, [(n, dict(o)) for n, o in measurements]) for m in masters}
    print(f"| measurement ({args.records:,} records) | master | splits | seconds | rows/s | speed-up |")
    print("|---|---|---:|---:|---:|---:|")
    for kind in KINDS:
        secs, n = best(lambda kind=kind: engine_arrow(path, kind, args.split_mib * 2**20), args.repeat)
        assert n == args.records
        print(f"| {kind}: engine + Arrow, 1 process (no Spark) | - | - | {secs:.2f} | {n / secs:,.0f} | - |")
    for i, (name, _options) in enumerate(measurements):
        base = results[masters[0]][i][0]
        for m in masters:
            secs, splits = results[m][i]
            print(f"| {name} | {m} | {splits} | {secs:.2f} | {args.records / secs:,.0f} | {base / secs:.2f}x |")


if __name__ == "__main__":
    main()
