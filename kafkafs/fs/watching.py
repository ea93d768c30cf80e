"""Records that other processes append (a broker, ``kafkafs produce``), found by events, not by polling.

:class:`ChangeWatcher` keeps an inotify watch on the folder of every read-only partition the mount
has opened (on a read-only mount, from before the partition loads: :meth:`ChangeWatcher.watch_folder`). The first event of a burst (a write to the active ``.log``, a new segment, a file deleted
or renamed by retention or compaction) schedules one :meth:`PartitionState.refresh
<kafkafs.fs.views.partition.PartitionState.refresh>` of that partition :data:`BURST` seconds later;
the events that come meanwhile ride along. So a quiet mount spends no CPU (its thread sleeps in
``poll()``), a busy partition is refreshed at most once per burst window, and ``tail -f
records.jsonl`` shows a record well within a second. A folder that cannot be watched (inotify's limit
reached, a file system without inotify) is polled as before (:func:`~kafkafs.fs.invalidation.poll_forever`).

The refresh tells the listeners (the :class:`~kafkafs.fs.invalidation.Invalidator`) what changed, as
the poller's did.
"""

from __future__ import annotations

import errno
import logging
import os
import select
import threading
import time
from collections.abc import Callable
from pathlib import Path

from inotify_simple import INotify
from inotify_simple import flags as inotify_flags

from .errnos import refresh_failed
from .views.partition import PartitionState

__all__ = ["ChangeWatcher", "BURST"]

log = logging.getLogger("kafkafs.fs")

#: How long a partition's changes gather before its one refresh.
BURST = 0.05

_MASK = (
    inotify_flags.MODIFY
    | inotify_flags.CLOSE_WRITE
    | inotify_flags.CREATE
    | inotify_flags.DELETE
    | inotify_flags.MOVED_FROM
    | inotify_flags.MOVED_TO
    | inotify_flags.DELETE_SELF
    | inotify_flags.MOVE_SELF
)


