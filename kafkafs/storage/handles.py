"""File descriptors: segments open them lazily and give them back when too many are open.

A partition may have thousands of segments, a log directory thousands of partitions, and every open
segment holds up to three descriptors (its ``.log`` and the two index maps; Python's ``mmap`` keeps a
duplicate of the descriptor it maps). Kafka answers with a large ``ulimit -n``; kafkafs does two things:

- :func:`raise_open_file_limit` lifts the soft ``RLIMIT_NOFILE`` to the hard limit, once per process
  (called when a log or a log directory is opened);
- a :class:`HandleBudget` remembers which segments hold descriptors, oldest first, and when there are
  more than its limit it asks the oldest ones (never the active segment of a writable log) to
  :meth:`release_handles`. The next read opens them again.

Releasing never closes a descriptor that a reader in another thread may be using: a segment's ``.log``
descriptor lives in a :class:`FileHandle` that closes itself when the last reference goes (readers hold a
reference for as long as they read), and an index map is only dropped, never closed, for the same
reason. So eviction is a couple of reference stores, safe without locks, from any thread.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from typing import Protocol

__all__ = [
    "FileHandle",
    "HandleBudget",
    "HandleOwner",
    "BUDGET",
    "raise_open_file_limit",
    "default_budget_limit",
]

log = logging.getLogger("kafkafs.storage")

#: Descriptors one segment may hold: its ``.log`` and the two index maps.
FDS_PER_SEGMENT = 3
#: Descriptors left for everything else in the process (sockets, FUSE, Spark, ...).
_RESERVED_FDS = 256
_CAP = 1 << 20


class FileHandle:
    """An open file descriptor, closed when this object is closed or garbage-collected.

    Readers take a reference (``handle = records.handle()``) and use ``handle.fd`` while they hold
    it, so a concurrent release cannot close the descriptor under them, and the number can never be
    reused by another file in the meantime.
    """

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:
            pass

    def __repr__(self) -> str:
        return f"FileHandle({self.fd})"


_limit_lock = threading.Lock()
_raised: int | None = None


def raise_open_file_limit() -> int:
    """Lift the soft limit on open files to the hard limit (once per process); return the soft limit."""
    global _raised
    with _limit_lock:
        if _raised is not None:
            return _raised
        try:
            import resource
        except ImportError:  # not on this platform: nothing to raise
            _raised = 1024
            return _raised
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = _CAP if hard == resource.RLIM_INFINITY else min(hard, _CAP)
        if soft != resource.RLIM_INFINITY and soft < target:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                log.debug("raised the open file limit from %d to %d", soft, target)
                soft = target
            except (ValueError, OSError) as exc:
                log.debug("could not raise the open file limit from %d: %s", soft, exc)
        _raised = _CAP if soft == resource.RLIM_INFINITY else int(soft)
        return _raised


def default_budget_limit(open_file_limit: int) -> int:
    """How many segments may hold descriptors under ``open_file_limit`` open files."""
    return max(16, (open_file_limit - _RESERVED_FDS) // (FDS_PER_SEGMENT + 1))


class HandleOwner(Protocol):
    """What the budget needs of a segment."""

    @property
    def pinned(self) -> bool:
        """Never released (the active segment of a writable log)."""
        ...

    def release_handles(self) -> None:
        """Drop the descriptors and maps; called from any thread, without locks."""
        ...


class HandleBudget:
    """The segments holding descriptors, oldest first; over ``limit`` the oldest give theirs back.

    Oldest-opened rather than least-recently-used: registering happens when a segment opens a file,
    which is rare, so reads pay nothing for the bookkeeping. A hot segment that gets released is simply
    opened again on its next read.
    """

    def __init__(self, limit: int | None = None) -> None:
        self._limit = limit
        self._owners: OrderedDict[int, HandleOwner] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def limit(self) -> int:
        if self._limit is None:
            self._limit = default_budget_limit(raise_open_file_limit())
        return self._limit

    @limit.setter
    def limit(self, value: int | None) -> None:
        self._limit = None if value is None else max(1, value)

    def __len__(self) -> int:
        return len(self._owners)

    def __contains__(self, owner: object) -> bool:
        return id(owner) in self._owners

    def opened(self, owner: HandleOwner) -> None:
        """Note that ``owner`` holds descriptors; release the oldest others if over the limit."""
        limit = self.limit
        evict: list[HandleOwner] = []
        with self._lock:
            self._owners[id(owner)] = owner
            self._owners.move_to_end(id(owner))
            excess = len(self._owners) - limit
            if excess > 0:
                keys: list[int] = []
                for key, candidate in self._owners.items():  # oldest first; stops early
                    if key == id(owner) or len(keys) >= excess:
                        break
                    if not candidate.pinned:
                        keys.append(key)
                for key in keys:
                    evict.append(self._owners.pop(key))
        for candidate in evict:  # outside the lock: releasing is lock-free anyway
            candidate.release_handles()

    def forget(self, owner: HandleOwner) -> None:
        """``owner`` closed its descriptors itself."""
        with self._lock:
            self._owners.pop(id(owner), None)


#: The process-wide budget that segments use unless given another.
BUDGET = HandleBudget()
