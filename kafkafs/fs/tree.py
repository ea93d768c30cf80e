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
from typing import NamedTuple

import orjson

from ..errors import InvalidInput, InvalidName, UnsafeFileError
from ..format.decoders import decoder_for
from ..format.jsonview import VALUES_MODES
from ..storage.log import parse_partition_dir_name
from ..storage.logdir import LogDir
from ..storage.safefiles import is_regular_file, open_file, regular_files
from . import names
from .append import AppendBuffer
from .layout import RangeLayout
from .partition import PartitionState, PieceCache
from .sizecache import SizeCache

log = logging.getLogger("kafkafs.fs")

__all__ = [
    "Tree",
    "Node",
    "Dir",
    "File",
    "Handle",
    "Attr",
    "NotFound",
    "NotPermitted",
    "STABLE_TIMEOUT",
    "VOLATILE_TIMEOUT",
]

#: Attribute / entry timeouts (seconds) the kernel may cache: things that never change, things that
#: grow as records arrive (they are also invalidated when that happens), folders.
STABLE_TIMEOUT = 60.0
VOLATILE_TIMEOUT = 0.1
DIR_TIMEOUT = 1.0
#: by-offset/ lists every offset up to this many records, one range per segment past it (SPEC §3).
LIST_LIMIT = 100_000
#: st_blksize: tools such as cat size their buffers from it; FUSE reads come in 128 KiB anyway.
BLOCK_SIZE = 128 * 1024


class NotFound(Exception):
    """No such name (ENOENT)."""


class NotPermitted(Exception):
    """A change to something read-only (EROFS on a read-only mount, EACCES otherwise)."""


class Attr(NamedTuple):
    mode: int
    size: int
    mtime_ns: int
    nlink: int = 1
    timeout: float = STABLE_TIMEOUT


def _dir_attr(mtime_ns: int, writable: bool = False, timeout: float = DIR_TIMEOUT) -> Attr:
    return Attr(stat.S_IFDIR | (0o755 if writable else 0o555), 0, mtime_ns, 2, timeout)


def _file_attr(size: int, mtime_ns: int, timeout: float, mode: int = 0o444) -> Attr:
    return Attr(stat.S_IFREG | mode, size, mtime_ns, 1, timeout)


def _mtime_ns(path: str | os.PathLike[str], default: int) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return default


def _ms_to_ns(ms: int, default: int) -> int:
    return ms * 1_000_000 if ms >= 0 else default


# ---------------------------------------------------------------------------------------------- handles


class Handle:
    """An open file. ``keep_cache``: the kernel may keep pages across opens (the content never changes
    underneath); ``direct_io``: every read comes here (small files rendered at open)."""

    keep_cache = False
    direct_io = False
    #: False for handles that only touch memory: the adapter then skips the worker thread
    blocking = True

    def read(self, offset: int, size: int) -> bytes:
        raise NotPermitted("not readable")

    def write(self, offset: int, data: bytes) -> int:
        raise NotPermitted("read-only file")

    def flush(self) -> None:
        pass

    def fsync(self) -> None:
        self.flush()

    def release(self) -> None:
        pass


class BytesHandle(Handle):
    blocking = False

    def __init__(self, data: bytes, *, keep_cache: bool = True, direct_io: bool = False) -> None:
        self.data = data
        self.keep_cache = keep_cache
        self.direct_io = direct_io

    def read(self, offset: int, size: int) -> bytes:
        return self.data[offset : offset + size]


class RecordsHandle(Handle):
    """``records.jsonl`` as this open sees it (:meth:`PartitionState.view_for`): the bytes it has read
    stay where they were when compaction or retention rewrites segments below the end. ``direct_io``
    where that can happen (writable mounts run the cleaner): handles then differ from each other, and
    the kernel must not share one's pages with another."""

    keep_cache = True

    def __init__(self, state: PartitionState, direct_io: bool = False) -> None:
        self.state = state
        self.cache = PieceCache()
        self.view = None
        if direct_io:
            self.keep_cache, self.direct_io = False, True

    def read(self, offset: int, size: int) -> bytes:
        # reading from the start again (``tail -f`` after the file shrank) is reading a new file
        self.view = view = self.state.view_for(None if offset == 0 else self.view)
        return self.state.read_view(view, offset, size, self.cache)


