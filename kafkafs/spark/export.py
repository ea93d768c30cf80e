"""``kafkafs export``: log directories to Parquet, JSON lines or CSV with Spark.

A local Spark session by default (``master="local[*]"``); an existing session is reused (and left
running). Workers must import kafkafs, so the session is started with ``PYSPARK_PYTHON`` set to this
interpreter unless the environment already names one. Progress (tasks done of tasks) goes to stderr.

Parquet and JSON keep every column as it is (JSON writes binary as base64). CSV has no binary or
array type: ``key`` and ``value`` become UTF-8 text (invalid bytes replaced) and ``headers`` a JSON
string; use Parquet when payloads are not text.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import InvalidInput, KafkafsError

__all__ = ["export", "FORMATS"]

FORMATS = ("parquet", "json", "csv")


def _session(master: str) -> tuple[Any, bool]:
    """``(session, created)``: the active session if there is one, else a new one on ``master``."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master(master)
        .appName("kafkafs export")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session, True


class _Progress(threading.Thread):
    """Prints ``export: N/M tasks`` to stderr while Spark works."""

    def __init__(self, spark: Any, interval: float = 0.5) -> None:
        super().__init__(name="kafkafs-export-progress", daemon=True)
        self.tracker = spark.sparkContext.statusTracker()
        self.interval = interval
        self.stopped = threading.Event()
        self.shown = False

    def run(self) -> None:
        tty = sys.stderr.isatty()
        last = None
        while not self.stopped.wait(self.interval):
            done = total = 0
            for stage_id in self.tracker.getActiveStageIds():
                info = self.tracker.getStageInfo(stage_id)
                if info is not None:
                    done += info.numCompletedTasks
                    total += info.numTasks
            if total and (done, total) != last:
                last = (done, total)
                # a terminal line rewritten in place; elsewhere (a log file, a pipe) one line per change
                if tty:
                    print(f"\rexport: {done}/{total} tasks", end="", file=sys.stderr, flush=True)
                    self.shown = True
                else:
                    print(f"export: {done}/{total} tasks", file=sys.stderr, flush=True)

    def stop(self) -> None:
        self.stopped.set()
        self.join()
        if self.shown:
            print(file=sys.stderr)


def _count_rows(out: Path, fmt: str) -> int:
    parts = sorted(p for p in out.iterdir() if p.name.startswith("part-"))
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return sum(pq.read_metadata(p).num_rows for p in parts)
    rows = 0
    for p in parts:
        with open(p, "rb") as f:
            rows += sum(1 for _ in f)
        if fmt == "csv":
            rows -= 1  # the header line
    return rows


def export(
    logdirs: list[str],
    out: str,
    *,
    fmt: str = "parquet",
    topics: list[str] | None = None,
    master: str = "local[*]",
    progress: bool = True,
) -> int:
    """Write every record of ``logdirs`` (optionally only ``topics``) to the directory ``out``.

    Returns 0 (the exit status); user mistakes raise :class:`~kafkafs.errors.KafkafsError` subclasses
    with a one-line message. ``out`` must not exist yet.
    """
    if fmt not in FORMATS:
        raise InvalidInput(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    if not logdirs:
        raise InvalidInput("no log directory given")
    for d in logdirs:
        if not os.path.isdir(d):
            raise InvalidInput(f"{d}: no such log directory")
    target = Path(out)
    if target.exists():
        raise InvalidInput(f"{out} already exists; export writes a new directory")
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise InvalidInput("kafkafs export needs pyspark: pip install 'kafkafs[spark]'") from None

    from . import register
    from .discovery import discover_partitions
    from .options import parse_read_options

    wanted = {"paths": _json_list([os.path.abspath(d) for d in logdirs])}
    if topics:
        wanted["topics"] = ",".join(topics)
    found = {t for _d, t, _p in discover_partitions(parse_read_options(wanted))}
    missing = sorted({t.strip() for t in topics or () if t.strip()} - found)
    if missing:
        raise InvalidInput(f"no topic {', '.join(missing)} in {', '.join(logdirs)}")

    started = time.monotonic()
    spark, created = _session(master)
    try:
        register(spark)
        df = spark.read.format("kafkalog").options(**wanted).option("includeHeaders", "true").load()
        if fmt == "csv":
            df = df.selectExpr(
                "CAST(key AS STRING) AS key",
                "CAST(value AS STRING) AS value",
                "topic",
                "partition",
                "offset",
                "timestamp",
                "timestampType",
                "to_json(headers) AS headers",
            )
        writer = df.write.mode("errorifexists").format(fmt)
        if fmt == "csv":
            writer = writer.option("header", "true")
        ticker = _Progress(spark) if progress else None
        if ticker is not None:
            ticker.start()
        try:
            writer.save(str(target.absolute()))
        except Exception as exc:
            if type(exc).__module__.split(".")[0] in ("pyspark", "py4j"):
                raise KafkafsError(spark_error_line(exc)) from None
            raise
        finally:
            if ticker is not None:
                ticker.stop()
        if progress:
            rows = _count_rows(target, fmt)
            print(
                f"export: {rows} records to {out} ({fmt}) in {time.monotonic() - started:.1f}s",
                file=sys.stderr,
            )
        return 0
    finally:
        if created:
            spark.stop()


_KAFKAFS_ERROR = re.compile(r"kafkafs\.errors\.\w+: (.+)")


def spark_error_line(exc: BaseException) -> str:
    """One line for a failed Spark job: the kafkafs error raised in a worker when there is one (Spark
    wraps it in a Java exception holding the Python traceback), else the first line Spark gives."""
    text = str(exc)
    found = _KAFKAFS_ERROR.findall(text)
    if found:
        return found[-1].strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def _json_list(items: list[str]) -> str:
    import json

    return json.dumps(items)
