"""The mounted tree without FUSE: names resolve to nodes, nodes have attributes, files open to handles.

::

    <topic>-<partition>/  records.jsonl  by-offset/  by-time/  segments/  partition.json  [append]

Every method here may block (files, decoding) and is meant to run in a worker thread; the FUSE adapter
(:mod:`kafkafs.fs.operations`) only maps inodes to nodes and errors to errno. Nodes are cheap and
stateless except ranges, whose layouts live as long as their node does.

Errors: :class:`NotFound` for a name that does not resolve, :class:`NotPermitted` for a change to
something read-only; the engine's own exceptions pass through.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from collections.abc import Iterator

from ..errors import InvalidInput, InvalidName
from ..format.decoders import decoder_for
from ..format.jsonview import VALUES_MODES
from ..storage.logdir import LogDir
from ..storage.names import parse_partition_dir_name
from ..storage.safefiles import is_regular_file, regular_files
from . import names
from .generations import RecordsGenerations
from .handles import Handle, NotFound, NotPermitted, OSFileHandle
from .inodes import parse_record_ino
from .nodes import LIST_LIMIT, VOLATILE_TIMEOUT, Attr, Dir, File, Node, _dir_attr, _file_attr, _mtime_ns
from .partition import PartitionState
from .partition_nodes import CHILDREN, ByOffsetDir, RangeFile, RecordFile, RecordsFile
from .segment_nodes import SegmentFile
from .sizecache import SizeCache

log = logging.getLogger("kafkafs.fs")

__all__ = ["Tree", "Root", "PartitionDir", "LogDirFile"]

# ---------------------------------------------------------------------------------------------- nodes


_TOP_FILE_IDS = 1 << 40  # readdir ids of the log directory's own files: after every partition's


class Root(Dir):
    def attr(self) -> Attr:
        return _dir_attr(_mtime_ns(self.tree.logdir.path, self.tree.mount_ns), self.tree.rw)

    def lookup(self, name: str) -> Node:
        if names.is_logdir_file(name):
            if not is_regular_file(self.tree.logdir.path / name):
                raise NotFound(name)
            return LogDirFile(self.tree, name, self)
        return self.tree.partition_dir(name)

    def _files(self) -> list[str]:
        # no warning here: a link at the top is most often a partition folder, which is served (SPEC §3)
        return sorted(n for n in regular_files(self.tree.logdir.path, warn=False) if names.is_logdir_file(n))

    def entries(self, start_id: int) -> Iterator[tuple[int, str, Node]]:
        numbered = sorted((self.tree.number(name), name) for name in self.tree.logdir.partition_names())
        for number, name in numbered:
            if number + 1 > start_id:
                yield number + 1, name, PartitionDir(self.tree, name)
        for i, name in enumerate(self._files()):
            if _TOP_FILE_IDS + i + 1 > start_id:
                yield _TOP_FILE_IDS + i + 1, name, LogDirFile(self.tree, name, self)


class LogDirFile(File):
    """One of the log directory's own files (``meta.properties``, the checkpoints), byte-identical,
    read-only; a broker may rewrite it at any time, so nothing of it is cached."""

    def __init__(self, tree: Tree, name: str, parent: Node) -> None:
        super().__init__(tree, ("logdir-file", name), parent)
        self.path = tree.logdir.path / name

    def attr(self) -> Attr:
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            raise NotFound(self.path.name) from None
        if not stat.S_ISREG(st.st_mode):  # never a link's target
            raise NotFound(self.path.name)
        return _file_attr(st.st_size, st.st_mtime_ns, VOLATILE_TIMEOUT)

    def volatile(self) -> bool:
        return True

    def _open(self) -> Handle:
        return OSFileHandle(self.path, keep_cache=False)


class PartitionDir(Dir):
    def __init__(self, tree: Tree, name: str) -> None:
        super().__init__(tree, ("partition", name), tree.root)
        self.name = name

    def attr(self) -> Attr:
        return _dir_attr(_mtime_ns(self.tree.logdir.path / self.name, self.tree.mount_ns))

    def _children(self) -> list[str]:
        out = [names.RECORDS, names.BY_OFFSET, names.BY_TIME, names.SEGMENTS, names.PARTITION_JSON]
        if self.tree.rw:
            out.append(names.APPEND)
        return out

    def lookup(self, name: str) -> Node:
        if name not in self._children():
            raise NotFound(name)
        return self.tree.child(self.name, name, current=True)

    def entries(self, start_id: int) -> Iterator[tuple[int, str, Node]]:
        for i, name in enumerate(self._children(), 1):
            if i > start_id:
                yield i, name, self.tree.child(self.name, name)


# ---------------------------------------------------------------------------------------------- tree


class Tree:
    """The whole mount: a log directory, its partitions as :class:`PartitionState`, the root node."""

    def __init__(
        self,
        logdir: LogDir,
        *,
        mode: str = "auto",
        rw: bool = False,
        cache: SizeCache | None = None,
        list_limit: int = LIST_LIMIT,
    ) -> None:
        if mode not in VALUES_MODES:
            raise InvalidInput(f"--values must be one of {', '.join(VALUES_MODES)}, not {mode!r}")
        self.logdir = logdir
        self.mode = mode
        self.cache = cache if cache is not None else SizeCache(None)
        self.list_limit = list_limit
        #: a Schema Registry's schemas (``--schemas``): topics with framed values render decoded
        self.registry = None
        self.rw = rw and logdir.writable
        self.mount_ns = time.time_ns()
        self.root = Root(self, ("root",), None)
        self._numbers: dict[str, int] = {}
        self._states: dict[str, PartitionState] = {}
        self._by_number: dict[int, PartitionState] = {}
        self._generations: dict[str, RecordsGenerations] = {}
        self._guard = threading.RLock()
        self._listeners: list = []
        self._append_listeners: list = []

    # -- partitions

    def number(self, name: str) -> int:
        """A partition folder's number: given on first sight, kept for the mount's lifetime."""
        with self._guard:
            n = self._numbers.get(name)
            if n is None:
                n = self._numbers[name] = len(self._numbers)
            return n

    def partition_dir(self, name: str) -> PartitionDir:
        try:
            parse_partition_dir_name(name)
        except InvalidName:
            raise NotFound(name) from None
        if not (self.logdir.path / name).is_dir():
            raise NotFound(name)
        self.number(name)
        return PartitionDir(self, name)

    def state(self, name: str | None) -> PartitionState:
        """The open partition ``name`` (opened on first use)."""
        assert name is not None
        state = self._states.get(name)
        if state is not None:
            return state
        with self._guard:
            state = self._states.get(name)
            if state is None:
                if not (self.logdir.path / name).is_dir():
                    raise NotFound(name)
                try:
                    log_ = self.logdir.log(name, read_only_fallback=True)
                except InvalidName:
                    raise NotFound(name) from None
                number = self.number(name)
                decoder = decoder_for(log_.topic, self.registry, self.mode)
                state = PartitionState(name, number, log_, self.mode, cache=self.cache, decoder=decoder)
                for callback in self._listeners:
                    state.add_listener(callback)
                self._states[name] = state
                self._by_number[number] = state
            return state

    def open_states(self) -> list[PartitionState]:
        with self._guard:
            return list(self._states.values())

    def add_listener(self, callback) -> None:
        """``callback(state)`` whenever a partition's records change (see PartitionState.add_listener)."""
        with self._guard:
            self._listeners.append(callback)
            for state in self._states.values():
                state.add_listener(callback)

    def add_append_listener(self, callback) -> None:
        """``callback(state, since_base)`` after records were appended through an ``append`` file, in
        the thread that appended them and before the write (or close) returns; ``since_base`` is the
        active segment's base offset before the append (segments from there on may have changed)."""
        with self._guard:
            self._append_listeners.append(callback)

    def appended(self, state: PartitionState, since_base: int | None) -> None:
        for callback in list(self._append_listeners):
            try:
                callback(state, since_base)
            except Exception:  # the records are in: a listener must not fail the write
                log.exception("append listener failed")

    def mkdir(self, name: str) -> PartitionDir:
        """Create an empty partition ``<topic>-<partition>`` (InvalidName for a bad name)."""
        if not self.rw:
            raise NotPermitted("read-only mount")
        topic, partition = parse_partition_dir_name(name)
        if (self.logdir.path / name).exists():
            raise FileExistsError(name)
        self.logdir.create_partition(topic, partition)
        return self.partition_dir(name)

    # -- nodes

    def child(self, partition: str, name: str, *, current: bool = False) -> Node:
        """A partition folder's child ``name``. ``records.jsonl`` is its current generation: checked
        against the partition (and renewed if compaction or retention rewrote it) when ``current``,
        as it is otherwise (a listing renders nothing)."""
        parent = PartitionDir(self, partition)
        if name == names.RECORDS:
            generations = self.records_generations(partition)
            stream = generations.current() if current else generations.peek()
            return RecordsFile(self, stream, parent)
        return CHILDREN[name](self, (name, partition), parent)

    def records_generations(self, partition: str) -> RecordsGenerations:
        """The generations of a partition's ``records.jsonl`` (made with its state)."""
        generations = self._generations.get(partition)
        if generations is None:
            state = self.state(partition)
            with self._guard:
                generations = self._generations.get(partition)
                if generations is None:
                    generations = self._generations[partition] = RecordsGenerations(state)
        return generations

    def range_node(self, state: PartitionState, key: tuple, parent: Node, name: str = "") -> RangeFile:
        return RangeFile(self, state, key, parent, name)

    def segment_file(
        self, state: PartitionState, name: str, parent: Node, st: os.stat_result | None = None
    ) -> SegmentFile:
        return SegmentFile(self, state, name, parent, st)

    def node_for_ino(self, ino: int) -> Node | None:
        """The node of a computed inode number (None when it is not one, or its partition is gone)."""
        parsed = parse_record_ino(ino)
        if parsed is None:
            return None
        number, offset = parsed
        state = self._by_number.get(number)
        if state is None:
            return None
        return RecordFile(self, state, offset, ByOffsetDir(self, (names.BY_OFFSET, state.name), None))

    def records_mtime_ns(self, state: PartitionState) -> int:
        active = state.log.active_segment
        if active is None:
            return self.mount_ns
        return _mtime_ns(active.log_path, self.mount_ns)

    # -- paths (tests, tools)

    def resolve(self, path: str) -> Node:
        """The node at ``path`` (relative to the mount, ``/``-separated)."""
        node: Node = self.root
        for part in path.strip("/").split("/"):
            if not part or part == ".":
                continue
            if part == "..":
                node = node.parent or self.root
                continue
            if not isinstance(node, Dir):
                raise NotFound(path)
            node = node.lookup(part)
        return node

    def listdir(self, path: str) -> list[str]:
        node = self.resolve(path)
        if not isinstance(node, Dir):
            raise NotFound(path)
        return [name for _id, name, _node in node.entries(0)]

    def read_file(self, path: str, chunk: int = 128 * 1024) -> bytes:
        node = self.resolve(path)
        if not isinstance(node, File):
            raise NotFound(path)
        handle = node.open(False)
        try:
            out = []
            offset = 0
            while True:
                data = handle.read(offset, chunk)
                if not data:
                    break
                out.append(data)
                offset += len(data)
            return b"".join(out)
        finally:
            handle.release()

    def close(self) -> None:
        """Keep the layouts the size cache lacks, then close the log directory (flushes, checkpoints
        and unlocks when writable)."""
        try:
            for state in self.open_states():
                state.save_layouts()
        except Exception:  # the cache is an optimisation: never let it keep the log directory open
            log.exception("could not save the size cache")
        self.logdir.close()
