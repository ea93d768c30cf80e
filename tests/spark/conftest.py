"""One local Spark session for the whole test run, and generated log directories.

Generated logs use small segments (``segment.bytes`` 8 KiB, ``index.interval.bytes`` 512) so a
partition has many segments and every segment many index entries: pruning and splitting show.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from kafkafs.format.batch import Header  # noqa: E402
from kafkafs.storage.config import Settings  # noqa: E402
from kafkafs.storage.logdir import LogDir  # noqa: E402

BASE_TS = 1_763_700_000_000
SMALL = {"segment.bytes": 8192, "index.interval.bytes": 512}


def _settings() -> Settings:
    return Settings(SMALL, {"events": {"compression.type": "gzip"}})


def fill(logdir: Path) -> None:
    """orders-0, orders-1: 1000 records each in batches of 1..10, CreateTime with some out-of-order
    timestamps; events-0: gzip batches; audit-0: a few records; headers and null keys throughout."""
    with LogDir(logdir, _settings(), writable=True) as ld:
        for topic, partition, total in (("orders", 0, 1000), ("orders", 1, 1000), ("events", 0, 400), ("audit", 0, 30)):
            log = ld.create_partition(topic, partition)
            n = 0
            size = 1
            while n < total:
                rows = []
                for i in range(min(size, total - n)):
                    off = n + i
                    ts = BASE_TS + off * 10 - (35 if off % 7 == 3 else 0)
                    key = None if off % 4 == 0 else f"{topic}-key-{off % 13}".encode()
                    value = f'{{"n": {off}, "p": {partition}}}'.encode() * (1 + off % 3)
                    headers = [Header("trace", f"t{off}".encode()), Header("nil", None)] if off % 5 == 0 else []
                    rows.append((ts, key, value, headers))
                log.append_records(rows)
                n += len(rows)
                size = size % 10 + 1


def engine_rows(logdir: Path | str) -> list[tuple]:
    """Every record as the engine reads it, in the shape of :func:`df_rows` (control records left out)."""
    out = []
    with LogDir(logdir) as ld:
        for log in ld:
            for batch in log.read():
                if batch.is_control:
                    continue
                for off, ts, key, value, headers in batch:
                    hs = [(h[0], h[1]) for h in headers] or None
                    out.append((log.topic, log.partition, off, ts, batch.timestamp_type, key, value, hs))
    return sorted(out, key=lambda r: (r[0], r[1], r[2]))


def df_rows(df) -> list[tuple]:
    """A kafkalog DataFrame's rows, timestamps in epoch ms, sorted like :func:`engine_rows`."""
    rows = df.selectExpr(
        "topic", "partition", "offset", "unix_millis(timestamp) AS ts", "timestampType", "key", "value", "headers"
    ).collect()
    out = []
    for r in rows:
        hs = None if r.headers is None else [(h.key, None if h.value is None else bytes(h.value)) for h in r.headers]
        key = None if r.key is None else bytes(r.key)
        value = None if r.value is None else bytes(r.value)
        out.append((r.topic, r.partition, r.offset, r.ts, r.timestampType, key, value, hs))
    return sorted(out, key=lambda r: (r[0], r[1], r[2]))


@pytest.fixture(scope="session")
def generated(tmp_path_factory) -> Path:
    """A generated log directory; tests must not change it (copy it with ``writable_copy``)."""
    path = tmp_path_factory.mktemp("generated") / "logs"
    path.mkdir()
    fill(path)
    return path


@pytest.fixture
def writable_copy(tmp_path):
    def copy(src: Path) -> Path:
        dst = tmp_path / f"copy-{src.name}"
        shutil.copytree(src, dst)
        for p in dst.rglob("*"):
            p.chmod(0o755 if p.is_dir() else 0o644)
        dst.chmod(0o755)
        return dst

    return copy


@pytest.fixture(scope="session")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from kafkafs.spark import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("kafkafs-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true")
        # a stream's Python source runner connects back within this (15 s by default: review25 R25-7 saw
        # kafkalog stream starts die at load 25 on 2 cores; 120 s cured every run)
        .config("spark.python.authenticate.socketTimeout", "120s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture
def pushdown(spark):
    """Filter push-down on for one test (each query on a fresh DataFrame, see kafkafs.spark.register)."""
    from kafkafs.spark import register

    key = "spark.sql.python.filterPushdown.enabled"
    before = spark.conf.get(key)
    register(spark, pushdown=True)
    yield spark
    spark.conf.set(key, before)
    register(spark)
