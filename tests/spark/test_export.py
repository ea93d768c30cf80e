"""``kafkafs export``: every kafkalog option (``--option KEY=VALUE`` and the common ones as flags), and
CSV cells by the JSON view's rule (UTF-8 as text, anything else ``{"$base64": ...}``), header values
included."""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kafkafs.cli import build_parser
from kafkafs.errors import InvalidInput
from kafkafs.format.batch import Header
from kafkafs.spark.export import export
from kafkafs.spark.export_args import options_from_args
from kafkafs.storage.logdir import LogDir

from .conftest import BASE_TS, engine_rows
from .helpers import flip_byte

ROOT = Path(__file__).resolve().parents[2]


def _args(*argv: str):
    return build_parser().parse_args(["export", "/logs", "/out", *argv])


# ---------------------------------------------------------------------------------------------- options


def test_flags_and_options_become_kafkalog_options():
    args = _args("--starting-timestamp", "2025-11-21T05:20:00Z", "--ending-offsets", '{"orders": {"0": 9}}',
                 "--isolation-level", "read_committed", "--min-partitions", "4", "--pattern", "ord.*",
                 "-O", "failOnDataLoss=false", "--option", "onCorrupt=skip", "--no-headers")
    assert options_from_args(args) == {
        "failOnDataLoss": "false",
        "onCorrupt": "skip",
        "subscribePattern": "ord.*",
        "endingOffsets": '{"orders": {"0": 9}}',
        "startingTimestamp": "1763702400000",  # ISO-8601 as epoch ms
        "kafka.isolation.level": "read_committed",
        "minPartitions": "4",
        "includeHeaders": "false",
    }
    assert options_from_args(_args("--ending-timestamp", "1763700000123")) == {"endingTimestamp": "1763700000123"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--option", "startingTimestamp"], "expected KEY=VALUE"),
        (["--option", "=1"], "expected KEY=VALUE"),
        (["--starting-timestamp", "1", "--option", "STARTINGTIMESTAMP=2"], "given twice"),
        (["--starting-timestamp", "yesterday"], "not a timestamp"),
        # review16 R16-1 (fix37's leftover): as consume --from-time, a bound is never negative (exit 2)
        (["--starting-timestamp", "-5"], "never negative"),
        (["--ending-timestamp", "-1"], "never negative"),
    ],
)
def test_bad_options_are_usage_errors(argv, message):
    with pytest.raises(InvalidInput, match=message):
        options_from_args(_args(*argv))


@pytest.mark.parametrize(("argv", "message"), [
    (["--ending-timestamp", "-2"], "--ending-timestamp: a time to look up is never negative: '-2' is -2 (Kafka's "
     "offsetsForTimes refuses it too); for the earliest or latest offset use --ending-offsets earliest|latest (or "
     "-O endingTimestamp=-2|-1, Spark's meaning)"),
    (["--starting-timestamp", "1969-12-31T23:59:59Z"], "--starting-timestamp: a time to look up is never negative: "
     "'1969-12-31T23:59:59Z' is -1000 (Kafka's offsetsForTimes refuses it too); for the earliest or latest offset use "
     "--starting-offsets earliest|latest (or -O startingTimestamp=-2|-1, Spark's meaning)"),
    (["--starting-timestamp", "yesterday"], "--starting-timestamp: not a timestamp: 'yesterday' (use epoch "
     "milliseconds or ISO-8601 UTC such as 2026-11-21T10:00:00Z)"),
])
def test_a_bad_time_flag_is_named_with_the_way_to_sparks_meaning(argv, message):
    # fix63's leftover: the line named neither the flag (two take a time) nor the option that takes -2/-1
    with pytest.raises(InvalidInput) as caught:
        options_from_args(_args(*argv))
    assert str(caught.value) == message
    assert options_from_args(_args("-O", "startingTimestamp=-2")) == {"startingTimestamp": "-2"}  # the option's


def test_export_checks_options_before_spark_starts(generated, tmp_path):
    """No Spark session is needed to refuse these: the options are checked first (exit 2, one line)."""
    cases = [
        ({"startingOfsets": "earliest"}, "unknown kafkalog option 'startingOfsets'"),
        ({"path": "/elsewhere"}, "export reads the log directories it is given"),
        ({"startingOffsets": "latest"}, "starting offset can't be latest for batch queries on Kafka"),
        ({"subscribe": "orders", "assign": '{"orders": [0]}'}, "Only one of the following options"),
        ({"minPartitions": "0"}, "minPartitions must be positive"),
    ]
    for options, message in cases:
        with pytest.raises(InvalidInput, match=message):
            export([str(generated)], str(tmp_path / "out"), options=options)
    with pytest.raises(InvalidInput, match="give the topics once"):
        export([str(generated)], str(tmp_path / "out"), topics=["orders"], options={"subscribe": "audit"})
    assert not (tmp_path / "out").exists()


