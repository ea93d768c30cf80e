"""Whether a close of an open ``append`` file is its last: the processes that still hold it (Linux ``/proc``).

The kernel tells a FUSE file system of every close of a descriptor (FLUSH, which close(2) waits for) but
not which process closes, nor whether other descriptors of the same open file remain: a child the shell
forks inherits the descriptor and closes its copy when it exits or replaces its standard output, while
the shell goes on writing. The last close is told afterwards (RELEASE), and close(2) does not wait for
that one (``fs/fuse/file.c``: the release is sent in the background on a ``fuse`` mount). So at a FLUSH
the ``append`` file asks :class:`Holders` whether any process still holds a descriptor of it: the process
that opened it (the FUSE request's pid), its descendants, and the processes found holding it at an
earlier close (a child that outlived its parent is re-parented away from the opener); when all of those
have ended (a zombie counts as ended), every process in ``/proc``. A close removes the descriptor from its
process's table before the kernel sends FLUSH, and an exiting process's table is gone by then, so the
closing process itself is never counted. A FLUSH with no partial line pending asks nothing.

What this cannot see, and then takes for "nobody" (the close ends the line, as every close did before
R21-7): a process outside that family that got the descriptor by other means (passed over a Unix socket)
while a member is still there, a process in another pid namespace, and a process whose ``/proc`` entries
this daemon may not read (another user's, when the mount runs unprivileged with ``allow_other``). It
matches the file, not the open file: another descriptor of the same ``append`` file opened separately
within that family counts as a holder (the line then waits for the release, see :mod:`.append`).

Threads: one :class:`Holders` belongs to one open file and is used under its lock.
"""

from __future__ import annotations

import os

__all__ = ["Holders"]

PROC = "/proc"


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not ended (a zombie has: its children went to another parent)."""
    try:
        with open(f"{PROC}/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    state = stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3]
    return state not in (b"Z", b"X", b"x", b"")


def _children(pid: int) -> list[int]:
    """The children of every thread of ``pid`` (``/proc/<pid>/task/<tid>/children``); [] when gone."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"{PROC}/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"{PROC}/{pid}/task/{tid}/children", "rb") as f:
                found.extend(int(child) for child in f.read().split())
        except (OSError, ValueError):
            continue
    return found


class Holders:
    """The processes that may hold a descriptor of one open ``append`` file (see the module).

    ``name`` is the file's path inside the mount (``events-3/append``) and ``inode`` its inode number:
    a descriptor is counted when its link in ``/proc/<pid>/fd`` ends with ``/<name>`` and its
    ``fdinfo`` says that inode."""

    def __init__(self, opener: int, inode: int, name: str) -> None:
        self.opener = opener
        self.inode = inode
        self.suffix = "/" + name
        self.seen: set[int] = set()

    def any(self) -> bool:
        """Whether a process other than the one closing now still holds a descriptor of the file."""
        me = os.getpid()
        roots = [pid for pid in (self.opener, *sorted(self.seen)) if pid != me and _alive(pid)]
        if roots:
            found = self._holding(self._family(roots))
        else:  # the opener and every holder seen before are gone: look at every process
            try:
                pids = [int(name) for name in os.listdir(PROC) if name.isdigit() and int(name) != me]
            except OSError:  # no /proc: nobody can be seen, every close is taken for the last
                return False
            found = self._holding(pids)
        self.seen = found
        return bool(found)

    @staticmethod
    def _family(roots: list[int]) -> list[int]:
        family: list[int] = []
        known: set[int] = set()
        todo = list(roots)
        while todo:
            pid = todo.pop()
            if pid in known:
                continue
            known.add(pid)
            family.append(pid)
            todo.extend(_children(pid))
        return family

    def _holding(self, pids) -> set[int]:
        return {pid for pid in pids if self._holds(pid)}

    def _holds(self, pid: int) -> bool:
        fds = f"{PROC}/{pid}/fd"
        try:
            names = os.listdir(fds)
        except OSError:  # gone, or not ours to read
            return False
        for fd in names:
            try:
                if not os.readlink(f"{fds}/{fd}").endswith(self.suffix):
                    continue
                with open(f"{PROC}/{pid}/fdinfo/{fd}", "rb") as f:
                    info = f.read()
            except OSError:  # closed meanwhile
                continue
            for line in info.splitlines():
                if line.startswith(b"ino:"):
                    if int(line[4:]) == self.inode:
                        return True
                    break
            else:  # a kernel whose fdinfo has no inode line: the name alone
                return True
        return False
