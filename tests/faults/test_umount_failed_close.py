"""review23 R23-7: ``kafkafs umount`` of a detached ``--rw`` mount whose close failed (a full disk: the
checkpoints cannot be written) says so and exits 1, and the failed checkpoint write leaves no ``.tmp``."""

from __future__ import annotations

import os
import signal
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


def _holder(logs) -> int | None:
    from kafkafs.storage.dirlock import lock_holder

    fd = os.open(logs / ".lock", os.O_RDONLY)
    try:
        return lock_holder(fd)
    finally:
        os.close(fd)


@pytest.mark.parametrize("how, stop, then", [
    ("detached", "fusermount3", "verify"),
    ("detached", "SIGTERM", "mount"),
    ("foreground", "SIGTERM", "verify"),  # the systemd unit's way (kafkafs mount --foreground, stopped: SIGTERM)
    ("foreground", "fusermount3", "mount"),
])
def test_a_failed_close_without_umount_is_said_by_the_next_command(tmp_path, how, stop, then):
    # fix61: stopped by fusermount3 -u or a SIGTERM, the daemon's note of its failed close stayed in the
    # note folder unread; the next verify said OK and the next mount nothing (only the mount's log had it).
    # review27 R27-3: a foreground mount (-f) left no note at all, so nothing was said after it
    import time

    from kafkafs.fs.daemon import note_folder

    root = tmp_path / "fs"
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(root)], check=True)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    pid = None
    proc = None
    try:
        logs = root / "logs"
        logs.mkdir()
        with LogDir(logs, writable=True) as d:
            d.create_partition("t", 0)
        args = ["mount", "--rw", "--cache-dir", str(tmp_path / "cache"), str(logs), str(mnt)]
        if how == "foreground":
            proc = subprocess.Popen([sys.executable, "-m", "kafkafs", "mount", "-f", *args[1:]],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                    env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT)
            deadline = time.monotonic() + 30
            while not os.path.ismount(mnt) and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert os.path.ismount(mnt), proc.stderr.read() if proc.poll() is not None else "not mounted"
        else:
            mounted = _kafkafs(*args)
            assert mounted.returncode == 0, mounted.stderr
        with open(mnt / "t-0/append", "ab", buffering=0) as f:
            f.write(b"hello\n")
        pid = _holder(logs)
        assert proc is None or pid == proc.pid
        st = os.statvfs(root)
        with open(root / "filler", "ab") as f:  # the disk full: the close cannot write its checkpoints
            f.write(bytes(st.f_bavail * st.f_frsize))
        if stop == "SIGTERM":
            os.kill(pid, signal.SIGTERM)
        else:
            subprocess.run(["fusermount3", "-u", str(mnt)], check=True)
        if proc is not None:
            ended = proc.communicate(timeout=30)[1]  # its own stderr says it too (the journal, under systemd)
            assert proc.returncode == 1 and "no space left on device" in ended, ended
        deadline = time.monotonic() + 30
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not os.path.ismount(mnt) and not os.path.exists(f"/proc/{pid}")
        (root / "filler").unlink()
        if then == "verify":
            done = _kafkafs("verify", str(logs))
            assert done.returncode == 0 and done.stdout.endswith(": OK\n"), done.stdout + done.stderr
        else:
            done = _kafkafs("mount", "--cache-dir", str(tmp_path / "cache"), str(logs), str(mnt))
            assert done.returncode == 0, done.stderr
            assert _kafkafs("umount", str(mnt)).returncode == 0
        said = [line for line in done.stderr.splitlines() if "its close failed" in line]
        assert len(said) == 1 and "Traceback" not in done.stderr, done.stderr
        assert said[0].startswith(f"kafkafs: warning: the last --rw mount of {logs} (pid {pid}) was stopped without "
                                  "`kafkafs umount`, and its close failed: cannot "), said
        assert "no space left on device" in said[0]
        assert not (note_folder() / f"daemon-{pid}.failed").exists()
        again = _kafkafs("verify", str(logs))  # said once
        assert again.returncode == 0 and "its close failed" not in again.stderr, again.stderr
    finally:
        if os.path.ismount(mnt):
            subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        subprocess.run(["umount", "-l", str(root)], capture_output=True)
        if pid is not None:
            (note_folder() / f"daemon-{pid}.failed").unlink(missing_ok=True)
