"""SPEC §6's drop_privileges way, the whole way and for real (review12 R12-4): ``mount.kafkafs -o
drop_privileges`` has libfuse's ``mount.fuse3`` mount as root, drop every capability and run the helper
again on ``/dev/fd/N``, which starts ``kafkafs mount LOGDIR /dev/fd/N``: that kafkafs must serve the
open /dev/fuse it is handed (not refuse it as 'not a directory' and leave a dead mount), answer reads,
and end when the mount is unmounted. The helper and kafkafs are this tree's (not an installed copy).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkafs.fs import mount_helper

from .conftest import ROOT, expected_jsonl

pytestmark = pytest.mark.fuse


def _scripts(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A ``mount.kafkafs`` and a ``kafkafs`` that run this tree's code, and the environment for them."""
    helper, kafkafs = tmp_path / "bin" / "mount.kafkafs", tmp_path / "bin" / "kafkafs"
    helper.parent.mkdir()
    prelude = f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(ROOT)!r})\n"
    helper.write_text(prelude + "from kafkafs.fs.mount_helper import main\nsys.exit(main(sys.argv))\n")
    kafkafs.write_text(prelude + "from kafkafs.cli import main\nsys.exit(main())\n")
    for script in (helper, kafkafs):
        script.chmod(0o755)
    return helper, {**os.environ, "KAFKAFS": str(kafkafs), "XDG_CACHE_HOME": str(tmp_path / "cache")}


def _mount_options(target: Path) -> list[str] | None:
    """The mount's [type, source, options...] (per mount and of its super block) from
    /proc/self/mountinfo, None when not mounted."""
    with open("/proc/self/mountinfo") as mountinfo:
        for line in mountinfo:
            fields = line.split()
            if fields[4] == str(target):
                separator = fields.index("-")
                options = fields[5].split(",") + fields[separator + 3].split(",")
                return [fields[separator + 1], fields[separator + 2], *options]
    return None


def _daemons(logdir: Path) -> list[int]:
    """The pids of `kafkafs mount` processes serving ``logdir`` on a /dev/fd/N."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"mount" in args and str(logdir).encode() in args and args[-2].startswith(b"/dev/fd/"):
            found.append(int(pid))
    return found


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def _gone(pid: int, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if _status(pid).get("State", "").startswith("Z"):
                return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def dropping(tmp_path, logdir_copy):
    """(helper, env, logdir, mountpoint); afterwards nothing stays mounted and no daemon of the test runs."""
    mount_fuse3 = mount_helper.find_mount_fuse3()
    if os.geteuid() != 0 or mount_fuse3 is None or not os.path.exists("/dev/fuse"):
        pytest.skip("needs root, /dev/fuse and libfuse's mount.fuse3")
    helper, env = _scripts(tmp_path)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    yield helper, env, logdir_copy, mnt
    if _mount_options(mnt) is not None:
        subprocess.run(["umount", "-l", str(mnt)], check=False, capture_output=True)
    for pid in _daemons(logdir_copy):
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass


def test_drop_privileges_mounts_serves_and_unmounts(dropping) -> None:
    helper, env, logdir, mnt = dropping
    result = subprocess.run(
        [str(helper), str(logdir), str(mnt), "-o", "rw,drop_privileges,allow_other"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr  # was 2: '/dev/fd/3: not a directory', a dead mount left
    options = _mount_options(mnt)
    assert options is not None and options[:2] == ["fuse.kafkafs", str(logdir)]
    # as `kafkafs mount` makes it: read-only (mount(8)'s rw is its default), modes checked by the kernel
    assert {"ro", "default_permissions", "allow_other", "nosuid", "nodev"} <= set(options[2:])
    (daemon,) = _daemons(logdir)
    status = _status(daemon)
    assert status["CapEff"] == "0000000000000000" and status["NoNewPrivs"] == "1"
    assert (mnt / "orders-0" / "records.jsonl").read_bytes() == expected_jsonl(logdir, "orders-0")
    assert sorted(os.listdir(mnt / "orders-0" / "by-offset"))[:2] == ["0.json", "1.json"]
    with pytest.raises(OSError, match="Read-only file system"):
        (mnt / "orders-0" / "append").write_text("x\n")
    subprocess.run(["umount", str(mnt)], check=True, timeout=30)
    assert _gone(daemon), "the daemon did not end after the unmount"
    assert _mount_options(mnt) is None


@pytest.mark.slow  # a second mount.fuse3 round trip (3 Pythons start): 5-7 s under load
def test_drop_privileges_writable_in_the_foreground(dropping) -> None:
    """The systemd drop-in's way: foreground (Type=notify), writable; the helper's process is the
    daemon and exits 0 once the mount is unmounted."""
    helper, env, logdir, mnt = dropping
    process = subprocess.Popen(
        [str(helper), str(logdir), str(mnt), "-o", "drop_privileges,foreground,writable"],
        env=env, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not (mnt / "orders-0").exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process.poll() is None, process.communicate(timeout=5)[1]
        options = _mount_options(mnt)
        assert options is not None and "rw" in options and "ro" not in options and "default_permissions" in options
        with open(mnt / "events-3" / "append", "a") as append:
            append.write("dropped\n")
        assert b'"value":"dropped"' in (mnt / "events-3" / "records.jsonl").read_bytes().splitlines()[-1]
        subprocess.run(["umount", str(mnt)], check=True, timeout=30)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert b'"value":"dropped"' in expected_jsonl(logdir, "events-3").splitlines()[-1]


@pytest.mark.slow  # an error path (one kafkafs start, 2-7 s under load); the suite has under a minute to spare
def test_a_dev_fd_that_is_not_mounted_is_one_line(tmp_path, logdir_copy) -> None:
    """`kafkafs mount LOGDIR /dev/fd/3` on a /dev/fuse that nobody mounted: one line, exit 1."""
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse")
    helper, env = _scripts(tmp_path)
    kafkafs = env["KAFKAFS"]
    result = subprocess.run(
        ["/bin/sh", "-c", 'exec "$0" mount -f "$1" /dev/fd/3 3<>/dev/fuse', kafkafs, str(logdir_copy)],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "that /dev/fuse is not mounted" in result.stderr
