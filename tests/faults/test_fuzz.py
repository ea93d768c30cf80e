"""Issue 9's fuzz campaign: damaged segments, indexes, checkpoints and names through ``verify``,
``consume``, ``dump``, ``recover`` and a read-only mount that reads every file.

Pass: no traceback, no hang, no daemon death, and ``verify`` accepts every directory ``recover`` left.
The short run is part of CI; the long one (``FUZZ_INPUTS``, 10,000 by default) is marked slow.
"""

from __future__ import annotations

import os
import random
import shutil
import time
from pathlib import Path

import pytest

from . import fuzz


def campaign(work: Path, inputs: int, *, seed: int, mount_every: int, mounted=None, report=print) -> dict:
    template = fuzz.make_template(work / "template")
    rng = random.Random(seed)
    counts = {"inputs": 0, "problems": 0, "mount_files_read": 0, "mounts": 0, "daemon_deaths": 0}
    problems: list[str] = []
    pending: list[int] = []
    mount_dir = work / "mountdir"
    started = time.monotonic()

    def mount_and_read() -> None:
        if not pending:
            return
        m = mounted(mount_dir)
        m.allow_errors = True  # damage is logged; tracebacks are still checked by the fixture
        read, found = fuzz.read_everything(m.path, timeout=30)
        counts["mount_files_read"] += read
        counts["mounts"] += 1
        if m.proc.poll() is not None:
            counts["daemon_deaths"] += 1
            found.append(f"the daemon died: {m.log()[-2000:]}")
        if "Traceback" in m.log():
            found.append(f"traceback in the daemon's log: {m.log()[-3000:]}")
        m.stop()
        for p in found:
            problems.append(f"mount over inputs {pending[0]}..{pending[-1]}: {p}")
            report(problems[-1])
        shutil.rmtree(mount_dir)
        pending.clear()

    for i in range(inputs):
        target = work / f"in{i}"
        what = fuzz.damage(template, target, rng)
        if mounted is not None:
            mount_dir.mkdir(exist_ok=True)
            shutil.copytree(target / fuzz.PARTITION, mount_dir / f"m{i}-0", symlinks=True)
            pending.append(i)
        found = fuzz.run_commands(target)
        counts["inputs"] += 1
        for p in found:
            problems.append(f"input {i} ({what}): {p}")
            report(problems[-1])
        shutil.rmtree(target)
        if mounted is not None and len(pending) >= mount_every:
            mount_and_read()
        if (i + 1) % 500 == 0:
            report(f"fuzz: {i + 1} inputs, {len(problems)} problems, {time.monotonic() - started:.0f} s")
    if mounted is not None:
        mount_and_read()
    counts["problems"] = len(problems)
    counts["seconds"] = round(time.monotonic() - started)
    counts["details"] = problems
    return counts


def test_fuzz_short(tmp_path, mounted):
    counts = campaign(tmp_path, 40, seed=9, mount_every=40, mounted=mounted)
    assert counts["inputs"] == 40 and counts["mounts"] == 1 and counts["mount_files_read"] > 40 * 10
    assert counts["problems"] == 0, "\n".join(counts["details"][:10])
    assert counts["daemon_deaths"] == 0


@pytest.mark.slow
def test_fuzz_long(tmp_path, mounted):
    inputs = int(os.environ.get("FUZZ_INPUTS", "10000"))
    counts = campaign(tmp_path, inputs, seed=int(os.environ.get("FUZZ_SEED", "2026")), mount_every=250,
                      mounted=mounted)
    print({k: v for k, v in counts.items() if k != "details"})
    assert counts["problems"] == 0, "\n".join(counts["details"][:20])
    assert counts["daemon_deaths"] == 0