class RangeHandle(Handle):
    keep_cache = True

    def __init__(self, state: PartitionState, layout: RangeLayout) -> None:
        self.state = state
        self.layout = layout
        self.cache = PieceCache()

    def read(self, offset: int, size: int) -> bytes:
        if offset + size > self.layout.total():
            self.state.refresh()
            self.state.extend_range(self.layout)
        return self.state.read_range(self.layout, offset, size, self.cache)


class OSFileHandle(Handle):
    def __init__(self, path: str | os.PathLike[str], keep_cache: bool) -> None:
        try:
            self.fd = open_file(path, os.O_RDONLY)  # a link is never followed (SPEC §3)
        except (FileNotFoundError, UnsafeFileError):
            raise NotFound(str(path)) from None
        self.keep_cache = keep_cache

    def read(self, offset: int, size: int) -> bytes:
        return os.pread(self.fd, size, offset)

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class AppendHandle(Handle):
    """``append``: see :mod:`kafkafs.fs.append`. Once records are in, the tree's append listeners hear
    of it before the request returns (the mount tells the kernel that the views grew)."""

    direct_io = True

    def __init__(self, tree: Tree, state: PartitionState) -> None:
        self.tree = tree
        self.state = state
        self.buffer = AppendBuffer(state.log)

    def read(self, offset: int, size: int) -> bytes:
        return b""

    def _active_base(self) -> int | None:
        active = self.state.log.active_segment
        return active.base_offset if active is not None else None

    def write(self, offset: int, data: bytes) -> int:
        before = self._active_base()
        if self.buffer.write(data) is not None:
            self.tree.appended(self.state, before)
        return len(data)

    def flush(self) -> None:
        before = self._active_base()
        count = self.buffer.appended
        self.buffer.flush()
        if self.buffer.appended != count:
            self.tree.appended(self.state, before)

    def fsync(self) -> None:
        self.buffer.sync()


# ---------------------------------------------------------------------------------------------- nodes


class Node:
    """Something with a name in the tree. ``key`` identifies it (equal keys: the same inode)."""

    is_dir = False
    #: set for nodes whose inode number is computed from the key instead of kept in a table
    fixed_ino: int | None = None

    def __init__(self, tree: Tree, key: tuple, parent: Node | None) -> None:
        self.tree = tree
        self.key = key
        self.parent = parent

    @property
    def partition_name(self) -> str | None:
        return self.key[1] if len(self.key) > 1 and isinstance(self.key[1], str) else None

    def attr(self) -> Attr:
        raise NotImplementedError

    def quick_attr(self) -> Attr:
        """Attributes for a directory listing: must not render anything big (``ls`` of a folder of a
        million records must stay fast); a size that is not known yet is given as 0 with no cache time,
        so a ``stat`` asks again."""
        return self.attr()

    def volatile(self) -> bool:
        """Whether what this node shows can change when records arrive."""
        return False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.key}>"


class File(Node):
    def open(self, write: bool) -> Handle:
        if write:
            raise NotPermitted(f"{self.key} is read-only")
        return self._open()

    def open_now(self) -> Handle | None:
        """A handle for reading when one can be made from memory alone (no worker thread), else None."""
        return None

    def _open(self) -> Handle:
        raise NotImplementedError


class Dir(Node):
    is_dir = True

    def lookup(self, name: str) -> Node:
        raise NotFound(name)

    def entries(self, start_id: int) -> Iterator[tuple[int, str, Node]]:
        """(next_id, name, node) from the entry ``start_id`` designates on (0: the first). Ids come from
        stable keys, so a listing resumed while entries come and go never repeats or skips one."""
        return iter(())

    def listing(self, start_id: int) -> Iterator[tuple[int, bytes, Node | int, Attr]]:
        """What a FUSE ``readdir`` sends: (next_id, name, node or computed inode number, attributes)."""
        for next_id, name, node in self.entries(start_id):
            yield next_id, os.fsencode(name), node, node.quick_attr()


