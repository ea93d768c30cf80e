"""Where a detached mount's log goes (review23 R23-11): syslog when there is one, else a file in the cache
folder's ``logs/``, said at mount time, rotated."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkafs.fs.daemon import LOG_FILE_BYTES, log_file_name, syslog_here

from .conftest import ROOT


def _unmount(mnt: Path) -> None:
    subprocess.run([sys.executable, "-m", "kafkafs", "umount", "--timeout", "20", str(mnt)], capture_output=True,
                   cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    if os.path.ismount(mnt):
        subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)


def test_log_file_name_is_the_mount_points_path():
    assert log_file_name("/tmp/x/mnt") == "tmp_x_mnt.log"
    long = "/" + "/".join(["d" * 50] * 6)
    name = log_file_name(long)
    assert name.startswith("d" * 50 + "-") and name.endswith(".log") and len(name) < 200


@pytest.mark.skipif(syslog_here(), reason="a daemon logs to syslog where there is one")
def test_a_detached_mount_says_where_its_log_is(logdir_copy, tmp_path):
    # events-3's active segment is a link: a --rw mount serves it read-only and says why, in its log
    seg = next((logdir_copy / "events-3").glob("*.log"))
    real = tmp_path / "real.log"
    os.rename(seg, real)
    os.symlink(real, seg)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    cache = tmp_path / "cache"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:
        done = subprocess.run(
            [sys.executable, "-m", "kafkafs", "mount", "--rw", "--cache-dir", str(cache), str(logdir_copy), str(mnt)],
            capture_output=True, text=True, timeout=30, env=env, cwd=ROOT,
        )
        assert done.returncode == 0, done.stderr
        log_file = cache / "logs" / log_file_name(str(mnt))
        assert done.stderr == f"kafkafs: no syslog here: this mount's log (warnings, errors) is {log_file}\n"
        with pytest.raises(PermissionError):
            with open(mnt / "events-3/append", "w") as f:
                f.write("x\n")
        deadline = time.monotonic() + 5
        while "refusing to write" not in log_file.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        text = log_file.read_text()
        assert "WARNING: " in text and "events-3: refusing to write" in text and "serving it read-only" in text
    finally:
        _unmount(mnt)


def test_the_log_file_is_rotated(tmp_path):
    # in a child: the handler moves file descriptor 2 onto the file
    path = tmp_path / "logs" / "m.log"
    script = (
        "import logging, os, sys\n"
        "from kafkafs.fs import daemon\n"
        f"daemon.open_log_file({str(path)!r})\n"
        f"daemon._to_log({str(path)!r})\n"
        "log = logging.getLogger('kafkafs.fs')\n"
        "for i in range(3000):\n"
        "    log.warning('line %d %s', i, 'x' * 1000)\n"
        "os.write(2, b'on stderr\\n')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    files = sorted(p.name for p in path.parent.iterdir())
    assert files == ["m.log", "m.log.1"]
    assert all((path.parent / name).stat().st_size <= LOG_FILE_BYTES for name in files)
    text = path.read_text()
    assert "line 2999" in text and text.endswith("on stderr\n")


def test_a_log_file_that_cannot_be_written_is_said(tmp_path, built_logdir):
    from kafkafs.fs.mount import daemon_log_file

    if syslog_here():
        assert daemon_log_file(str(tmp_path), str(built_logdir), "/m") == (None, None)
        return
    (tmp_path / "file").write_text("x")
    path, why = daemon_log_file(str(tmp_path / "file"), str(built_logdir), "/m")
    assert path is None and why is not None and "cannot be written" in why
    path, why = daemon_log_file(str(built_logdir / "c"), str(built_logdir), "/m")
    assert path is None and why is not None and "inside the log directory" in why