def test_export_refuses_what_planning_refuses_before_spark_starts(generated, tmp_path, monkeypatch):
    """A read that planning refuses (no record at or after the starting timestamp; a start past the end)
    fails before a Spark session exists: one line, and no Spark stack trace logged by its file writer
    ("ERROR FileFormatWriter: Aborting job" with a Java traceback printed before kafkafs's line)."""
    from kafkafs.spark import export as export_module

    def no_spark(master):
        raise AssertionError("Spark was started")

    monkeypatch.setattr(export_module, "_session", no_spark)
    cases = [
        ({"startingTimestamp": "99999999999999"}, "No offset matched from request of topic-partition"),
        ({"subscribe": "orders", "startingOffsets": '{"orders": {"0": 999999, "1": -2}}'},
         "The resolved start offset 999999 is greater than the resolved end offset"),
        ({"subscribe": "orders", "startingOffsets": '{"order": {"0": 1, "1": 1}}'},
         "Partitions specified for Kafka start offsets don't match what are assigned"),
    ]
    for options, message in cases:
        with pytest.raises(InvalidInput, match=message):
            export([str(generated)], str(tmp_path / "out"), options=options)
    assert not (tmp_path / "out").exists()


def test_export_warns_of_a_bad_max_trigger_delay_and_goes_on(generated, tmp_path, monkeypatch, caplog):
    """review27 R27-4: export said "maxTriggerDelay option ignored in batch queries" and then failed on
    maxTriggerDelay=banana (exit 2); Spark's batch read only warns, so export goes on to start Spark."""
    import logging

    from kafkafs.spark import export as export_module

    class Started(Exception):
        pass

    def no_spark(master):
        raise Started

    monkeypatch.setattr(export_module, "_session", no_spark)
    with caplog.at_level(logging.WARNING, logger="kafkafs.spark"), pytest.raises(Started):
        export([str(generated)], str(tmp_path / "out"), options={"maxTriggerDelay": "banana"})
    assert "maxTriggerDelay option ignored in batch queries" in [r.getMessage() for r in caplog.records]


def test_export_makes_missing_parent_folders_as_sparks_writers_do(generated, tmp_path, monkeypatch):
    # review23 R23-10: "its parent folder ... does not exist" (exit 2); README's export snippet failed so
    from kafkafs.spark import export as export_module

    def no_spark(master):
        raise AssertionError("Spark was started")

    monkeypatch.setattr(export_module, "_session", no_spark)
    with pytest.raises(AssertionError, match="Spark was started"):
        export([str(generated)], str(tmp_path / "new" / "dir" / "out"))
    assert (tmp_path / "new" / "dir").is_dir() and not (tmp_path / "new" / "dir" / "out").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(InvalidInput, match="is not a folder"):
        export([str(generated)], str(tmp_path / "file" / "out"))


def test_export_cli_refuses_a_bad_option_in_one_line(generated, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "kafkafs", "export", str(generated), str(tmp_path / "out"), "-O", "bogus=1"],
        capture_output=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 2
    assert proc.stderr.decode().startswith("kafkafs: error: unknown kafkalog option 'bogus' (the options: subscribe,")
    assert proc.stderr.count(b"\n") == 1


@pytest.mark.parametrize("argv, message", [
    (["--set", "segment.bytes=lots"], "segment.bytes"),
    (["--set", "no.such.setting=1"], "no.such.setting"),
    (["--config", "/nonexistent/kafkafs.toml"], "/nonexistent/kafkafs.toml: no such settings file"),
])
def test_export_takes_config_and_set_as_every_command_does(generated, tmp_path, argv, message):
    """SPEC §7: every command that opens a log directory takes --config and --set; a bad one is a usage
    error in one line, said before Spark starts (nothing written)."""
    proc = subprocess.run(
        [sys.executable, "-m", "kafkafs", "export", str(generated), str(tmp_path / "out"), *argv],
        capture_output=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr.decode() and proc.stderr.count(b"\n") == 1, proc.stderr
    assert not (tmp_path / "out").exists()
    args = _args("--config", "/etc/k.toml", "--set", "segment.bytes=1048576", "--set", "retention.ms=1")
    assert args.config == "/etc/k.toml" and args.set == ["segment.bytes=1048576", "retention.ms=1"]


def test_export_says_it_cannot_create_its_output_before_spark_starts(generated, tmp_path):
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o555)
    caps = "-dac_override,-dac_read_search,-fowner"
    prefix = ["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}"] if os.geteuid() == 0 else []
    try:
        proc = subprocess.run(
            [*prefix, sys.executable, "-m", "kafkafs", "export", str(generated), str(parent / "out")],
            capture_output=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    finally:
        parent.chmod(0o755)
    assert proc.returncode == 1, proc.stderr.decode()
    assert proc.stderr.decode() == f"kafkafs: error: cannot create {parent / 'out'}: permission denied\n"


# ---------------------------------------------------------------------------------------------- Spark


@pytest.mark.spark
def test_export_takes_a_time_window_and_more_options(spark, generated, tmp_path):
    start, end = BASE_TS + 2_000, BASE_TS + 4_000  # offsets ~200..~400 of each orders partition
    options = {"startingTimestamp": str(start), "endingTimestamp": str(end), "subscribe": "orders",
               "minPartitions": "3", "includeHeaders": "false"}
    assert export([str(generated)], str(tmp_path / "window"), options=options, progress=False) == 0
    table = pq.read_table(tmp_path / "window")
    assert "headers" not in table.column_names
    got = sorted(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True))
    with LogDir(generated) as ld:
        expect = []
        for p in (0, 1):
            log = ld.log(f"orders-{p}")
            first, last = log.offset_for_timestamp(start)[0], log.offset_for_timestamp(end)[0]
            expect += [(p, o) for o in range(first, last)]
    assert got == expect and expect


