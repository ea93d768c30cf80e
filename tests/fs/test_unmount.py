"""``kafkafs umount MOUNTPOINT`` (review13 R13-1): ``fusermount3 -u`` returns once the kernel detached the
mount, before a ``--rw`` daemon has closed LOGDIR (checkpoints, ``.kafka_cleanshutdown``, ``.lock``);
``kafkafs umount`` returns only once the daemon released the lock, so a broker or ``kafkafs produce``
can start at once."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from kafkafs.cli import main
from kafkafs.errors import MountError
from kafkafs.fs import unmount as unmount_module
from kafkafs.fs.unmount import MountEntry, find_mount, unmount
from kafkafs.storage.dirlock import lock_holder
from kafkafs.storage.logdir import LogDir


def _holder(logdir: Path) -> int | None:
    fd = os.open(logdir / ".lock", os.O_RDONLY)
    try:
        return lock_holder(fd)
    finally:
        os.close(fd)


@pytest.mark.fuse
def test_umount_of_a_rw_mount_returns_once_the_daemon_let_go(mounted, logdir_copy, capsys) -> None:
    mount = mounted(logdir_copy, "--rw")
    assert mount.proc is not None
    with open(mount / "events-3" / "append", "a") as append:
        append.write("last\n")
    assert _holder(logdir_copy) == mount.proc.pid
    # the daemon is held still, so that its close after the unmount takes as long as it may take
    os.kill(mount.proc.pid, signal.SIGSTOP)
    failed: list[BaseException] = []

    def run() -> None:
        try:
            unmount(str(mount.path), timeout=60)
        except BaseException as exc:  # noqa: BLE001 - said by the test
            failed.append(exc)

    umount = threading.Thread(target=run)
    try:
        umount.start()
        deadline = time.monotonic() + 30
        while find_mount(str(mount.path)) is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert find_mount(str(mount.path)) is None  # detached: where `fusermount3 -u` returned
        time.sleep(0.3)
        assert umount.is_alive() and _holder(logdir_copy) == mount.proc.pid  # the race R13-1 names
    finally:
        os.kill(mount.proc.pid, signal.SIGCONT)
    umount.join(timeout=60)
    assert not umount.is_alive() and not failed, failed
    # at once: the lock is free and the marker written, so another writer may start
    assert _holder(logdir_copy) is None
    assert (logdir_copy / ".kafka_cleanshutdown").exists()
    with LogDir(logdir_copy, writable=True) as logdir:  # as a broker or `kafkafs produce` takes it
        assert list(logdir.log("events-3").records())[-1].value == b"last"
    assert mount.proc.wait(timeout=30) == 0
    # what it refuses: one line, exit 2 (SPEC §4: a path that is not what the command takes)
    capsys.readouterr()
    assert main(["umount", str(mount.path)]) == 2
    assert main(["umount", "/proc"]) == 2
    err = capsys.readouterr().err.splitlines()  # stdout: nothing
    assert err == [
        f"kafkafs: error: {mount.path}: nothing is mounted there",
        "kafkafs: error: /proc: not a kafkafs mount (a proc mount is there)",
    ]


def test_umount_says_when_the_daemon_keeps_the_lock(monkeypatch, tmp_path) -> None:
    entry = MountEntry(str(tmp_path / "mnt"), "fuse.kafkafs", str(tmp_path), frozenset({"rw"}))
    monkeypatch.setattr(unmount_module, "find_mount", lambda _path: entry)
    monkeypatch.setattr(unmount_module, "_daemon_lock", lambda _entry: (tmp_path / ".lock", os.getpid()))
    monkeypatch.setattr(unmount_module, "_detach", lambda _mountpoint, _path: None)
    monkeypatch.setattr(unmount_module, "_released", lambda _lock, _pid: False)
    with pytest.raises(
        MountError, match=rf"unmounted, but process {os.getpid()} .* still holds .*\.lock after 0\.05 s"
    ):
        unmount(entry.path, timeout=0.05)


@pytest.mark.fuse
@pytest.mark.slow  # one more mount (3-6 s under load); the rw test above holds the part that waits
def test_umount_of_a_read_only_mount(mounted, built_logdir) -> None:
    mount = mounted(built_logdir)
    assert main(["umount", str(mount.path)]) == 0  # nothing of LOGDIR is held: nothing to wait for
    assert find_mount(str(mount.path)) is None
    assert mount.proc is not None and mount.proc.wait(timeout=30) == 0


@pytest.mark.fuse
def test_umount_names_a_mount_namespace_that_keeps_the_mount(mounted, logdir_copy, capsys) -> None:
    """review23 R23-2: a --rw daemon stayed alive after `kafkafs umount`, which waited 60 s and said only
    that the daemon still held the lock. The daemon learns of the unmount when the kernel ends its FUSE
    connection, once no mount of it is left anywhere: a mount namespace made while it was mounted
    (`unshare -m`, with mounts private as here) keeps a copy this unmount does not reach. The wait now
    names it; the daemon ends (exit 0, lock free) once that namespace ends."""
    import subprocess

    mount = mounted(logdir_copy, "--rw")
    assert mount.proc is not None
    holder = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sleep", "60"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while not _own_namespace(holder.pid) and holder.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        if not _own_namespace(holder.pid) or str(mount.path) not in _mountinfo(holder.pid):
            pytest.skip(f"no mount namespace of our own here: {holder.stderr.read().decode() if holder.stderr else ''}")
        capsys.readouterr()
        assert main(["umount", "--timeout", "2", str(mount.path)]) == 1
        err = capsys.readouterr().err.splitlines()
        lock = logdir_copy / ".lock"
        there = f"the mount is still there in the mount namespace of process {holder.pid} (sleep 60)"
        assert len(err) == 2 and err[0] == (
            f"kafkafs: {mount.path}: unmounted here, but {there}: its daemon (pid {mount.proc.pid}) serves it, "
            f"and holds {lock}, until none is left; waiting up to 2 s"), err
        assert err[1].startswith(f"kafkafs: error: {mount.path}: unmounted, but process {mount.proc.pid} "), err
        assert err[1].endswith(f"after 2 s: {there}, and its daemon serves it until none is left (end that, or stop "
                               f"the daemon: kill {mount.proc.pid})"), err
        assert find_mount(str(mount.path)) is None and _holder(logdir_copy) == mount.proc.pid
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert mount.proc.wait(timeout=30) == 0  # the last copy gone: the connection ends, the daemon closes
    assert _holder(logdir_copy) is None and (logdir_copy / ".kafka_cleanshutdown").exists()


def _own_namespace(pid: int) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
    except OSError:
        return False


def _mountinfo(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/mountinfo").read_text()
    except OSError:
        return ""
