"""A batch whose magic byte reads 3..127 (the magic is outside the CRC) is read as a v2 batch, as Kafka's
``FileLogInputStream`` reads every magic above 1: Kafka 4.4's recovery keeps it and its broker serves its
records (review11 R11-8: kafkafs said "unknown magic 7", consume stopped there and recover cut 1,233 records
that Kafka serves). A magic of 128..255 is negative to Kafka (a legacy message it cannot read): damage.

The records are checked against what the test wrote, not against another kafkafs reader.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from kafkafs.format.batchheader import scan_batches
from kafkafs.storage.logdir import LogDir

T0 = 1_700_000_000_000
BATCHES = 30
PER_BATCH = 5


def _kafkafs(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "kafkafs.cli", *args], capture_output=True, timeout=120)
    assert b"Traceback" not in proc.stderr, proc.stderr.decode()
    return proc


def _logdir(path: Path, magic: int) -> tuple[Path, Path]:
    """t-0: BATCHES batches of PER_BATCH records in one segment, then a second segment (so the first is
    sealed); the magic byte of the batch in the middle of the first segment set to ``magic``."""
    path.mkdir()
    with LogDir(path, writable=True) as logdir:
        part = logdir.create_partition("t", 0)
        for b in range(BATCHES):
            part.append_records([(T0 + b, f"k{b}".encode(), f"v{b}-{i}".encode(), ()) for i in range(PER_BATCH)])
        part.roll()
        part.append_records([(T0 + BATCHES, b"last", b"last", ())])
    seg = path / "t-0" / "00000000000000000000.log"
    data = bytearray(seg.read_bytes())
    middle = list(scan_batches(bytes(data)))[BATCHES // 2]
    data[middle.position + 16] = magic
    seg.write_bytes(bytes(data))
    return path, seg


def _expected_values() -> list[str]:
    return [f"v{b}-{i}" for b in range(BATCHES) for i in range(PER_BATCH)] + ["last"]


@pytest.mark.parametrize("magic", [3, 7, 127])
def test_a_magic_above_2_is_read_as_v2_by_verify_consume_and_recover(tmp_path: Path, magic: int) -> None:
    logs, seg = _logdir(tmp_path / "logs", magic)
    before = seg.read_bytes()

    verified = _kafkafs("verify", str(logs))
    assert verified.returncode == 0, verified.stdout.decode() + verified.stderr.decode()

    consumed = _kafkafs("consume", str(logs), "t-0")
    assert consumed.returncode == 0, consumed.stderr.decode()
    lines = [orjson.loads(line) for line in consumed.stdout.splitlines()]
    assert [line["offset"] for line in lines] == list(range(BATCHES * PER_BATCH + 1))
    assert [line["value"] for line in lines] == _expected_values()

    recovered = _kafkafs("recover", str(logs))
    assert recovered.returncode == 0, recovered.stdout.decode() + recovered.stderr.decode()
    assert seg.read_bytes() == before  # nothing cut: Kafka's recovery keeps the batch


@pytest.mark.allow_warnings("damage on purpose")
def test_a_magic_kafka_reads_as_negative_is_damage(tmp_path: Path) -> None:
    logs, _seg = _logdir(tmp_path / "logs", 200)
    verified = _kafkafs("verify", str(logs))
    assert verified.returncode == 1
    assert b"unknown magic 200" in verified.stdout + verified.stderr
    consumed = _kafkafs("consume", str(logs), "t-0")
    assert consumed.returncode == 1
    assert len(consumed.stdout.splitlines()) == BATCHES // 2 * PER_BATCH


def test_a_read_only_mount_serves_a_batch_of_magic_7(mounted, tmp_path: Path) -> None:
    logs, _seg = _logdir(tmp_path / "logs", 7)
    m = mounted(logs)
    part = m / "t-0"
    lines = [orjson.loads(line) for line in (part / "records.jsonl").read_bytes().splitlines()]
    assert [line["value"] for line in lines] == _expected_values()
    middle = BATCHES // 2 * PER_BATCH + 1  # a record of the magic-7 batch
    assert orjson.loads((part / "by-offset" / f"{middle}.json").read_bytes())["value"] == f"v{BATCHES // 2}-1"
    assert (part / "records.jsonl").stat().st_size == len((part / "records.jsonl").read_bytes())
    table = [orjson.loads(line) for line in (part / "table.jsonl").read_bytes().splitlines()]
    assert {(row["key"], row["value"]) for row in table} >= {(f"k{BATCHES // 2}", f"v{BATCHES // 2}-4")}
    assert "ERROR" not in m.log() and "WARNING" not in m.log(), m.log()
