"""Inode numbers for tree nodes, with the kernel's lookup counts.

Two kinds: by-offset record files get numbers computed from (partition number, offset) and need no
table entry at all (so listing a million offsets costs no memory here); every other node gets the next
free number, kept while the kernel holds a reference (its lookup count) and dropped on ``forget``.
A node with the same key as a known one gets the known number and the known node (a range keeps its
layout for as long as the kernel remembers it).

Memory: a walk of the tree (``ls -lR``, ``find``) has the kernel remember every name it met (about 600
bytes here a ``by-key/`` name) until it forgets them (memory pressure, ``drop_caches``). A Python dict
never shrinks when emptied, so once most of what the table held is forgotten its tables are made
again at their new size, and the C allocator is asked to give the freed memory back to the system
(review24 R24-5: 975 MB kept after a walk, never given back).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
import time
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from .nodes import Node

__all__ = ["InodeTable", "Entry", "ROOT_INODE", "RecordIno", "record_ino", "parse_record_ino"]

ROOT_INODE = 1

#: Seconds past an attribute reply's own timeout during which the kernel is taken to hold what it was
#: sent: the time between the reply leaving here and the kernel taking it (the requester's wake-up, up to
#: tens of milliseconds under load), with room to spare.
ATTR_MARGIN = 1.0

#: The table's dicts are made again (at their new size) once it holds at most a quarter of what it held at
#: its largest since they were last made, and that was at least this many nodes.
COMPACT_FROM = 4096


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim`` (None elsewhere): gives the free memory of every arena back to the system."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_TRIM = _malloc_trim()


def give_back_memory() -> None:
    """Ask the C allocator to return the memory freed so far to the system (a no-op where it cannot)."""
    if _TRIM is not None:
        _TRIM(0)


# Computed inode numbers of by-offset records: top bit set, 23 bits of partition number, 40 of offset.
_RECORD_FLAG = 1 << 63
_OFFSET_BITS = 40
_PARTITION_BITS = 23


def record_ino(number: int, offset: int) -> int | None:
    """The computed inode number of the record at ``offset`` of partition ``number`` (None when it does
    not fit: a partition number past 2**23 or an offset past 2**40 gets a table number instead)."""
    if number >= 1 << _PARTITION_BITS or not 0 <= offset < 1 << _OFFSET_BITS:
        return None
    return _RECORD_FLAG | (number << _OFFSET_BITS) | offset


class RecordIno(NamedTuple):
    """What a computed inode number says: a partition's number and an offset."""

    number: int
    offset: int


def parse_record_ino(ino: int) -> RecordIno | None:
    """The partition number and offset of a computed inode number, None for a table number."""
    if not ino & _RECORD_FLAG:
        return None
    return RecordIno((ino >> _OFFSET_BITS) & ((1 << _PARTITION_BITS) - 1), ino & ((1 << _OFFSET_BITS) - 1))


class Entry(NamedTuple):
    """A node and its inode number."""

    ino: int
    node: Node


class Tree(Protocol):
    """What the table needs of the tree: its root, and the node of a computed number."""

    @property
    def root(self) -> Node: ...

    def node_for_ino(self, ino: int) -> Node | None: ...


