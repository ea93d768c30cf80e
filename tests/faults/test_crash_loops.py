"""Crash loops (issue 9): SIGKILL at random moments, over and over, of ``kafkafs produce`` and of a
``--rw`` mount's daemon while records are written to ``append``.

Acknowledged: ``produce`` exited 0 (it flushed before saying so), or ``close()`` of ``append``
returned. After every kill the directory is reopened writable (recovery) and must hold a valid prefix
of what was sent: CRCs valid (reads validate), offsets contiguous from 0, each round's records a
prefix of the lines sent in it, rounds in order, and every acknowledged record there. At the end
kafka-python decodes every segment and agrees. ``CRASH_ROUNDS`` sets the long runs' length (200).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir
from tests.fs.conftest import ROOT
from tests.storage.helpers import kafka_python_records

SETTINGS = {"segment.bytes": 16384, "index.interval.bytes": 512, "segment.index.bytes": 160}
NAME = "crash-0"


def _line(round_: int, i: int, rng: random.Random) -> bytes:
    return b"%d:%d:" % (round_, i) + rng.randbytes(rng.choice([0, 8, 100, 700, 2500])).hex().encode()


class Ledger:
    """What was sent in each round, what was acknowledged, and how far the log has been checked."""

    def __init__(self) -> None:
        self.sent: dict[int, list[bytes]] = {}
        self.acked: dict[int, int] = {}  # round -> records acknowledged (a prefix of what was sent)
        self.checked = 0  # offsets below this were checked and cannot change
        self.position: tuple[int, int] = (-1, -1)  # (round, index) of the record at checked - 1

    def check(self, logdir: Path) -> int:
        """Reopen writable (recovery), check the records from ``checked`` on; return the log end."""
        with LogDir(logdir, Settings(SETTINGS), writable=True) as d:
            if NAME not in d.partition_names():
                assert not any(self.acked.values()), "acknowledged records but no partition"
                return 0
            log = d.log(NAME)
            end = log.log_end_offset
            assert log.log_start_offset == 0
            assert end >= self.checked, f"log end {end} below {self.checked}, which was checked before"
            expected = self.checked
            last_round, last_index = self.position
            for batch in log.read(self.checked):
                for offset, value in zip(batch.offsets, batch.values, strict=True):
                    assert offset == expected, f"offset {offset} where {expected} was expected"
                    round_, index, _ = value.split(b":", 2)
                    round_, index = int(round_), int(index)
                    if round_ == last_round:
                        assert index == last_index + 1, f"offset {offset}: record {index} of round {round_} after {last_index}"
                    else:
                        assert round_ > last_round and index == 0, f"offset {offset}: round {round_}/{index} after {last_round}/{last_index}"
                    assert value == self.sent[round_][index], f"offset {offset}: not the bytes sent"
                    last_round, last_index = round_, index
                    expected += 1
            assert expected == end
            present: dict[int, int] = {}
            for batch in log.read(0):
                for value in batch.values:
                    r = int(value.split(b":", 1)[0])
                    present[r] = present.get(r, 0) + 1
            for r, n in self.acked.items():
                assert present.get(r, 0) >= n, f"round {r}: {n} acknowledged, {present.get(r, 0)} there"
            for segment in log.segments.values():
                segment.sanity_check()
            self.checked, self.position = end, (last_round, last_index)
            return end

    def kafka_python_agrees(self, logdir: Path) -> int:
        with LogDir(logdir, Settings(SETTINGS)) as d:
            log = d.log(NAME)
            ours = [(o, v) for b in log.read(0) for o, v in zip(b.offsets, b.values, strict=True)]
            theirs = []
            for segment in log.segments.values():
                theirs.extend((r[0], r[3]) for r in kafka_python_records(segment.read_at(0, segment.size)))
        assert theirs == ours
        return len(ours)


def _produce_round(logdir: Path, round_: int, rng: random.Random, ledger: Ledger) -> str:
    lines = [_line(round_, i, rng) for i in range(rng.choice([1, 3, 40, 300, 1200]))]
    ledger.sent[round_] = lines
    sets = [a for k, v in SETTINGS.items() for a in ("--set", f"{k}={v}")]
    proc = subprocess.Popen(
        [sys.executable, "-m", "kafkafs.cli", "produce", str(logdir), NAME, *sets],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT,
    )

    def feed() -> None:
        try:
            data = b"".join(line + b"\n" for line in lines)
            step = max(1, len(data) // rng.choice([1, 2, 5]))
            for start in range(0, len(data), step):
                proc.stdin.write(data[start : start + step])
                proc.stdin.flush()
                time.sleep(rng.uniform(0, 0.02))
            proc.stdin.close()
        except (BrokenPipeError, ValueError, OSError):
            pass

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    # mostly while it starts, recovers, appends or rolls; sometimes late enough that it has finished
    # (on a loaded machine a run can take seconds)
    # (a run that ends before its kill moment is acknowledged then: no need to wait the rest)
    try:
        proc.wait(rng.uniform(0.0, 1.5) if rng.random() < 0.6 else rng.uniform(1.5, 8.0))
    except subprocess.TimeoutExpired:
        pass
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    err = proc.stderr.read()
    writer.join(10)
    assert b"Traceback" not in err, err.decode()
    if proc.returncode == 0:
        ledger.acked[round_] = len(lines)
        return "acknowledged"
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, err.decode())
    return "killed"


def produce_loop(logdir: Path, rounds: int, seed: int) -> dict:
    rng = random.Random(seed)
    ledger = Ledger()
    outcomes = {"acknowledged": 0, "killed": 0}
    logdir.mkdir(parents=True, exist_ok=True)
    for round_ in range(rounds):
        outcomes[_produce_round(logdir, round_, rng, ledger)] += 1
        ledger.check(logdir)
    records = ledger.kafka_python_agrees(logdir)
    return {**outcomes, "rounds": rounds, "records": records,
            "acknowledged_records": sum(ledger.acked.values())}


# ------------------------------------------------------------------------------------------ the mount

_WRITER = r"""
import os, sys, random
path, round_, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
lines = [l for l in sys.stdin.buffer.read().split(b"\n") if l]
i = 0
while i < len(lines):
    n = rng.choice([1, 1, 4, 20, 80])
    chunk = lines[i : i + n]
    f = open(path, "ab", buffering=0)
    f.write(b"".join(l + b"\n" for l in chunk))
    f.close()  # returned: acknowledged
    i += len(chunk)
    sys.stdout.write("%d\n" % i)
    sys.stdout.flush()
