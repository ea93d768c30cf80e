"""A kill at every step of a compaction (each fsync, rename and unlink, counted in a subprocess):
the reopened log holds the old segments or the new ones, never a mix that loses a key's latest value,
and recovery leaves no ``.cleaned``/``.swap`` file behind."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kafkafs.storage.logdir import LogDir

from . import compaction_crasher

CRASHER = Path(compaction_crasher.__file__)


def _build(directory: Path) -> dict[bytes, tuple[int, bytes | None]]:
    """A compacted topic with superseded values, tombstones and several segments; return every key's
    latest (offset, value)."""
    directory.mkdir()
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    with LogDir(directory, compaction_crasher.SETTINGS, writable=True) as logdir:
        log = logdir.create_partition("kv", 0)
        for i in range(400):
            key = b"k%d" % (i * 7 % 23)
            value = None if i % 37 == 0 else b"%d:" % i + b"x" * (i % 50)
            log.append_records([(1000 + i, key, value, ())])
            latest[key] = (i, value)
        log.roll()
    return latest


def _run(directory: Path, kill_at: int) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, str(CRASHER), str(directory), str(kill_at)],
                          capture_output=True, text=True, env=env, timeout=120)


def _check(directory: Path, latest: dict, before: list) -> str:
    with LogDir(directory, compaction_crasher.SETTINGS, writable=True) as logdir:
        log = logdir.log("kv-0")
        records = list(log.records())
    names = os.listdir(directory / "kv-0")
    assert not [n for n in names if n.endswith((".cleaned", ".swap"))], names
    offsets = [r[0] for r in records]
    assert offsets == sorted(set(offsets))
    seen: dict[bytes, tuple[int, bytes | None]] = {}
    for offset, _ts, key, value, _h in records:
        seen[key] = (offset, value)
    for key, (offset, value) in latest.items():
        if value is None:  # a tombstone may be gone (its horizon passed) or still there
            assert key not in seen or seen[key] == (offset, None)
        else:
            assert seen.get(key) == (offset, value), key
    return "old" if offsets == before else "new-or-partial"


@pytest.mark.slow
def test_a_kill_at_every_step_of_a_compaction_keeps_every_latest_value(tmp_path):
    _crash_at_every_step(tmp_path, kills=None)


def test_a_kill_at_some_steps_of_a_compaction_keeps_every_latest_value(tmp_path):
    _crash_at_every_step(tmp_path, kills=8)


def _crash_at_every_step(tmp_path: Path, kills: int | None) -> None:
    """Kill at every step (``kills`` None) or at ``kills`` steps spread over the run."""
    pristine = tmp_path / "pristine"
    latest = _build(pristine)
    with LogDir(pristine, compaction_crasher.SETTINGS) as reader:
        before = [r[0] for r in reader.log("kv-0").records()]
    counting = tmp_path / "count"
    shutil.copytree(pristine, counting)
    done = _run(counting, 0)
    assert done.returncode == 0, done.stderr
    steps = int(done.stdout.split()[-1])
    assert steps > 20  # renames and fsyncs of several swaps, in several rounds
    _check(counting, latest, before)
    outcomes = set()
    every = 1 if kills is None else max(steps // kills, 1)
    for k in sorted({1, steps, *range(1 + every // 2, steps + 1, every)}):
        work = tmp_path / f"k{k}"
        shutil.copytree(pristine, work)
        result = _run(work, k)
        assert result.returncode == 17, (k, result.stderr)
        outcomes.add(_check(work, latest, before))
        shutil.rmtree(work)
    assert outcomes == {"old", "new-or-partial"}
