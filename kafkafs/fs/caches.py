"""Small caches of the mount's partitions and open files."""

from __future__ import annotations

import threading
from collections import OrderedDict

__all__ = ["LRU", "PieceCache", "PIECES_KEPT", "SPAN_PIECES"]

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

    def put(self, key, value) -> list:
        """Keep ``value``; returns the values it pushed out (the caller may free them elsewhere)."""
        evicted = []
        with self.guard:
            self[key] = value
            self.move_to_end(key)
            while len(self) > self.capacity:
                evicted.append(self.popitem(last=False)[1])
        return evicted


#: Pieces an open file keeps: the span being read, the one rendered ahead, and one more (a span is at
#: most SPAN_PIECES pieces; see kafkafs.fs.piecerender).
SPAN_PIECES = 8
PIECES_KEPT = 4 * SPAN_PIECES


class PieceCache:
    """The last rendered pieces of one open file, so 128 KiB reads in a row decode each batch once, and
    most of them are answered from memory on the FUSE loop.

    Thread-safe: the kernel may send reads of one open file from several threads at once. ``rendering``
    is held while a span is rendered: a second read that needs it waits instead of rendering it again.
    ``ahead`` is replaced whole (one reference, under the GIL): a race at worst loses one render ahead,
    and the read that needs that span renders it."""

    __slots__ = ("_items", "_guard", "capacity", "rendering", "ahead", "_spans")

    def __init__(self, capacity: int = PIECES_KEPT) -> None:
        self._items: OrderedDict = OrderedDict()
        self._guard = threading.Lock()
        self.capacity = capacity
        self.rendering = threading.Lock()
        #: (layout, first piece of the span rendered ahead last, what renders the span after it): called
        #: once a read reaches that span (see kafkafs.fs.piecerender)
        self.ahead: tuple | None = None
        #: the first pieces of the spans rendered lately, kept after their bytes are let go: a prefill
        #: that runs late, after the reader rendered its span itself and moved on, renders nothing again
        self._spans: OrderedDict = OrderedDict()

    def span_rendered(self, pieces, i: int) -> None:
        """The span from piece ``i`` of ``pieces`` was rendered (by a read or ahead of one)."""
        with self._guard:
            self._spans[(pieces, i)] = True
            self._spans.move_to_end((pieces, i))
            while len(self._spans) > 4 * self.capacity:
                self._spans.popitem(last=False)

    def was_rendered(self, pieces, i: int) -> bool:
        """Whether the span from piece ``i`` was rendered lately (its bytes may be gone since)."""
        with self._guard:
            return (pieces, i) in self._spans

    def reached(self, pieces, i: int) -> None:
        """A read used piece ``i`` of ``pieces``: start rendering the next span if it is time."""
        ahead = self.ahead
        if ahead is not None and ahead[0] is pieces and i >= ahead[1]:
            self.ahead = None
            ahead[2]()

    def get(self, key) -> bytes | memoryview | None:
        with self._guard:
            data = self._items.get(key)
            if data is not None:
                self._items.move_to_end(key)  # least recently used goes first
            return data

    def put(self, key, data: bytes | memoryview) -> None:
        with self._guard:
            self._items[key] = data
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
