"""The fault tests use the FUSE fixtures of tests/fs (real mounts that always unmount), and
``eio_layer``: a failing disk under LOGDIR (:mod:`tests.faults.eiofs`, a pass-through FUSE layer).
:func:`cli`, :func:`values`, :func:`recovered`, :func:`produce_rounds`, :func:`recovers_with_every_ack`,
:func:`produce_keyed` and :func:`recovers_and_cleans`, :func:`rw_mount_of_t0`, :func:`append_rounds` and
:func:`heals_through_the_mount` are the steps the
write-fault tests (EIO, ENOSPC) share; :func:`read_pages` reads a mounted file page by page, so that damage or a failing
disk hurts only the pages that need it."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkafs.inspect import verify_logdir
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir
from tests.fs.conftest import ROOT, Mount, Mounts, built_logdir, logdir_copy, mounted, unmount  # noqa: F401

# small segments and index intervals, so that a few hundred records roll and index
SMALL = ["--set", "segment.bytes=16384", "--set", "index.interval.bytes=512"]


def cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    """``python -m kafkafs.cli ARGS`` with ``stdin``; never a traceback."""
    proc = subprocess.run([sys.executable, "-m", "kafkafs.cli", *args], input=stdin, capture_output=True,
                          timeout=300, cwd=ROOT)
    assert b"Traceback" not in proc.stderr, proc.stderr.decode()
    return proc


def recovered(proc: subprocess.CompletedProcess) -> None:
    """``recover`` finished: exit 0 (nothing wrong) or 1 (damage found and cut, SPEC §4), with its summary."""
    assert proc.returncode in (0, 1) and b"clean shutdown marked" in proc.stdout, (proc.stdout, proc.stderr)


def files_of(folder: Path) -> dict[str, bytes]:
    """Every file of ``folder`` by name, with its bytes."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def verified(logdir: Path) -> tuple[int, str]:
    """What ``kafkafs verify LOGDIR`` finds (its problem count and report), run in this process."""
    out = io.StringIO()
    with LogDir(logdir) as opened:
        problems = verify_logdir(opened, out)
    return problems, out.getvalue()


def values(logdir: Path, name: str) -> list[bytes]:
    """Every value of partition ``name``, in order, as the engine reads it."""
    with LogDir(logdir) as d:
        return [v for b in d.log(name).read() for v in b.values]


def produce_rounds(logs: Path, rounds: range, acked: list[bytes]) -> tuple[subprocess.CompletedProcess | None, int]:
    """``produce`` to ``t-0`` round by round (30 lines ``r<round>-<i>-xxx...`` of about 200 bytes each) until
    one fails; the lines of every produce that worked go to ``acked``. Returns the failed run (None when
    none failed) and the round it was."""
    round_ = rounds.start
    for round_ in rounds:
        lines = [b"r%d-%d-" % (round_, i) + b"x" * 200 for i in range(30)]
        proc = cli("produce", str(logs), "t-0", *SMALL, stdin=b"\n".join(lines) + b"\n")
        if proc.returncode != 0:
            return proc, round_
        acked.extend(lines)
    return None, round_


def recovers_with_every_ack(logs: Path, acked: list[bytes]) -> None:
    """After failed appends to ``t-0`` and a healed disk: ``recover`` leaves what ``verify`` accepts, with
    every acknowledged record in order first, and ``t-0`` takes an append (``after``) again."""
    recovered(cli("recover", str(logs)))
    assert cli("verify", str(logs)).returncode == 0
    got = values(logs, "t-0")
    assert got[: len(acked)] == acked  # every acknowledged record, in order, first
    assert cli("produce", str(logs), "t-0", *SMALL, stdin=b"after\n").returncode == 0
    assert values(logs, "t-0")[-1] == b"after"


COMPACT = [*SMALL, "--set", "cleanup.policy=compact"]


def produce_keyed(logs: Path) -> set[bytes]:
    """600 records of 20 keys to a compacted ``t-0``; returns the latest value of each key."""
    lines = b"".join(b'{"key": "k%d", "value": "v%d-%s"}\n' % (i % 20, i, b"z" * 200) for i in range(600))
    assert cli("produce", str(logs), "t-0", *COMPACT, stdin=lines).returncode == 0
    latest = {}
    for v in values(logs, "t-0"):
        latest[int(v.split(b"-")[0][1:]) % 20] = v
    return set(latest.values())


def recovers_and_cleans(logs: Path, latest: set[bytes]) -> None:
    """After a failed ``clean`` and a healed disk: ``recover`` leaves what ``verify`` accepts, with the
    ``latest`` value of every key; ``clean`` works again and keeps them."""
    recovered(cli("recover", str(logs), *COMPACT))
    assert cli("verify", str(logs)).returncode == 0
    assert latest <= set(values(logs, "t-0"))
    assert cli("clean", str(logs), *COMPACT).returncode == 0
    assert cli("verify", str(logs)).returncode == 0
    assert latest <= set(values(logs, "t-0"))


