"""Descriptors under a low open file limit (review11 R11-1): the segments' and the key indexes'
descriptors come out of one budget sized from ``RLIMIT_NOFILE``, and an open that finds none free makes
the budgets give theirs back and tries once more. Each case runs in a child process whose limit is
lowered, the hard limit too (as ``ulimit -n`` does: kafkafs cannot raise it back)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kafkafs.format.batch import encode_batch

from .helpers import write_segment

ROOT = Path(__file__).resolve().parents[2]
KEYS = 50


def keyed_logdir(path: Path, partitions: int, segments: int) -> Path:
    """``t-0``.. of ``segments`` segments each (their ``.log`` only, as written without indexes), one
    batch of 5 keyed records a segment (keys k0..k49)."""
    for p in range(partitions):
        folder = path / f"t-{p}"
        folder.mkdir(parents=True)
        for s in range(segments):
            records = [(1000 + i, b"k%d" % (i % KEYS), b"v%d" % i, ()) for i in range(s * 5, s * 5 + 5)]
            write_segment(folder, s * 5, [encode_batch(records, base_offset=s * 5)])
    return path


def run_child(script: str, limit: int, *args: str) -> dict:
    code = f"import resource\nresource.setrlimit(resource.RLIMIT_NOFILE, ({limit}, {limit}))\n{script}"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


TABLES = r"""
import json, os, sys
from kafkafs.storage.keyindex import KeyIndexStore
from kafkafs.storage.keytable import PartitionKeys
from kafkafs.storage.logdir import LogDir

out, peak = {}, 0
with LogDir(sys.argv[1]) as logdir:
    store = KeyIndexStore(sys.argv[2])
    names = sorted(logdir.partition_names())
    for _round in range(2):  # the second round: indexes from the cache folder, given back and opened again
        for name in names:
            with PartitionKeys(logdir.log(name), store).table() as table:
                out[name] = [table.kept, sum(part.kept for part in table.parts())]
                peak = max(peak, len(os.listdir("/proc/self/fd")))
    for name in names:
        out[name].append(sum(1 for _ in logdir.log(name).records()))
        peak = max(peak, len(os.listdir("/proc/self/fd")))
out["fds"] = peak
out["segments"] = sum(len(logdir.log(n).segments) for n in names)
print(json.dumps(out))
"""


def test_tables_of_more_sealed_segments_than_the_limit_allows(tmp_path: Path) -> None:
    """Before: the key indexes held a descriptor each outside the budget (up to 256 in the store, and
    every one a table reads at once): EMFILE for the table and every open after it."""
    logdir = keyed_logdir(tmp_path / "logs", partitions=2, segments=150)
    out = run_child(TABLES, 128, str(logdir), str(tmp_path / "cache"))
    assert out.pop("segments") == 300
    fds = out.pop("fds")
    assert out == {"t-0": [KEYS, KEYS, 750], "t-1": [KEYS, KEYS, 750]}
    assert fds <= 128 - 32, fds  # the budget's share (96 of 128), and what the process holds besides


def test_without_a_cache_folder_too(tmp_path: Path) -> None:
    """Indexes in this process's temporary files (no cache folder) are given back and opened again too
    (before: an anonymous temporary file each, kept open for good)."""
    logdir = keyed_logdir(tmp_path / "logs", partitions=1, segments=150)
    script = TABLES.replace("KeyIndexStore(sys.argv[2])", "KeyIndexStore(None)")
    out = run_child(script, 96, str(logdir), "-")
    assert out["t-0"] == [KEYS, KEYS, 750] and out["fds"] <= 96


READ_ALL = r"""
import json, os, sys
from kafkafs.storage.handles import BUDGET
from kafkafs.storage.log import Log

BUDGET.limit = 100_000  # a budget that does not fit the limit: only the retry keeps the reads going
log = Log.open(sys.argv[1])
first = [s.find(s.base_offset).header.base_offset for s in log.segments]
again = sum(1 for _ in log.records())
print(json.dumps({"segments": len(first), "records": again, "fds": len(os.listdir("/proc/self/fd"))}))
"""


def test_an_open_that_finds_no_descriptor_free_gives_the_budgets_back_and_tries_again(tmp_path: Path) -> None:
    """Before: EMFILE from the first segment past the limit on."""
    logdir = keyed_logdir(tmp_path / "logs", partitions=1, segments=150)
    out = run_child(READ_ALL, 64, str(logdir / "t-0"))
    assert out == {"segments": 150, "records": 750, "fds": out["fds"]} and out["fds"] <= 64
