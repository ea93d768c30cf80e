"""``by-key/`` and ``table.jsonl`` of a partition (SPEC §3), from the engine's key queries
(:mod:`kafkafs.storage.keytable`): what a key's name stands for, the latest record of a key
(pretty-printed, as ``by-offset/``), every record of a key and the table (streams of records picked by
offset, :mod:`.filtered`), and the names of the keys for a listing.

The table, a key's latest record and its history are made again when the partition changed (its
:meth:`~.partition.PartitionState.shape`); an open keeps what it opened. Threads: safe to share; what
is cached is replaced whole, under a lock.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator

import orjson

from ...format.jsonview import render_raw_record_pretty
from ...format.kernel import indent_json
from ...format.keynames import key_name, parse_key_name
from ...format.recordfilter import RecordFilter
from ...storage.keyindex import KeyIndexStore
from ...storage.keytable import KeyRecord, PartitionKeys
from ...storage.segment import LogSegment
from .filtered import FilteredStream, StreamPart
from .partition import PartitionState, Shape
from .record import LRU, RenderedRecord
from .render import Renderer, disk_error, unreadable

__all__ = ["KeyViews", "LATEST_CACHE", "HISTORY_CACHE"]

#: Latest records of keys kept rendered, and keys' histories kept laid out, per partition.
LATEST_CACHE = 512
HISTORY_CACHE = 16


def _bitmap(offsets: list[int]) -> RecordFilter:
    """A filter of exactly ``offsets`` (sorted): a bitmap from the first."""
    first = offsets[0]
    bits = bytearray((offsets[-1] - first) // 8 + 1)
    for offset in offsets:
        rel = offset - first
        bits[rel >> 3] |= 1 << (rel & 7)
    return RecordFilter(bits=bytes(bits), bits_base=first)


class KeyViews:
    """The key views of one partition; ``store`` holds the key indexes (the mount's cache folder)."""

    def __init__(self, state: PartitionState, store: KeyIndexStore) -> None:
        self.state = state
        self.keys = PartitionKeys(state.log, store)
        self._lock = threading.Lock()
        self._table: tuple[Shape, FilteredStream] | None = None
        self._counted: tuple[Shape, int] | None = None
        self._latest: LRU[tuple[bytes, Shape], tuple[RenderedRecord | None]] = LRU(LATEST_CACHE)
        self._history: LRU[tuple[bytes, Shape], tuple[FilteredStream | None]] = LRU(HISTORY_CACHE)
        self._rewrites = state.rewrites
        state.add_listener(self._changed)

    def _changed(self, state: PartitionState) -> None:
        """Segments left the log (retention, compaction): the table and the histories laid out over them
        are not kept (they would keep every segment they read: review15 R15-5; an open keeps its own).
        From the thread that changed the log."""
        if state.rewrites == self._rewrites:
            return
        self._rewrites = state.rewrites
        with self._lock:
            self._table = None
        self._history.clear()

    # ------------------------------------------------------------------------------------------ names

    def key_of(self, name: str) -> bytes | None:
        """The key ``name`` stands for (a ``$sha256:`` name resolves through the indexes), or None."""
        parsed = parse_key_name(name)
        if parsed is None:
            return None
        if parsed.sha256 is not None:
            return self.keys.key_for_digest(parsed.sha256)
        return parsed.key

    # ------------------------------------------------------------------------------------------ records

    def latest(self, key: bytes) -> RenderedRecord | None:
        """``by-key/<name>.json``: the latest record of ``key`` (a tombstone included), or None. The last
        ones rendered are kept while the partition does not change (a lookup, its ``stat`` and its
        ``open`` render once)."""
        return self._held(self._latest, key, self._render_latest)

    def _held(self, cache: LRU, key: bytes, make):
        """``make(key)``, or what it gave last while the partition has not changed."""
        self.state.refresh()
        shape = self.state.shape()
        held = cache.get((key, shape))
        if held is not None:
            return held[0]
        value = make(key)
        cache.put((key, shape), (value,))
        return value

    def _render_latest(self, key: bytes) -> RenderedRecord | None:
        found = self.keys.latest(key)
        if found is None:
            return None
        view = found.view or self.state.log.locate(found.offset)
        if view is None:
            return None
        r = self.state.renderer
        got = render_raw_record_pretty(r.topic, r.partition, view.raw(), found.offset, r.mode, decoder=r.decoder,
                                       record_filter=RecordFilter(key=key))
        return None if got is None else RenderedRecord(*got)

    def history(self, key: bytes) -> FilteredStream | None:
        """``by-key/<name>.jsonl``: every record of ``key`` in offset order, or None when it has none (the
        last ones laid out are kept while the partition does not change)."""
        return self._held(self._history, key, self._lay_out_history)

    def _lay_out_history(self, key: bytes) -> FilteredStream | None:
        found = self.keys.history(key)
        if not found:
            return None
        parts = []
        for segment, position, size, records in _by_batch(found):
            parts.append(StreamPart(segment, _bitmap([r.offset for r in records]), position, position + size))
        return FilteredStream(self.state.renderer, parts)

    # ------------------------------------------------------------------------------------------ the table

    def table(self) -> FilteredStream:
        """``table.jsonl`` as of now (made again only when the partition changed). Damage, or a segment
        the disk will not give (:class:`~.render.UnreadableError`), raises CorruptRecordError: every key
        of the partition is in question."""
        self.state.refresh()
        shape = self.state.shape()
        with self._lock:
            cached = self._table
        if cached is not None and cached[0] == shape:
            return cached[1]
        try:
            with self.keys.table() as table:
                parts = [StreamPart(p.segment, p.filter, 0, p.size) for p in table.parts() if p.kept]
        except OSError as exc:  # a segment the disk will not give: damage for the reads that need it
            if not disk_error(exc):
                raise
            raise unreadable(exc, exc.filename, None) from None
        stream = FilteredStream(self.state.renderer, parts)
        with self._lock:
            self._table = (shape, stream)
        return stream

    def count(self) -> int:
        """How many keys the partition holds (tombstoned ones included)."""
        shape = self.state.shape()
        with self._lock:
            counted = self._counted
        if counted is not None and counted[0] == shape:
            return counted[1]
        n = self.keys.count_keys()
        with self._lock:
            self._counted = (shape, n)
        return n

    def names(self) -> Iterator[str]:
        """The name of every key, in the order of their latest records (for a listing: the caller checks
        :meth:`count` against its limit first)."""
        for name, _sized in self._names(sized=False):
            yield name

    def names_sized(self) -> Iterator[tuple[str, tuple[int, int] | None]]:
        """:meth:`names`, each with the size of ``by-key/<name>.json`` and its record's timestamp, from the
        same records rendered once more (None where a decoder renders them: its ``stat`` asks), so that a
        listing gives the sizes of all its names at once (review24 R24-5: a lookup each, with a scan)."""
        return self._names(sized=self.state.renderer.decoder is None)

    def _names(self, sized: bool) -> Iterator[tuple[str, tuple[int, int] | None]]:
        with self.keys.table(tombstones=True) as table:
            parts = [StreamPart(p.segment, p.filter, 0, p.size) for p in table.parts() if p.kept]
        r = self.state.renderer
        keys = _lines(FilteredStream(Renderer(r.topic, r.partition, "base64", r.on_corrupt), parts))
        shown = _lines(FilteredStream(r, parts)) if sized else None
        for line in keys:
            key = orjson.loads(line)["key"]  # base64 mode: every key is {"$base64": ...}
            name = key_name(base64.b64decode(key["$base64"])) or ""  # (a record kept has a key)
            if shown is None:
                yield name, None
                continue
            record = next(shown)  # the same record, as by-key/<name>.json shows it (compact)
            start = record.index(b',"timestamp":') + len(b',"timestamp":')  # (as render_raw_record_pretty)
            timestamp = int(record[start : record.index(b",", start)])
            yield name, (len(indent_json(record)) + 1, timestamp)


def _lines(stream: FilteredStream) -> Iterator[bytes]:
    """The lines of ``stream``, without their newlines, read a MiB at a time."""
    offset = 0
    rest = b""
    while offset < stream.total:
        data = stream.read(offset, 1 << 20)
        offset += len(data)
        lines = (rest + data).split(b"\n")
        rest = lines.pop()
        yield from lines


def _by_batch(found: list[KeyRecord]) -> Iterator[tuple[LogSegment, int, int, list[KeyRecord]]]:
    """The records grouped by the batch holding them (they come in offset order): (segment, the batch's
    position and size, its records). A record found by a scan is looked up in its segment."""
    group: list[KeyRecord] = []
    where: tuple[LogSegment, int, int] | None = None
    for record in found:
        view = record.view
        if view is None or not view.header.base_offset <= record.offset <= view.header.last_offset:
            view = record.segment.find(record.offset)
            if view is None:
                continue
        place = (record.segment, view.position, view.size)
        if group and place != where:
            yield (*where, group)  # type: ignore[misc]  # where is set once group holds a record (tables, issue 22, to type)
            group = []
        where = place
        group.append(record)
    if group and where is not None:
        yield (*where, group)
