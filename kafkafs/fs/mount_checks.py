"""What ``kafkafs mount`` checks before it mounts: the mount point, the log directory, the ``-o``
options; :class:`~kafkafs.errors.MountPathError` when they are not what it takes (SPEC §4: a wrong path
or option exits 2), :class:`~kafkafs.errors.MountError` for a mount point in the wrong state (1).
Functions only: no state.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable

from ..errors import MountError, MountPathError, UsageError, describe_os_error, tag_os_error
from ..storage.logdir import check_log_directory

__all__ = ["check_mountpoint", "check_logdir", "fuse_option_set", "fuse_fd"]


def fuse_fd(mountpoint: str) -> int | None:
    """N for a mount point ``/dev/fd/N`` (libfuse's way to hand a daemon a ``/dev/fuse`` that is already
    mounted: ``mount.fuse3 -o drop_privileges``), else None."""
    prefix = "/dev/fd/"
    if mountpoint.startswith(prefix) and mountpoint[len(prefix) :].isdigit():
        return int(mountpoint[len(prefix) :])
    return None


def _check_fuse_fd(mountpoint: str, fd: int) -> str:
    """``/dev/fd/N`` unchanged when descriptor N is an open ``/dev/fuse`` (what libfuse's
    ``fuse_session_mount`` takes as "mounted already"), else the reason (exit 2)."""
    try:
        st = os.fstat(fd)
    except OSError:
        raise MountPathError(
            f"{mountpoint}: no such open file descriptor (a /dev/fd/N mount point is an open /dev/fuse "
            "that mount.fuse3 -o drop_privileges hands over)"
        ) from None
    try:
        fuse_device = os.stat("/dev/fuse").st_rdev
    except OSError:
        fuse_device = os.makedev(10, 229)  # the FUSE device's number on Linux
    if not stat.S_ISCHR(st.st_mode) or st.st_rdev != fuse_device:
        raise MountPathError(f"{mountpoint}: not an open /dev/fuse")
    return mountpoint


def check_mountpoint(mountpoint: str) -> str:
    """The absolute mount point: an existing, empty folder of the caller's with nothing (alive or dead)
    mounted on it; else the reason, as :class:`MountPathError` (exit 2) or :class:`MountError` (1).
    ``/dev/fd/N`` is taken as it is when N is an open ``/dev/fuse`` (:func:`fuse_fd`)."""
    fd = fuse_fd(mountpoint)
    if fd is not None:
        return _check_fuse_fd(mountpoint, fd)
    path = os.path.abspath(mountpoint)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise MountPathError(f"{mountpoint}: no such mount point (create the folder first)") from None
    except OSError as exc:
        if exc.errno == errno.ENOTCONN:
            raise MountPathError(
                f"{mountpoint}: a dead mount is still there (its daemon died); clear it with "
                f"`fusermount3 -uz {mountpoint}`"
            ) from None
        raise MountPathError(describe_os_error(tag_os_error(exc, "use {path} as the mount point"))) from None
    if not os.path.isdir(path):
        raise MountPathError(f"{mountpoint}: not a directory")
    if os.path.ismount(path) or _mounted_at(path):
        # stat() may still answer from the kernel's cache for a second after the daemon died: ask the
        # file system itself (statfs is never cached) before calling the mount alive
        if _dead_mount(path):  # the state of the mount point, not a wrong path: exit 1
            raise MountError(
                f"{mountpoint}: a dead mount is still there (its daemon died); clear it with "
                f"`fusermount3 -uz {mountpoint}`"
            )
        raise MountError(
            f"{mountpoint}: something is already mounted there (unmount it with `fusermount3 -u`)"
        )
    try:
        if os.listdir(path):
            raise MountPathError(f"{mountpoint}: the mount point is not empty")
    except PermissionError:
        raise MountPathError(f"cannot read the mount point {mountpoint}: permission denied") from None
    if not os.access(path, os.W_OK) and os.geteuid() != 0:
        raise MountPathError(f"{mountpoint}: you do not own the mount point")
    del st
    return path


def _dead_mount(path: str) -> bool:
    try:
        os.statvfs(path)
    except OSError as exc:
        return exc.errno == errno.ENOTCONN
    return False


def _mounted_at(path: str) -> bool:
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 4 and fields[4].replace("\\040", " ") == path:
                    return True
    except OSError:
        pass
    return False


def check_logdir(logdir: str) -> str:
    """The absolute log directory, when it is a folder that can be a Kafka log directory
    (:func:`~kafkafs.storage.logdir.check_log_directory`, not strict, as every command checks it) and
    that the mount can list and enter."""
    try:
        check_log_directory(logdir, strict=False)
    except UsageError as exc:
        raise MountPathError(str(exc)) from None
    path = os.path.abspath(logdir)
    if not os.access(path, os.R_OK | os.X_OK):
        raise MountPathError(f"cannot read {logdir}: permission denied")
    return path


def _fsname(logdir: str | None) -> str:
    """The mount's source as ``mount`` and ``df`` show it: the log directory (libfuse splits options
    at commas and takes a backslash as an escape; pyfuse3 passes options as ASCII)."""
    if not logdir or not logdir.isascii() or not logdir.isprintable():
        return "kafkafs"
    return logdir.replace("\\", "\\\\").replace(",", "\\,")


def fuse_option_set(
    rw: bool, user_options: Iterable[str], logdir: str | None = None
) -> tuple[set[str], bool, str | None]:
    """The options for ``pyfuse3.init`` from ``-o`` strings; returns (options, rw, values override).

    ``ro`` in the user's options wins over ``--rw``; ``rw`` is accepted and ignored (``mount`` passes
    it by default); ``values=MODE`` selects the values mode (for fstab lines). The mount is named
    ``fsname=LOGDIR`` (the absolute log directory), ``subtype=kafkafs`` (type ``fuse.kafkafs``); the
    user's own ``fsname=`` or ``subtype=`` wins.
    """
    defaults = {"fsname": f"fsname={_fsname(logdir)}", "subtype": "subtype=kafkafs"}
    options = {"default_permissions"}
    values = None
    for group in user_options:
        for option in str(group).split(","):
            option = option.strip()
            if not option or option == "rw":
                continue
            if option == "ro":
                rw = False
            elif option.startswith("values="):
                values = option.partition("=")[2]
            elif option in ("defaults", "auto", "noauto", "user", "nouser", "_netdev", "nofail"):
                continue  # fstab words that mean nothing to FUSE
            else:
                defaults.pop(option.partition("=")[0], None)
                options.add(option)
    options.update(defaults.values())
    if not rw:
        options.add("ro")
    return options, rw, values
