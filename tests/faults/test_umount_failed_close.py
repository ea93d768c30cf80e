"""review23 R23-7: ``kafkafs umount`` of a detached ``--rw`` mount whose close failed (a full disk: the
checkpoints cannot be written) says so and exits 1, and the failed checkpoint write leaves no ``.tmp``."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kafkafs.storage.logdir import LogDir
from tests.faults.conftest import ROOT

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


def _kafkafs(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkafs", *args], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT)


def test_umount_says_the_daemons_close_failed(tmp_path):
    root = tmp_path / "fs"
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(root)], check=True)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        logs = root / "logs"
        logs.mkdir()
        with LogDir(logs, writable=True) as d:
            d.create_partition("t", 0)
        mounted = _kafkafs("mount", "--rw", "--cache-dir", str(tmp_path / "cache"), str(logs), str(mnt))
        assert mounted.returncode == 0, mounted.stderr
        with open(mnt / "t-0/append", "ab", buffering=0) as f:
            f.write(b"hello\n")
        st = os.statvfs(root)
        with open(root / "filler", "ab") as f:  # the disk full: the close cannot write its checkpoints
            f.write(bytes(st.f_bavail * st.f_frsize))
        done = _kafkafs("umount", str(mnt))
        assert not os.path.ismount(mnt)
        assert done.returncode == 1, done.stderr
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
        assert f"unmounted, but its daemon's close of {logs} failed: cannot " in done.stderr and str(logs) in done.stderr
        assert "no space left on device" in done.stderr
        assert sorted(p.name for p in logs.iterdir() if p.name.endswith(".tmp")) == []
        assert not (logs / ".kafka_cleanshutdown").exists()
        (root / "filler").unlink()
        assert _kafkafs("umount", str(mnt)).returncode == 2  # nothing mounted: said once, not again
    finally:
        if os.path.ismount(mnt):
            subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)
        subprocess.run(["umount", "-l", str(root)], capture_output=True)
