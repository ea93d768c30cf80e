"""The background cleaner of a ``--rw --clean`` mount under continuous appends (bench/cleaner_mount.py): the
log stays bounded while readers of records.jsonl, by-offset/ and tail -f see only right records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOAK = ROOT / "bench" / "cleaner_mount.py"

pytestmark = pytest.mark.fuse


def _soak(tmp_path: Path, seconds: int, delay_ms: int = 10_000) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)] + sys.path))
    try:
        out = subprocess.run(
            [sys.executable, str(SOAK), "--seconds", str(seconds), "--rate", "200", "--json", "--delete-delay-ms", str(delay_ms), "--dir",
             str(tmp_path / "soak")],
            capture_output=True, text=True, env=env, timeout=seconds + 180,
        )
    finally:  # the script unmounts; this is the last resort if it died
        if os.path.ismount(tmp_path / "soak" / "mnt"):
            subprocess.run(["fusermount3", "-uz", str(tmp_path / "soak" / "mnt")], capture_output=True)
    assert out.stdout.strip(), out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _check(result: dict) -> None:
    assert result["errors"] == []
    assert result["bounded"], result
    counts = result["counts"]
    assert counts["jsonl_reads"] > 10 and counts["by_offset_hits"] > 10 and counts["tail_lines"] > 100
    assert counts["by_offset_gone"] > 0  # compaction and retention removed records under the readers
    assert result["kv_segments_max"] < 20 and result["ev_segments_max"] < 30


@pytest.mark.slow  # a soak (25 s): the default suite must stay under 15 min
def test_a_mount_keeps_its_log_bounded_under_appends_and_readers_stay_right(tmp_path):
    _check(_soak(tmp_path, 24, delay_ms=3000))


@pytest.mark.slow
def test_ten_minutes_under_appends(tmp_path):
    _check(_soak(tmp_path, 600))
