"""Keeping the kernel's view current: records arrive, cached pages and sizes must go.

* :class:`Invalidator` is a thread of its own that tells the kernel to forget what it cached for the
  files that grow (``records.jsonl``, ``partition.json``, ranges reaching the end, the active
  segment's files): attributes and pages. It never runs inside a request handler: dropping pages can
  wait for a page that a handler is still filling, and the handler would wait for it.
* :meth:`Invalidator.attrs_now` is the exception, for appends through the mount itself: before the
  ``write()`` (or ``close()``) of ``append`` returns, it marks the cached attributes of the files that
  grew as stale (of those whose attributes the kernel may hold: the inode table knows which it was sent),
  so the next ``stat``, ``open`` or ``read`` on this mount asks again and sees the new records
  (read-after-append). Only attributes: that touches no page and waits for nothing (the
  kernel bumps the inode's attribute version and returns), so it is safe from the worker thread of
  a request. The new size then drops the stale pages in the kernel itself (a FUSE inode whose size
  changes loses its page cache), and the thread above follows with a full invalidation.
* :func:`poll_forever` hands every read-only partition in use to the
  :class:`~kafkafs.fs.watching.ChangeWatcher` (inotify), so records written by another process (a
  broker, ``kafkafs produce``) are noticed as they come, and polls the active segment of those it
  cannot watch every :data:`POLL_INTERVAL` seconds; a read-write mount hears of its own appends
  directly.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import trio

from ..storage.handles import TOO_MANY_FILES
from ..storage.kraft import METADATA_PARTITION
from .errnos import no_descriptor_free, refresh_failed
from .tree import names
from .tree.inodes import ATTR_MARGIN, ROOT_INODE, InodeTable
from .tree.nodes import OFFSET_RANGE, Key, Node
from .tree.partition_nodes import RangeFile
from .tree.root import Tree
from .tree.segment_nodes import SegmentFile
from .views.partition import PartitionState
from .watching import ChangeWatcher

__all__ = ["Invalidator", "poll_forever", "POLL_INTERVAL"]

log = logging.getLogger("kafkafs.fs")

POLL_INTERVAL = 0.3
#: With every partition watched: how often the partitions opened meanwhile are handed to the watcher
#: (the watcher refreshes a partition once when it starts watching it).
WATCH_INTERVAL = 1.0
#: Changes that come close together are sent to the kernel as one.
COALESCE = 0.01
#: A change is told again this many seconds later, attributes only, for the files of the partition whose
#: attributes were given from :data:`~.tree.inodes.ATTR_MARGIN` before the change on: a reply on its way
#: that makes a new inode in the kernel (a lookup after a rewrite or a schema change, a listing) is taken
#: whatever was told before it (the kernel has no older attributes to compare it with, and an
#: invalidation of an inode it does not know yet is lost), so it could keep the size before the change
#: for the whole of its timeout (10 s for a watched partition's ``records.jsonl``).
TOLD_AGAIN_AFTER = 0.3


class Invalidator:
    """``invalidate(ino, attr_only=False)`` is :func:`pyfuse3.invalidate_inode` (or a stand-in);
    ``invalidate_entry(parent_ino, name)`` is :func:`pyfuse3.invalidate_entry`: when compaction or
    retention rewrote a partition, the name ``records.jsonl`` is dropped from the kernel's cache so that
    the next lookup gets the new generation (:mod:`kafkafs.fs.views.streams`) at once.

    Threads: the callbacks may come from any thread; the pending work is kept under one condition,
    and only the invalidator's own thread talks to the kernel (but :meth:`attrs_now`)."""

    def __init__(
        self,
        table: InodeTable,
        invalidate: Callable[..., None],
        invalidate_entry: Callable[[int, bytes], None] | None = None,
    ) -> None:
        self.table = table
        self._invalidate = invalidate
        self._invalidate_entry = invalidate_entry
        self._pending: dict[str, int | None] = {}
        self._rewrites: dict[str, int] = {}  # per partition: the rewrites already told
        self._rewritten: set[str] = set()
        self._decodings: dict[str, int] = {}  # per partition: the decoder changes already told
        self._redecoded: set[str] = set()
        #: ``records_held(partition)``: the inode numbers of the records whose files the kernel may hold
        #: (:meth:`~.tree.partitions.Partitions.records_held`; they are in no table)
        self.records_held: Callable[[str], list[int]] | None = None
        self._folders: set[str] = set()  # partition folders whose attributes go (folder_changed)
        self._gone: set[str] = set()  # partition folders that left LOGDIR: their names go (folder_gone)
        #: partition -> (since, due): attributes given since then (the table's clock) are told again at due
        #: (``time.monotonic()``; :data:`TOLD_AGAIN_AFTER`)
        self._again: dict[str, tuple[float, float]] = {}
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="kafkafs-invalidate", daemon=True)
        self.sent = 0
        self.sent_attrs = 0
        self.sent_entries = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def partition_changed(self, state: PartitionState) -> None:
        """Called from whichever thread saw the change; returns at once."""
        with self._cond:
            if self._rewrites.get(state.name, 0) != state.rewrites:
                self._rewrites[state.name] = state.rewrites
                self._rewritten.add(state.name)
            if self._decodings.get(state.name, 0) != state.decoding:
                self._decodings[state.name] = state.decoding
                self._redecoded.add(state.name)
            before = self._pending.get(state.name, state.prev_active_base)
            prev = state.prev_active_base
            self._pending[state.name] = (
                prev if before is None or (prev is not None and prev < before) else before
            )
            self._cond.notify()

    def folder_changed(self, name: str) -> None:
        """Something changed in the watched partition folder ``name``, loaded or not (an inotify event,
        from the watcher's thread): the attributes the kernel keeps of the folder and of its growing
        files go (the folder's mtime; a size answered from the size summary before the partition
        loaded). Returns at once."""
        with self._cond:
            self._folders.add(name)
            self._cond.notify()

    def folder_gone(self, name: str) -> None:
        """The watched partition folder ``name`` left LOGDIR (a broker renamed it ``NAME.<id>-delete``
        when its topic was deleted): the kernel's entry for the name goes, so that its next lookup asks
        and is told ENOENT (R13-3: the kernel kept a watched folder's name 10 s). Returns at once."""
        with self._cond:
            self._gone.add(name)
            self._folders.add(name)
            self._cond.notify()

    def folders_changed(self, names: list[str]) -> None:
        """:meth:`folder_changed` for each of ``names`` (the schemas changed: a size the size summary
        answered for a partition not open yet is another now)."""
        with self._cond:
            self._folders.update(names)
            self._cond.notify()

    def attrs_now(self, state: PartitionState, since_base: int | None = None) -> None:
        """Mark the attributes of ``state``'s growing files stale in the kernel, now (see above);
        ``since_base``: segment files from that base offset on changed too. Only those whose attributes
        the kernel may hold (:meth:`~.tree.inodes.InodeTable.attrs_held_in`): a reader's range files are
        sent once, not at every write."""
        table = self.table
        for (ino, node), mark in table.attrs_held_in(state.name):
            if self._needs(node, since_base):
                self._send_attrs(ino)
                table.attrs_dropped(ino, mark)

    def _due(self) -> list[tuple[str, float]]:
        """The partitions whose change is to be told again now, with since when (callers hold ``_cond``)."""
        now = time.monotonic()
        due = [(name, since) for name, (since, at) in self._again.items() if at <= now]
        for name, _since in due:
            del self._again[name]
        return due

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._folders and not self._redecoded and not self._stopped:
                    if not self._again:
                        self._cond.wait()
                        continue
                    wait = min(at for _since, at in self._again.values()) - time.monotonic()
                    if wait <= 0:
                        break
                    self._cond.wait(wait)
                if self._stopped:
                    return
                again = self._due()
            for name, since in again:
                for ino, node in self.table.given_since(name, since):
                    if node.volatile():
                        self._send_attrs(ino)
            if not (self._pending or self._folders or self._redecoded):
                continue
            time.sleep(COALESCE)
            with self._cond:
                pending, self._pending = self._pending, {}
                rewritten, self._rewritten = self._rewritten, set()
                redecoded, self._redecoded = self._redecoded, set()
                folders, self._folders = self._folders, set()
                gone, self._gone = self._gone, set()
                now, due = self.table.clock(), time.monotonic() + TOLD_AGAIN_AFTER
                for name in {*pending, *redecoded}:  # replies on their way meanwhile: told again, later
                    since = self._again.get(name, (now - ATTR_MARGIN, 0.0))[0]
                    self._again[name] = (since, due)
            if self._invalidate_entry is not None:
                for name in gone:  # the folder's name first: nothing below it resolves any more
                    self._drop_entry(ROOT_INODE, name)
            for name in rewritten:
                self._renamed(name)
            for name in redecoded:  # every file of the partition renders otherwise: none is kept as it was
                for ino, _node in self.table.of_partition(name):
                    self._send(ino)
                for ino in self.records_held(name) if self.records_held is not None else ():
                    self._send(ino)
            for name in folders:
                for ino, node in self.table.of_partition(name):
                    if node.volatile() or node.is_dir:
                        self._send_attrs(ino)
            for name, since_base in pending.items():
                for ino, node in self.table.of_partition(name):
                    if self._needs(node, since_base):
                        self._send(ino)

    @staticmethod
    def _needs(node: Node, since_base: int | None) -> bool:
        if isinstance(node, SegmentFile):
            # the active segment grows; the one before it was just sealed (its indexes trimmed)
            return node.volatile() or (
                since_base is not None and node.base_offset is not None and node.base_offset >= since_base
            )
        return node.volatile() or node.is_dir

    def _renamed(self, partition: str) -> None:
        """Compaction or retention rewrote ``partition``: ``records.jsonl`` names a new generation, names
        in ``segments/`` may hold other files or none, and ranges in ``by-offset/`` and ``by-time/`` name
        new files: drop the kernel's entries for them."""
        if self._invalidate_entry is None:
            return  # no entry is ever dropped
        parent = self.table.ino_of(Key("partition", partition))
        if parent is not None:  # else the kernel does not know the folder: it has no entry to forget
            self._drop_entry(parent, names.RECORDS)
        folders = {kind: self.table.ino_of(Key(kind, partition)) for kind in (names.SEGMENTS, names.BY_OFFSET, names.BY_TIME)}
        for _ino, node in self.table.of_partition(partition):
            if isinstance(node, SegmentFile) and node.replaced():
                folder = folders[names.SEGMENTS]
            elif isinstance(node, RangeFile) and node.name and node.rewritten():
                folder = folders[names.BY_OFFSET if node.key.kind == OFFSET_RANGE else names.BY_TIME]
            else:
                continue
            if folder is not None:
                self._drop_entry(folder, node.name)

    def _drop_entry(self, parent: int, name: str) -> None:
        if self._stopped:
            return  # as _send_attrs
        try:
            assert self._invalidate_entry is not None  # _renamed asks nothing of a mount without it
            self._invalidate_entry(parent, name.encode())
            self.sent_entries += 1
        except OSError:
            pass  # the kernel had no such entry
        except Exception:
            log.exception("entry invalidation failed")

    def _send_attrs(self, ino: int) -> None:
        if self._stopped:
            return  # the mount is going away: nothing more to forget (and its loop may answer no more)
        try:
            self._invalidate(ino, True)
            self.sent_attrs += 1
        except OSError:
            pass  # the kernel no longer knows the inode: nothing to forget
        except Exception:
            log.exception("cache invalidation failed")

    def _send(self, ino: int) -> None:
        if self._stopped:
            return  # as _send_attrs
        try:
            self._invalidate(ino)
            self.sent += 1
        except OSError:
            pass  # the kernel no longer knows the inode: nothing to forget
        except Exception:
            log.exception("cache invalidation failed")


