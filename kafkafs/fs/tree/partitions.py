"""The partitions of the mount, as every node of the tree asks for them: the log directory, how it is
served (values mode, read-write, list limit), each partition's :class:`~kafkafs.fs.views.partition.
PartitionState` (opened on first use, numbered for the mount's lifetime) and the generations of its
``records.jsonl``, and who hears of changes.

Nodes hold this object, not the tree (:mod:`.root`) that makes them; it knows no node.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, TypeVar, Unpack

from ...errors import InvalidInput, InvalidName, NotFound
from ...format.decoders import decoder_for
from ...format.jsonview import VALUES_MODES
from ...storage.cachedir import prune_entries
from ...storage.keyindex import KeyIndexStore
from ...storage.kraft import METADATA_PARTITION
from ...storage.logdir import LogDir
from ...storage.names import parse_partition_dir_name
from ...storage.safefiles import is_dir
from ...storage.schemas import SCHEMAS_TOPIC, SchemasStamp, load_registry
from ..views.coordinators import Coordinators
from ..views.keys import KeyViews
from ..views.layoutcache import LayoutCache, LayoutKey
from ..views.partition import PartitionState
from ..views.render import decoder_identity
from ..views.streams import RecordsGenerations, RecordsStream
from ..views.summary import Sized, SizeSummary

if TYPE_CHECKING:
    from ...format.decoders import SchemaRegistry

__all__ = ["Partitions", "ServeOptions", "LIST_LIMIT"]

#: Threads that size a topic's partitions ahead of the stats that will ask: two a core, as for a first
#: sizing (:data:`~kafkafs.fs.views.sizing.SIZING_THREADS`): the kernel's length pass and the reads
#: release the GIL, and a thread waiting for the disk leaves its core to one that counts.
SIBLING_THREADS = max(2, min(8, 2 * (os.cpu_count() or 1)))

log = logging.getLogger("kafkafs.fs")

_Made = TypeVar("_Made")  # what a partition has one of, made on first use (Partitions._made_once)

#: Files whose start was rendered for an open expected soon (:meth:`Partitions.reading_to_end`) that keep
#: it until it is taken: the last prepared (a few MB each), so that guesses nobody opened cost no more.
SPARES_KEPT = 4
#: Files prepared ahead of a reader whose order is known: the next three, so that the threads that render
#: them never wait for the reader, and a reader never waits for them when they lose their core for a
#: while (each a few MB: FILE_AHEAD_BYTES at most). Three rather than two (issue 25): first cats 0.85-0.89x
#: per pair in three interleaved runs once no file was prepared twice (Partitions.opening).
PREPARED_AHEAD = 3

#: by-offset/ lists every offset up to this many records, one range per segment past it (SPEC §3).
LIST_LIMIT = 100_000

#: Records per partition whose ``by-offset/<offset>.json`` (or ``by-time/``) the kernel may hold, kept
#: so that a change of the schemas drops them there (:meth:`Partitions.records_held`); past this many,
#: the oldest are let go (the kernel keeps those no longer than their attributes' timeout).
RECORDS_HELD = 100_000


class _HeldRuns:
    """One partition's records whose files the kernel may hold (:meth:`Partitions.record_looked_up`), as
    runs of consecutive inode numbers, each with the latest time until the kernel may hold one of them:
    a walk of ``by-offset/`` (every offset in a row) is one run, not an entry per name (review24 R24-5:
    ~165 bytes a name, kept until the partition's next lookup). At most :data:`RECORDS_HELD` runs, the
    oldest let go first. Not thread-safe: the caller holds the lock."""

    __slots__ = ("runs",)

    def __init__(self) -> None:
        self.runs: deque[list[float]] = deque()  # [first ino, last ino, until], oldest first

    def add(self, ino: int, until: float, now: float) -> None:
        runs = self.runs
        newest = runs[-1] if runs else None
        if newest is not None and newest[0] <= ino <= newest[1] + 1:  # in or right after the newest run
            newest[1] = max(newest[1], ino)
            newest[2] = max(newest[2], until)
        else:
            runs.append([ino, ino, until])
        while runs and (len(runs) > RECORDS_HELD or runs[0][2] < now):
            runs.popleft()

    def held(self, now: float) -> list[int]:
        out: set[int] = set()
        for first, last, until in self.runs:
            if until > now:
                out.update(range(int(first), int(last) + 1))
        return sorted(out)


class _Order:
    """Partition names in one order, and what comes after each."""

    __slots__ = ("names", "at")

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.at = {name: k for k, name in enumerate(names)}

    def after(self, name: str) -> str | None:
        k = self.at.get(name)
        return self.names[k + 1] if k is not None and k + 1 < len(self.names) else None


class ServeOptions(TypedDict, total=False):
    """How a log directory is served: ``mode`` the values mode (``--values``, default ``auto``), ``rw``
    read-write (when the log directory is writable), ``cache`` the layout cache (default none),
    ``list_limit`` (``--list-limit``, default :data:`LIST_LIMIT`)."""

    mode: str
    rw: bool
    cache: LayoutCache | None
    list_limit: int


class Partitions:
    """The log directory's partitions as the mount serves them (``options``: :class:`ServeOptions`).

    Threads: safe to share; partitions are opened, numbered and listened to under one lock, and every
    :class:`PartitionState` is safe to share itself."""

    def __init__(self, logdir: LogDir, **options: Unpack[ServeOptions]) -> None:
        mode = options.get("mode", "auto")
        if mode not in VALUES_MODES:
            raise InvalidInput(f"--values must be one of {', '.join(VALUES_MODES)}, not {mode!r}")
        cache = options.get("cache")
        self.logdir = logdir
        #: the log directory's path as a str: paths made on the FUSE loop without pathlib (issue 25)
        self.logdir_path = os.fspath(logdir.path)
        self.mode = mode
        self.cache = cache if cache is not None else LayoutCache(None)
        self.list_limit = options.get("list_limit", LIST_LIMIT)
        #: a Schema Registry's schemas (LOGDIR's ``_schemas`` topic, ``--schemas``): topics with framed values
        #: render decoded (:meth:`load_schemas`, :meth:`follow_schemas`)
        self.registry: SchemaRegistry | None = None
        self._schemas_dir: str | None = None
        self._schemas_stamp: SchemasStamp | None = None
        self._schemas_lock = threading.Lock()  # one look at the schemas at a time (poll loop, watcher)
        #: ``on_schemas_changed(names)``: the schemas changed; ``names``: partition folders not open whose
        #: ``records.jsonl`` size the size summary may have answered (the mount drops what the kernel keeps)
        self.on_schemas_changed: Callable[[list[str]], None] | None = None
        #: per partition: inode numbers of records looked up -> until when the kernel may hold them (in that order)
        self._records_held: dict[str, _HeldRuns] = {}
        self._held_lock = threading.Lock()
        self.rw = options.get("rw", False) and logdir.writable
        self.mount_ns = time.time_ns()
        self._numbers: dict[str, int] = {}
        self._states: dict[str, PartitionState] = {}
        self._by_number: dict[int, PartitionState] = {}
        self._generations: dict[str, RecordsGenerations] = {}
        self._guard = threading.RLock()
        self._listeners: list[Callable[[PartitionState], None]] = []
        self._append_listeners: list[Callable[[PartitionState, int | None], None]] = []
        #: by-key/ and table.jsonl: the key indexes live in the layout cache's folder
        self.keys_store = KeyIndexStore(self.cache.directory)
        self._key_views: dict[str, KeyViews] = {}
        #: groups/, transactions/ and each partition's transactions.json
        self.coordinators = Coordinators(logdir)
        #: ``watch_folder(path)`` before a partition's log is loaded, returning ``bind(state)`` for after
        #: (the mount's inotify watcher on a read-only mount; :meth:`kafkafs.fs.watching.ChangeWatcher.watch_folder`)
        self.watch_folder: Callable[[Path], Callable[[PartitionState], bool] | None] | None = None
        #: folders watched before anything opened them (:meth:`watch_early`): name -> bind (None: not watchable)
        self._early_binds: dict[str, Callable[[PartitionState], bool] | None] = {}
        #: folders whose last event found them out of LOGDIR (:meth:`folder_seen`; a set: the watcher's thread
        #: adds and discards, the FUSE loop only asks)
        self._gone: set[str] = set()
        #: the size of each partition's records.jsonl as the last mount knew it (read-only mounts with
        #: a layout cache): a stat of one not opened yet needs no log opened (:mod:`..views.summary`)
        self.summary = SizeSummary(self.cache.directory if not self.rw else None, logdir.path, mode)
        self._sized_topics: set[str] = set()
        self._sizer: ThreadPoolExecutor | None = None
        #: topic -> the first of its partitions whose records.jsonl a reader opened (under _ahead_lock;
        #: a second one opens the others in the background: :meth:`opening`)
        self._first_read: dict[str, str] = {}
        #: reading in order (:meth:`reading_to_end`): the thread that opens the next partitions, what
        #: it is asked to do, the partition read to its end last and the order seen ("name", "number")
        self._ahead: ThreadPoolExecutor | None = None
        self._ahead_lock = threading.Lock()
        self._ahead_asked: set[str] = set()
        #: the last files a reader came near the end of (under _ahead_lock): not prepared again
        self._read_recently: deque[str] = deque(maxlen=4)
        self._read_last: str | None = None
        self._read_order: str | None = None
        self._read_orders: tuple[int, _Order, _Order] | None = None  # (LOGDIR's mtime, by number, by name)
        self._spares: deque[RecordsStream] = deque()
        self._closed = False

    def number(self, name: str) -> int:
        """A partition folder's number: given on first sight, kept for the mount's lifetime."""
        with self._guard:
            n = self._numbers.get(name)
            if n is None:
                n = self._numbers[name] = len(self._numbers)
            return n

    def number_now(self, name: str) -> int | None:
        """:meth:`number` when it waits for nobody (the FUSE loop): None while the lock is held
        (a partition is opening)."""
        n = self._numbers.get(name)
        if n is not None or not self._guard.acquire(blocking=False):
            return n
        try:
            return self.number(name)
        finally:
            self._guard.release()

    def state(self, name: str | None) -> PartitionState:
        """The open partition ``name`` (opened on first use)."""
        assert name is not None
        state = self._states.get(name)
        if state is not None:
            return state
        with self._guard:
            state = self._states.get(name)
            if state is None:
                if not is_dir(os.path.join(self.logdir_path, name)):  # (no pathlib: issue 25)
                    raise NotFound(name)
                bind = None
                if self.watch_folder is not None and not self.rw:
                    bind = self._early_binds.pop(name, None) or self.watch_folder(self.logdir.path / name)
                try:
                    log_ = self.logdir.log(name, read_only_fallback=True)
                except InvalidName:
                    raise NotFound(name) from None
                number = self.number(name)
                decoder = decoder_for(log_.topic, self.registry, self.mode)
                state = PartitionState(name, number, log_, self.mode, cache=self.cache, decoder=decoder)
                state.on_segment_gone = self._segment_gone
                if bind is not None and not log_.writable:
                    bind(state)
                for callback in self._listeners:
                    state.add_listener(callback)
                self._states[name] = state
                self._by_number[number] = state
            return state

    def load_schemas(self, schemas_dir: str | None = None) -> None:
        """Read the Schema Registry's schemas: LOGDIR's ``_schemas`` topic and ``schemas_dir``
        (``--schemas DIR``); :meth:`follow_schemas` then follows their changes."""
        self._schemas_dir = schemas_dir
        if self.mode == "auto":  # (other modes decode nothing: nothing to follow)
            # before the reading: a change meanwhile is seen (--schemas DIR's files too: R10-8 leftover)
            self._schemas_stamp = SchemasStamp(self.logdir.path, schemas_dir)
        self.registry = load_registry(self.logdir.path, schemas_dir)

    def follow_schemas(self) -> bool:
        """When LOGDIR's ``_schemas`` topic changed since the last look (a schema registered, deleted,
        the topic compacted: :class:`~kafkafs.storage.schemas.SchemasStamp`, a few stats), or a file of
        ``--schemas DIR`` was added, replaced or edited (the poll loop's look, every second), read the
        schemas again, and when they render otherwise, have every open partition render with them
        (:meth:`~kafkafs.fs.views.partition.PartitionState.use_decoder`: a rewrite of what changes).
        True when the schemas changed. Blocks (a worker thread: the poll loop's)."""
        stamp = self._schemas_stamp
        if stamp is None:
            return False
        with self._schemas_lock:
            if not stamp.changed():
                return False
            self.watch_schemas()  # a _schemas folder made since
            registry = load_registry(self.logdir.path, self._schemas_dir)
            if decoder_identity(decoder_for("", registry, self.mode)) == decoder_identity(
                    decoder_for("", self.registry, self.mode)):
                return False  # the same schemas (a compaction of the topic, a record that is not a schema)
            with self._guard:  # partitions opened from now on take the new schemas; those open already:
                self.registry = registry
                states = list(self._states.values())
            log.info("the schemas in %s changed: %d schemas known", self.logdir.path, len(registry) if registry else 0)
            for state in states:  # (under the lock: a later change never lands before this one)
                state.use_decoder(decoder_for(state.log.topic, registry, self.mode))
            hook = self.on_schemas_changed
            if hook is not None:
                with self._guard:
                    unopened = [name for name in self._early_binds if name not in self._states]
                hook(unopened)
        return True

    def record_looked_up(self, name: str, ino: int | None, seconds: float) -> None:
        """A lookup of a record's file in partition ``name`` (``by-offset/<offset>.json``, a ``by-time/``
        name of it: inode ``ino``, computed) is answered: the kernel may hold its attributes and pages
        ``seconds``. Kept only while the schemas are followed (a record renders otherwise after their
        change: :meth:`records_held`). Cheap: the FUSE loop calls it."""
        if self._schemas_stamp is None or ino is None:
            return
        now = time.monotonic()
        with self._held_lock:
            held = self._records_held.get(name)
            if held is None:
                held = self._records_held[name] = _HeldRuns()
            held.add(ino, now + seconds + 1.0, now)

    def records_held(self, name: str) -> list[int]:
        """The inode numbers of partition ``name``'s records whose files the kernel may hold (see
        :meth:`record_looked_up`): a change of how they render must drop them there."""
        now = time.monotonic()
        with self._held_lock:
            held = self._records_held.get(name)
            return held.held(now) if held is not None else []

    def watch_schemas(self) -> None:
        """Have the mount's watcher (:attr:`watch_folder`) watch the ``_schemas`` folders, so that a
        schema registered is followed at once (:meth:`is_schemas_folder`: the mount's folder event calls
        :meth:`follow_schemas`), not at the poll loop's next turn."""
        stamp = self._schemas_stamp
        if stamp is not None:
            for folder in stamp.folders:
                self.watch_early(folder.name)

    @staticmethod
    def is_schemas_folder(name: str) -> bool:
        """Whether partition folder ``name`` is one of the ``_schemas`` topic's."""
        return name.rpartition("-")[0] == SCHEMAS_TOPIC

    def follow_settings(self) -> list[str]:
        """Read-only mounts: read the topic settings a KRaft broker recorded again where LOGDIR's
        metadata log changed (:meth:`~kafkafs.storage.logdir.LogDir.follow_recorded`: from where the
        last reading stopped), so that ``partition.json`` and all else says a topic's new settings.
        Returns the open partitions whose settings changed. Blocks (the watcher's thread, at an event
        of the metadata log's folder; the poll loop's worker while that folder is not watched)."""
        return [] if self.rw else self.logdir.follow_recorded()

    def follow_settings_unwatched(self) -> None:
        """The poll loop's turn for the recorded settings: nothing while events tell of the metadata
        log's changes (a dict lookup); else, when the folder is there (one stat), watch it and read
        what changed (also each turn while it cannot be watched)."""
        if self.rw or self.folder_watched(METADATA_PARTITION):
            return
        if (self.logdir.path / METADATA_PARTITION).is_dir():
            self.watch_early(METADATA_PARTITION)  # from now on its events say it (the mount's folder event)
            self.follow_settings()  # what came before the watch

    def open_state(self, name: str) -> PartitionState | None:
        """The partition ``name`` if it is open already (None otherwise); opens nothing."""
        return self._states.get(name)

    def watch_early(self, name: str) -> bool:
        """Watch partition folder ``name`` before anything opens it (a read-only mount answering from
        the size summary): its events then drop what the kernel keeps of it. False when it is not
        watched (a read-write mount, no watcher, the folder cannot be watched)."""
        watch = self.watch_folder
        if self.rw or watch is None:
            return False
        if name not in self._early_binds:
            self._early_binds.setdefault(name, watch(self.logdir.path / name))
        return self._early_binds.get(name) is not None

    def folder_watched(self, name: str) -> bool:
        """Whether events tell of changes in partition folder ``name`` (open and watched, or watched
        before it opened)."""
        state = self._states.get(name)
        return state.watched if state is not None else self._early_binds.get(name) is not None

    def folder_gone(self, name: str) -> bool:
        """Whether partition folder ``name`` is no longer in LOGDIR (a broker renamed it ``NAME.<id>-delete``
        when its topic was deleted): nothing of it resolves or opens any more (SPEC §3), though its
        state may be open and the kernel may hold its inodes (handles open keep what they had).

        A watched folder costs no stat (the FUSE loop asks at every open and lookup under it: a stat
        there cost a by-offset lookup 0.15 ms): its events tell when it goes (:meth:`folder_seen`,
        from the mount's folder hook), and the watcher marks it unwatched as it reads the event that
        it moved or went, before the refresh that would show it empty. Any other folder, or one an
        event said went (until one says it is back), is one stat."""
        if name not in self._gone:
            state = self._states.get(name)
            if state is not None and state.watched:
                return False
        return not (self.logdir.path / name).is_dir()

    def folder_seen(self, name: str, there: bool) -> None:
        """An event of watched partition folder ``name`` came, and the folder is ``there`` (in LOGDIR) or
        not (renamed or removed: a topic deleted): :meth:`folder_gone` stats it while it is not (the
        mount's folder hook calls this, on the watcher's thread)."""
        if there:
            self._gone.discard(name)
        else:
            self._gone.add(name)

    def presized(self, name: str) -> Sized | None:
        """The size of ``records.jsonl`` of partition ``name``, not opened yet, from the size summary
        when it holds for the folder as it is now (one listing, one stat a segment file); None when the
        partition is open or the summary cannot say. Blocks only on those calls (the FUSE loop may ask)."""
        summary = self.summary
        if name in self._states or name not in summary:
            return None
        try:
            topic, partition = parse_partition_dir_name(name)
        except InvalidName:
            return None
        decoder = decoder_identity(decoder_for(topic, self.registry, self.mode))
        return summary.check(name, self.logdir.log_start_offsets.get((topic, partition)), decoder)

    def key_views(self, name: str | None) -> KeyViews:
        """The key views (``by-key/``, ``table.jsonl``) of partition ``name`` (made on first use)."""
        assert name is not None
        return self._made_once(self._key_views, name, lambda state: KeyViews(state, self.keys_store))

    def by_number(self, number: int) -> PartitionState | None:
        """The open partition numbered ``number`` (None when it is not open)."""
        return self._by_number.get(number)

    def open_states(self) -> list[PartitionState]:
        with self._guard:
            return list(self._states.values())

    def records_generations(self, partition: str) -> RecordsGenerations:
        """The generations of a partition's ``records.jsonl`` (made with its state)."""
        return self._made_once(self._generations, partition, RecordsGenerations)

    def _made_once(self, made: dict[str, _Made], name: str, make: Callable[[PartitionState], _Made]) -> _Made:
        """``made[name]``, made from the partition's state the first time it is asked for (once: under
        the guard; found without it after)."""
        found = made.get(name)
        if found is None:
            state = self.state(name)
            with self._guard:
                found = made.get(name)
                if found is None:
                    found = made[name] = make(state)
        return found

    def records_generations_now(self, partition: str) -> RecordsGenerations | None:
        """:meth:`records_generations` of an open partition when it waits for nobody (the FUSE loop),
        else None."""
        generations = self._generations.get(partition)
        if generations is not None:
            return generations
        state = self._states.get(partition)
        if state is None or not self._guard.acquire(blocking=False):  # the guard is held while a partition opens
            return None
        try:
            generations = self._generations.get(partition)
            if generations is None:
                generations = self._generations[partition] = RecordsGenerations(state)
            return generations
        finally:
            self._guard.release()

    def size_siblings(self, state: PartitionState) -> None:
        """The first time a partition of a topic is sized (a ``stat`` of its ``records.jsonl``), start
        sizing the topic's other partitions in the background (:meth:`_open_siblings`), on at most
        :data:`SIBLING_THREADS` threads, in the order a shell's glob walks them: ``ls -l MOUNT/*/records.jsonl`` stats one file
        at a time, and finds the next ones sized (or being sized: it waits for that one) instead of
        sizing every partition in turn. Returns at once. Not on a writable mount: it would open, and so
        recover, partitions nobody asked for (review27 R27-1: every index file of a 300-partition topic
        rewritten at a first stat)."""
        topic = state.log.topic
        if self.rw or topic in self._sized_topics:  # the usual answer, without the guard (held while partitions open)
            return
        with self._guard:
            self._size_siblings(state)

    def size_siblings_now(self, state: PartitionState) -> None:
        """:meth:`size_siblings` when it waits for nobody (the FUSE loop): nothing while the guard is held (a
        partition is opening; the next call asks again)."""
        if self.rw or state.log.topic in self._sized_topics or not self._guard.acquire(blocking=False):
            return
        try:
            self._size_siblings(state)
        finally:
            self._guard.release()

    def _size_siblings(self, state: PartitionState) -> None:
        """(Under the guard.) :meth:`size_siblings`: the topic's other partitions listed and opened on a
        sizing thread (:meth:`_open_siblings`)."""
        topic = state.log.topic
        if self._closed or topic in self._sized_topics:
            return
        self._sized_topics.add(topic)
        if self._sizer is None:
            self._sizer = ThreadPoolExecutor(max_workers=SIBLING_THREADS, thread_name_prefix="kafkafs-siblings")
        self._sizer.submit(self._list_siblings, topic, state.name, self._sizer)

    def _list_siblings(self, topic: str, name: str, sizer: ThreadPoolExecutor) -> None:
        """On a sizing thread: the partitions of ``topic`` but ``name``, in the order a shell's glob walks
        them, opened (:meth:`_open_siblings`)."""
        try:
            siblings = sorted(n for n in self.logdir.partition_names() if n != name and n.rpartition("-")[0] == topic)
        except Exception as exc:  # the stats that come say what is wrong
            log.debug("%s: listing its siblings failed: %s", name, exc)
            return
        if siblings:
            self._open_siblings(siblings, sizer)

    def _open_siblings(self, names: list[str], sizer: ThreadPoolExecutor) -> None:
        """On one sizing thread: open the partitions ``names`` in turn, and lay out here those whose every
        segment the layout cache holds (a little Python each); the others are laid out on the other
        sizing threads, in parallel (the kernel's length pass releases the GIL). Opening is one partition
        at a time anyway (under the guard): four threads opening side by side mostly waited for the guard
        and the GIL, and so did the FUSE loop answering a reader meanwhile (issue 25, a first ``cat
        MOUNT/*/records.jsonl`` of 200 partitions whose sizes the summary knew: 0.15 s of opening threads'
        time instead of 1.06 s, their CPU 0.06 s instead of 0.10 s, the loop's lookups 0.07 s instead of
        0.11 s, the first 40 files 0.46 s instead of 0.52 s)."""
        for name in names:
            if self._closed:
                return
            try:
                state = self.state(name)
                jobs = state.cached_composition() is None and state.sizing_jobs()
                if not jobs:
                    state.composition()
                    # the stream its stat or a reader's open takes (composed: a little Python), made here too
                    self.records_generations(name).current()
            except Exception as exc:  # the foreground stat of that partition says what is wrong
                log.debug("%s: sizing ahead failed: %s", name, exc)
                continue
            if not jobs:
                continue
            try:  # segments to lay out (not in the layout cache): on the other threads, in parallel
                sizer.submit(self._size_one, state)
            except RuntimeError:  # the pool shut down: the mount is stopping
                return

    def _size_one(self, state: PartitionState) -> None:
        if self._closed:
            return
        try:
            if state.cached_composition() is None:
                state.composition()
            self.records_generations(state.name).current()  # (as _open_siblings)
        except Exception as exc:  # the foreground stat of that partition says what is wrong
            log.debug("%s: sizing ahead failed: %s", state.name, exc)

    def opening(self, name: str) -> None:
        """A reader opens partition ``name``'s ``records.jsonl``: it is not prepared again (the thread that
        prepares, behind a fast reader, would render it whole a second time for no open: it took the
        spare made before, or read its own). The second partition of a topic opened so (a reader going
        through them: ``cat MOUNT/*/records.jsonl``) has the topic's other partitions opened in the
        background, one after another (:meth:`size_siblings_now`), before the reader comes: opened one at
        a time as the reader came, between the renders and beside the FUSE loop, the same opens cost
        the thread that prepares each next file 3-5 times their CPU and the loop its GIL (issue 25; a
        first cat of 200 partitions 0.78-0.85x per pair with them opened in a batch). Only on a
        read-only mount (a writable one would recover partitions nobody asked for). Returns at once
        (the FUSE loop calls it)."""
        if self.rw:
            return
        topic = name.rpartition("-")[0]
        with self._ahead_lock:
            if name not in self._read_recently:
                self._read_recently.append(name)
            second = self._first_read.setdefault(topic, name) != name
        state = self._states.get(name)
        if second and state is not None:
            self.size_siblings_now(state)

    def reading_to_end(self, name: str) -> None:
        """A reader of partition ``name``'s ``records.jsonl`` is near its end (:class:`~.handles.RecordsHandle`):
        open the partition it will most likely read next and render the start of its ``records.jsonl``
        (:meth:`~kafkafs.fs.views.streams.RecordsStream.prepare`), on a thread of its own, so that
        ``cat MOUNT/*/records.jsonl`` finds each next file opened and its first bytes rendered instead
        of waiting for both between files. Next: after ``name`` in the order the reader has followed,
        by name (a shell's glob) or by topic and partition number; both while it is not known. Only on
        a read-only mount (a writable one would open, and so recover, partitions nobody asked for).
        Returns at once (the FUSE loop calls it)."""
        if self.rw:
            return
        with self._ahead_lock:
            if name not in self._read_recently:
                self._read_recently.append(name)
            if self._closed or name in self._ahead_asked or len(self._ahead_asked) >= 2:
                return  # a reader far ahead of the thread: no queue builds up
            self._ahead_asked.add(name)
            if self._ahead is None:
                self._ahead = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafkafs-ahead")
            ahead = self._ahead
        try:
            ahead.submit(self._open_after, name)
        except RuntimeError:  # shutting down
            with self._ahead_lock:
                self._ahead_asked.discard(name)

    def _open_after(self, name: str) -> None:
        try:
            targets = self._next_partitions(name)
            for target in targets:
                if self._closed:
                    return
                self._prepare(target)
            if len(targets) == 1:  # the order is known, or both agree: the files after it too (PREPARED_AHEAD)
                following: str | None = targets[0]
                for _ in range(PREPARED_AHEAD - 1):
                    following = self._after_in_order(following) if following is not None else None
                    if following is None or self._closed:
                        return
                    self._prepare(following)
            elif (orders := self._read_orders) is not None and not self._closed:
                # the order not known yet (t-1 read after t-0): after the next file by name (targets[0]) and
                # by number, the one after that by name too, the likely reader's (a shell's glob: t-100 as
                # t-1 is read, not one file ahead of the reader as it reads t-10; issue 25). Not at the first
                # file's read: that one renders on demand, and more renders beside it slowed it down.
                following = orders[2].after(targets[0])
                if following is not None:
                    self._prepare(following)
        except Exception as exc:  # the reader's own open says what is wrong
            log.debug("opening the partition after %s ahead failed: %s", name, exc)
        finally:
            with self._ahead_lock:
                self._ahead_asked.discard(name)

    def _prepare(self, target: str) -> None:
        """Have partition ``target``'s records.jsonl rendered for the open expected soon, unless it is
        already, or was opened already (a reader ahead of this thread)."""
        with self._ahead_lock:
            if target in self._read_recently:
                return
        stream = self.records_generations(target).current()
        if not stream.prepare():
            return
        with self._ahead_lock:
            self._spares.append(stream)
            old = self._spares.popleft() if len(self._spares) > SPARES_KEPT else None
        if old is not None and old is not stream:
            old.drop_spare()

    def _after_in_order(self, name: str) -> str | None:
        """The partition after ``name`` in the order the reader follows (:meth:`_next_partitions`), or in
        both orders while it is not known and they agree (None otherwise)."""
        orders = self._read_orders
        if orders is None:
            return None
        by_number, by_name = orders[1].after(name), orders[2].after(name)
        if self._read_order is None:
            return by_number if by_number == by_name else None
        return by_number if self._read_order == "number" else by_name

    def _next_partitions(self, name: str) -> list[str]:
        """The partitions a reader that has just read ``name`` to its end reads next (see
        :meth:`reading_to_end`); learns the order from the one read to its end before."""
        try:
            stamp = os.stat(self.logdir.path).st_mtime_ns  # a partition folder made or removed changes it
        except OSError:
            return []
        if self._read_orders is None or self._read_orders[0] != stamp:
            listed = self.logdir.partition_names()  # by topic, then partition number
            self._read_orders = (stamp, _Order(listed), _Order(sorted(listed)))
        _, by_number, by_name = self._read_orders

        prev, self._read_last = self._read_last, name
        if prev is not None:
            numbered, named = by_number.after(prev) == name, by_name.after(prev) == name
            if numbered != named:
                self._read_order = "number" if numbered else "name"
        nexts = {"number": [by_number.after(name)], "name": [by_name.after(name)]}.get(
            self._read_order or "", [by_name.after(name), by_number.after(name)])
        return [n for n in dict.fromkeys(nexts) if n is not None]

    def _save_summary(self) -> None:
        """Keep each open partition's records.jsonl size in the size summary (with what it depends on)."""
        summary = self.summary
        if not summary.enabled:
            return
        for state in self.open_states():
            log_ = state.log
            start = self.logdir.log_start_offsets.get((log_.topic, log_.partition))
            renderer = state.renderer  # the size is kept under its decoder's name, or not at all
            summary.record(state.name, start, renderer.decoder_id,
                           lambda files, s=state, r=renderer: s.measured(files, r))
        summary.keep_only(set(self.logdir.partition_names()))
        summary.save()

    def records_mtime_ns(self, state: PartitionState) -> int:
        """The modification time of the views that grow: the active segment's."""
        active = state.log.active_segment
        if active is None:
            return self.mount_ns
        try:
            return os.stat(active.log_path).st_mtime_ns
        except OSError:
            return self.mount_ns

    # -- listeners

    def add_listener(self, callback: Callable[[PartitionState], None]) -> None:
        """``callback(state)`` whenever a partition's records change (see PartitionState.add_listener)."""
        with self._guard:
            self._listeners.append(callback)
            for state in self._states.values():
                state.add_listener(callback)

    def add_append_listener(self, callback: Callable[[PartitionState, int | None], None]) -> None:
        """``callback(state, since_base)`` after records were appended through an ``append`` file, in
        the thread that appended them and before the write (or close) returns; ``since_base`` is the
        active segment's base offset before the append (segments from there on may have changed)."""
        with self._guard:
            self._append_listeners.append(callback)

    def shown_unsized(self, state: PartitionState) -> None:
        """A read of ``state``'s ``records.jsonl`` is about to show records that the size the kernel may
        hold does not count: another process appended them, and the mount saw them (its watcher, a
        lookup's catch-up) before its invalidator's thread told the kernel. The append listeners mark
        the attributes of the partition's growing files stale now, as after an append through the mount,
        so that a ``stat`` after that read counts them (SPEC §3: under load, a ``stat`` right after a
        read of the new records still said the size before them). In the reading thread."""
        self.appended(state, None)

    def appended(self, state: PartitionState, since_base: int | None) -> None:
        for callback in list(self._append_listeners):
            try:
                callback(state, since_base)
            except Exception:  # the records are in: a listener must not fail the write
                log.exception("append listener failed")

    def close(self) -> None:
        """Keep the layouts the layout cache lacks, then close the log directory (flushes, checkpoints
        and unlocks when writable)."""
        with self._guard:
            self._closed = True
            sizer, self._sizer = self._sizer, None
        with self._ahead_lock:
            ahead, self._ahead = self._ahead, None
            spares = list(self._spares)
            self._spares.clear()
        for pool in (sizer, ahead):
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)  # a partition being opened finishes first
        for stream in spares:
            stream.drop_spare()
        try:
            for state in self.open_states():
                state.save_layouts()
            self._save_summary()
        except Exception:  # the cache is an optimisation: never let it keep the log directory open
            log.exception("could not save the size cache")
        self.keys_store.close()
        self.prune_cache()
        self.logdir.close()

    def _segment_gone(self, key: LayoutKey) -> None:
        self.keys_store.segment_gone(key.dev, key.ino, key.topic, key.partition)

    def prune_cache(self) -> int:
        """Remove the cache folder's entries of this log directory's segments that are gone (at mount
        start, in the background, and at unmount); never fails."""
        try:
            return prune_entries(self.cache.directory, self.logdir.path)
        except Exception:  # the cache is an optimisation
            log.exception("could not prune the cache folder %s", self.cache.directory)
            return 0
