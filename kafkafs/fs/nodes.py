"""The nodes of the mounted tree: what a name resolves to, its attributes, what it opens to.

:class:`Node`, :class:`File` and :class:`Dir` are the shapes; the partition folder's children are in
:mod:`kafkafs.fs.partition_nodes`, the root and the tree itself in :mod:`kafkafs.fs.tree`. Nodes are
cheap and stateless except ranges, whose layouts live as long as their node does; every method may
block and runs in a worker thread.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

from .handles import Handle, NotFound, NotPermitted

if TYPE_CHECKING:  # the tree makes the nodes and hands itself to them
    from .tree import Tree

__all__ = [
    "Node", "Dir", "File", "Attr", "STABLE_TIMEOUT", "VOLATILE_TIMEOUT", "DIR_TIMEOUT", "LIST_LIMIT", "BLOCK_SIZE",
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