def _poll_states(states: list[PartitionState]) -> None:
    for state in states:
        try:
            state.refresh(force=True)
        except Exception as exc:
            refresh_failed(state.name, exc)


async def _in_a_thread(read: Callable[[], object], what: str) -> None:
    """``read()`` in a worker thread; failing is never the end of the mount (R11-1: EMFILE here stopped
    it): said (``what`` it was reading), and tried again at the next turn."""
    try:
        await trio.to_thread.run_sync(read)
    except Exception as exc:
        if isinstance(exc, OSError) and exc.errno in TOO_MANY_FILES:
            no_descriptor_free(exc, f"reading {what}")
        else:
            log.warning("could not read %s again: %s", what, exc)


async def poll_forever(tree: Tree, interval: float = POLL_INTERVAL, watcher: ChangeWatcher | None = None) -> None:
    """Look for records that other processes appended, until cancelled: the read-only partitions in use
    are handed to ``watcher`` (inotify: :mod:`.watching`), and only those it cannot watch are polled
    every ``interval`` seconds. Without partitions to poll, this wakes every :data:`WATCH_INTERVAL`
    seconds only, to hand the partitions opened meanwhile to the watcher."""
    logdir = tree.partitions.logdir
    while True:
        # a log start another process checkpointed (one stat when unchanged): the views follow it.
        # Failing is never the end of the mount (R11-1: EMFILE here stopped it): said, tried next turn
        await _in_a_thread(logdir.reread_log_starts, "the log start offsets")
        # schemas registered (or deleted) since: the partitions render with them (a few stats when unchanged)
        await _in_a_thread(tree.partitions.follow_schemas, "the schemas")
        # the topic settings a broker recorded: followed by events once the metadata log's folder is
        # watched (nothing here then); watched here when it appears, polled while it cannot be
        if not (tree.partitions.rw or tree.partitions.folder_watched(METADATA_PARTITION)):
            await _in_a_thread(tree.partitions.follow_settings_unwatched, "the recorded topic settings")
        states = [s for s in tree.partitions.open_states() if not s.log.writable]
        polled = [s for s in states if watcher is None or not (s.watched or watcher.watch(s))]
        if polled:
            await trio.to_thread.run_sync(_poll_states, polled)
        await trio.sleep(interval if polled or watcher is None else WATCH_INTERVAL)