class ChangeWatcher:
    """inotify watches on partition folders, and the thread that refreshes the partitions they report.

    Threads: :meth:`watch`, :meth:`watch_folder` (and the ``bind`` it returns) and :meth:`stop` from any
    thread; the events are read, and the refreshes run, on the watcher's own thread only."""

    def __init__(self, burst: float = BURST) -> None:
        self.burst = burst
        self._inotify = INotify()
        try:
            self._wake_r, self._wake_w = os.pipe()
        except OSError:
            self._inotify.close()
            raise
        self._lock = threading.Lock()
        self._by_wd: dict[int, PartitionState] = {}
        self._wd_of: dict[str, int] = {}
        self._new: list[PartitionState] = []  # watched since the thread last looked: refreshed once
        #: folders watched before their partition was loaded (:meth:`watch_folder`): wd -> an event came
        self._early: dict[int, bool] = {}
        self._names: dict[int, str] = {}  # wd -> the partition folder's name
        #: ``on_folder_event(name)``: called on this thread when a watched folder changed: a folder not
        #: loaded yet at each read of its events, a loaded one once a burst, after its refresh (the mount
        #: drops the attributes the kernel keeps of it: the Invalidator)
        self.on_folder_event: Callable[[str], None] | None = None
        self._stopped = False
        #: why folders could not be watched, each said once (the poll loop asks again at every turn, and
        #: a broker's directory past the watch limit has thousands of folders: R24-2)
        self._said: set[int | None] = set()
        self._thread = threading.Thread(target=self._run, name="kafkafs-watch", daemon=True)
        self.refreshes = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped = True
        os.write(self._wake_w, b"x")
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._inotify.close()
        os.close(self._wake_r)
        os.close(self._wake_w)

    def watch(self, state: PartitionState) -> bool:
        """Watch ``state``'s folder (once); False when it cannot be watched (the caller polls it)."""
        with self._lock:
            wd = self._wd_of.get(state.name)
            if wd is not None and self._by_wd.get(wd) is state:
                return True
            try:
                wd = self._inotify.add_watch(str(state.log.dir), _MASK)
            except OSError as exc:
                self._cannot_watch(state.name, exc)
                return False
            self._by_wd[wd] = state
            self._wd_of[state.name] = wd
            self._names[wd] = state.name
            state.watched = True
            self._new.append(state)  # what came before the watch: one refresh finds it
        os.write(self._wake_w, b"w")
        return True

    def watch_folder(self, path: Path) -> Callable[[PartitionState], bool] | None:
        """Watch a partition folder before its log is loaded; returns ``bind(state)``, to call with the
        partition once loaded: from then on its events refresh it, and it is refreshed once if an event
        came in between (a watch that predates the load needs no first refresh: nothing is missed).
        None when the folder cannot be watched (the caller polls it). Watching a folder again before
        it is bound forgets no event."""
        with self._lock:
            try:
                wd = self._inotify.add_watch(str(path), _MASK)
            except OSError as exc:
                self._cannot_watch(path.name, exc)
                return None
            self._names[wd] = path.name
            if wd not in self._by_wd and wd not in self._early:
                self._early[wd] = False

        def bind(state: PartitionState) -> bool:
            with self._lock:
                if wd not in self._early:  # already bound (the same folder twice), or the folder went
                    return self._by_wd.get(wd) is state
                changed = self._early.pop(wd)
                self._by_wd[wd] = state
                self._wd_of[state.name] = wd
                state.watched = True
                if changed:
                    self._new.append(state)
            if changed:
                os.write(self._wake_w, b"w")
            return True

        return bind

    def _cannot_watch(self, name: str, exc: OSError) -> None:
        """Say, once for each reason, that a folder cannot be watched and is polled (under the lock)."""
        if exc.errno in self._said:
            return
        self._said.add(exc.errno)
        hint = (" (the inotify watch limit: /proc/sys/fs/inotify/max_user_watches)"
                if exc.errno == errno.ENOSPC else "")
        level = logging.WARNING if hint else logging.INFO  # a folder removed meanwhile is routine
        log.log(level, "%s: cannot watch for new records: %s%s; polling it, and any other folder that cannot be "
                "watched for this reason (said once)", name, exc.strerror or exc, hint)

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._inotify.fileno(), select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        due: dict[str, tuple[float, PartitionState]] = {}
        while not self._stopped:
            now = time.monotonic()
            timeout = None if not due else max(0.0, min(t for t, _ in due.values()) - now) * 1000
            ready = {fd for fd, _ in poller.poll(timeout)}
            now = time.monotonic()
            if self._wake_r in ready:
                os.read(self._wake_r, 4096)
                with self._lock:
                    new, self._new = self._new, []
                for fresh in new:
                    due.setdefault(fresh.name, (now, fresh))
            if self._inotify.fileno() in ready:
                touched: set[str] = set()
                for event in self._inotify.read(timeout=0):
                    with self._lock:
                        state = self._by_wd.get(event.wd)
                        name = self._names.get(event.wd)
                        if name is not None and state is None:  # a loaded one: told once a burst (_refresh)
                            touched.add(name)
                        if event.wd in self._early:  # not loaded yet: refreshed once when it is
                            self._early[event.wd] = True
                        if state is not None and event.mask & (inotify_flags.MOVE_SELF | inotify_flags.DELETE_SELF):
                            # the folder was renamed or removed (a topic deleted): one made later under
                            # its name is another folder; the poll loop watches the name again (R8-6)
                            try:
                                self._inotify.rm_watch(event.wd)
                            except OSError:
                                pass
                            state.watched = False
                            del self._by_wd[event.wd]
                            self._names.pop(event.wd, None)
                            if self._wd_of.get(state.name) == event.wd:
                                del self._wd_of[state.name]
                        if event.mask & inotify_flags.IGNORED:  # the folder went
                            self._early.pop(event.wd, None)
                            self._names.pop(event.wd, None)
                            if state is not None:
                                state.watched = False
                                del self._by_wd[event.wd]
                                if self._wd_of.get(state.name) == event.wd:
                                    del self._wd_of[state.name]
                    if state is not None and state.name not in due:
                        due[state.name] = (now + self.burst, state)
                hook = self.on_folder_event
                if hook is not None:
                    for name in touched:
                        hook(name)
            for name, (at, waiting) in list(due.items()):
                if at <= now:
                    del due[name]
                    self._refresh(waiting)

    def _refresh(self, state: PartitionState) -> None:
        try:
            state.refresh(force=True)
            self.refreshes += 1
        except Exception as exc:
            refresh_failed(state.name, exc)
        hook = self.on_folder_event
        if hook is not None:
            hook(state.name)


def open_watcher(burst: float = BURST) -> ChangeWatcher | None:
    """A :class:`ChangeWatcher`, or None when inotify cannot be had (the user's inotify instances used
    up: ``/proc/sys/fs/inotify/max_user_instances``; a kernel without it): said in one line, and the
    mount polls every partition instead (R24-1: the mount died there and left a dead mount point)."""
    try:
        return ChangeWatcher(burst)
    except OSError as exc:
        hint = (" (the user's inotify instances are used up: /proc/sys/fs/inotify/max_user_instances)"
                if exc.errno == errno.EMFILE else "")
        log.warning("cannot watch partition folders for new records: %s%s; polling every partition instead",
                    exc.strerror or exc, hint)
        return None
