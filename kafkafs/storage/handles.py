"""File descriptors: segments and key indexes open them lazily and give them back when too many are open.

A partition may have thousands of segments, a log directory thousands of partitions, and every open
segment holds up to three descriptors (its ``.log`` and, writable, the two index maps; Python's ``mmap``
keeps a duplicate of the descriptor it maps; a read-only segment reads its indexes into memory and holds
its ``.log`` only); a key index (:mod:`.keyfile`) holds one. Kafka answers with a large ``ulimit -n``;
kafkafs does three things:

- :func:`raise_open_file_limit` lifts the soft ``RLIMIT_NOFILE`` to the hard limit, once per process
  (called when a log or a log directory is opened);
- a :class:`HandleBudget` counts the descriptors its owners hold (the limit: the open file limit less
  what is left for everything else, :func:`default_budget_limit`), oldest first, and when they hold
  more than its limit it asks the oldest ones (the active segment of a writable log too: a ``--rw``
  mount's cleaner opens every partition, review24 R24-6) to :meth:`release_handles`. The next read
  or append opens them again;
- an open that fails with EMFILE or ENFILE anyway (:func:`retrying_open`) makes every budget give back
  what it holds (:func:`release_all`) and is tried once more; a second failure is the caller's error
  (the mount answers that one request with it and logs one line).

Releasing never closes a descriptor that a reader in another thread may be using: a segment's ``.log``
descriptor lives in a :class:`FileHandle` that closes itself when the last reference goes (readers hold a
reference for as long as they read), and an index map is only dropped, never closed, for the same
reason. So eviction is a couple of reference stores, safe without locks, from any thread.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable
from functools import partial
from typing import Protocol, TypeVar

__all__ = [
    "FileHandle",
    "HandleBudget",
    "HandleOwner",
    "BUDGET",
    "raise_open_file_limit",
    "default_budget_limit",
    "release_all",
    "retrying_open",
    "TOO_MANY_FILES",
]

log = logging.getLogger("kafkafs.storage")

#: Descriptors one writable segment may hold: its ``.log`` and the two index maps (a read-only one: 1).
FDS_PER_SEGMENT = 3
#: Descriptors left for everything else in the process (sockets, FUSE, inotify, readers holding a
#: released segment's ``.log`` while they read, key index builds, Spark, ...): a quarter of the open
#: file limit, at least 64, at most 256.
_RESERVED_MIN = 64
_RESERVED_MAX = 256
#: The fewest descriptors a budget hands out, whatever the limit.
_MIN_BUDGET = 16
_CAP = 1 << 20
#: The errors of an open that found no descriptor free (the process's limit, the system's).
TOO_MANY_FILES = frozenset({errno.EMFILE, errno.ENFILE})
_T = TypeVar("_T")


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
    """How many descriptors segments and key indexes may hold under ``open_file_limit`` open files."""
    reserved = min(_RESERVED_MAX, max(_RESERVED_MIN, open_file_limit // 4))
    return max(_MIN_BUDGET, open_file_limit - reserved)


class HandleOwner(Protocol):
    """What the budget needs of a segment or a key index."""

    @property
    def pinned(self) -> bool:
        """Never released (a key index that could not open its file again)."""
        ...

    def release_handles(self) -> None:
        """Drop the descriptors and maps; called from any thread, without locks."""
        ...


class HandleBudget:
    """The owners holding descriptors, oldest first; when they hold more than ``limit`` descriptors
    the oldest give theirs back. Owners are held weakly: one that is gone (its files closed with it)
    only leaves its entry, dropped when met.

    Oldest-opened rather than least-recently-used: registering happens when an owner opens a file,
    which is rare, so reads pay nothing for the bookkeeping. A hot segment that gets released is simply
    opened again on its next read.

    Threads: any method from any thread (a lock guards the bookkeeping; releasing is lock-free).
    """

    def __init__(self, limit: int | None = None) -> None:
        self._limit = limit
        self._owners: OrderedDict[int, tuple[weakref.ref[HandleOwner], int]] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()
        #: references of owners that were collected (weakref callbacks: they take no lock, GC may run
        #: them in a thread holding it); their entries are dropped at the next open or forget, so the
        #: entries stay bounded by the owners alive, not by every one ever seen (review15 R15-5)
        self._dead: deque[int] = deque()
        _BUDGETS.add(self)

    @property
    def limit(self) -> int:
        """Descriptors the owners may hold together."""
        if self._limit is None:
            self._limit = default_budget_limit(raise_open_file_limit())
        return self._limit

    @limit.setter
    def limit(self, value: int | None) -> None:
        self._limit = None if value is None else max(1, value)

    @property
    def held(self) -> int:
        """Descriptors the owners hold (as they said when they opened them)."""
        return self._held

    def __len__(self) -> int:
        return len(self._owners)

    def __contains__(self, owner: object) -> bool:
        entry = self._owners.get(id(owner))
        return entry is not None and entry[0]() is owner

    def opened(self, owner: HandleOwner, descriptors: int = 1) -> None:
        """Note that ``owner`` holds ``descriptors``; release the oldest others if over the limit."""
        limit = self.limit
        evict: list[HandleOwner] = []
        with self._lock:
            key = id(owner)
            previous = self._owners.pop(key, None)
            if previous is not None:
                self._held -= previous[1]
            self._drop_dead()
            self._owners[key] = (weakref.ref(owner, partial(_died, self._dead, key)), descriptors)
            self._held += descriptors
            if self._held > limit:
                drop: list[int] = []
                over = self._held - limit
                for other, (ref, count) in self._owners.items():  # oldest first; stops early
                    if other == key or over <= 0:
                        break
                    candidate = ref()
                    if candidate is None:
                        drop.append(other)
                        over -= count
                    elif not candidate.pinned:
                        drop.append(other)
                        evict.append(candidate)
                        over -= count
                for other in drop:
                    self._held -= self._owners.pop(other)[1]
        for candidate in evict:  # outside the lock: releasing is lock-free anyway
            candidate.release_handles()

    def _drop_dead(self) -> None:
        """Drop the entries of collected owners (under the lock)."""
        while self._dead:
            key = self._dead.popleft()
            entry = self._owners.get(key)
            if entry is not None and entry[0]() is None:  # (not an owner that got the same id since)
                del self._owners[key]
                self._held -= entry[1]

    def forget(self, owner: HandleOwner) -> None:
        """``owner`` closed its descriptors itself."""
        with self._lock:
            self._drop_dead()
            entry = self._owners.get(id(owner))
            held = entry[0]() if entry is not None else None
            if entry is not None and (held is owner or held is None):
                del self._owners[id(owner)]
                self._held -= entry[1]

    def release_all(self) -> int:
        """Ask every owner that is not pinned to give its descriptors back (an open found none free);
        returns how many were asked."""
        evict: list[HandleOwner] = []
        with self._lock:
            for key, (ref, count) in list(self._owners.items()):
                candidate = ref()
                if candidate is None or not candidate.pinned:
                    del self._owners[key]
                    self._held -= count
                    if candidate is not None:
                        evict.append(candidate)
        for candidate in evict:
            candidate.release_handles()
        return len(evict)


def _died(dead: deque[int], key: int, _ref: object) -> None:
    dead.append(key)  # (no lock: a weakref callback may run in a thread holding the budget's)


_BUDGETS: weakref.WeakSet[HandleBudget] = weakref.WeakSet()

#: The process-wide budget that segments and key indexes use unless given another.
BUDGET = HandleBudget()


def release_all() -> int:
    """Every budget of the process gives back what its owners hold (but pinned ones); how many owners
    were asked. The descriptors close as soon as no reader holds them."""
    return sum(budget.release_all() for budget in list(_BUDGETS))


def retrying_open(opening: Callable[[], _T]) -> _T:
    """``opening()``; when it fails because no descriptor is free (EMFILE, ENFILE), every budget gives
    its descriptors back (:func:`release_all`) and it is tried once more. A second failure raises."""
    try:
        return opening()
    except OSError as exc:
        if exc.errno not in TOO_MANY_FILES:
            raise
        released = release_all()
        log.debug("no descriptor free (%s): %d owners gave theirs back; trying again", exc.strerror, released)
    return opening()