def rw_mount_of_t0(mounts: Mounts, source: Path, mount_of: Path, config: Path) -> Mount:
    """An empty ``t-0`` created in ``source``, then a ``--rw`` mount of ``mount_of`` (``source`` or a layer
    over it) with segments of 16 KB and an index entry every 512 bytes (``config`` written for it); its
    errors are allowed (the tests make its writes fail)."""
    with LogDir(source, Settings({"segment.bytes": 16384}), writable=True) as d:
        d.create_partition("t", 0)
    config.write_text('"segment.bytes" = 16384\n"index.interval.bytes" = 512\n')
    m = mounts(mount_of, "--rw", "--config", str(config))
    m.allow_errors = True
    return m


def append_rounds(m: Mount, rounds: range, acked: list[bytes]) -> OSError | None:
    """Appends to ``t-0/append`` of the mount ``m``, a round at a time (10 lines ``m<round>-<i>-www...`` of
    about 300 bytes each), until one fails; the lines of every append that worked go to ``acked``.
    Returns the error of the one that failed (None when none did)."""
    for round_ in rounds:
        lines = [b"m%d-%d-" % (round_, i) + b"w" * 300 for i in range(10)]
        try:
            with open(m / "t-0" / "append", "ab", buffering=0) as f:
                f.write(b"\n".join(lines) + b"\n")
        except OSError as exc:
            return exc
        acked.extend(lines)
    return None


def heals_through_the_mount(m: Mount, logdir: Path, acked: list[bytes]) -> None:
    """After failed writes through the ``--rw`` mount ``m`` of ``logdir`` and a healed disk: an append
    (``after``) works and records.jsonl holds it with every line in ``acked``; once unmounted, ``recover``
    leaves what ``verify`` accepts, with ``acked`` in order and ``after`` last, and no traceback."""
    with open(m / "t-0" / "append", "ab", buffering=0) as f:
        f.write(b"after\n")
    records = (m / "t-0" / "records.jsonl").read_bytes()
    assert records.count(b"\n") >= len(acked) + 1
    m.stop()
    recovered(cli("recover", str(logdir)))
    assert cli("verify", str(logdir)).returncode == 0
    got = values(logdir, "t-0")
    assert [v for v in got if v.startswith(b"m")][: len(acked)] == acked and got[-1] == b"after"
    assert "Traceback" not in m.log()


PAGE = 4096


def read_pages(path: Path, offset: int, size: int) -> bytes:
    """Bytes ``offset .. offset+size`` of ``path`` read page by page with the kernel's read-ahead off, so
    that each read asks the mount for the pages it names only."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        out = bytearray()
        while len(out) < size:
            chunk = os.pread(fd, min(PAGE, size - len(out)), offset + len(out))
            if not chunk:
                break
            out += chunk
        return bytes(out)
    finally:
        os.close(fd)


class EioLayer:
    """``source`` seen through :mod:`tests.faults.eiofs` at ``path``; :meth:`fail` sets its rules."""

    def __init__(self, source: Path, path: Path, rules: Path, log: Path) -> None:
        self.source, self.path, self.rules, self.log = source, path, rules, log
        self.proc: subprocess.Popen | None = None

    def fail(self, *rules: dict) -> None:
        """Replace the faults: each a ``{"name", "from", "op"}`` rule (none: a healthy disk)."""
        tmp = self.rules.with_suffix(".tmp")
        tmp.write_text(json.dumps(list(rules)))
        os.replace(tmp, self.rules)

    def no_read_ahead(self) -> None:
        """Set the layer's read-ahead to nothing (root only: its bdi in sysfs), so that a read or a page
        fault asks exactly for the pages it needs and a bad stretch of a file hurts only those."""
        st = os.stat(self.path)
        knob = Path(f"/sys/class/bdi/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/read_ahead_kb")
        knob.write_text("0")

    def hits(self) -> list[str]:
        hits = self.rules.with_name(self.rules.name + ".hits")
        return hits.read_text().splitlines() if hits.exists() else []

    def start(self) -> EioLayer:
        self.path.mkdir(parents=True, exist_ok=True)
        self.fail()
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "tests.faults.eiofs", str(self.source), str(self.path),
                                          str(self.rules)], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        deadline = time.monotonic() + 30
        while not os.path.ismount(self.path):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the EIO layer did not mount: " + self.log.read_text())
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        unmount(self.path, self.proc)


@pytest.fixture
def eio_layer(tmp_path):
    """``eio_layer(source)`` -> a started :class:`EioLayer` over ``source``; all unmounted afterwards.
    Ask for it before ``mounted``, so that a kafkafs mount on top goes first."""
    layers: list[EioLayer] = []

    def start(source: Path) -> EioLayer:
        n = len(layers)
        layer = EioLayer(Path(source), tmp_path / f"eio{n}", tmp_path / f"eio{n}.rules", tmp_path / f"eio{n}.log")
        layers.append(layer)
        return layer.start()

    yield start
    for layer in reversed(layers):
        layer.stop()
