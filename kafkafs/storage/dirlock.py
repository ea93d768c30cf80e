"""Who holds a log directory's ``.lock``, and the one line that says so.

Kafka's ``.lock`` is a POSIX ``fcntl`` lock (Java's ``FileChannel.tryLock``), so ``F_GETLK`` tells
whether a lock could be taken and, if not, which process holds it; that process's command line (from
``/proc``) names it for the user. A process in another PID namespace (a broker in a container) shows
as pid 0 or not at all: then the line says "another process".

Functions only; safe from any thread.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
from pathlib import Path

from ..errors import LogDirLocked, doing

__all__ = ["LOCK_FILE", "lock_holder", "holder_of", "holder_kind", "describe_holder", "locked_error", "check_not_locked"]

LOCK_FILE = ".lock"

# struct flock: short l_type, short l_whence, off_t l_start, off_t l_len, pid_t l_pid (native layout)
_FLOCK = struct.Struct("@hhqqi4x")


def lock_holder(fd: int) -> int | None:
    """The pid of the process whose lock on the file ``fd`` keeps a write lock from being taken; 0 when
    the kernel cannot say (another PID namespace); None when nothing holds it (or the query failed)."""
    query = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
    try:
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, query)
    except OSError:
        return None
    l_type, _whence, _start, _len, pid = _FLOCK.unpack(answer[: _FLOCK.size])
    if l_type == fcntl.F_UNLCK:
        return None
    holder: int = max(pid, 0)
    return holder


def describe_holder(pid: int | None) -> str:
    """``process 1234 (kafkafs mount --rw /data /mnt)``, or ``another process`` when it cannot be named."""
    if not pid:
        return "another process (a broker or kafkafs)"
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return f"process {pid}"
    words = [w.decode("utf-8", "replace") for w in raw.split(b"\0") if w]
    # `python -m kafkafs ...` and `.venv/bin/kafkafs ...`: show the program by its name
    if len(words) > 2 and words[1] == "-m":
        words = words[2:]
    elif len(words) > 1 and os.path.basename(words[0]).startswith("python") and words[1].endswith("/kafkafs"):
        words = words[1:]
    if words:
        words[0] = os.path.basename(words[0])
    command = " ".join(" ".join(w.split()) for w in words)  # one line: a word's newlines and tabs as spaces
    if len(command) > 300:
        command = command[:297] + "..."
    return f"process {pid} ({command})" if command else f"process {pid}"


def holder_kind(pid: int | None) -> str:
    """What the process ``pid`` holding a ``.lock`` is, for a reader's line: ``a running broker`` (its
    command runs Kafka's main class ``kafka.Kafka``), ``a running kafkafs writer``, or ``a running broker
    or writer`` when its command does not tell (another PID namespace: a broker in a container)."""
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if pid else []
    except OSError:
        words = []
    if b"kafka.Kafka" in words:
        return "a running broker"
    if any(os.path.basename(w) == b"kafkafs" or w.startswith(b"kafkafs.") for w in words):
        return "a running kafkafs writer"
    return "a running broker or writer"


def locked_error(path: str | os.PathLike[str], pid: int | None) -> LogDirLocked:
    """The one line for a log directory another writer holds: who, and what to do."""
    return LogDirLocked(
        f"{path} is locked by another writer: {describe_holder(pid)} holds {Path(path) / LOCK_FILE}; "
        "stop that writer (a kafkafs mount --rw: unmount it) and try again, or only read the directory"
    )


def _holder(path: str | os.PathLike[str], *, quiet: bool) -> int | None:
    """:func:`lock_holder` of ``path``'s ``.lock``, opened read-only (never created); None when it is
    missing or a link. ``quiet``: any other OS error is None too (else it is raised, named)."""
    lock = Path(path) / LOCK_FILE
    try:
        with doing("read {path}"):
            fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if quiet or exc.errno == errno.ELOOP:
            return None  # a link is never a lock kafkafs takes: the writer refuses it itself
        raise
    try:
        return lock_holder(fd)
    finally:
        os.close(fd)


def holder_of(path: str | os.PathLike[str]) -> int | None:
    """Whether another process (a running broker, a ``kafkafs mount --rw``) holds the log directory
    ``path``'s ``.lock`` now: its pid (0 when the kernel cannot name it), else None. Reads only: a
    reader beside a live broker asks it to tell in-flight writes from damage (review26)."""
    return _holder(path, quiet=True)


def check_not_locked(path: str | os.PathLike[str]) -> None:
    """Raise :func:`locked_error` when another process holds ``path``'s ``.lock`` now, without taking
    it (a writer that takes it later, a Spark write's commit, finds it free or fails the same way). A
    missing ``.lock`` is free. The caller's own process never conflicts with itself (POSIX locks)."""
    pid = _holder(path, quiet=False)
    if pid is not None:
        raise locked_error(path, pid)