class Root(Dir):
    def attr(self) -> Attr:
        return _dir_attr(_mtime_ns(self.tree.logdir.path, self.tree.mount_ns), self.tree.rw)

    def lookup(self, name: str) -> Node:
        return self.tree.partition_dir(name)

    def entries(self, start_id: int) -> Iterator[tuple[int, str, Node]]:
        numbered = sorted((self.tree.number(name), name) for name in self.tree.logdir.partition_names())
        for number, name in numbered:
            if number + 1 > start_id:
                yield number + 1, name, PartitionDir(self.tree, name)


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
        return self.tree.child(self.name, name)

    def entries(self, start_id: int) -> Iterator[tuple[int, str, Node]]:
        for i, name in enumerate(self._children(), 1):
            if i > start_id:
                yield i, name, self.tree.child(self.name, name)


class RecordsFile(File):
    def attr(self) -> Attr:
        state = self.tree.state(self.partition_name)
        state.refresh()
        return _file_attr(state.records_size(), self.tree.records_mtime_ns(state), VOLATILE_TIMEOUT)

    def quick_attr(self) -> Attr:
        state = self.tree.state(self.partition_name)
        size = state.cached_records_size()
        if size is None:
            return _file_attr(0, self.tree.records_mtime_ns(state), 0)
        return _file_attr(size, self.tree.records_mtime_ns(state), VOLATILE_TIMEOUT)

    def volatile(self) -> bool:
        return True

    def _open(self) -> Handle:
        return RecordsHandle(self.tree.state(self.partition_name), direct_io=self.tree.rw)


class PartitionJsonFile(File):
    def render(self) -> bytes:
        state = self.tree.state(self.partition_name)
        state.refresh()
        info = state.log.describe()
        info["valuesMode"] = self.tree.mode
        info["writable"] = state.log.writable
        return orjson.dumps(info, option=orjson.OPT_INDENT_2) + b"\n"

    def attr(self) -> Attr:
        state = self.tree.state(self.partition_name)
        return _file_attr(len(self.render()), self.tree.records_mtime_ns(state), VOLATILE_TIMEOUT)

    def volatile(self) -> bool:
        return True

    def _open(self) -> Handle:
        return BytesHandle(self.render(), keep_cache=False, direct_io=True)


class AppendFile(File):
    def attr(self) -> Attr:
        state = self.tree.state(self.partition_name)
        return _file_attr(0, self.tree.records_mtime_ns(state), VOLATILE_TIMEOUT, 0o200)

    def open(self, write: bool) -> Handle:
        state = self.tree.state(self.partition_name)
        if not state.log.writable:
            raise NotPermitted("the log directory is open read-only")
        return AppendHandle(self.tree, state)


class ByOffsetDir(Dir):
    def attr(self) -> Attr:
        state = self.tree.state(self.partition_name)
        return _dir_attr(state.last_change_ns, timeout=VOLATILE_TIMEOUT)

    def lookup(self, name: str) -> Node:
        state = self.tree.state(self.partition_name)
        offset = names.parse_offset_file(name)
        if offset is not None:
            node = RecordFile(self.tree, state, offset, self)
            node.rendered()  # raises NotFound when there is no such record
            return node
        bounds = names.parse_offset_range(name)
        if bounds is not None:
            return self.tree.range_node(state, ("offset-range", state.name, *bounds), self)
        raise NotFound(name)

    def _ranges(self, state: PartitionState, start_id: int) -> Iterator[tuple[int, str, Node]] | None:
        """Past the list limit: one ``<first>-<last>.jsonl`` per segment (None below it)."""
        if state.listed_records() <= self.tree.list_limit:
            return None
        return (
            (r.last + 1, f"{r.first}-{r.last}.jsonl",
             self.tree.range_node(state, ("offset-range", state.name, r.first, r.last), self))
            for r in state.segment_ranges(start_id)
        )

    def entries(self, start_id: int) -> Iterator[tuple[int, str, Node]]:
        state = self.tree.state(self.partition_name)
        ranges = self._ranges(state, start_id)
        if ranges is not None:
            yield from ranges
            return
        for run in state.offset_runs(start_id):
            offsets = range(run.first, run.last + 1) if run.offsets is None else run.offsets
            for offset in offsets:
                yield (
                    offset + 1,
                    f"{offset}.json",
                    RecordFile(self.tree, state, offset, self, run.max_timestamp),
                )

    def listing(self, start_id: int) -> Iterator[tuple[int, bytes, Node | int, Attr]]:
        """Every offset, a batch at a time from its header, without a node per name (a million names
        list in constant memory). Sizes are not rendered here: they come with timeout 0, so a ``stat``
        asks for the real ones."""
        state = self.tree.state(self.partition_name)
        ranges = self._ranges(state, start_id)
        if ranges is not None:
            for next_id, name, node in ranges:
                yield next_id, os.fsencode(name), node, _file_attr(0, self.tree.mount_ns, 0)
            return
        ino_of = self.tree.record_ino
        number = state.index
        for run in state.offset_runs(start_id):
            offsets = range(run.first, run.last + 1) if run.offsets is None else run.offsets
            attr = _file_attr(0, _ms_to_ns(run.max_timestamp, self.tree.mount_ns), 0)
            for offset in offsets:
                ino = ino_of(number, offset)
                target = (
                    ino if ino is not None else RecordFile(self.tree, state, offset, self, run.max_timestamp)
                )
                yield offset + 1, b"%d.json" % offset, target, attr

    def volatile(self) -> bool:
        return True


