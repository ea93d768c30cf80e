"""Fixtures of the FUSE tests: a log directory built with the engine, and real mounts that always go.

``mounted(logdir, *args)`` starts ``python -m kafkafs mount LOGDIR MNT -f`` in a child process,
waits until the mount answers, and at teardown unmounts it (``fusermount3 -u``, then ``-uz`` and a kill
as last resorts), also when the test failed. The daemon's log is kept so tests can read it; a traceback
in it fails the test.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkafs.format.batch import Header
from kafkafs.format.jsonview import ProducerRecord, render_batch_jsonl
from kafkafs.fs.tree.root import Tree
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir

ROOT = Path(__file__).resolve().parents[2]
BASE_TS = 1_763_700_000_000
SMALL_SEGMENTS = Settings({"segment.bytes": 16 * 1024, "index.interval.bytes": 1024})


def sample_records(start: int, count: int, seed: int = 7) -> list[ProducerRecord]:
    """Records with JSON values, text and binary values, null keys and headers, in a fixed mix."""
    rng = random.Random(seed + start)
    out = []
    for i in range(start, start + count):
        kind = i % 7
        if kind == 0:
            value = b"plain text %d" % i
        elif kind == 1:
            value = bytes(rng.randrange(256) for _ in range(12)) + b"\xff"
        elif kind == 2:
            value = None
        else:
            value = b'{"order":%d,"amount":%d.%02d,"tags":["a","b"],"note":"q\\"uote"}' % (
                i,
                rng.randrange(1000),
                rng.randrange(100),
            )
        key = None if i % 5 == 0 else b"key-%d" % (i % 13)
        headers = (Header("trace", b"t-%d" % i), Header("bin", b"\x00\x01")) if i % 4 == 0 else ()
        out.append(ProducerRecord(BASE_TS + i * 10, key, value, headers))
    return out


def build_logdir(path: Path, records: int = 1500, per_batch: int = 10) -> Path:
    """``orders-0`` (several small segments), ``events-3`` (a few records), ``empty-0``."""
    path.mkdir(parents=True, exist_ok=True)
    with LogDir(path, SMALL_SEGMENTS, writable=True) as logdir:
        orders = logdir.create_partition("orders", 0)
        for start in range(0, records, per_batch):
            orders.append_records(sample_records(start, min(per_batch, records - start)))
        events = logdir.create_partition("events", 3)
        events.append_records([ProducerRecord(BASE_TS + i, None, b"event %d" % i, ()) for i in range(5)])
        logdir.create_partition("empty", 0)
    return path


def expected_jsonl(
    logdir: Path, name: str, lo: int | None = None, hi: int | None = None, mode: str = "auto"
) -> bytes:
    """What records.jsonl (or a by-offset range) must hold, straight from the engine."""
    with LogDir(logdir) as d:
        log = d.log(name)
        return b"".join(render_batch_jsonl(log.topic, log.partition, b, mode) for b in log.read(lo, hi))


@pytest.fixture(scope="session")
def built_logdir(tmp_path_factory) -> Path:
    """A log directory shared by tests that only read it (copy it before changing anything)."""
    return build_logdir(tmp_path_factory.mktemp("built") / "logs")


@pytest.fixture
def logdir_copy(built_logdir, tmp_path) -> Path:
    target = tmp_path / "logs"
    shutil.copytree(built_logdir, target)
    return target


class Mount:
    def __init__(self, logdir: Path, mountpoint: Path, args: tuple[str, ...], log_path: Path) -> None:
        self.logdir = logdir
        self.path = mountpoint
        self.args = args
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        self.allow_errors = False
        self.killed = False  # whether a stop had to kill the daemon (10 s after fusermount3 -u)
        self.prefix: tuple[str, ...] = ()  # a command the daemon runs under (e.g. setpriv)

    def start(self, timeout: float = 15.0) -> Mount:
        self.path.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    *self.prefix,
                    sys.executable,
                    "-m",
                    "kafkafs",
                    "mount",
                    str(self.logdir),
                    str(self.path),
                    "-f",
                    *self.args,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=str(ROOT),
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mount exited with {self.proc.returncode}: {self.log()}")
            if os.path.ismount(self.path):
                try:
                    os.listdir(self.path)
                    return self
                except OSError:
                    pass
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"mount did not answer in {timeout} s: {self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        self.killed = unmount(self.path, self.proc) or self.killed

    def __truediv__(self, other: str) -> Path:
        return self.path / other


def unmount(path: Path, proc: subprocess.Popen | None) -> bool:
    """Take down the FUSE mount at ``path`` served by ``proc``: ``fusermount3 -u``, wait for ``proc`` to
    end (a kill after 10 s), then ``fusermount3 -uz`` if it is still (or stale-ly) mounted. Whether
    ``proc`` had to be killed (its log then lacks what its stop says)."""
    killed = False
    if os.path.ismount(path):
        subprocess.run(["fusermount3", "-u", str(path)], capture_output=True)
    if proc is not None:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
            killed = True
    if os.path.ismount(path) or _stale(path):
        subprocess.run(["fusermount3", "-uz", str(path)], capture_output=True)
    return killed


def _stale(path: Path) -> bool:
    try:
        os.stat(path)
        return False
    except OSError:
        return True


class Mounts:
    """Starts mounts under ``base`` and takes every one of them down in :meth:`close`."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.mounts: list[Mount] = []

    def __call__(self, logdir: Path, *args: str) -> Mount:
        n = len(self.mounts)
        m = Mount(Path(logdir), self.base / f"mnt{n}", args, self.base / f"mount{n}.log")
        self.mounts.append(m)
        return m.start()

    def close(self) -> list[str]:
        problems = []
        for m in self.mounts:
            m.stop()
            text = m.log()
            if "Traceback" in text or (not m.allow_errors and ("ERROR" in text or "WARNING" in text)):
                problems.append(f"{m.path}: unexpected log lines:\n{text}")
            if os.path.ismount(m.path):
                problems.append(f"{m.path} is still mounted")
        return problems


