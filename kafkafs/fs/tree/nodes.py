"""The nodes of the mounted tree: what a name resolves to, its key, its attributes, what it opens to.

:class:`Node`, :class:`File` and :class:`Dir` are the shapes; the partition folder and its children are
in :mod:`.partition_nodes` and :mod:`.segment_nodes`, the top in :mod:`.root`. A node's key (:data:`NodeKey`)
says what it is: equal keys are the same inode. Nodes are cheap and stateless except ranges, whose
layouts live as long as their node does; every method may block and runs in a worker thread. They
ask the views (:mod:`kafkafs.fs.views`) through the mount's :class:`~.partitions.Partitions`, and
never render anything themselves.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

from ...errors import NotFound, NotPermitted
from .handles import Handle

if TYPE_CHECKING:
    from .partitions import Partitions

__all__ = [
    "Node", "Dir", "File", "Attr", "Key", "RecordsKey", "RecordKey", "RangeKey", "SegmentKey", "NodeKey",
    "STABLE_TIMEOUT", "VOLATILE_TIMEOUT", "WATCHED_TIMEOUT", "DIR_TIMEOUT", "BLOCK_SIZE",
    "dir_attr", "file_attr", "mtime_ns", "ms_to_ns",
]

#: Attribute / entry timeouts (seconds) the kernel may cache: things that never change, things that
#: grow as records arrive (they are also invalidated when that happens), folders.
STABLE_TIMEOUT = 60.0
VOLATILE_TIMEOUT = 0.1
#: for what grows in a partition whose changes come by inotify events (the kernel is told of each)
WATCHED_TIMEOUT = 10.0
DIR_TIMEOUT = 1.0
#: st_blksize: tools such as cat size their buffers from it; FUSE reads come in 128 KiB anyway.
BLOCK_SIZE = 128 * 1024

# ---------------------------------------------------------------------------------------------- keys
# Every key starts with its kind and its partition folder (None above the partitions), so keys of
# different kinds never compare equal, and a node's partition is ``key.partition``.

#: The kinds of the ranges' keys (the first item of a :class:`RangeKey`).
OFFSET_RANGE = "offset-range"
TIME_RANGE = "time-range"


class Key(NamedTuple):
    """A node named by its kind alone: ``root``, a ``partition`` folder, a folder or file of a partition
    with nothing more to it (``by-offset``, ``partition.json``, ...), a ``logdir-file`` (``name``)."""

    kind: str
    partition: str | None = None
    name: str | None = None


class RecordsKey(NamedTuple):
    """``records.jsonl``: one generation (stream) of it."""

    kind: str
    partition: str
    stream: int


class RecordKey(NamedTuple):
    """``by-offset/<offset>.json``."""

    kind: str
    partition: str
    offset: int


class RangeKey(NamedTuple):
    """``by-offset/<first>-<last>.jsonl`` (kind :data:`OFFSET_RANGE`) or ``by-time/<ts1>..<ts2>.jsonl``
    (:data:`TIME_RANGE`), with the partition's rewrites when it was looked up."""

    kind: str
    partition: str
    first: int
    last: int
    rewrites: int


class SegmentKey(NamedTuple):
    """``segments/<name>``, tied to the file (inode on disk) the name held when it was looked up."""

    kind: str
    partition: str
    name: str
    file_id: int | None


NodeKey = Key | RecordsKey | RecordKey | RangeKey | SegmentKey


class Attr(NamedTuple):
    """What ``stat`` says of a node, and how long the kernel may keep it (seconds)."""

    mode: int
    size: int
    mtime_ns: int
    nlink: int = 1
    timeout: float = STABLE_TIMEOUT


def dir_attr(mtime_ns: int, writable: bool = False, timeout: float = DIR_TIMEOUT) -> Attr:
    return Attr(stat.S_IFDIR | (0o755 if writable else 0o555), 0, mtime_ns, 2, timeout)


def file_attr(size: int, mtime_ns: int, timeout: float, mode: int = 0o444) -> Attr:
    return Attr(stat.S_IFREG | mode, size, mtime_ns, 1, timeout)


def mtime_ns(path: str | os.PathLike[str], default: int) -> int:
    """The modification time of ``path``, or ``default`` when it cannot be had."""
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return default


def ms_to_ns(ms: int, default: int) -> int:
    """A record timestamp (ms) as a file time (ns); ``default`` for a record without one."""
    return ms * 1_000_000 if ms >= 0 else default


# ---------------------------------------------------------------------------------------------- nodes


class Node:
    """Something with a name in the tree. ``key`` identifies it (equal keys: the same inode)."""

    #: (slots: the inode table holds a node per name the kernel remembers, R24-5; a subclass without
    #: slots of its own gets a ``__dict__`` as usual)
    __slots__ = ("partitions", "key", "parent")

    is_dir = False
    #: set for nodes whose inode number is computed from the key instead of kept in a table
    fixed_ino: int | None = None

    def __init__(self, partitions: Partitions, key: NodeKey, parent: Node | None) -> None:
        self.partitions = partitions
        self.key = key
        self.parent = parent

    @property
    def partition_name(self) -> str | None:
        return self.key.partition

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
    __slots__ = ()

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
    __slots__ = ()

    is_dir = True

    def lookup(self, name: str) -> Node:
        raise NotFound(name)

    def lookup_now(self, name: str) -> Node | None:
        """:meth:`lookup` when it is short work the FUSE loop may do itself (no worker thread), else None."""
        return None

    def entries(self, start_id: int) -> Iterator[tuple[int, str, Node]]:
        """(next_id, name, node) from the entry ``start_id`` designates on (0: the first). Ids come from
        stable keys, so a listing resumed while entries come and go never repeats or skips one."""
        return iter(())

    def listing(self, start_id: int) -> Iterator[tuple[int, bytes, Node | int, Attr]]:
        """What a FUSE ``readdir`` sends: (next_id, name, node or computed inode number, attributes)."""
        for next_id, name, node in self.entries(start_id):
            yield next_id, os.fsencode(name), node, node.quick_attr()