class RecordFile(File):
    """``by-offset/<offset>.json``: its inode number is computed from (partition number, offset)."""

    def __init__(
        self,
        tree: Tree,
        state: PartitionState,
        offset: int,
        parent: Node | None,
        hint_timestamp: int | None = None,
    ) -> None:
        super().__init__(tree, ("record", state.name, offset), parent)
        self.state = state
        self.offset = offset
        self.hint_timestamp = hint_timestamp
        self.fixed_ino = tree.record_ino(state.index, offset)

    def rendered(self):
        found = self.state.record(self.offset)
        if found is None:
            raise NotFound(f"{self.state.name}: no record at offset {self.offset}")
        return found

    def attr(self) -> Attr:
        found = self.rendered()
        return _file_attr(len(found.data), _ms_to_ns(found.timestamp, self.tree.mount_ns), STABLE_TIMEOUT)

    def quick_attr(self) -> Attr:
        ts = self.hint_timestamp if self.hint_timestamp is not None else -1
        return _file_attr(0, _ms_to_ns(ts, self.tree.mount_ns), 0)

    def _open(self) -> Handle:
        return BytesHandle(self.rendered().data)

    def open_now(self) -> Handle | None:
        found = self.state.cached_record(self.offset)  # the lookup just before rendered it
        return BytesHandle(found.data) if found is not None else None


class RangeFile(File):
    """``by-offset/<first>-<last>.jsonl`` and ``by-time/<ts1>..<ts2>.jsonl``."""

    def __init__(self, tree: Tree, state: PartitionState, key: tuple, parent: Node | None) -> None:
        super().__init__(tree, key, parent)
        self.state = state
        self._lock = threading.Lock()
        self._new_layout()

    def _new_layout(self) -> None:
        key, state = self.key, self.state
        self.generation = getattr(state.log, "generation", 0)  # compaction swaps since the log opened
        if key[0] == "offset-range":
            self.layout = state.offset_range(key[2], key[3])
        else:
            self.layout = state.time_range(key[2], key[3])

    def attr(self) -> Attr:
        with self._lock:
            if self.generation != getattr(self.state.log, "generation", 0):
                self._new_layout()  # compaction rewrote segments: the range holds other bytes now
            if not self.layout.complete:
                self.state.refresh()
                self.state.extend_range(self.layout)
        growing = not self.layout.complete
        mtime = self.tree.records_mtime_ns(self.state) if growing else self.tree.mount_ns
        return _file_attr(self.layout.total(), mtime, VOLATILE_TIMEOUT if growing else STABLE_TIMEOUT)

    def volatile(self) -> bool:
        return not self.layout.complete

    def _open(self) -> Handle:
        return RangeHandle(self.state, self.layout)