class InodeTable:
    """Inode numbers of the nodes the kernel knows, with its lookup counts.

    Threads: safe to share; every read and change of the tables holds one lock (the kernel sends
    lookups, forgets and getattrs from several threads at once).

    It also knows which nodes' attributes the kernel may hold (issue 25: an append through the mount
    marks the attributes of the files that grew stale, one syscall per inode, before it returns; beside
    8 readers a partition had ~240 growing range files, most of whose attributes the kernel had long
    let go): :meth:`attrs_replying` before attributes are computed for a reply, :meth:`attrs_given`
    once they are (with the reply's timeout), :meth:`attrs_held_in` to ask, :meth:`attrs_dropped` once
    the kernel was told to forget them. A reply computed before a change but taken by the kernel after
    the change was told is discarded by the kernel itself (its attribute version moved on).
    """

    def __init__(self, tree: Tree, clock: Callable[[], float] = time.monotonic) -> None:
        self.tree = tree
        self.clock = clock
        self._nodes: dict[int, Node] = {ROOT_INODE: tree.root}
        self._inos: dict[Hashable, int] = {tree.root.key: ROOT_INODE}
        self._counts: dict[int, int] = {}
        self._by_partition: dict[str, set[int]] = {}
        self._next = ROOT_INODE + 1
        self._replying: dict[int, int] = {}  # attribute replies being computed, per inode
        self._attrs_until: dict[int, float] = {}  # the kernel may hold the attributes it was sent until then
        self._given_at: dict[int, float] = {}  # when attributes were last given (see given_since)
        self._peak = 1  # the most nodes held since the dicts were last made (see COMPACT_FROM)
        self.compactions = 0
        self._guard = threading.Lock()

    def __len__(self) -> int:
        with self._guard:
            return len(self._nodes)

    def register(self, node: Node, count: int = 0) -> Entry:
        """The inode number of ``node`` and the node to use for it (the known one if any); ``count``
        references are taken at once (so a ``forget`` running meanwhile cannot drop it)."""
        if node.fixed_ino is not None:
            return Entry(node.fixed_ino, node)
        with self._guard:
            ino = self._inos.get(node.key)
            if ino is None:
                ino = self._next
                self._next += 1
                self._nodes[ino] = node
                self._inos[node.key] = ino
                if len(self._nodes) > self._peak:
                    self._peak = len(self._nodes)
                partition = node.partition_name
                if partition is not None:
                    self._by_partition.setdefault(partition, set()).add(ino)
            else:
                node = self._nodes[ino]
            if count and ino != ROOT_INODE:
                self._counts[ino] = self._counts.get(ino, 0) + count
            return Entry(ino, node)

    def remember(self, ino: int, n: int = 1) -> None:
        """The kernel took ``n`` more references (a lookup, a listed entry, a mkdir)."""
        with self._guard:
            if ino == ROOT_INODE or ino not in self._nodes:
                return
            self._counts[ino] = self._counts.get(ino, 0) + n

    def ino_of(self, key: Hashable) -> int | None:
        """The inode number of the node with ``key`` if the kernel knows it (None otherwise)."""
        with self._guard:
            return self._inos.get(key)

    def get(self, ino: int) -> Node | None:
        with self._guard:
            node = self._nodes.get(ino)
        if node is None:
            node = self.tree.node_for_ino(ino)
        return node

    def forget(self, ino: int, n: int) -> None:
        """The kernel dropped ``n`` references; at zero the node goes."""
        with self._guard:
            if ino == ROOT_INODE or ino not in self._nodes:
                return
            left = self._counts.get(ino, 0) - n
            if left > 0:
                self._counts[ino] = left
                return
            self._drop(ino)
            compacted = self._compact_if_shrunk()
        if compacted:
            give_back_memory()  # (outside the lock: it walks the allocator's heaps)

    def _compact_if_shrunk(self) -> bool:
        """Make the dicts again at their size when most of what they held was dropped (callers hold the
        lock); True when they were."""
        size = len(self._nodes)
        if self._peak < COMPACT_FROM or size * 4 > self._peak:
            return False
        self._nodes = dict(self._nodes)
        self._inos = dict(self._inos)
        self._counts = dict(self._counts)
        self._replying = dict(self._replying)
        self._attrs_until = dict(self._attrs_until)
        self._given_at = dict(self._given_at)
        self._by_partition = {name: set(members) for name, members in self._by_partition.items() if members}
        self._peak = max(size, 1)
        self.compactions += 1
        return True

    def discard_if_unused(self, ino: int, taken: int = 0) -> None:
        """Give back ``taken`` references and drop the node if nobody holds it (a reply the kernel
        never received): a ``forget`` of what the reply took."""
        self.forget(ino, taken)

    def attrs_replying(self, ino: int) -> None:
        """Attributes of ``ino`` are about to be computed for a reply (call :meth:`attrs_given` after)."""
        with self._guard:
            if ino in self._nodes:
                self._replying[ino] = self._replying.get(ino, 0) + 1

    def attrs_given(self, ino: int, timeout: float | None, *, replied: bool = True) -> None:
        """The attributes of ``ino`` were computed, to be held by the kernel ``timeout`` seconds (None:
        none were given, the reply failed); ``replied``: it follows :meth:`attrs_replying` (False for
        attributes given without it, as a listing's)."""
        with self._guard:
            if replied:
                left = self._replying.get(ino, 0) - 1
                if left > 0:
                    self._replying[ino] = left
                else:
                    self._replying.pop(ino, None)
            if timeout is not None and ino in self._nodes:
                now = self.clock()
                self._given_at[ino] = now
                until = now + timeout + ATTR_MARGIN
                if until > self._attrs_until.get(ino, 0.0):
                    self._attrs_until[ino] = until

    def attrs_held_in(self, partition: str) -> list[tuple[Entry, float]]:
        """The known (inode, node) pairs under one partition folder whose attributes the kernel may
        hold (or is about to be sent), each with a mark to give :meth:`attrs_dropped`."""
        now = self.clock()
        out: list[tuple[Entry, float]] = []
        with self._guard:
            replying, until_of, nodes = self._replying, self._attrs_until, self._nodes
            for ino in self._by_partition.get(partition, ()):
                until = until_of.get(ino, 0.0)
                if (until > now or ino in replying) and ino in nodes:
                    out.append((Entry(ino, nodes[ino]), until))
        return out

    def given_since(self, partition: str, since: float) -> list[Entry]:
        """The known (inode, node) pairs under one partition folder whose attributes were given at or
        after ``since`` (this table's clock): replies that may still be on their way to the kernel."""
        with self._guard:
            given, nodes = self._given_at, self._nodes
            return [Entry(ino, nodes[ino]) for ino in self._by_partition.get(partition, ())
                    if given.get(ino, -1.0) >= since and ino in nodes]

    def attrs_dropped(self, ino: int, mark: float) -> None:
        """The kernel was told to forget the attributes of ``ino`` that :meth:`attrs_held_in` said it held
        (``mark``): it holds none until asked again, unless attributes were given since."""
        with self._guard:
            if self._attrs_until.get(ino) == mark:
                del self._attrs_until[ino]

    def _drop(self, ino: int) -> None:
        self._counts.pop(ino, None)
        self._replying.pop(ino, None)
        self._attrs_until.pop(ino, None)
        self._given_at.pop(ino, None)
        node = self._nodes.pop(ino, None)
        if node is not None:
            self._inos.pop(node.key, None)
            partition = node.partition_name
            if partition is not None:
                members = self._by_partition.get(partition)
                if members is not None:
                    members.discard(ino)

    def of_partition(self, partition: str) -> list[Entry]:
        """The known (inode, node) pairs under one partition folder."""
        with self._guard:
            return [
                Entry(ino, self._nodes[ino]) for ino in self._by_partition.get(partition, ()) if ino in self._nodes
            ]
