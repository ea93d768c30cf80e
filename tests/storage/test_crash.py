"""Kill a writer with SIGKILL at random points, many times over the same directory; after each kill a
writable open (recovery) must keep every append that was reported durable, with valid CRCs and
contiguous offsets from the log start, and kafka-python must agree."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkafs.format.batch import encode_batch
from kafkafs.storage.config import Settings
from kafkafs.storage.log import Log
from kafkafs.storage.logdir import CLEAN_SHUTDOWN_FILE, LogDir

from . import crash_writer
from .helpers import headers_of, kafka_python_records

ROOT = Path(__file__).resolve().parents[2]
WRITER = Path(crash_writer.__file__)
ROUNDS = 60


def run_and_kill(directory: Path, seed: int, rng: random.Random) -> tuple[int, str]:
    """Start a writer, kill it at a random moment; return the last durable offset it reported (-1 if
    none) and its stderr."""
    proc = subprocess.Popen(
        [sys.executable, str(WRITER), str(directory), str(seed)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    if rng.random() < 0.1:
        time.sleep(rng.uniform(0, 0.25))  # anywhere, the opening included
    else:
        ready = proc.stdout.readline()
        assert ready.startswith(b"ready"), ready + proc.stderr.read()
        time.sleep(rng.uniform(0, 0.08))
    proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate()
    assert proc.returncode == -signal.SIGKILL, err.decode()
    durable = -1
    for line in out.split(b"\n")[:-1]:  # complete lines only: the last one may have been cut
        if line.startswith(b"ready"):
            continue
        first, last = map(int, line.split())
        durable = max(durable, last)
    return durable, err.decode()


def tear(partition: Path, durable: int, rng: random.Random) -> bool:
    """Do what a power loss may do to bytes that were never fsynced: cut the last segment inside a
    batch past the durable offset, or leave a part of a batch or zeros after its end. Return whether
    anything was done."""
    path = max(partition.glob("*.log"))
    data = path.read_bytes()
    undurable = [pos for pos, base, *_ in headers_of(data) if base > durable]
    choice = rng.random()
    if undurable and choice < 0.5:
        with open(path, "r+b") as f:
            f.truncate(rng.randrange(undurable[0] + 1, len(data)))  # inside some batch: a torn write
        return True
    with open(path, "ab") as f:
        if choice < 0.8:
            partial = encode_batch([(1, None, b"%d:" % (durable + 1000) + bytes(500), ())])
            f.write(partial[: rng.randrange(1, len(partial))])
        else:
            f.write(bytes(rng.randrange(1, 4096)))
    return True


def check(log: Log, from_offset: int) -> None:
    """Offsets contiguous from ``from_offset`` to the end, every batch's CRC valid (reads validate),
    every value where its offset says."""
    expected = from_offset
    for batch in log.read(from_offset):
        for offset, value in zip(batch.offsets, batch.values, strict=True):
            assert offset == expected, f"offset {offset} where {expected} was expected"
            assert value is not None and value.startswith(b"%d:" % offset)
            expected += 1
    assert expected == log.log_end_offset


@pytest.mark.slow
def test_sigkill_at_random_points(tmp_path: Path) -> None:
    rng = random.Random(20261122)
    settings = Settings(crash_writer.SETTINGS)
    name = f"{crash_writer.TOPIC}-0"
    durable = -1
    verified = 0
    kills_with_appends = 0
    torn = 0
    for round_ in range(ROUNDS):
        reported, err = run_and_kill(tmp_path, rng.randrange(1 << 30), rng)
        assert "Traceback" not in err, err
        if reported > durable:
            kills_with_appends += 1
        durable = max(durable, reported)
        partition = tmp_path / name
        unclean = not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()  # else the writer died before opening
        was_torn = unclean and partition.exists() and rng.random() < 0.5 and tear(partition, durable, rng)
        with LogDir(tmp_path, settings, writable=True) as logdir:
            if name not in logdir.partition_names():
                assert durable == -1
                continue
            log = logdir.log(name)
            assert not logdir.clean_shutdown or round_ == 0 or reported == -1
            assert log.log_end_offset > durable, f"round {round_}: durable offset {durable} lost"
            if was_torn:
                torn += 1
                assert log.last_recovery.truncated_bytes > 0  # type: ignore[union-attr]
            assert log.log_start_offset == 0
            check(log, max(0, min(verified, log.log_end_offset) - 50))
            for segment in log.segments:
                segment.sanity_check()
            verified = log.log_end_offset
    assert kills_with_appends >= ROUNDS // 2, "too few kills landed while appending"
    assert torn >= ROUNDS // 5
    with Log.open(tmp_path / name) as log:
        check(log, 0)
        theirs = []
        for segment in log.segments:
            theirs.extend(kafka_python_records(segment.read_at(0, segment.size)))
        assert [r[0] for r in theirs] == list(range(log.log_end_offset))
        assert all(r[3].startswith(b"%d:" % r[0]) for r in theirs)
        assert len(log.segments) > 3