class ByTimeDir(Dir):
    def attr(self) -> Attr:
        state = self.tree.state(self.partition_name)
        return _dir_attr(state.last_change_ns, timeout=VOLATILE_TIMEOUT)

    def lookup(self, name: str) -> Node:
        state = self.tree.state(self.partition_name)
        ts = names.parse_time_file(name)
        if ts is not None:
            found = state.log.offset_for_timestamp(ts)
            if found is None:
                raise NotFound(name)
            node = RecordFile(self.tree, state, found[0], self)
            node.rendered()
            return node
        bounds = names.parse_time_range(name)
        if bounds is not None:
            return self.tree.range_node(state, ("time-range", state.name, *bounds), self)
        raise NotFound(name)


class SegmentsDir(Dir):
    def attr(self) -> Attr:
        state = self.tree.state(self.partition_name)
        return _dir_attr(_mtime_ns(state.log.dir, self.tree.mount_ns), timeout=VOLATILE_TIMEOUT)

    def _files(self) -> list[str]:
        state = self.tree.state(self.partition_name)
        try:
            listed = regular_files(state.log.dir)  # links skipped with a warning, never followed
        except FileNotFoundError:
            return []
        return sorted((n for n in listed if names.is_segment_file(n)), key=names.segment_file_key)

    def lookup(self, name: str) -> Node:
        state = self.tree.state(self.partition_name)
        if not names.is_segment_file(name) or not is_regular_file(state.log.dir / name):
            raise NotFound(name)
        return self.tree.segment_file(state, name, self)

    def entries(self, start_id: int) -> Iterator[tuple[int, str, Node]]:
        state = self.tree.state(self.partition_name)
        for name in self._files():
            next_id = names.segment_file_key(name) + 1
            if next_id > start_id:
                yield next_id, name, self.tree.segment_file(state, name, self)

    def volatile(self) -> bool:
        return True


class SegmentFile(File):
    def __init__(self, tree: Tree, state: PartitionState, name: str, parent: Node | None) -> None:
        super().__init__(tree, ("segment", state.name, name), parent)
        self.state = state
        self.name = name
        self.path = state.log.dir / name
        self.base_offset = int(name[:20])

    def sealed(self) -> bool:
        active = self.state.log.active_segment
        return active is not None and self.base_offset < active.base_offset

    def attr(self) -> Attr:
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            raise NotFound(self.name) from None
        if not stat.S_ISREG(st.st_mode):  # replaced by a link since the lookup: never followed
            raise NotFound(self.name)
        return _file_attr(st.st_size, st.st_mtime_ns, STABLE_TIMEOUT if self.sealed() else VOLATILE_TIMEOUT)

    def volatile(self) -> bool:
        return not self.sealed()

    def _open(self) -> Handle:
        return OSFileHandle(self.path, keep_cache=self.sealed())


_CHILDREN = {
    names.RECORDS: RecordsFile,
    names.BY_OFFSET: ByOffsetDir,
    names.BY_TIME: ByTimeDir,
    names.SEGMENTS: SegmentsDir,
    names.PARTITION_JSON: PartitionJsonFile,
    names.APPEND: AppendFile,
}

# Computed inode numbers of by-offset records: top bit set, 23 bits of partition number, 40 of offset.
_RECORD_FLAG = 1 << 63
_OFFSET_BITS = 40
_PARTITION_BITS = 23


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
                decoder = decoder_for(log_.topic, self.registry)
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

    def child(self, partition: str, name: str) -> Node:
        cls = _CHILDREN[name]
        return cls(self, (name, partition), PartitionDir(self, partition))

    def range_node(self, state: PartitionState, key: tuple, parent: Node) -> RangeFile:
        return RangeFile(self, state, key, parent)

    def segment_file(self, state: PartitionState, name: str, parent: Node) -> SegmentFile:
        return SegmentFile(self, state, name, parent)

    def record_ino(self, number: int, offset: int) -> int | None:
        if number >= 1 << _PARTITION_BITS or not 0 <= offset < 1 << _OFFSET_BITS:
            return None
        return _RECORD_FLAG | (number << _OFFSET_BITS) | offset

    def node_for_ino(self, ino: int) -> Node | None:
        """The node of a computed inode number (None when it is not one, or its partition is gone)."""
        if not ino & _RECORD_FLAG:
            return None
        number = (ino >> _OFFSET_BITS) & ((1 << _PARTITION_BITS) - 1)
        offset = ino & ((1 << _OFFSET_BITS) - 1)
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
