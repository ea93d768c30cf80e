"""``kafkafs export``: log directories to Parquet, JSON lines or CSV with Spark.

A local Spark session by default (``master="local[*]"``); an existing session is reused (and left
running). Workers must import kafkafs, so the session is started with ``PYSPARK_PYTHON`` set to this
interpreter unless the environment already names one. Progress (tasks done of tasks) goes to stderr.

Every ``kafkalog`` option applies (``options``: ``startingTimestamp``, ``endingOffsets``, ``assign``,
``kafka.isolation.level``, ...), checked before Spark starts, and so is the read's plan (what it refuses:
a start past the end, a starting timestamp with no record at or after it); ``includeHeaders`` is true
unless given.

Parquet and JSON keep every column as it is (JSON writes binary as base64). CSV has no binary or array
type, so its cells follow the JSON view's rule (``--values string``), one rule for keys, values and
header values: valid UTF-8 as text, anything else ``{"$base64":"..."}``; ``headers`` is the JSON array
the view shows (``[{"key":"trace","value":"abc"}]``). The cells are rendered by the view's own code
(:func:`kafkafs.format.jsonembed.view_string`) in the Spark workers.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import InvalidInput, KafkafsError, doing, tag_os_error
from .options import READ_OPTION_NAMES, READ_OPTIONS

__all__ = ["export", "FORMATS", "csv_columns"]

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
    # A failed job is said in one line (spark_error_line); Spark's own ERROR lines would print it first
    # with Java and Python stack traces (a damaged batch: ~190 lines). ``kafkafs -v export`` shows them.
    session.sparkContext.setLogLevel("ERROR" if logging.getLogger("kafkafs").isEnabledFor(logging.INFO) else "OFF")
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


def _read_options(logdirs: list[str], topics: list[str] | None, options: Mapping[str, str] | None) -> dict[str, str]:
    """The reader's options: ``options`` (every kafkalog option but the paths, checked by name),
    ``topics`` as ``subscribe``, the log directories as ``paths``, ``includeHeaders`` true by default."""
    given = {str(k): str(v) for k, v in (options or {}).items()}
    lowered: dict[str, str] = {}
    for key in given:
        low = key.lower()
        if low in ("path", "paths"):
            raise InvalidInput(f"option {key}: export reads the log directories it is given; drop the option")
        if low not in READ_OPTIONS and not low.startswith("kafka."):
            raise InvalidInput(f"unknown kafkalog option {key!r} (the options: {', '.join(READ_OPTION_NAMES)})")
        if low in lowered:
            raise InvalidInput(f"option {key} is given twice")
        lowered[low] = key
    wanted = dict(given)
    if topics:
        if "subscribe" in lowered or "topics" in lowered:
            raise InvalidInput("give the topics once: --topics or the subscribe option")
        wanted["subscribe"] = ",".join(topics)
    if "includeheaders" not in lowered:
        wanted["includeHeaders"] = "true"
    wanted["paths"] = _json_list([os.path.abspath(d) for d in logdirs])
    return wanted


def export(
    logdirs: list[str],
    out: str,
    *,
    fmt: str = "parquet",
    topics: list[str] | None = None,
    options: Mapping[str, str] | None = None,
    master: str = "local[*]",
    progress: bool = True,
) -> int:
    """Write the records of ``logdirs`` that a ``kafkalog`` read with ``options`` gives (``topics``:
    the ``subscribe`` option) to the directory ``out``.

    Returns 0 (the exit status); user mistakes raise :class:`~kafkafs.errors.KafkafsError` subclasses
    with a one-line message, before Spark starts where they can be seen from the options and the file
    names. ``out`` must not exist yet.
    """
    if fmt not in FORMATS:
        raise InvalidInput(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    if not logdirs:
        raise InvalidInput("no log directory given")
    for d in logdirs:
        if not os.path.isdir(d):
            raise InvalidInput(f"{d}: no such log directory")
    target = Path(out)
    for d in logdirs:  # a broker refuses a log directory holding a folder that is not a partition
        root, where = Path(os.path.realpath(d)), Path(os.path.realpath(out))
        if where == root or where.is_relative_to(root):
            raise InvalidInput(f"{out}: the export cannot be inside the log directory {d} (a broker refuses to start "
                               "with a folder there that is not a partition)")
    if target.exists():
        raise InvalidInput(f"{out} already exists; export writes a new directory")
    wanted = _read_options(logdirs, topics, options)
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise InvalidInput("kafkafs export needs pyspark: pip install 'kafkafs[spark]'") from None

    from . import register
    from .discovery import discover_partitions
    from .options import parse_read_options
    from .plan import plan_read

    read_options = parse_read_options(wanted)  # a bad option fails here, before Spark starts
    found = {t for _d, t, _p in discover_partitions(read_options)}
    missing = sorted(read_options.topics - found) if read_options.topics else []
    if missing:
        raise InvalidInput(f"no topic {', '.join(missing)} in {', '.join(logdirs)}")
    # what planning refuses (a start past the end, no record at or after a starting timestamp): here in
    # one line, not after Spark's file writer has logged the error with its Java stack trace
    plan_read(read_options)
    parent = target.absolute().parent
    try:  # missing parent folders are made, as Spark's own writers make them (review23 R23-10)
        parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise InvalidInput(f"{out}: its parent {parent} is not a folder") from None
    except OSError as exc:
        raise tag_os_error(exc, "create {path}", parent) from None
    with doing("create {path}"):  # the folder Spark will write: said here, not by a Java stack trace
        target.mkdir()
        target.rmdir()

    started = time.monotonic()
    spark, created = _session(master)
    try:
        register(spark)
        df = spark.read.format("kafkalog").options(**wanted).load()
        if fmt == "csv":
            df = csv_columns(df)
        writer = df.write.mode("errorifexists").format(fmt)
        if fmt == "csv":
            # RFC 4180: a quote inside a quoted cell is doubled (Spark escapes it with a backslash by default)
            writer = writer.option("header", "true").option("escape", '"')
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


_KAFKAFS_ERROR = re.compile(r"kafkafs\.(?:spark\.)?errors\.\w+: (.+?)(?: SQLSTATE: \w+)?$", re.M)


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


# ---------------------------------------------------------------------------------------------- CSV

def _cell(data: bytes | bytearray | None) -> str | None:
    """A key or value as a CSV cell: the JSON view's rule (``--values string``): UTF-8 as text,
    anything else ``{"$base64":"..."}``."""
    from ..format.jsonembed import view_string

    shown = view_string(None if data is None else bytes(data))
    if isinstance(shown, dict):
        import orjson

        return orjson.dumps(shown).decode("ascii")
    return shown


def _headers_cell(headers: list[Any] | None) -> str | None:
    """The headers as the JSON view shows them: ``[{"key":"trace","value":"abc"}]``, a value that is not
    UTF-8 as ``{"$base64":"..."}``: the same rule as :func:`_cell`."""
    if headers is None:
        return None
    import orjson

    from ..format.jsonembed import view_string

    return orjson.dumps(
        [{"key": h["key"], "value": view_string(None if h["value"] is None else bytes(h["value"]))} for h in headers]
    ).decode("utf-8")


def csv_columns(df: Any) -> Any:
    """A kafkalog DataFrame with ``key``, ``value`` and ``headers`` as CSV cells (:func:`_cell`,
    :func:`_headers_cell`), rendered in the workers by the JSON view's own code (plain Python UDFs:
    no pandas needed)."""
    from pyspark.sql import functions as F
    from pyspark.sql.functions import udf

    cell = udf(_cell, "string", useArrow=False)
    columns = [cell("key").alias("key"), cell("value").alias("value"), "topic", "partition", "offset", "timestamp",
               "timestampType"]
    if "headers" in df.columns:
        columns.append(udf(_headers_cell, "string", useArrow=False)(F.col("headers")).alias("headers"))
    return df.select(*columns)
