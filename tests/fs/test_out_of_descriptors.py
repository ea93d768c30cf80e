"""A mount that runs short of file descriptors (review11 R11-1): under a low ``ulimit -n`` it serves
from one descriptor budget; an open that still finds none free fails that one request (EMFILE), said in
one line now and then, and the mount goes on."""

from __future__ import annotations

import errno
import json
import logging
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import trio

from kafkafs.format.batch import encode_batch
from kafkafs.fs import errnos
from kafkafs.fs.errnos import errno_for
from kafkafs.fs.invalidation import poll_forever

from .conftest import ROOT, unmount

KEYS = 50


def test_emfile_gives_the_budgets_back_and_is_said_in_one_line(monkeypatch, caplog) -> None:
    released: list[int] = []
    monkeypatch.setattr(errnos, "release_all", lambda: released.append(1) or 0)
    monkeypatch.setattr(errnos, "_too_many_said", float("-inf"))
    with caplog.at_level(logging.WARNING, logger="kafkafs.fs"):
        for _ in range(5):
            assert errno_for(OSError(errno.EMFILE, "Too many open files"), rw=False) == errno.EMFILE
        assert errno_for(OSError(errno.ENFILE, "Too many open files in system"), rw=True) == errno.ENFILE
    assert len(released) == 6
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "no file descriptor free: a request failed with" in lines[0]


def test_the_poll_loop_outlives_a_failing_read_of_the_log_starts(caplog) -> None:
    """Before: EMFILE reading log-start-offset-checkpoint ended the poll loop, and the mount with it
    ('kafkafs: ERROR: the mount stopped: OSError(24, ...)')."""
    calls = []

    def reread_log_starts() -> list:
        calls.append(1)
        if len(calls) <= 3:
            raise OSError(errno.EMFILE, "Too many open files")
        return []

    logdir = SimpleNamespace(reread_log_starts=reread_log_starts)
    tree = SimpleNamespace(partitions=SimpleNamespace(logdir=logdir, open_states=lambda: [], follow_schemas=lambda: False,
                                                      rw=False, folder_watched=lambda name: True))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(poll_forever, tree, 0.001, None)
            with trio.fail_after(10):
                while len(calls) < 6:
                    await trio.sleep(0.001)
            nursery.cancel_scope.cancel()

    errnos._too_many_said = float("-inf")
    with caplog.at_level(logging.WARNING, logger="kafkafs.fs"):
        trio.run(main)
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["no file descriptor free"]


def _keyed_logdir(path: Path, partitions: int, segments: int) -> None:
    """``t-0``.. of ``segments`` segments each (``.log`` files only), 5 keyed records a segment."""
    for p in range(partitions):
        folder = path / f"t-{p}"
        folder.mkdir(parents=True)
        for s in range(segments):
            records = [(1000 + i, b"k%d" % (i % KEYS), b"v%d" % i, ()) for i in range(s * 5, s * 5 + 5)]
            (folder / f"{s * 5:020d}.log").write_bytes(encode_batch(records, base_offset=s * 5))


LIMIT = 128


def _low_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


def test_a_mount_under_a_low_open_file_limit_serves_every_file(tmp_path: Path) -> None:
    """Two partitions of 150 sealed segments under ``ulimit -n 128``. Before: the key indexes of the
    first table.jsonl took every descriptor (outside the budget), and every open after failed EMFILE."""
    logdir, mnt = tmp_path / "logs", tmp_path / "mnt"
    _keyed_logdir(logdir, 2, 150)
    mnt.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with open(tmp_path / "mount.log", "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "kafkafs", "mount", "-f", str(logdir), str(mnt),
                                 "--cache-dir", str(tmp_path / "cache")], stdout=out, stderr=subprocess.STDOUT,
                                env=env, cwd=str(ROOT), preexec_fn=_low_limit)
    try:
        deadline = time.monotonic() + 20
        while not os.path.ismount(mnt):
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "mount.log").read_text()
            time.sleep(0.02)
        peak = 0
        for _round in range(2):
            for p in range(2):
                part = mnt / f"t-{p}"
                table = [json.loads(line) for line in (part / "table.jsonl").read_text().splitlines()]
                assert sorted(r["key"] for r in table) == sorted(f"k{i}" for i in range(KEYS))
                assert len((part / "records.jsonl").read_text().splitlines()) == 750
                assert json.loads((part / "partition.json").read_text())["logEndOffset"] == 750
                assert json.loads((part / "by-key" / "k7.json").read_text())["offset"] == 707
                peak = max(peak, len(os.listdir(f"/proc/{proc.pid}/fd")))
        assert peak <= LIMIT
    finally:
        unmount(mnt, proc)
    text = (tmp_path / "mount.log").read_text()
    assert "Too many open files" not in text and "ERROR" not in text and "WARNING" not in text, text
    assert proc.returncode == 0, text


pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux: /proc, FUSE")


RW_CONFIG = """\
"log.retention.check.interval.ms" = 200
"log.initial.task.delay.ms" = 0
"log.cleaner.backoff.ms" = 200
"retention.ms" = 86400000
"""
RW_PARTITIONS = 60


def test_a_writable_cleaning_mount_under_a_low_limit_keeps_its_descriptors_in_the_budget(tmp_path: Path) -> None:
    """review24 R24-6: ``mount --rw --clean`` of more partitions than ``ulimit -n`` / 3. Before: the cleaner
    opened every partition writable and each kept its active segment's three files (pinned, outside the
    budget), so the daemon sat at its limit: ``ls`` and every read and append failed EMFILE and each
    cleaner pass logged a traceback. Now an idle active segment gives its files back like any other."""
    logdir, mnt = tmp_path / "logs", tmp_path / "mnt"
    now = int(time.time() * 1000)
    for p in range(RW_PARTITIONS):  # one tiny segment each (3 descriptors when open writable: 180 > 128)
        folder = logdir / f"t-{p}"
        folder.mkdir(parents=True)
        (folder / f"{0:020d}.log").write_bytes(encode_batch([(now, b"k", b"v%d" % p, ())], base_offset=0))
    config = tmp_path / "kafkafs.toml"
    config.write_text(RW_CONFIG)
    mnt.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with open(tmp_path / "mount.log", "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "kafkafs", "mount", "-f", "--rw", "--clean", str(logdir),
                                 str(mnt), "--config", str(config), "--cache-dir", str(tmp_path / "cache")],
                                stdout=out, stderr=subprocess.STDOUT, env=env, cwd=str(ROOT), preexec_fn=_low_limit)
    try:
        deadline = time.monotonic() + 20
        while not os.path.ismount(mnt):
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "mount.log").read_text()
            time.sleep(0.02)
        time.sleep(0.8)  # cleaner passes over every partition
        assert len(os.listdir(mnt)) >= RW_PARTITIONS
        for p in (0, RW_PARTITIONS // 2, RW_PARTITIONS - 1):
            with open(mnt / f"t-{p}" / "append", "a") as f:
                f.write('{"key": "a", "value": "b"}\n')
            lines = (mnt / f"t-{p}" / "records.jsonl").read_text().splitlines()
            assert json.loads(lines[-1])["value"] == "b", lines
        assert len(os.listdir(f"/proc/{proc.pid}/fd")) <= LIMIT
    finally:
        unmount(mnt, proc)
    text = (tmp_path / "mount.log").read_text()
    assert "Traceback" not in text and "Too many open files" not in text and "ERROR" not in text, text[-3000:]
    assert proc.returncode == 0, text[-3000:]