@pytest.fixture
def mounted(tmp_path):
    """``mounted(logdir, *args)`` -> a started :class:`Mount`; all of them are unmounted afterwards."""
    mounts = Mounts(tmp_path)
    yield mounts
    problems = mounts.close()
    if problems:
        pytest.fail("\n".join(problems))


@pytest.fixture(scope="module")
def ro_mount(built_logdir, tmp_path_factory):
    """One read-only mount of the shared log directory for a whole test module."""
    mounts = Mounts(tmp_path_factory.mktemp("ro"))
    yield mounts(built_logdir)
    problems = mounts.close()
    if problems:
        pytest.fail("\n".join(problems))


def tree_of(path: Path, *, rw: bool = False, mode: str = "auto") -> Tree:
    return Tree(LogDir(path, SMALL_SEGMENTS, writable=rw), mode=mode, rw=rw)


@pytest.fixture
def tree(built_logdir):
    t = tree_of(built_logdir)
    yield t
    t.close()


def engine_records(path: Path, name: str):
    with LogDir(path) as d:
        return list(d.log(name).records())


def late_log(path: Path) -> list:
    """``late-0``: CreateTime out of order. Blocks of records, one segment each, alternate between
    recent and old timestamps; inside a block, timestamps jump back and forth, and batches hold both."""
    rng = random.Random(11)
    with LogDir(path, SMALL_SEGMENTS, writable=True) as d:
        log = d.create_partition("late", 0)
        for block in range(6):
            base = BASE_TS + (0 if block % 2 else 100_000)
            for start in range(0, 60, 6):
                rows = [
                    ProducerRecord(base + rng.randrange(0, 5_000), None, b"b%d r%d" % (block, start + k), ())
                    for k in range(6)
                ]
                log.append_records(rows)
            log.roll()
        # a straggler: older than everything before it, at the very end
        log.append_records([ProducerRecord(BASE_TS - 1, None, b"straggler", ())])
    return engine_records(path, "late-0")


def write_segment(directory: Path, base: int, batches: list[bytes]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{base:020d}.log").write_bytes(b"".join(batches))


def read_view(state, view, offset: int, size: int, cache) -> bytes:
    """Bytes ``offset .. offset+size`` of a composition of ``state`` (``records.jsonl`` as a stream
    reads it, without the stream)."""
    from kafkafs.fs.views.reading import read_parts

    return read_parts(view.parts, view.starts, offset, size, lambda layout, i: state.render_piece(layout, i, cache))
