"""``kafkafs groups``, ``kafkafs transactions``, ``kafkafs index --keys`` and consume's filters (SPEC §4),
as a user runs them; filters checked against the unfiltered output filtered here."""

from __future__ import annotations

import base64
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir
from tests.storage.keylogs import fill
from tests.storage.test_replay import build_damaged, spoil
from tests.storage.test_txnstate import build as build_transactions


def run(*args: str, rc: int = 0, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "kafkafs.cli", *args], capture_output=True, timeout=300,
                          env={**os.environ, **(env or {})})
    assert b"Traceback" not in proc.stderr, proc.stderr.decode()
    assert proc.returncode == rc, (proc.returncode, proc.stderr.decode())
    return proc


def lines(data: bytes) -> list[dict]:
    return [orjson.loads(line) for line in data.splitlines()]


@pytest.fixture(scope="module")
def keyed(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("keyed") / "logs"
    path.mkdir()
    with LogDir(path, Settings({"segment.bytes": 8000}), writable=True) as logdir:
        log = logdir.create_partition("kv", 0)
        fill(log, random.Random(31), 300, keys=40)
        log.append_records([(1, b"h", b"x", (("trace", b"1"), ("kind", b"a"))), (2, b"h", b"y", (("trace", None),))])
    return path


def test_groups_of_the_fixtures(fixtures_dir):
    out = run("groups", str(fixtures_dir / "kafka-logs-c")).stdout.decode()
    assert "DEVSmileCDR Stable" in out and "TestTopicPatient" in out
    one = orjson.loads(run("groups", str(fixtures_dir / "kafka-logs-c"), "DEVSmileCDR", "--json").stdout)
    assert one["group"] == "DEVSmileCDR" and one["state"] == "Stable"
    every = orjson.loads(run("groups", str(fixtures_dir / "kafka-logs-c"), "--json").stdout)
    assert every == [one]
    assert run("groups", str(fixtures_dir / "kafka-logs-a"), "--json").stdout == b"[]\n"
    proc = run("groups", str(fixtures_dir / "kafka-logs-a"), "my-group", rc=2)
    assert proc.stderr.decode().count("\n") == 1 and "no group my-group" in proc.stderr.decode()


def test_transactions_and_hanging_exit_code(tmp_path):
    logs = build_transactions(tmp_path)
    out = run("transactions", str(logs)).stdout.decode()
    assert len(out.splitlines()) == 1 + 6 and "app-3" in out
    hanging = run("transactions", str(logs), "--hanging", rc=1).stdout.decode()
    assert len(hanging.splitlines()) == 1 + 4
    report = orjson.loads(run("transactions", str(logs), "--json").stdout)
    assert set(report) == {"partitions", "transactionalIds"}
    assert report["partitions"]["t-0"]["lastStableOffset"] == 7
    assert sorted(report["transactionalIds"]) == ["app-3", "app-4", "app-6", "app-7"]
    only = orjson.loads(run("transactions", str(logs), "--json", "--hanging", rc=1).stdout)
    assert list(only["partitions"]) == ["t-0"]
    assert all(t["hanging"] for t in only["partitions"]["t-0"]["open"])
    # a long enough timeout and no coordinator: nothing hangs
    clean = tmp_path / "clean"
    clean.mkdir()
    with LogDir(clean, writable=True) as logdir:
        logdir.create_partition("p", 0).append_records([(1, None, b"x", ())])
    assert run("transactions", str(clean), "--hanging").stdout == b"no hanging transactions\n"


@pytest.mark.parametrize("args, pick", [
    (["--key", "key-5"], lambda r: r["key"] == "key-5"),
    (["--key-base64", base64.b64encode(b"key-7").decode()], lambda r: r["key"] == "key-7"),
    (["--key-base64", base64.urlsafe_b64encode(bytes([0xFF, 10, 0])).decode()],
     lambda r: r["key"] == {"$base64": base64.b64encode(bytes([0xFF, 10, 0])).decode()}),
    (["--header", "trace"], lambda r: any(h["key"] == "trace" for h in r["headers"])),
    (["--header", "trace=1", "--header", "kind=a"], lambda r: {"trace", "kind"} <= {h["key"] for h in r["headers"]}),
    (["--grep", r'"value":"v1\d+"'], lambda r: re.fullmatch(r"v1\d+", str(r["value"])) is not None),
    (["--key", "key-5", "--grep", "v9"], lambda r: r["key"] == "key-5" and "v9" in str(r["value"])),
])
def test_consume_filters_equal_the_filtered_output(keyed, args, pick):
    everything = lines(run("consume", str(keyed), "kv-0").stdout)
    want = [r for r in everything if pick(r)]
    assert want
    assert lines(run("consume", str(keyed), "kv-0", *args, "--cache-dir", "").stdout) == want
    assert lines(run("consume", str(keyed), "kv-0", *args, "-c", "2", "--cache-dir", "").stdout) == want[:2]
    # a start offset and the interleaved path give the same records
    half = everything[len(everything) // 2]["offset"]
    got = lines(run("consume", str(keyed), "kv", *args, "-o", str(half), "--cache-dir", "").stdout)
    assert got == [r for r in want if r["offset"] >= half]


def test_consume_by_key_through_the_index(keyed, tmp_path):
    cache = tmp_path / "cache"
    scanned = run("consume", str(keyed), "kv-0", "--key", "key-5", "--cache-dir", "").stdout
    run("index", str(keyed), "--keys", "--cache-dir", str(cache))
    assert list(cache.glob("*.keys"))
    assert run("consume", str(keyed), "kv-0", "--key", "key-5", "--cache-dir", str(cache)).stdout == scanned
    assert run("consume", str(keyed), "kv-0", "--key", "key-5", "-c", "3", "--cache-dir", str(cache)).stdout == \
        b"".join(scanned.splitlines(keepends=True)[:3])
    tail = lines(scanned)[-2]["offset"]
    assert lines(run("consume", str(keyed), "kv-0", "--key", "key-5", "-o", str(tail), "--cache-dir",
                     str(cache)).stdout) == lines(scanned)[-2:]


def test_index_keys_says_a_damaged_batch_once(keyed, tmp_path):
    """``kafkafs index --keys`` on a segment with a bad-CRC batch: one line for that batch (the sizing
    and the key index meet it both), naming file and position, and exit 1. Before, the key index added
    its own WARNING line for it."""
    import shutil

    logs = tmp_path / "logs"
    shutil.copytree(keyed, logs)
    first = sorted((logs / "kv-0").glob("*.log"))[0]
    data = bytearray(first.read_bytes())
    data[len(data) // 2] ^= 0xFF
    first.write_bytes(bytes(data))
    proc = run("index", str(logs), "--keys", "--cache-dir", str(tmp_path / "cache"), rc=1)
    said = [line for line in proc.stderr.decode().splitlines() if str(first) in line]
    assert len(said) == 1 and "position" in said[0] and "CRC mismatch" in said[0], proc.stderr.decode()


def test_bad_filters_are_usage_errors(keyed):
    for args in (["--key-base64", "!!"], ["--grep", "("], ["--key", "a", "--key-base64", "YQ"]):
        proc = run("consume", str(keyed), "kv-0", *args, rc=2)
        assert proc.stderr.decode().count("\n") == 1


def test_a_header_with_an_empty_name_is_matched(tmp_path):
    """review10 R10-4: Kafka allows a header whose key is empty; ``--header =VALUE`` matches it (and
    ``--header ''`` any record that has one), where it was refused as a usage error (exit 2)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    with LogDir(logs, writable=True) as logdir:
        logdir.create_partition("h", 0).append_records([
            (1, b"a", b"1", (("", b"e"),)), (2, b"b", b"2", (("", b"f"), ("x", b"e"))), (3, b"c", b"3", (("x", b"e"),)),
            (4, b"d", b"4", ())])
    for where in ("h-0", "h"):
        assert [r["offset"] for r in lines(run("consume", str(logs), where, "--header", "=e").stdout)] == [0]
        assert [r["offset"] for r in lines(run("consume", str(logs), where, "--header", "").stdout)] == [0, 1]
        assert [r["offset"] for r in lines(run("consume", str(logs), where, "--header", "", "--header", "x").stdout)] \
            == [1]


def test_damage_in_the_coordinators_is_local(tmp_path, fixtures_dir):
    """review6 F10 on the brokers' own data: fixture c (KRaft: group DEVSmileCDR in __consumer_offsets-6)
    with fixture a's __consumer_offsets-12 (a 3.7.1 broker's, 147 batches) in place of c's empty one."""
    logs = tmp_path / "c"
    shutil.copytree(fixtures_dir / "kafka-logs-c", logs)
    shutil.rmtree(logs / "__consumer_offsets-12")
    shutil.copytree(fixtures_dir / "kafka-logs-a" / "__consumer_offsets-12", logs / "__consumer_offsets-12")
    before = run("groups", str(logs), "--json").stdout
    assert [g["group"] for g in orjson.loads(before)] == ["DEVSmileCDR"]
    position = spoil(logs / "__consumer_offsets-12" / "00000000000000000000.log", 40)
    after = run("groups", str(logs), "--json", rc=1)
    assert after.stdout == before  # the group of another partition: exact
    said = after.stderr.decode().splitlines()
    assert len(said) == 1 and said[0].startswith("kafkafs: __consumer_offsets-12: damaged: ")
    assert f"position {position}: CRC mismatch" in said[0] and "left out: " in said[0]
    # a group whose records all lie in the damaged bytes cannot be named: the line says they may hide some
    assert said[0].endswith("; the damaged bytes may hide more groups, which cannot be named"), said
    missing = run("groups", str(logs), "no-such-group", rc=1).stderr.decode()  # it may lie in the damaged bytes
    assert missing.startswith(f"kafkafs: no group no-such-group in what can be read of {logs} (the damaged bytes "
                              "said below may hold it)\n"), missing
    one = run("groups", str(logs), "DEVSmileCDR")  # asked by name, known exactly: nothing wrong
    assert one.stderr == b"" and b"DEVSmileCDR Stable" in one.stdout
    # damage in the group's own partition: it is said and left out, exit 1
    spoil(logs / "__consumer_offsets-6" / "00000000000000000000.log", 0)
    mine = run("groups", str(logs), "DEVSmileCDR", rc=1)
    assert mine.stdout == b"" and "__consumer_offsets-6: damaged" in mine.stderr.decode()
    assert "DEVSmileCDR" in mine.stderr.decode().split("left out: ")[1]


def test_damage_in_the_transaction_state_is_local(tmp_path):
    logs = build_damaged(tmp_path)
    table = run("transactions", str(logs), rc=1)
    rows = {line.split()[0]: line.split() for line in table.stdout.decode().splitlines()[1:]}
    assert rows["t-0"][-1] == "no" and rows["t-0"][6] == "app-3" and rows["u-0"][-1] == "unknown"
    said = table.stderr.decode().splitlines()
    assert len(said) == 1 and said[0].startswith("kafkafs: __transaction_state-1: damaged: ")
    assert "left out: app-7" in said[0] and "hanging unknown for 1 open transaction(s)" in said[0]
    assert said[0].endswith("; hanging unknown for 1 open transaction(s)")
    assert "; the damaged bytes may hide more transactional ids, which cannot be named;" in said[0]
    report = orjson.loads(run("transactions", str(logs), "--json", rc=1).stdout)
    assert list(report["transactionalIds"]) == ["app-3"]
    assert report["partitions"]["v-0"] == {"lastStableOffset": 3, "open": [], "abortedRanges": []}
    assert [t["hanging"] for t in report["partitions"]["u-0"]["open"]] == [None]
    hanging = run("transactions", str(logs), "--hanging", rc=1).stdout.decode()  # unknown ones may hang: shown
    assert "u-0" in hanging and "t-0" not in hanging