"""


def _mount_round(logdir: Path, mnt: Path, config: Path, round_: int, rng: random.Random, ledger: Ledger,
                 log_path: Path) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with open(log_path, "ab") as log:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "kafkafs", "mount", str(logdir), str(mnt), "-f", "--rw", "--config", str(config)],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
        )
    try:
        deadline = time.monotonic() + 60
        while not os.path.ismount(mnt):
            assert daemon.poll() is None, f"the mount exited with {daemon.returncode}: {log_path.read_text()[-2000:]}"
            assert time.monotonic() < deadline, "the mount did not come up"
            time.sleep(0.02)
        if not (mnt / NAME).exists():
            os.mkdir(mnt / NAME)
        lines = [_line(round_, i, rng) for i in range(rng.choice([5, 40, 300]))]
        ledger.sent[round_] = lines
        writer = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(mnt / NAME / "append"), str(round_), str(rng.randrange(1 << 30))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
        )
        writer.stdin.write(b"".join(line + b"\n" for line in lines))
        writer.stdin.close()
        time.sleep(rng.uniform(0.0, 1.5))
        daemon.send_signal(signal.SIGKILL)
        daemon.wait(10)
        try:
            writer.wait(timeout=30)
        except subprocess.TimeoutExpired:
            writer.kill()
            writer.wait()
            raise AssertionError("the writer hung after the daemon died") from None
        out = writer.stdout.read()  # its stderr says how its last write failed (the daemon died)
        acked = [int(x) for x in out.split(b"\n")[:-1]]  # complete lines only
        if acked:
            ledger.acked[round_] = max(acked)
        return "acknowledged" if acked and max(acked) == len(lines) else "killed"
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait(10)
        subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)
        deadline = time.monotonic() + 10
        while os.path.ismount(mnt) and time.monotonic() < deadline:
            time.sleep(0.05)


def mount_loop(work: Path, rounds: int, seed: int) -> dict:
    rng = random.Random(seed)
    ledger = Ledger()
    logdir, mnt = work / "logs", work / "mnt"
    logdir.mkdir(parents=True)
    mnt.mkdir()
    config = work / "kafkafs.toml"
    config.write_text("".join(f'"{k}" = {v}\n' for k, v in SETTINGS.items()))
    outcomes = {"acknowledged": 0, "killed": 0}
    log_path = work / "daemon.log"
    for round_ in range(rounds):
        outcomes[_mount_round(logdir, mnt, config, round_, rng, ledger, log_path)] += 1
        ledger.check(logdir)
    text = log_path.read_text(errors="replace")
    assert "Traceback" not in text, text[-3000:]
    records = ledger.kafka_python_agrees(logdir)
    return {**outcomes, "rounds": rounds, "records": records,
            "acknowledged_records": sum(ledger.acked.values())}


@pytest.mark.allow_warnings("SIGKILL mid-append on purpose: reopening recovers and says what it cut")
def test_produce_crash_loop_short(tmp_path):
    result = produce_loop(tmp_path / "logs", 12, seed=1)
    assert result["acknowledged"] + result["killed"] == 12 and result["records"] > 0


@pytest.mark.allow_warnings("SIGKILL mid-append on purpose: reopening recovers and says what it cut")
def test_mount_append_crash_loop_short(tmp_path):
    result = mount_loop(tmp_path, 5, seed=2)
    assert result["records"] > 0 and result["acknowledged_records"] > 0


@pytest.mark.allow_warnings("SIGKILL mid-append on purpose: reopening recovers and says what it cut")
@pytest.mark.slow
def test_produce_crash_loop_long(tmp_path):
    rounds = int(os.environ.get("CRASH_ROUNDS", "200"))
    result = produce_loop(tmp_path / "logs", rounds, seed=int(os.environ.get("CRASH_SEED", "9")))
    print("produce crash loop:", result)
    assert result["acknowledged"] >= rounds // 10 and result["killed"] >= rounds // 10


@pytest.mark.allow_warnings("SIGKILL mid-append on purpose: reopening recovers and says what it cut")
@pytest.mark.slow
def test_mount_append_crash_loop_long(tmp_path):
    rounds = int(os.environ.get("CRASH_ROUNDS", "200"))
    result = mount_loop(tmp_path, rounds, seed=int(os.environ.get("CRASH_SEED", "9")))
    print("mount append crash loop:", result)
    assert result["killed"] >= rounds // 10
