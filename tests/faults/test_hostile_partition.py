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

import pytest

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


@pytest.mark.slow
def test_a_hostile_partition_among_fifty_healthy_ones(tmp_path, eio_layer, mounted):
    """Issue 20's done-when: batches with non-UTF-8 header keys, a decompression bomb, offsets that go
    backwards and a segment that answers EIO, in a mount of 50 healthy partitions: every healthy file
    reads byte-exact and the daemon answers SIGTERM within a second."""
    import struct

    from kafkafs.format.batch import Codec, encode_batch
    from kafkafs.format.jsonview import ProducerRecord
    from kafkafs.storage.config import Settings
    from kafkafs.storage.logdir import LogDir

    logdir = tmp_path / "logs"
    logdir.mkdir()
    with LogDir(logdir, Settings({"segment.bytes": 16384}), writable=True) as d:
        for p in range(50):
            d.create_partition("healthy", p).append_records(
                [ProducerRecord(1_763_700_000_000 + i, b"k%d" % i, b'{"p":%d,"i":%d}' % (p, i), ()) for i in range(300)])
    hostile = logdir / "hostile-0"
    hostile.mkdir()
    batches = [hostile_batch(100 * i) for i in range(20)]
    backwards = bytearray(hostile_batch(2000))
    struct.pack_into(">q", backwards, 0, 50)  # offsets going backwards (the base is outside the CRC)
    bomb = encode_batch([(1_763_700_000_000, None, bytes(100 * 1024 * 1024), ())], base_offset=2100,
                        compression=Codec.ZSTD)
    (hostile / "00000000000000000000.log").write_bytes(b"".join(batches) + bytes(backwards) + bomb)
    (hostile / "00000000000000003000.log").write_bytes(hostile_batch(3000) * 1)
    layer = eio_layer(logdir)
    layer.fail({"name": "hostile-0/00000000000000003000.log", "from": 100, "op": "read"})
    m = mounted(layer.path)
    m.allow_errors = True
    for top, _dirs, files in os.walk(m / "hostile-0"):  # every file of it answers (EIO where it must)
        for name in files:
            try:
                _within(TIMEOUT_S, (Path(top) / name).read_bytes)
            except OSError:
                pass
    for p in range(50):
        name = f"healthy-{p}"
        assert _within(TIMEOUT_S, (m / name / "records.jsonl").read_bytes) == expected_jsonl(logdir, name)
        assert _within(TIMEOUT_S, (m / name / "by-offset" / "150.json").read_bytes).count(b"\n") > 5
    start = time.monotonic()
    m.proc.send_signal(signal.SIGTERM)
    m.proc.wait(timeout=10)
    took = time.monotonic() - start
    print(f"\nSIGTERM answered in {took:.2f} s (load {os.getloadavg()[0]:.1f})")
    assert took < 1.0
