"""``consume`` from past a partition's end (SPEC §4): nothing on stdout, where the partition ends on
stderr (without ``--follow``), exit 0, so that "no records" and "nothing there" can be told apart."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kafkafs.storage.logdir import LogDir

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkafs", *args], capture_output=True, timeout=timeout,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


@pytest.fixture(scope="module")
def logdir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("past-end") / "logs"
    path.mkdir()
    with LogDir(path, writable=True) as ld:
        log = ld.create_partition("orders", 0)
        log.append_records([(1_700_000_000_000 + i, None, b"v%d" % i, []) for i in range(10)])
        ld.create_partition("orders", 1)  # empty
    return path


def test_an_offset_past_the_end_says_where_the_partition_ends(logdir):
    proc = run("consume", str(logdir), "orders-0", "-o", "999")
    assert (proc.returncode, proc.stdout) == (0, b"")
    assert proc.stderr.decode() == (
        "kafkafs: orders-0: nothing at or after offset 999: the partition ends at offset 9 (its next offset is 10)\n")
    # the next offset itself is past the last record too
    assert b"ends at offset 9" in run("consume", str(logdir), "orders-0", "-o", "10").stderr


def test_a_whole_topic_says_it_per_partition(logdir):
    proc = run("consume", str(logdir), "orders", "-o", "999")
    assert (proc.returncode, proc.stdout) == (0, b"")
    assert proc.stderr.decode().splitlines() == [
        "kafkafs: orders-0: nothing at or after offset 999: the partition ends at offset 9 (its next offset is 10)",
        "kafkafs: orders-1: nothing at or after offset 999: the partition holds no records (its next offset is 0)",
    ]


def test_a_time_past_the_last_record(logdir):
    proc = run("consume", str(logdir), "orders-0", "-o", "s@2030-01-01T00:00:00Z")
    assert (proc.returncode, proc.stdout) == (0, b"")
    assert "nothing at or after 2030-01-01T00:00:00.000Z: the partition ends at offset 9" in proc.stderr.decode()


def test_within_the_log_nothing_is_said(logdir):
    proc = run("consume", str(logdir), "orders-0", "-o", "5")
    assert (proc.returncode, proc.stderr, proc.stdout.count(b"\n")) == (0, b"", 5)
    proc = run("consume", str(logdir), "orders-0", "-o", "end")  # the end, asked for by name
    assert (proc.returncode, proc.stderr, proc.stdout) == (0, b"", b"")


def test_follow_waits_quietly(logdir):
    with pytest.raises(subprocess.TimeoutExpired) as raised:
        run("consume", str(logdir), "orders-0", "-o", "999", "--follow", timeout=3)
    assert not raised.value.stderr
