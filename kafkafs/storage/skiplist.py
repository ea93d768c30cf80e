"""A skip list map from int keys (segment base offsets) to values, read without locks.

Kafka keeps a log's segments in a ``ConcurrentSkipListMap``; this is the same idea for one writer and
any number of readers under CPython.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

from kafkafs.errors import InvalidInput

__all__ = ["SkipList"]

V = TypeVar("V")
#: the level generator of every unseeded list (``random.Random.random`` is one C call: safe across threads)
_SHARED_RNG = random.Random()
D = TypeVar("D")


class _Node(Generic[V]):
    __slots__ = ("key", "value", "next")

    def __init__(self, key: int, value: V, height: int) -> None:
        self.key = key
        self.value = value
        self.next: list[_Node[V] | None] = [None] * height


class SkipList(Generic[V]):
    """A sorted map of int keys with O(log n) expected get, put, remove and neighbour queries.

    Threads: writes (``put``, ``remove``, ``clear``) serialise on an internal lock; reads (everything
    else) take no lock and may run in any thread at any time, also while a write is under way. This
    holds because of three rules, each write being a single reference store, atomic under CPython:

    1. Insertion builds the new node completely (key, value, every forward pointer) before linking
       it, then links it bottom-up: level 0 first, so a node reachable at some level is already
       reachable at every level below it, and a reader that descends from it finds the right path.
    2. Removal unlinks top-down and never touches the removed node's own forward pointers, so a reader
       standing on it walks on to the nodes that followed it at the moment it was removed; keys only
       increase along any chain of pointers, removed or not.
    3. A value is replaced by one store into the existing node.

    So a read sees a consistent, strictly increasing sequence of keys; it never misses a key that was
    present for the whole read, never sees a key twice, and may or may not see keys inserted or
    removed while it runs (a floor may return a segment removed a moment ago: callers that delete
    segments keep them readable until readers are done, as Kafka does with ``.deleted`` files).
    Iterators are lazy and follow the same rule between ``next()`` calls.

    Levels are drawn from a ``random.Random(seed)`` owned by the instance, so a seeded list has the
    same shape every run; unseeded lists share one generator (seeding one from the OS is a system
    call, and a mount opens a list per partition).
    """

    __slots__ = ("_head", "_level", "_len", "_p", "_max_level", "_rng", "_write_lock")

    def __init__(
        self,
        items: Iterable[tuple[int, V]] = (),
        *,
        seed: int | None = None,
        p: float = 0.25,
        max_level: int = 32,
    ) -> None:
        if not 0.0 < p < 1.0:
            raise InvalidInput(f"skip list p must be in (0, 1): {p}")
        if max_level < 1:
            raise InvalidInput(f"skip list max_level must be at least 1: {max_level}")
        self._p = p
        self._max_level = max_level
        self._rng = random.Random(seed) if seed is not None else _SHARED_RNG
        self._head: _Node[V] = _Node(0, None, max_level)  # type: ignore[arg-type]  # the head holds no value
        self._level = 1  # levels in use; readers may see a stale value, which only costs a few steps
        self._len = 0
        self._write_lock = threading.Lock()
        for key, value in items:
            self.put(key, value)

    # -- reading ---------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._head.next[0] is not None

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, int):
            return False
        node = self._floor_node(key)
        return node is not None and node.key == key

    def __iter__(self) -> Iterator[int]:
        return self.keys()

    def __repr__(self) -> str:
        return f"SkipList({list(self.items())!r})"

    def _last_below(self, key: int, inclusive: bool) -> _Node[V]:
        """The last node whose key is < key (<= with ``inclusive``), or the head."""
        node = self._head
        for level in range(self._level - 1, -1, -1):
            nxt = node.next[level]
            while nxt is not None and (nxt.key < key or (inclusive and nxt.key == key)):
                node = nxt
                nxt = node.next[level]
        return node

    def _floor_node(self, key: int) -> _Node[V] | None:
        node = self._last_below(key, True)
        return None if node is self._head else node

    def get(self, key: int, default: D = None) -> V | D:  # type: ignore[assignment]  # D is None when not given
        """The value stored under ``key``, or ``default``."""
        node = self._floor_node(key)
        return node.value if node is not None and node.key == key else default

    def floor(self, key: int) -> tuple[int, V] | None:
        """The entry with the greatest key <= ``key``."""
        node = self._floor_node(key)
        return None if node is None else (node.key, node.value)

    def lower(self, key: int) -> tuple[int, V] | None:
        """The entry with the greatest key < ``key``."""
        node = self._last_below(key, False)
        return None if node is self._head else (node.key, node.value)

    def ceiling(self, key: int) -> tuple[int, V] | None:
        """The entry with the smallest key >= ``key``."""
        node = self._last_below(key, False).next[0]
        # the predecessor may have been unlinked (and a smaller key inserted after it) since we found
        # it: walk on until the key is reached, so a key present throughout is never missed
        while node is not None and node.key < key:
            node = node.next[0]
        return None if node is None else (node.key, node.value)

    def higher(self, key: int) -> tuple[int, V] | None:
        """The entry with the smallest key > ``key``."""
        node = self._last_below(key, True).next[0]
        while node is not None and node.key <= key:  # see ceiling
            node = node.next[0]
        return None if node is None else (node.key, node.value)

    def first(self) -> tuple[int, V] | None:
        """The entry with the smallest key."""
        node = self._head.next[0]
        return None if node is None else (node.key, node.value)

    def last(self) -> tuple[int, V] | None:
        """The entry with the greatest key (O(log n): there are no back pointers)."""
        node = self._head
        for level in range(self._level - 1, -1, -1):
            nxt = node.next[level]
            while nxt is not None:
                node = nxt
                nxt = node.next[level]
        return None if node is self._head else (node.key, node.value)

    def items(
        self,
        from_key: int | None = None,
        to_key: int | None = None,
        *,
        from_inclusive: bool = True,
        to_inclusive: bool = False,
    ) -> Iterator[tuple[int, V]]:
        """Entries in key order from ``from_key`` up to ``to_key`` (None: no bound), lazily.

        By default the range is half-open, ``from_key <= key < to_key``, as in Kafka's ``subMap``.
        """
        if from_key is None:
            node = self._head.next[0]
        else:
            node = self._last_below(from_key, not from_inclusive).next[0]
            while node is not None and (node.key < from_key or (not from_inclusive and node.key == from_key)):
                node = node.next[0]  # see ceiling
        while node is not None:
            key = node.key
            if to_key is not None and (key > to_key or (key == to_key and not to_inclusive)):
                return
            yield key, node.value
            node = node.next[0]

    def keys(self, from_key: int | None = None, to_key: int | None = None, **bounds: bool) -> Iterator[int]:
        """Keys in order; arguments as for ``items``."""
        return (key for key, _ in self.items(from_key, to_key, **bounds))

    def values(self, from_key: int | None = None, to_key: int | None = None, **bounds: bool) -> Iterator[V]:
        """Values in key order; arguments as for ``items``."""
        return (value for _, value in self.items(from_key, to_key, **bounds))

    # -- writing ---------------------------------------------------------------------------------------

    def _random_height(self) -> int:
        height = 1
        rand, p = self._rng.random, self._p
        while height < self._max_level and rand() < p:
            height += 1
        return height

    def _predecessors(self, key: int) -> list[_Node[V]]:
        """For each level, the last node whose key is < ``key`` (writer only)."""
        preds = [self._head] * self._max_level
        node = self._head
        for level in range(self._level - 1, -1, -1):
            nxt = node.next[level]
            while nxt is not None and nxt.key < key:
                node = nxt
                nxt = node.next[level]
            preds[level] = node
        return preds

    def put(self, key: int, value: V) -> V | None:
        """Insert ``key`` or replace its value; returns the value it replaced, or None."""
        if not isinstance(key, int) or isinstance(key, bool):
            raise InvalidInput(f"skip list keys are ints, not {type(key).__name__}")
        with self._write_lock:
            preds = self._predecessors(key)
            found = preds[0].next[0]
            if found is not None and found.key == key:
                old = found.value
                found.value = value
                return old
            height = self._random_height()
            node = _Node(key, value, height)
            for level in range(height):
                node.next[level] = preds[level].next[level]
            for level in range(height):  # publish bottom-up: rule 1
                preds[level].next[level] = node
            if height > self._level:
                self._level = height
            self._len += 1
            return None

    def remove(self, key: int) -> V | None:
        """Remove ``key``; returns its value, or None when it was not there."""
        with self._write_lock:
            preds = self._predecessors(key)
            node = preds[0].next[0]
            if node is None or node.key != key:
                return None
            for level in range(len(node.next) - 1, -1, -1):  # unlink top-down: rule 2
                if preds[level].next[level] is node:
                    preds[level].next[level] = node.next[level]
            while self._level > 1 and self._head.next[self._level - 1] is None:
                self._level -= 1
            self._len -= 1
            return node.value

    def clear(self) -> None:
        """Remove every entry (readers already inside keep walking the old nodes)."""
        with self._write_lock:
            for level in range(self._max_level - 1, -1, -1):
                self._head.next[level] = None
            self._level = 1
            self._len = 0
