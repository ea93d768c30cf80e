"""``kafkafs umount MOUNTPOINT``: unmount a kafkafs mount and return once its daemon let go of LOGDIR.

``fusermount3 -u`` returns as soon as the kernel detached the mount; the daemon learns of it only then,
and a ``--rw`` mount's daemon still closes its logs (fsyncs, trims the active indexes, writes the
checkpoints and ``.kafka_cleanshutdown``) and releases ``LOGDIR/.lock`` afterwards, a tenth of a second
or more later. A script that unmounts and at once starts a broker, runs ``kafkafs produce`` or copies
LOGDIR races that (review13 R13-1). This command unmounts the same way, then waits until the process
that held the lock (the daemon: a process with ``/dev/fuse`` open) released it or ended.

The daemon learns of the unmount only when the kernel ends its FUSE connection, which it does once
no mount of it is left anywhere: a mount namespace made while it was mounted (``unshare -m``, a
container, a sandboxed service) holds a copy of it that this unmount does not reach (where mounts are
private, as here), and the daemon serves that copy, and keeps the lock, until the namespace ends
(review23 R23-2). The wait then says so, naming a process of that namespace (and a bind mount of it
left in this one), rather than waiting in silence for a daemon that cannot stop.

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
from .mountinfo import MountEntry, find_mount, mount_entries

__all__ = ["MountEntry", "find_mount", "mount_copies", "unmount", "WAIT_TIMEOUT"]

#: Seconds ``kafkafs umount`` waits by default for the daemon to release LOGDIR's lock (systemd's
#: TimeoutStopSec of the unit is 30 s; a daemon asked to stop has 5 s for its requests, then closes).
WAIT_TIMEOUT = 60.0
_POLL = 0.01
#: Seconds ``kafkafs umount`` gives a daemon that released the lock to end (and leave its note).
_END_WAIT = 5.0
#: Seconds of waiting after which the copies of the mount left elsewhere are looked for, and said.
_LOOK_AFTER = 1.0


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


def _mount_ns(pid: str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def _has_device(mountinfo: str, device: str) -> list[str]:
    """The mount points of the mounts of ``device`` in the mount table ``mountinfo``."""
    try:
        return [entry.path for entry in mount_entries(mountinfo) if entry.device == device]
    except OSError:
        return []


def mount_copies(device: str, limit: int = 3) -> list[str]:
    """Where the mount of ``device`` (major:minor) is still mounted: ``"at PATH"`` for a mount of it in
    this mount namespace, ``"in the mount namespace of process N (cmd)"`` for each other namespace that
    has one (a process of it named; at most ``limit`` in all). Processes that cannot be looked at are
    passed over."""
    if not device:
        return []
    own = _mount_ns("self")
    said = [f"at {path}" for path in _has_device("/proc/self/mountinfo", device)]
    seen = {own}
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return said[:limit]
    for pid in sorted(pids, key=int):
        if len(said) >= limit:
            break
        ns = _mount_ns(pid)
        if ns is None or ns in seen:
            continue
        seen.add(ns)
        if _has_device(f"/proc/{pid}/mountinfo", device):
            said.append(f"in the mount namespace of {describe_holder(int(pid))}")
    return said[:limit]


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
    start = time.monotonic()
    deadline = start + timeout
    looked = False
    while not _released(lock, pid):
        now = time.monotonic()
        if now >= deadline:
            where = "; ".join(mount_copies(entry.device))  # as they are now
            why = (f": the mount is still there {where}, and its daemon serves it until none is left (end "
                   f"that, or stop the daemon: kill {pid})") if where else ""
            raise MountError(
                f"{mountpoint}: unmounted, but {describe_holder(pid)} still holds {lock} after {timeout:g} s{why}"
            )
        if not looked and now - start >= _LOOK_AFTER:
            looked = True
            where = "; ".join(mount_copies(entry.device))
            if where:
                print(f"kafkafs: {mountpoint}: unmounted here, but the mount is still there {where}: its daemon "
                      f"(pid {pid}) serves it, and holds {lock}, until none is left; waiting up to {timeout:g} s",
                      file=sys.stderr)
        time.sleep(_POLL)
    failed = _failed_stop(pid, deadline)
    if failed is not None:
        raise MountError(f"{mountpoint}: unmounted, but its daemon's close of {entry.source} failed: {failed}")
    return 0
