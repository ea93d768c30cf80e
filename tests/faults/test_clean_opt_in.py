"""A ``--rw`` mount deletes and compacts nothing unless ``--clean`` asks (issue 20, defect 7; SPEC §3).

A ``--rw`` mount of a copied broker directory (data older than ``retention.ms``) deleted all of it in
the background a few seconds after the mount: kafkafs is used on copies, forensics and archives, and a
user who mounted to append did not ask to lose the rest.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from kafkafs.storage.logdir import LogDir
from tests.fs.conftest import ROOT

# what a copied broker directory looks like to retention: every record far older than retention.ms
OLD = ("--set", "retention.ms=1000", "--set", "log.initial.task.delay.ms=0",
       "--set", "log.retention.check.interval.ms=100", "--set", "file.delete.delay.ms=0")


def _segments(logdir) -> list[str]:
    return sorted(n for n in os.listdir(logdir / "orders-0") if n.endswith(".log"))


def test_a_rw_mount_deletes_nothing_without_clean(logdir_copy, mounted):
    before = _segments(logdir_copy)
    assert len(before) > 2
    with LogDir(logdir_copy) as d:
        records = sum(1 for _ in d.log("orders-0").records())
    m = mounted(logdir_copy, "--rw", *OLD)
    (m / "orders-0" / "append").write_bytes(b"appended\n")
    time.sleep(3)  # thirty retention intervals
    assert set(before) <= set(_segments(logdir_copy))  # every segment still there (the append may roll one)
    assert not [n for n in os.listdir(logdir_copy / "orders-0") if n.endswith(".deleted")]
    assert (m / "orders-0" / "records.jsonl").read_bytes().count(b"\n") == records + 1
    assert "not cleaning" in m.log() and "cleaner started" not in m.log()


def test_clean_runs_retention_in_the_background(logdir_copy, mounted):
    before = _segments(logdir_copy)
    m = mounted(logdir_copy, "--rw", "--clean", *OLD)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(_segments(logdir_copy)) > 1:
        time.sleep(0.1)
    assert len(_segments(logdir_copy)) == 1 < len(before)
    assert "cleaner started" in m.log()


def test_clean_without_rw_is_a_usage_error(logdir_copy, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "kafkafs", "mount", str(logdir_copy), str(mnt), "--clean", "-f"],
                          env=env, capture_output=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.decode().strip() == "kafkafs: error: --clean needs --rw (a read-only mount deletes and compacts nothing)"
    assert not os.path.ismount(mnt)


def test_help_says_what_rw_and_clean_do():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    text = subprocess.run([sys.executable, "-m", "kafkafs", "mount", "--help"], env=env, capture_output=True,
                          timeout=60).stdout.decode()
    flat = " ".join(text.split())
    assert "deletes and compacts nothing" in flat and "--clean" in flat and "retention and compaction" in flat
