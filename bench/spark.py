"""Spark throughput of the kafkalog source: count() and a Parquet export, local[1] vs local[2].

Builds (once, reused from --dir) a log directory holding one partition of --records records (about
100-byte JSON values, 500 records a batch, 256 MiB segments) through the engine, then measures rows/s:

- engine decode: Log.read() in this process, every batch decoded (no Spark, no Arrow);
- engine + Arrow: the source's own split reader (decode and Arrow columns) in this process;
- count() and a Parquet export with Spark at each --masters entry (one SparkSession each; the
  first job of a session warms the Python workers and is not measured; best of --repeat; on a
  DataFrame loaded anew each time, so every run plans and reads the files).

    /tmp/venv/bin/python bench/spark.py [--records N] [--dir DIR] [--masters local[1],local[2]]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir


def build(path: Path, records: int) -> None:
    marker = path / f".bench-{records}"
    if marker.exists():
        return
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    rng = random.Random(7)
    ts = 1_763_700_000_000
    with LogDir(path, Settings({"segment.bytes": 256 * 1024 * 1024}), writable=True) as ld:
        log = ld.create_partition("orders", 0)
        n = 0
        while n < records:
            rows = []
            for i in range(min(500, records - n)):
                o = n + i
                value = (
                    b'{"order":%d,"customer":"c-%05d","amount":%d.%02d,"currency":"EUR","status":"paid","n":%d}'
                    % (o, rng.randrange(100000), rng.randrange(1000), rng.randrange(100), i)
                )
                rows.append((ts + o, b"c-%05d" % rng.randrange(100000), value, ()))
            log.append_records(rows)
            n += len(rows)
    marker.touch()


def best(fn, repeat: int) -> tuple[float, int]:
    times, result = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), result


def engine_decode(path: Path) -> int:
    n = 0
    with LogDir(path) as ld:
        for log in ld:
            for batch in log.read():
                n += len(batch)
    return n


def engine_arrow(path: Path) -> int:
    from kafkafs.spark.options import parse_read_options
    from kafkafs.spark.plan import plan_read
    from kafkafs.spark.scan import read_split

    plan = plan_read(parse_read_options({"path": str(path)}))
    return sum(b.num_rows for s in plan.splits for b in read_split(s))


def spark_runs(path: Path, master: str, repeat: int, records: int) -> tuple[float, float, int]:
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
    try:
        spark.read.format("kafkalog").load(str(path)).count()  # warm-up: starts the Python workers
        splits = spark.read.format("kafkalog").load(str(path)).rdd.getNumPartitions()
        count_s, n = best(lambda: spark.read.format("kafkalog").load(str(path)).count(), repeat)
        assert n == records, (n, records)
        out = Path(tempfile.mkdtemp(prefix="kafkafs-bench-parquet-"))

        def export() -> int:
            target = out / f"run-{time.monotonic_ns()}"
            spark.read.format("kafkalog").load(str(path)).write.parquet(str(target))
            return 0

        parquet_s, _ = best(export, repeat)
        shutil.rmtree(out, ignore_errors=True)
        return count_s, parquet_s, splits
    finally:
        spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "kafkafs-bench-spark"))
    parser.add_argument("--masters", default="local[1],local[2]")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    path = Path(args.dir)
    t0 = time.perf_counter()
    build(path, args.records)
    size = sum(f.stat().st_size for f in path.rglob("*.log"))
    print(f"log: {args.records:,} records, {size / 2**20:.0f} MiB in {path} (built/checked in "
          f"{time.perf_counter() - t0:.1f}s)", file=sys.stderr)
    rows = []
    secs, n = best(lambda: engine_decode(path), args.repeat)
    assert n == args.records
    rows.append(("engine decode, 1 process (no Spark)", "-", secs))
    secs, n = best(lambda: engine_arrow(path), args.repeat)
    assert n == args.records
    rows.append(("engine decode + Arrow batches, 1 process", "-", secs))
    for master in args.masters.split(","):
        count_s, parquet_s, splits = spark_runs(path, master, args.repeat, args.records)
        rows.append((f"Spark {master}: count()", str(splits), count_s))
        rows.append((f"Spark {master}: Parquet export", str(splits), parquet_s))
    print(f"| measurement ({args.records:,} records) | splits | seconds | rows/s |")
    print("|---|---:|---:|---:|")
    for name, splits, seconds in rows:
        print(f"| {name} | {splits} | {seconds:.2f} | {args.records / seconds:,.0f} |")


if __name__ == "__main__":
    main()
