"""A hostile partition in a mount leaves every other partition answering, and the daemon its signals.

Issue 20, defect 1: batches whose records carry header keys that are not UTF-8 (librdkafka lets any
producer write them) deadlocked the kernel on the GIL: every read of every partition and ``ls`` of the
mount point hung, SIGTERM was ignored, and ``kafkafs consume`` stopped after 1,500 lines. Every read here
runs in a thread with a timeout, so a hang fails the test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.format.gil_worker import hostile_batch
from tests.fs.conftest import ROOT, build_logdir, expected_jsonl

TIMEOUT_S = 30


def _within(timeout: float, fn):
    out: list = []

    def work() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out.append(exc)

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"hung for {timeout} s"
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


def _hostile_logdir(path: Path, batches: int = 30) -> Path:
    build_logdir(path)
    part = path / "hostile-0"
    part.mkdir()
    (part / "00000000000000000000.log").write_bytes(b"".join(hostile_batch(100 * i) for i in range(batches)))
    return path


def _consume(logdir: Path, name: str, *args: str) -> bytes:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "kafkafs", "consume", str(logdir), name, *args], env=env,
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_consume_renders_a_hostile_partition_whole(tmp_path):
    logdir = _hostile_logdir(tmp_path / "logs", batches=200)
    for mode in ("auto", "string", "base64"):
        out = _consume(logdir, "hostile-0", "--values", mode)
        assert out.count(b"\n") == 200 * 100
        assert out == expected_jsonl(logdir, "hostile-0", mode=mode)


def test_a_hostile_partition_leaves_the_mount_answering(mounted, tmp_path):
    logdir = _hostile_logdir(tmp_path / "logs")
    m = mounted(logdir)
    hostile = _within(TIMEOUT_S, lambda: (m / "hostile-0" / "records.jsonl").read_bytes())
    assert hostile == expected_jsonl(logdir, "hostile-0") == _consume(logdir, "hostile-0")
    assert _within(TIMEOUT_S, lambda: (m / "hostile-0" / "by-offset" / "2957.json").read_bytes()).count(b"\n") > 10
    for name in ("orders-0", "events-3", "empty-0"):
        got = _within(TIMEOUT_S, lambda n=name: (m / n / "records.jsonl").read_bytes())
        assert got == expected_jsonl(logdir, name)
    assert {"empty-0", "events-3", "hostile-0", "orders-0"} <= set(_within(TIMEOUT_S, lambda: os.listdir(m.path)))
    start = time.monotonic()
    m.proc.send_signal(signal.SIGTERM)
    m.proc.wait(timeout=10)
    assert time.monotonic() - start < 1.0
