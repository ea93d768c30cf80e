"""Small caches of the mount's partitions and open files."""

from __future__ import annotations

import threading
from collections import OrderedDict

__all__ = ["LRU", "PieceCache"]


class LRU(OrderedDict):
    """A small least-recently-used map. Thread-safe: every method takes ``guard``."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.guard = threading.Lock()

    def get_item(self, key):
        with self.guard:
            value = self.get(key)
            if value is not None:
                self.move_to_end(key)
            return value

    def clear_all(self) -> None:
        with self.guard:
            self.clear()

    def put(self, key, value) -> None:
        with self.guard:
            self[key] = value
            self.move_to_end(key)
            while len(self) > self.capacity:
                self.popitem(last=False)


#: Pieces an open file keeps: two spans rendered ahead (see PartitionState.render_piece) and a few more.
PIECES_KEPT = 24


class PieceCache:
    """The last rendered pieces of one open file, so 128 KiB reads in a row decode each batch once, and
    most of them are answered from memory on the FUSE loop.

    Thread-safe: the kernel may send reads of one open file from several threads at once. ``rendering``
    is held while a span is rendered: a second read that needs it waits instead of rendering it again."""

    __slots__ = ("_items", "_guard", "capacity", "rendering")

    def __init__(self, capacity: int = PIECES_KEPT) -> None:
        self._items: OrderedDict = OrderedDict()
        self._guard = threading.Lock()
        self.capacity = capacity
        self.rendering = threading.Lock()

    def get(self, key) -> bytes | memoryview | None:
        with self._guard:
            return self._items.get(key)

    def put(self, key, data: bytes | memoryview) -> None:
        with self._guard:
            self._items[key] = data
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
