"""``kafkafs umount MOUNTPOINT``: unmount a kafkafs mount and return once its daemon let go of LOGDIR.

``fusermount3 -u`` returns as soon as the kernel detached the mount; the daemon learns of it only then,
and a ``--rw`` mount's daemon still closes its logs (fsyncs, trims the active indexes, writes the
checkpoints and ``.kafka_cleanshutdown``) and releases ``LOGDIR/.lock`` afterwards, a tenth of a second
or more later. A script that unmounts and at once starts a broker, runs ``kafkafs produce`` or copies
LOGDIR races that (review13 R13-1). This command unmounts the same way, then waits until the process
that held the lock (the daemon: a process with ``/dev/fuse`` open) released it or ended.

A read-only mount holds nothing of LOGDIR (no lock, no write), so there is nothing to wait for: it is
unmounted and the command returns. The mount's log directory is its source in the mount table (kafkafs
names its mounts ``fsname=LOGDIR``); a mount named otherwise is unmounted without the wait, said on stderr.

Functions only; nothing here runs in the daemon.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ..errors import MountError, MountPathError
from ..storage.dirlock import LOCK_FILE, describe_holder, lock_holder
from .daemon import take_failure_note
from .mountinfo import MountEntry, find_mount

__all__ = ["MountEntry", "find_mount", "unmount", "WAIT_TIMEOUT"]

#: Seconds ``kafkafs umount`` waits by default for the daemon to release LOGDIR's lock (systemd's
#: TimeoutStopSec of the unit is 30 s; a daemon asked to stop has 5 s for its requests, then closes).
WAIT_TIMEOUT = 60.0
_POLL = 0.01
#: Seconds ``kafkafs umount`` gives a daemon that released the lock to end (and leave its note).
_END_WAIT = 5.0


def _holds_fuse(pid: int) -> bool:
    """True when process ``pid`` has ``/dev/fuse`` open (a FUSE daemon, not a broker)."""
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == "/dev/fuse":
                    return True
            except OSError:
                continue
    except OSError:
        return False
    return False


def _lock_holder(lock: Path) -> int | None:
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        return lock_holder(fd)
    finally:
        os.close(fd)


def _daemon_lock(entry: MountEntry) -> tuple[Path, int] | None:
    """(LOGDIR/.lock, the daemon's pid) for a ``--rw`` kafkafs mount whose daemon holds the lock now."""
    if "rw" not in entry.options or not os.path.isabs(entry.source) or not os.path.isdir(entry.source):
        return None
    lock = Path(entry.source) / LOCK_FILE
    pid = _lock_holder(lock)
    if not pid or not _holds_fuse(pid):
        return None
    return lock, pid


def _detach(mountpoint: str, path: str) -> None:
    """``fusermount3 -u`` (``umount`` where there is none); MountError with its reason when it fails."""
    tool = shutil.which("fusermount3")
    command = [tool, "-u", path] if tool else ["umount", path]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise MountError(f"cannot unmount {mountpoint}: {exc}") from None
    if result.returncode != 0:
        said = " ".join(result.stderr.split()) or f"{command[0]} exited with {result.returncode}"
        for prefix in (f"{command[0]}: ", "fusermount3: ", "umount: "):
            said = said.removeprefix(prefix)
        raise MountError(f"cannot unmount {mountpoint}: {said}")


def _released(lock: Path, pid: int) -> bool:
    return _lock_holder(lock) != pid or not os.path.exists(f"/proc/{pid}")


def _ended(pid: int) -> bool:
    """Whether process ``pid`` has ended (gone, or a zombie its parent has yet to reap)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rpartition(b")")[2].split()[:1]
    except OSError:
        return True
    return state in ([b"Z"], [b"X"])


def _failed_stop(pid: int, deadline: float) -> str | None:
    """The daemon ``pid`` released the lock: what it noted of a failed close (review23 R23-7), once it
    ended (waited for :data:`_END_WAIT` seconds at most, within the timeout), else None."""
    until = min(deadline, time.monotonic() + _END_WAIT)
    while not _ended(pid) and time.monotonic() < until:
        time.sleep(_POLL)
    return take_failure_note(pid)


def unmount(mountpoint: str, timeout: float = WAIT_TIMEOUT) -> int:
    """Unmount the kafkafs mount at ``mountpoint``; for a ``--rw`` mount, return once its daemon
    released LOGDIR's lock (having written its checkpoints and ``.kafka_cleanshutdown``). Returns 0;
    raises :class:`MountPathError` (exit 2) when no kafkafs mount is there, :class:`MountError` (1) when
    the unmount fails, the daemon still holds the lock after ``timeout`` seconds, or its close failed
    (the line it noted, :func:`~.daemon.leave_failure_note`)."""
    try:
        entry = find_mount(mountpoint)
    except OSError as exc:
        raise MountError(f"cannot read the mount table: {exc.strerror or exc}") from None
    if entry is None:
        raise MountPathError(f"{mountpoint}: nothing is mounted there")
    if entry.fstype != "fuse.kafkafs":
        raise MountPathError(f"{mountpoint}: not a kafkafs mount (a {entry.fstype} mount is there)")
    held = _daemon_lock(entry)
    if held is None and "rw" in entry.options and not os.path.isdir(entry.source):
        print(
            f"kafkafs: {mountpoint}: its log directory is not named in the mount table ({entry.source}): "
            "unmounted without waiting for its daemon",
            file=sys.stderr,
        )
    _detach(mountpoint, entry.path)
    if held is None:
        return 0
    lock, pid = held
    deadline = time.monotonic() + timeout
    while not _released(lock, pid):
        if time.monotonic() >= deadline:
            raise MountError(
                f"{mountpoint}: unmounted, but {describe_holder(pid)} still holds {lock} after {timeout:g} s"
            )
        time.sleep(_POLL)
    failed = _failed_stop(pid, deadline)
    if failed is not None:
        raise MountError(f"{mountpoint}: unmounted, but its daemon's close of {entry.source} failed: {failed}")
    return 0