def _binary_logdir(path: Path) -> Path:
    path.mkdir()
    with LogDir(path, writable=True) as ld:
        log = ld.create_partition("bin", 0)
        log.append_records([
            (BASE_TS, b"text key", "héllo, \"quoted\"".encode(), [Header("h", b"text"), Header("raw", b"\xff\x00")]),
            (BASE_TS + 1, b"\xfe\xff", b"\x00\x01\x80", [Header("nil", None)]),
            (BASE_TS + 2, None, None, []),
        ])
    return path


def _json_view(logdir: Path) -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "kafkafs", "consume", str(logdir), "bin-0", "--values", "string"],
                         capture_output=True, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    return [json.loads(line) for line in out.splitlines()]


@pytest.mark.spark
def test_csv_cells_follow_the_json_views_rule(spark, tmp_path):
    logdir = _binary_logdir(tmp_path / "logs")
    assert export([str(logdir)], str(tmp_path / "csv"), fmt="csv", progress=False) == 0
    text = "".join(p.read_text("utf-8") for p in sorted((tmp_path / "csv").glob("part-*.csv")))
    rows = [r for r in csv.DictReader(io.StringIO(text)) if r["key"] != "key"]
    rows.sort(key=lambda r: int(r["offset"]))
    view = _json_view(logdir)

    def as_view(cell: str):
        return json.loads(cell) if cell.startswith('{"$base64"') else cell

    for row, record in zip(rows[:2], view[:2], strict=True):
        assert as_view(row["key"]) == record["key"]
        assert as_view(row["value"]) == record["value"]
        assert json.loads(row["headers"]) == record["headers"]  # the same rule for header values
    assert rows[0]["value"] == 'héllo, "quoted"'
    assert json.loads(rows[0]["headers"])[1] == {"key": "raw", "value": {"$base64": base64.b64encode(b"\xff\x00").decode()}}
    assert rows[1]["key"] == '{"$base64":"/v8="}' and rows[1]["value"] == '{"$base64":"AAGA"}'
    assert rows[2]["key"] == rows[2]["value"] == ""  # null: an empty cell, as Spark writes null


@pytest.mark.spark
def test_csv_of_the_generated_directory_keeps_every_record(spark, generated, tmp_path):
    assert export([str(generated)], str(tmp_path / "csv"), fmt="csv", topics=["audit"], progress=False) == 0
    text = "".join(p.read_text("utf-8") for p in sorted((tmp_path / "csv").glob("part-*.csv")))
    rows = [r for r in csv.DictReader(io.StringIO(text)) if r["key"] != "key"]
    expect = [r for r in engine_rows(generated) if r[0] == "audit"]
    assert sorted(r["value"] for r in rows) == sorted(r[6].decode() for r in expect)


@pytest.mark.spark
@pytest.mark.slow
def test_export_of_damaged_data_says_one_error_line(generated, writable_copy, tmp_path):
    """`kafkafs export` of a damaged partition (onCorrupt=fail) exits 1 with kafkafs's one line, not after
    Spark's ERROR lines with their Java and Python stack traces (about 190 lines of them; SPEC §4).
    Spark's start-up warnings may come before it. A subprocess: it needs a session of its own (slow)."""
    copy = writable_copy(generated)
    seg = flip_byte(copy / "audit-0" / f"{0:020d}.log", 300)
    proc = subprocess.run(
        [sys.executable, "-m", "kafkafs", "export", str(copy), str(tmp_path / "out"), "--topics", "audit"],
        capture_output=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert err.splitlines()[-1].startswith(f"kafkafs: error: {seg}: position "), err
    assert "Traceback" not in err and " ERROR " not in err and "\tat " not in err, err


def test_export_refuses_an_output_inside_the_log_directory(generated, tmp_path):
    """review9 R9-8 addendum: `kafkafs export LOGDIR LOGDIR/out` wrote LOGDIR/out/, a folder a broker
    refuses to start with (and verify then names); it is refused before Spark starts, as --cache-dir is."""
    with pytest.raises(InvalidInput, match="inside the log directory"):
        export([str(generated)], str(generated / "out"))
    assert not (generated / "out").exists()
