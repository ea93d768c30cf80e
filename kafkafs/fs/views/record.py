"""``by-offset/<offset>.json``: one record, pretty-printed, from the batch that holds it.

The record is rendered from the batch's bytes (the kernel checks the CRC, skips the records before it
and writes that one's JSON, indented in C): no record of the batch becomes a Python object. The last
batches' bytes are kept for the neighbours looked up next, and the last records rendered for the
``stat`` then ``cat`` of one name. A lookup of a short, uncompressed batch already in the page cache
may run on the FUSE loop itself (``inline``); anything longer raises :class:`~kafkafs.errors.Deferred`
and runs in a worker thread.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, NamedTuple, TypeVar

from ...errors import CorruptRecordError, Deferred, UninflatableBatch, WouldBlock
from ...format.bigbatch import record_in_pieces
from ...format.jsonview import raw_pretty_sizes, render_raw_record_pretty
from ...storage.log import Log
from ...storage.records import BatchView
from .render import Renderer, disk_error, unreadable

__all__ = ["RecordFinder", "RenderedRecord", "LRU", "INLINE_BATCH_BYTES"]

#: Batches kept per partition (offset lookups in a row mostly hit the same batch).
BATCH_CACHE = 16
#: Pretty-printed records kept per partition (``stat`` then ``cat`` of one ``N.json`` renders once).
RECORD_CACHE = 512
#: A lookup may decode a batch on the FUSE loop itself (no worker thread) when it is uncompressed,
#: of an ordinary topic and at most this long: about 50 µs of work, where a trip to a worker costs more.
INLINE_BATCH_BYTES = 256 * 1024

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRU(Generic[K, V]):
    """A small least-recently-used map. Thread-safe: every method takes the one lock."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: OrderedDict[K, V] = OrderedDict()
        self._guard = threading.Lock()

    def __len__(self) -> int:
        with self._guard:
            return len(self._items)

    def get(self, key: K) -> V | None:
        with self._guard:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def values(self) -> list[V]:
        """The values, least recently used first (a copy)."""
        with self._guard:
            return list(self._items.values())

    def clear(self) -> None:
        with self._guard:
            self._items.clear()

    def put(self, key: K, value: V) -> list[V]:
        """Keep ``value``; returns the values it pushed out (the caller may free them elsewhere)."""
        evicted = []
        with self._guard:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                evicted.append(self._items.popitem(last=False)[1])
        return evicted


class RenderedRecord(NamedTuple):
    data: bytes
    timestamp: int


class _HeldBatch(NamedTuple):
    """A batch kept for the offset lookups that follow: its offsets, where it is, its bytes."""

    first: int
    last: int
    file: str
    position: int
    raw: bytes


class RecordFinder:
    """One partition's records by offset, rendered one at a time.

    Threads: safe to share; the caches take their own locks, and a record rendered twice by two
    threads at once is the same bytes (the later one is kept)."""

    def __init__(self, log: Log, renderer: Renderer, *, catch_up: Callable[[], bool] | None = None) -> None:
        self.log = log
        self.renderer = renderer
        #: reads the log again once when an offset is past its known end (a read-only log another
        #: process appends to); True when it changed
        self.catch_up = catch_up
        self._batches: LRU[tuple[int, int], _HeldBatch] = LRU(BATCH_CACHE)
        self._records: LRU[int, RenderedRecord] = LRU(RECORD_CACHE)

    def clear(self) -> None:
        """Forget every batch and record kept (segments went away: offsets may hold other records)."""
        self._batches.clear()
        self._records.clear()

    def find(self, offset: int, *, inline: bool = False) -> RenderedRecord | None:
        """``by-offset/<offset>.json``: the record pretty-printed, or None if there is no such offset.

        ``inline``: called on the FUSE loop; raises :class:`Deferred` rather than render from a batch
        that is compressed, long, of an internal topic or not in the page cache (a worker thread does that)."""
        found = self._records.get(offset)
        if found is not None:
            return found
        renderer = self.renderer
        if inline and renderer.decoder is not None:
            raise Deferred(offset)
        held = self._batch_holding(offset, inline)
        if held is None and self.catch_up is not None and offset >= self.log.log_end_offset:
            if inline:  # the refresh reads the folder: a worker does it
                raise Deferred(offset)
            if self.catch_up():
                held = self._batch_holding(offset)
        if held is None:
            return None
        try:
            try:
                rendered = render_raw_record_pretty(
                    renderer.topic, renderer.partition, held.raw, offset, renderer.mode, decoder=renderer.decoder
                )
            except UninflatableBatch as exc:  # valid data not inflated at once (R15-7): read up to the record
                if inline:
                    raise Deferred(offset) from None
                if exc.base_offset is None:  # a legacy wrapper
                    raise
                rendered = record_in_pieces(renderer.topic, renderer.partition, held.raw, offset, renderer.mode,
                                            decoder=renderer.decoder)
        except CorruptRecordError as exc:
            exc = exc.at(held.file, held.position)
            renderer.on_corrupt(exc)
            raise exc from None
        if rendered is None:
            return None
        found = RenderedRecord(*rendered)
        self._records.put(offset, found)
        return found

    def sizes(self, view: BatchView, first: int, last: int) -> dict[int, tuple[int, int]] | None:
        """offset -> (size, timestamp) of the files of the records ``first..last`` of the batch ``view`` (a
        listing's: every name of a batch sized from one render of it, review24 R24-5); None where that is
        not cheap or not sure (a decoder renders the records, the batch is damaged or too large to
        inflate at once): each name's ``stat`` asks then, and says any damage."""
        renderer = self.renderer
        if renderer.decoder is not None:
            return None
        try:
            return raw_pretty_sizes(renderer.topic, renderer.partition, view.raw(), renderer.mode, lo=first, hi=last)
        except (CorruptRecordError, UninflatableBatch, OSError):
            return None

    def cached(self, offset: int) -> RenderedRecord | None:
        """``find(offset)`` if it is in memory (nothing read, nothing decoded), else None."""
        return self._records.get(offset)

    def _batch_holding(self, offset: int, inline: bool = False) -> _HeldBatch | None:
        """The batch that may hold ``offset`` (its ``.log``, position and bytes) if any batch can: a
        recently read one, else the one the engine locates, kept for the lookups that follow (a whole
        batch of ``by-offset/`` names read in a row). Raw bytes are kept, not decoded records: one
        object to free, so an eviction costs nothing."""
        log_ = self.log
        if offset < log_.log_start_offset or offset >= log_.log_end_offset:
            return None
        for held in self._batches.values():
            if held.first <= offset <= held.last:
                return held
        try:
            view = log_.locate(offset, nowait=inline)
        except WouldBlock:  # on the FUSE loop, the batch is not in the page cache: a worker reads it
            raise Deferred(offset) from None
        except CorruptRecordError as exc:
            self.renderer.on_corrupt(exc)
            raise
        except OSError as exc:  # the disk would not give the batch: EIO for this lookup, said once
            if not disk_error(exc):
                raise
            segment = log_.segments.floor(offset)
            error = unreadable(exc, str(segment.log_path) if segment is not None else None, None)
            self.renderer.on_corrupt(error)
            raise error from None
        if view is None:
            return None
        header = view.header
        if inline and (header.attributes & 0x07 or header.size > INLINE_BATCH_BYTES):
            raise Deferred(offset)
        held = _HeldBatch(header.base_offset, header.last_offset, str(view.segment.log_path), view.position, view.raw())
        self._batches.put((view.segment.base_offset, view.position), held)
        return held
