"""``consume`` with kcat's offsets, whole topics and ``-c``, checked against what the engine holds."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import orjson
import pytest

from kafkafs import consume_merge
from kafkafs.consume import consume, parse_offset_spec, resolve_partitions
from kafkafs.errors import InvalidInput, InvalidName
from kafkafs.format.recordfilter import RecordFilter
from kafkafs.storage.logdir import LogDir

T0 = 1_700_000_000_000


def run(*args: str, rc: int = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "kafkafs.cli", "consume", *args], capture_output=True, timeout=120)
    assert b"Traceback" not in proc.stderr, proc.stderr.decode()
    assert proc.returncode == rc, proc.stderr.decode()
    return proc


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    """orders-0: 10 records at T0 + 10*i (offsets 0..9); orders-1: 5 at T0 + 5 + 20*i; orders-10 (a
    third partition, to check that 'orders-1' names one partition): 1 record; other-0: 1 record."""
    path = tmp_path_factory.mktemp("consume") / "logs"
    path.mkdir()
    with LogDir(path, writable=True) as logdir:
        a = logdir.create_partition("orders", 0)
        for i in range(10):
            a.append_records([(T0 + 10 * i, None, f"a{i}".encode(), ())])
        b = logdir.create_partition("orders", 1)
        b.append_records([(T0 + 5 + 20 * i, b"k", f"b{i}".encode(), ()) for i in range(5)])
        logdir.create_partition("orders", 10).append_records([(T0 + 1, None, b"c0", ())])
        logdir.create_partition("other", 0).append_records([(T0, None, b"x", ())])
    return path


def records(data: bytes) -> list[dict]:
    return [orjson.loads(line) for line in data.splitlines()]


def read(logs: Path, names: list[str], spec: str = "beginning", **kw) -> list[dict]:
    out = io.BytesIO()
    logdir = LogDir(logs)
    try:
        consume(logdir, names, out, spec=parse_offset_spec(spec), **kw)
    finally:
        logdir.close()
    return records(out.getvalue())


def engine_values(logs: Path, name: str) -> list[tuple[int, str]]:
    logdir = LogDir(logs)
    try:
        return [(r.offset, r.value.decode()) for r in logdir.log(name).records()]
    finally:
        logdir.close()


@pytest.mark.parametrize(
    ("spec", "first"),
    [("beginning", 0), ("earliest", 0), ("end", 10), ("latest", 10), ("3", 3), ("-2", 8), ("-99", 0), ("99", 10),
     ("-0", 10), ("+0", 0), ("0", 0),
     (f"s@{T0 + 35}", 4), (f"s@{T0 + 90}", 9), (f"s@{T0 + 91}", 10)],
)
def test_kcat_offsets(logs, spec, first):
    expected = [(o, v) for o, v in engine_values(logs, "orders-0") if o >= first]
    got = read(logs, ["orders-0"], spec)
    assert [(r["offset"], r["value"]) for r in got] == expected


def test_offset_spec_errors():
    for bad in ("start", "s@yesterday", "1.5", ""):
        with pytest.raises(InvalidInput):
            parse_offset_spec(bad)


def test_whole_topic_interleaved_and_in_order(logs):
    logdir = LogDir(logs)
    try:
        assert resolve_partitions(logdir, "orders", None, None) == ["orders-0", "orders-1", "orders-10"]
        assert resolve_partitions(logdir, "orders-1", None, None) == ["orders-1"]
        assert resolve_partitions(logdir, None, "orders", 1) == ["orders-1"]
        assert resolve_partitions(logdir, None, "orders", None) == ["orders-0", "orders-1", "orders-10"]
        with pytest.raises(InvalidName):
            resolve_partitions(logdir, "nope", None, None)
    finally:
        logdir.close()
    names = ["orders-0", "orders-1", "orders-10"]
    merged = read(logs, names)
    assert len(merged) == 16
    keys = [(r["timestamp"], r["partition"], r["offset"]) for r in merged]
    assert keys == sorted(keys)
    in_order = read(logs, names, interleave=False)
    assert [(r["partition"], r["offset"]) for r in in_order] == sorted((r["partition"], r["offset"]) for r in merged)
    # per partition, each holds what the engine holds
    for name in names:
        part = int(name.rsplit("-", 1)[1])
        assert [(r["offset"], r["value"]) for r in merged if r["partition"] == part] == engine_values(logs, name)
    # -c counts across the topic; -N applies to every partition
    assert len(read(logs, names, count=4)) == 4
    assert [(r["partition"], r["offset"]) for r in read(logs, names, "-1")] == [(10, 0), (1, 4), (0, 9)]


def test_cli_forms(logs):
    assert run(str(logs), "orders-0", "-o", "-0").stdout == b""  # kcat's -0: 0 from the end (it read from 0)
    out = records(run(str(logs), "orders", "-o", "-2", "-c", "3").stdout)
    assert len(out) == 3 and {r["partition"] for r in out} <= {0, 1, 10}
    out = records(run(str(logs), "-t", "orders", "-p", "1", "-o", "beginning").stdout)
    assert [r["value"] for r in out] == [f"b{i}" for i in range(5)]
    out = records(run(str(logs), "orders-0", "--from-offset", "earliest", "--count", "2").stdout)
    assert [r["offset"] for r in out] == [0, 1]
    out = records(run(str(logs), "orders-0", "-o", f"s@{T0 + 20}", "-o", f"e@{T0 + 50}").stdout)
    assert [r["offset"] for r in out] == [2, 3, 4]
    assert run(str(logs), "orders-0", "-o", "end").stdout == b""
    out = records(run(str(logs), "orders", "--no-interleave", "-c", "11").stdout)
    assert [r["partition"] for r in out] == [0] * 10 + [1]
    for args in (("orders-0", "-o", "soon"), ("nope",), ("orders-0", "-t", "orders")):
        proc = run(str(logs), *args, rc=2)
        assert proc.stderr.startswith(b"kafkafs: ") and proc.stderr.count(b"\n") == 1


def test_a_folder_named_as_a_shell_completes_it(logs):
    # review23 R23-10: tab completion's trailing slash was "no partition orders-0/ and no topic orders-0/"
    assert [r["offset"] for r in records(run(str(logs), "orders-0/").stdout)] == list(range(10))
    assert len(records(run(str(logs), "orders/").stdout)) == 16


@pytest.mark.parametrize("starts", [("--from-offset", "5", "--from-time", "0"), ("-o", "3", "-o", "9")])
def test_two_places_to_start_are_a_usage_error(logs, starts):
    # SPEC §4: [--from-offset N | --from-time TS]; both used to print from the later one, exit 0
    proc = run(str(logs), "orders-0", *starts, rc=2)
    assert proc.stdout == b"" and proc.stderr.decode().count("\n") == 1
    assert proc.stderr.startswith(b"kafkafs: error: give one place to start (got ")


@pytest.mark.parametrize("args", [("--from-time", "-1"), ("--from-time", "1969-12-31T23:59:59Z"), ("-o", "s@-5"),
                                  ("-o", "e@-1")])
def test_a_negative_time_is_a_usage_error(logs, args):
    # review16 R16-1: --from-time -1 and -o s@-5 started at offset 0, exit 0; Kafka's offsetsForTimes
    # refuses a negative target time
    proc = run(str(logs), "orders-0", *args, rc=2)
    assert proc.stdout == b"" and proc.stderr.decode().count("\n") == 1
    assert proc.stderr.startswith(b"kafkafs: error: ") and b"negative" in proc.stderr, proc.stderr


@pytest.mark.parametrize("count", ["-1", "x"])
def test_a_bad_count_is_a_usage_error(logs, count):
    # -c -1 used to print some records and exit 0
    proc = run(str(logs), "orders-0", "-c", count, rc=2)
    assert proc.stdout == b"" and proc.stderr.decode().count("\n") == 1


_EVERY_WAY = {
    "whole-batches": {"interleave": False},
    "interleaved": {},
    "stop-time": {"stop_ts": T0 + 1000},
    "grep": {"grep": re.compile("a|b")},
    "key": {"record_filter": RecordFilter(key=b"k")},
    "follow": {"follow": True, "interleave": False},
    "follow-grep": {"follow": True, "grep": re.compile("a|b")},
}


@pytest.mark.parametrize("way", list(_EVERY_WAY.values()), ids=list(_EVERY_WAY))
@pytest.mark.parametrize("merge", [True, False], ids=["merge", "no-merge"])
def test_count_0_prints_nothing_and_returns_on_every_way(logs, monkeypatch, way, merge):
    # -c 0 printed one record where lines are written one at a time (--grep, a filter, or e@TS without
    # the kernel's merge), and with --follow the whole-batch way waited for new records for ever
    if not merge:
        monkeypatch.setattr(consume_merge, "available", lambda: False)
    got: list[list[dict]] = []
    reader = threading.Thread(target=lambda: got.append(read(logs, ["orders-0", "orders-1"], count=0, **way)),
                              daemon=True)
    reader.start()
    reader.join(30)
    assert not reader.is_alive(), "consume -c 0 did not return"
    assert got == [[]]


@pytest.fixture(scope="module")
def damaged(tmp_path_factory) -> Path:
    """tx-0: 4 batches, the first one damaged (a value byte changed: its CRC fails); tx-1: 4 healthy
    batches; tx-2: 6 batches, the fourth damaged. One record a batch, keyed k, timestamps interleaved."""
    path = tmp_path_factory.mktemp("damaged") / "logs"
    path.mkdir()
    with LogDir(path, writable=True) as logdir:
        for p, n in ((0, 4), (1, 4), (2, 6)):
            log = logdir.create_partition("tx", p)
            for i in range(n):
                log.append_records([(T0 + 10 * i + p, b"k", f"p{p}-{i}-value".encode(), ())])
    for p, bad in ((0, 0), (2, 3)):
        segment = path / f"tx-{p}" / "00000000000000000000.log"
        data = bytearray(segment.read_bytes())
        at = [i for i in range(len(data)) if data.startswith(f"p{p}-{bad}-value".encode(), i)][0]
        data[at + 3] ^= 0xFF
        segment.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("args", [(), ("--no-interleave",), ("--key", "k"), ("-o", f"e@{T0 + 1000}"),
                                  ("--grep", "value"), ("-c", "100")],
                         ids=["interleaved", "no-interleave", "key", "stop-time", "grep", "count"])
def test_damage_in_one_partition_of_a_topic_ends_only_that_partition(damaged, args):
    # SPEC §3/§4: damage is local. Reading a whole topic used to stop at the first damaged partition:
    # tx-0 damaged at its first batch printed nothing at all (also with --no-interleave), exit 1
    proc = run(str(damaged), "tx", *args, rc=1)
    got = sorted((r["partition"], r["offset"]) for r in records(proc.stdout))
    assert got == [(1, i) for i in range(4)] + [(2, i) for i in range(3)]
    said = proc.stderr.decode().splitlines()
    assert len(said) == 2 and all(line.startswith("kafkafs: damaged data: ") for line in said), said
    assert any("tx-0" in line for line in said) and any("tx-2" in line for line in said)
    # one partition: what comes before the damage, then the damage said, as before
    proc = run(str(damaged), "tx-2", *args, rc=1)
    assert [r["offset"] for r in records(proc.stdout)] == [0, 1, 2]
    assert proc.stderr.decode().count("damaged data") == 1


def test_damage_said_before_the_reader_left_is_exit_1(tmp_path):
    # review23 R23-10: `consume TOPIC | head -n1` said the damage, then exited 0 at the closed pipe
    with LogDir(tmp_path, writable=True) as logdir:
        logdir.create_partition("t", 0).append_records([(T0, None, b"bad-value", ())])
        big = logdir.create_partition("t", 1)
        for i in range(20):
            big.append_records([(T0 + 1 + i * 100 + j, None, b"v" * 200, ()) for j in range(100)])
    segment = tmp_path / "t-0" / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    data[data.index(b"bad-value")] ^= 0xFF
    segment.write_bytes(bytes(data))
    script = f'"$0" -m kafkafs.cli consume {tmp_path} t | head -n 1 > /dev/null; exit ${{PIPESTATUS[0]}}'
    proc = subprocess.run(["bash", "-c", script, sys.executable], capture_output=True, timeout=120)
    assert "damaged data" in proc.stderr.decode() and "Traceback" not in proc.stderr.decode(), proc.stderr
    assert proc.returncode == 1
    healthy = subprocess.run(["bash", "-c", script.replace(" t |", " t-1 |"), sys.executable], capture_output=True,
                             timeout=120)
    assert healthy.returncode == 0 and healthy.stderr == b""  # the reader gone, nothing wrong: exit 0 (SPEC §4)


def test_dash_t_names_a_topic_as_kcats_does(tmp_path):
    # review6 F6: -t a-1 read the folder a-1 (topic a, partition 1), so topic a-1 could not be read whole
    logs = tmp_path / "logs"
    logs.mkdir()
    with LogDir(logs, writable=True) as logdir:
        for topic, p, value in (("a-1", 0, b"one"), ("a-1", 1, b"two"), ("a", 1, b"three")):
            logdir.create_partition(topic, p).append_records([(T0 + p, None, value, ())])
    out = records(run(str(logs), "-t", "a-1").stdout)
    assert sorted((r["topic"], r["partition"], r["value"]) for r in out) == [("a-1", 0, "one"), ("a-1", 1, "two")]
    assert [r["value"] for r in records(run(str(logs), "-t", "a-1", "-p", "1").stdout)] == ["two"]
    assert [r["value"] for r in records(run(str(logs), "-t", "a", "-p", "1").stdout)] == ["three"]
    assert [r["value"] for r in records(run(str(logs), "a-1").stdout)] == ["three"]  # a folder first (README)
    assert [r["value"] for r in records(run(str(logs), "-t", "a").stdout)] == ["three"]
    proc = run(str(logs), "-t", "a-1-0", rc=2)  # a folder is no topic: said, with what was meant
    assert proc.stderr.decode().strip().endswith("(a-1-0 is partition 0 of topic a-1: -t a-1 -p 0)")


@pytest.mark.parametrize("way", [{}, {"count": 1000}, {"stop_ts": 2**62}], ids=["spans", "batch-by-batch", "merge"])
def test_a_consume_that_listed_the_folder_just_before_a_compaction_swap_reads_the_merged_segment(tmp_path, way):
    """review8 R8-7: ``kafkafs consume`` beside a broker whose cleaner compacts listed the partition's
    folder (every segment, with its size), then the swap happened (the merged segment swapped in at the
    first base, the segments it replaced renamed away), then the first ``.log`` was opened: the merged
    file, read with the replaced segments still listed above it, its batches ran past the next listed
    base: "damaged data ... offsets run past the next batch's base", exit 1, on healthy data."""
    from kafkafs.storage.cleaner import compact
    from kafkafs.storage.config import Settings

    def history(log_dir: Path) -> bytes:
        out = io.BytesIO()
        with LogDir(log_dir) as fresh:
            consume(fresh, ["kv-0"], out, spec=parse_offset_spec("beginning"), on_damage=pytest.fail)
        return out.getvalue()

    settings = Settings({"segment.bytes": 300}, {"kv": {"cleanup.policy": "compact"}})
    with LogDir(tmp_path, settings, writable=True) as logdir:
        log_ = logdir.create_partition("kv", 0)
        for i in range(60):
            log_.append_records([(T0 + i, b"k%d" % (i % 4), b"v%d" % i, ())])
    settings = Settings({"segment.bytes": 100_000}, {"kv": {"cleanup.policy": "compact"}})  # the cleaner merges
    damage: list[Exception] = []
    out = io.BytesIO()
    with LogDir(tmp_path, settings) as reading:
        before = len(reading.log("kv-0").segments.bases())  # listed now; no .log opened yet
        with LogDir(tmp_path, settings, writable=True) as logdir:
            assert compact(logdir.log("kv-0"), now_ms=10**13)  # merges the sealed segments
        logs = [name for name in os.listdir(tmp_path / "kv-0") if name.endswith(".log")]
        assert len(logs) < before  # the swap renamed segments away
        consume(reading, ["kv-0"], out, spec=parse_offset_spec("beginning"), on_damage=damage.append, **way)
    assert damage == []
    assert out.getvalue() == history(tmp_path)
    assert len(out.getvalue().splitlines()) < 60
