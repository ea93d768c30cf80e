"""A partition as a table: the latest record of a key, every record of a key, and the table itself (the
latest record of every key whose latest record is not a tombstone), from the key indexes of the sealed
segments (:mod:`.keyindex`) and a scan of the active segment.

Which records count, for all three: records at or past the log start offset (those below it are gone
for every reader, as after ``kafka-delete-records``) of data batches (control records never) that have
a key and are not in a transaction that aborted (the ``.txnindex`` entries of the partition say which,
when the query runs). A hash found in an index is confirmed against the record's key before it is
served; the table takes hash equality for key equality, as the cleaner's offset map does (MD5), so
the table is what compaction keeps, minus tombstones.

The table in bounded memory: the index entries are read by hash range (a range holds at most
:data:`RANGE_ENTRIES` entries of all segments together), newest segment first, so that the first
segment holding a hash holds its latest record; a set of the range's hashes says which are decided,
and the kept records are marked in a bitmap of offsets per segment (one bit per offset). When the
bitmaps of all segments would pass :data:`BITMAP_BUDGET`, segments are taken in groups, oldest first,
each group a pass over the indexes of itself and the newer segments. The records are then read in
offset order, each segment's bitmap a filter (:class:`~kafkafs.format.recordfilter.RecordFilter`).

Damage (offsets out of order included, judged as every reader judges them) fails every query whose
answer could depend on what follows it (CorruptRecordError): the table always, a latest lookup when no
newer segment answered it, a history after the records before it (:meth:`~PartitionKeys.history_to_damage`).
A batch too large to inflate (valid data, :class:`~kafkafs.errors.UninflatableBatch`) is gone past: it
fails the table and a history as damage does, and a latest lookup only when no record of the key
follows it (what it holds is older: review19 R19-2).

The active segment is scanned; once it is large (:data:`ACTIVE_INDEX_FROM`), or lookups have scanned it a
few times over (:data:`ACTIVE_INDEX_AFTER_SCANS`), an index of what it holds is made in a temporary file
and kept while it grows, and only what was appended since is scanned. A table made of the whole active
segment leaves its index for the lookups that follow (a listing of ``by-key/``, then a ``stat`` of each name).

Threads: a :class:`PartitionKeys` keeps its log, its store and the active segment's index (made under
a lock): any thread may query it. A :class:`Table` belongs to one reader.
"""

from __future__ import annotations

import os
import threading
from array import array
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from ..errors import CorruptRecordError
from ..format.keyindex import (
    ENTRY,
    TRANSACTIONAL,
    TXN,
    key_hash,
    table_latest,
)
from ..format.keynames import key_sha256
from ..format.recordfilter import RecordFilter
from .keyfile import DamagedIndex, SegmentKeyIndex, Skipped, temporary_index_file
from .keyindex import KeyIndexStore
from .keyscan import KeyConfirmer, ScanDamage, ScanSkip, build_key_index, scan_entries
from .records import BatchView
from .segment import LogSegment
from .transactions import segment_aborted

if TYPE_CHECKING:
    from .log import Log

_T = TypeVar("_T")

#: producer id -> [(first offset, ABORT marker offset)] (:func:`_aborted_by_producer`).
_Aborted = dict[int, list[tuple[int, int]]]

__all__ = ["PartitionKeys", "KeyRecord", "Table", "TablePart", "RANGE_ENTRIES", "BITMAP_BUDGET"]

#: Index entries of all segments together handled at once by the table (hash ranges are cut so).
RANGE_ENTRIES = 1 << 18
#: Bytes of offset bitmaps the table holds at once (past it, segments are taken in groups).
BITMAP_BUDGET = 32 << 20
#: An active segment this large gets an index of what it holds (lookups then scan only what follows);
#: it is made again once that much more was appended.
ACTIVE_INDEX_FROM = 16 << 20
ACTIVE_REINDEX_BYTES = 64 << 20
#: An active segment of any size gets an index once lookups have scanned this many times its size since it
#: was last indexed (or became active): a run of lookups (``ls -l by-key/``: one per name, review24 R24-5)
#: then scans only what was appended since, for at most about twice the work of scanning it each time.
ACTIVE_INDEX_AFTER_SCANS = 2


class KeyRecord(NamedTuple):
    """A record found for a key: its offset, the segment holding it, and the batch holding it (a
    :class:`~kafkafs.storage.records.BatchView`, to render it from without reading it again; None
    when the record was found by a scan)."""

    offset: int
    segment: LogSegment
    view: BatchView | None = None


class TablePart(NamedTuple):
    """One segment of a table: the filter of its kept records (a bitmap of offsets from its base), and
    the bytes of it the table covers (``size``: the active segment's as it was when the table was made)."""

    segment: LogSegment
    filter: RecordFilter
    kept: int
    size: int


class _Source(NamedTuple):
    """A segment with its key index, its aborted ranges (None: none) and how many offsets it spans."""

    segment: LogSegment
    keys: SegmentKeyIndex
    aborted: array[int] | None
    span: int


def _aborted_by_producer(segments: Sequence[LogSegment]) -> _Aborted:
    """producer id -> [(first offset, ABORT marker offset)] of every aborted transaction of the partition
    (its ``.txnindex`` entries; a segment without its ``.index`` file: what a broker's recovery writes,
    :func:`.transactions.segment_aborted`)."""
    out: dict[int, list[tuple[int, int]]] = {}
    for _segment, entries in segment_aborted(segments):
        for entry in entries:
            out.setdefault(entry.producer_id, []).append((entry.first_offset, entry.last_offset))
    return out


def _batch_aborted(aborted: dict[int, list[tuple[int, int]]], pid: int, base_offset: int) -> bool:
    """Whether a transactional batch of ``pid`` starting at ``base_offset`` belongs to an aborted
    transaction (one that began at or before it and whose marker follows it)."""
    return any(first <= base_offset < marker for first, marker in aborted.get(pid, ()))


def _aborted_ranges(txns: list[tuple[int, int, int]], base: int, aborted: _Aborted) -> array[int] | None:
    """The rel ranges ``[lo, hi]`` of the transactional batches that aborted (sorted, disjoint)."""
    if not aborted or not txns:
        return None
    ranges = array("I")
    for first, last, pid in txns:
        if _batch_aborted(aborted, pid, first):
            ranges.extend((max(first - base, 0), min(max(last - base, 0), 2**32 - 1)))
    return ranges or None


def _in_aborted(txns: list[tuple[int, int, int]], offset: int, aborted: _Aborted) -> bool:
    """Whether the transactional record at ``offset`` (one of the batches ``txns``) aborted."""
    for first, last, pid in txns:
        if first <= offset <= last:
            return _batch_aborted(aborted, pid, first)
    return False


class _Scan(NamedTuple):
    """What :meth:`PartitionKeys._scan` found: (rel, flags) of the records, the transactional batches, the
    damage that ended it and the batches too large to inflate it went past."""

    found: list[tuple[int, int]]
    txns: list[tuple[int, int, int]]
    damage: CorruptRecordError | None
    skipped: Skipped | None


def _judged(found: list[KeyRecord], damage: CorruptRecordError | None, skipped: Skipped | None,
            newest_only: bool) -> tuple[list[KeyRecord], CorruptRecordError | None]:
    """A segment's records of a key (by offset; ``newest_only``: at most its newest) and what stops the
    answer: the ``damage`` that ended its scan, or the batches too large to inflate it went past
    (``skipped``): the newest record is known when it follows every one of them (what they hold is
    older, review19 R19-2); a history holds the records before the first of them, then fails there."""
    if skipped is None:
        return (found[-1:] if newest_only else found), damage
    if newest_only:
        if damage is None and found and found[-1].offset > skipped.last:
            return found[-1:], None
        return [], damage if damage is not None else skipped.error
    return [r for r in found if r.offset < skipped.first], skipped.error


def _unpack_txns(raw: bytes) -> list[tuple[int, int, int]]:
    return [TXN.unpack_from(raw, i) for i in range(0, len(raw), TXN.size)]


class Table:
    """The table as it was when it was made: :meth:`parts` gives each segment's filter of kept records,
    oldest first. ``kept``: the records in it; ``keys``: every key with a latest record (tombstones
    included; exact when the table keeps tombstones). Records below ``start`` (the log start offset)
    are gone for every reader: a key whose latest record lies there has none. Close it to drop the
    active segment's temporary index."""

    def __init__(self, sources: list[_Source], tombstones: bool, temporary: SegmentKeyIndex | None,
                 start: int = 0) -> None:
        self._sources = sources  # oldest first
        self._tombstones = tombstones
        self._temporary = temporary
        self._start = start
        self._groups = _groups(sources)
        self._cached: tuple[int, list[TablePart]] | None = None
        self._distinct = self._below_start = 0
        self.kept = sum(p.kept for g in range(len(self._groups)) for p in self._group(g))
        self.keys = self._distinct - self._below_start

    def _group(self, g: int) -> list[TablePart]:
        cached = self._cached
        if cached is not None and cached[0] == g:
            return cached[1]
        lo, hi = self._groups[g]
        sources = self._sources
        newest_first = list(reversed(sources[lo:]))  # older segments cannot change the group's keys
        bitmaps = [bytearray((s.span + 7) // 8) if lo <= len(sources) - 1 - i < hi else None
                   for i, s in enumerate(newest_first)]
        kept = distinct = 0
        bits = _range_bits(sum(s.keys.entries for s in newest_first))
        for prefix in range(1 << bits):
            slices = [s.keys.slice(prefix, bits) for s in newest_first]
            k, d = table_latest(slices, [s.aborted for s in newest_first], bitmaps, self._tombstones)
            kept += k
            distinct += d
        if lo == 0:
            self._distinct = distinct
        parts = []
        for i, source in enumerate(newest_first):
            bitmap = bitmaps[i]
            if bitmap is not None:
                self._below_start += _clear_below(bitmap, self._start - source.keys.base_offset)
                count = int.from_bytes(bitmap, "little").bit_count()
                parts.append(TablePart(source.segment, RecordFilter(bits=bytes(bitmap),
                                                                    bits_base=source.keys.base_offset), count,
                                       source.keys.head["scanned"]))
        parts.reverse()
        self._cached = (g, parts)
        return parts

    def parts(self) -> Iterator[TablePart]:
        """Each segment's kept records, oldest first (groups computed again as they are reached)."""
        for g in range(len(self._groups)):
            yield from self._group(g)

    def close(self) -> None:
        if self._temporary is not None:
            self._temporary.close()
            self._temporary = None

    def __enter__(self) -> Table:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _clear_below(bitmap: bytearray, end: int) -> int:
    """Clear the bits of ``bitmap`` below bit ``end``; how many were set."""
    if end <= 0:
        return 0
    bits = int.from_bytes(bitmap, "little")
    low = bits & ((1 << end) - 1)
    bitmap[:] = (bits ^ low).to_bytes(len(bitmap), "little")
    return low.bit_count()


def _range_bits(entries: int) -> int:
    bits = 0
    while bits < 16 and entries >> bits > RANGE_ENTRIES:
        bits += 1
    return bits


def _groups(sources: list[_Source]) -> list[tuple[int, int]]:
    """Consecutive segments (oldest first) whose bitmaps fit :data:`BITMAP_BUDGET` together."""
    groups = []
    start, used = 0, 0
    for i, s in enumerate(sources):
        size = (s.span + 7) // 8
        if i > start and used + size > BITMAP_BUDGET:
            groups.append((start, i))
            start, used = i, 0
        used += size
    if sources:
        groups.append((start, len(sources)))
    return groups


class PartitionKeys:
    """Key queries over one :class:`~kafkafs.storage.log.Log` (see the module's docstring), with the
    indexes of ``store``; ``build`` False: use only the indexes already built (segments without one are
    scanned)."""

    def __init__(self, log: Log, store: KeyIndexStore, *, build: bool = True) -> None:
        self.log = log
        self.store = store
        self.build = build
        self._active_lock = threading.Lock()
        self._active: tuple[LogSegment, int, SegmentKeyIndex] | None = None  # (segment, bytes indexed, index)
        self._scanned: tuple[LogSegment | None, int] = (None, 0)  # (active segment, bytes lookups scanned since indexed)

    # ------------------------------------------------------------------------------------------ helpers

    def _index(self, segment: LogSegment) -> SegmentKeyIndex | None:
        return self.store.get(segment, self.log.topic, self.log.partition, build=self.build,
                              upper=self.log.segments.upper(segment.base_offset))

    def _segments(self) -> tuple[list[LogSegment], LogSegment | None]:
        segments = list(self.log.segments)
        if not segments:
            return [], None
        return segments[:-1], segments[-1]

    def _query(self, fn: Callable[[], _T]) -> _T:
        """Run ``fn``; an index that fails a check while read is dropped (rebuilt by the next use) and
        the query runs again, as long as each failure is a different index's."""
        dropped: set[int] = set()
        while True:
            try:
                return fn()
            except DamagedIndex as exc:
                if exc.index is None or id(exc.index) in dropped:
                    raise CorruptRecordError(f"the key index fails its checks: {exc}") from None
                dropped.add(id(exc.index))
                self.store.forget(exc.index)

    def _scan(self, segment: LogSegment, record_filter: RecordFilter, start: int = 0) -> _Scan:
        """(rel, flags) of the records of a segment from position ``start`` on that the filter accepts,
        its transactional batches (a scan: the active segment, or a segment without an index), the
        damage that ended the scan (None: none), the records before it found, and the batches too large
        to inflate it went past (None: none)."""
        found: list[tuple[int, int]] = []
        txns: list[tuple[int, int, int]] = []
        skipped: Skipped | None = None
        for step in scan_entries(segment, segment.size, record_filter, start, upper=self.log.segments.upper(segment.base_offset)):
            if isinstance(step, ScanDamage):
                return _Scan(found, txns, step.error, skipped)
            if isinstance(step, ScanSkip):
                skipped = Skipped.of(skipped, step.first, step.last, step.error)
                continue
            entries = step.got.entries
            found.extend(ENTRY.unpack_from(entries, i)[2:] for i in range(0, len(entries), ENTRY.size))
            txns.extend(_unpack_txns(step.got.txns))
        return _Scan(found, txns, None, skipped)

    def _active_index(self, segment: LogSegment) -> SegmentKeyIndex | None:
        """An index of what the active segment holds, once it is large or lookups have scanned it
        :data:`ACTIVE_INDEX_AFTER_SCANS` times over (None before: it is scanned): made in a temporary
        file, and kept while the segment grows by less than :data:`ACTIVE_REINDEX_BYTES` past it and the
        scans of what was appended since stay below that bound too (lookups scan only the bytes appended
        since). A segment that shrank is indexed again."""
        size = segment.size
        with self._active_lock:
            held = self._active
            scanned = self._scanned[1] if self._scanned[0] is segment else 0
            scanned_enough = scanned >= ACTIVE_INDEX_AFTER_SCANS * max(size, 1)
            if held is not None and held[0] is segment and held[1] <= size < held[1] + ACTIVE_REINDEX_BYTES \
                    and not scanned_enough:
                return held[2]
            if size < ACTIVE_INDEX_FROM and not scanned_enough:
                return None
            index = _temporary_index(segment)  # the one it replaces closes when its last reader lets go
            self._scanned = (segment, 0)
            if index.damaged is not None:
                return None  # the scan says where (batches too large to inflate only: the index serves)
            self._active = (segment, index.head["scanned"], index)
            return index

    def _note_scanned(self, segment: LogSegment, nbytes: int) -> None:
        """A lookup scanned ``nbytes`` of the active ``segment`` (counted towards indexing it)."""
        with self._active_lock:
            before = self._scanned[1] if self._scanned[0] is segment else 0
            self._scanned = (segment, before + nbytes)

    def _held_whole(self, segment: LogSegment) -> SegmentKeyIndex | None:
        """The index kept of the active ``segment`` when it holds all of it as it is now, else None."""
        with self._active_lock:
            held = self._active
            if held is not None and held[0] is segment and held[1] == segment.size:
                return held[2]
            return None

    def _keep_active(self, segment: LogSegment, index: SegmentKeyIndex) -> bool:
        """Keep ``index`` (of all of the active ``segment``, made for a table) for the lookups that follow;
        False when it is not kept (damaged, or one as new is held)."""
        if index.damaged is not None:
            return False
        with self._active_lock:
            held = self._active
            if held is not None and held[0] is segment and held[1] >= index.head["scanned"]:
                return False
            self._active = (segment, index.head["scanned"], index)
            self._scanned = (segment, 0)
            return True

    def _candidates(self, segment: LogSegment, key: bytes, hashed: tuple[int, int], aborted: _Aborted, active: bool,
                    newest_only: bool = False) -> tuple[list[KeyRecord], CorruptRecordError | None]:
        """The records of ``key`` in ``segment`` that count (not aborted), confirmed, by offset
        (``newest_only``: only the newest, confirming as few candidates as it takes), and the damage a
        scan of it stopped at (None: none; the records are those before it)."""
        base = segment.base_offset
        index = self._active_index(segment) if active else self._index(segment)
        if index is None or active:  # a scan compares the key itself: nothing to confirm
            start = index.head["scanned"] if index is not None else 0
            size = segment.size
            if index is not None and start >= size:  # the index holds all of it: nothing to scan
                scan = _Scan([], [], None, None)
            else:
                scan = self._scan(segment, RecordFilter(key=key), start)
            if active:
                self._note_scanned(segment, max(size - start, 0))
            out = [KeyRecord(base + rel, segment) for rel, flags in scan.found
                   if not (flags & TRANSACTIONAL and _in_aborted(scan.txns, base + rel, aborted))]
            damage, skipped = scan.damage, scan.skipped
            if index is not None:  # what the index holds comes before what was scanned
                first = index.skipped(segment.log_path)
                if first is not None:
                    skipped = first if skipped is None else first._replace(last=max(first.last, skipped.last))
                if not (newest_only and out):
                    out = self._indexed(segment, index, key, hashed, aborted, newest_only) + out
        else:
            damage, skipped = index.true_damage(segment.log_path), index.skipped(segment.log_path)
            out = self._indexed(segment, index, key, hashed, aborted, newest_only)
        return _judged(out, damage, skipped, newest_only)

    def _indexed(self, segment: LogSegment, index: SegmentKeyIndex, key: bytes, hashed: tuple[int, int], aborted: _Aborted,
                 newest_only: bool) -> list[KeyRecord]:
        """:meth:`_candidates` from a key index: its entries of the hash, not aborted, confirmed."""
        base = segment.base_offset
        entries = index.find(*hashed)
        txns = index.transactional_batches() if any(f & TRANSACTIONAL for _r, f in entries) else []
        offsets = [base + rel for rel, flags in entries
                   if not (flags & TRANSACTIONAL and _in_aborted(txns, base + rel, aborted))]
        confirm = KeyConfirmer(segment, key)
        out = []
        for offset in reversed(offsets) if newest_only else offsets:
            if confirm(offset):
                out.append(KeyRecord(offset, segment, confirm.view))
                if newest_only:
                    break
        return out[::-1] if newest_only else out

    # ------------------------------------------------------------------------------------------ queries

    def latest(self, key: bytes) -> KeyRecord | None:
        """The latest record of ``key`` (a tombstone included), or None (also when it lies below the log
        start offset: gone for every reader)."""
        found = self._query(lambda: self._latest(key))
        return found if found is not None and found.offset >= self.log.log_start_offset else None

    def _latest(self, key: bytes) -> KeyRecord | None:
        sealed, active = self._segments()
        if active is None:
            return None
        hashed = key_hash(key)
        aborted = _aborted_by_producer([*sealed, active])
        for segment in [active, *reversed(sealed)]:
            found, damage = self._candidates(segment, key, hashed, aborted, segment is active, newest_only=True)
            if damage is not None:
                raise damage  # the newest may lie past it
            if found:
                return found[-1]
        return None

    def history(self, key: bytes, *, include_aborted: bool = False) -> list[KeyRecord]:
        """Every record of ``key``, by offset (``include_aborted``: records of aborted transactions too,
        as a plain read shows them). Damage raises :class:`CorruptRecordError`."""
        found, damage = self.history_to_damage(key, include_aborted=include_aborted)
        if damage is not None:
            raise damage
        return found

    def history_to_damage(self, key: bytes, *, include_aborted: bool = False
                          ) -> tuple[list[KeyRecord], CorruptRecordError | None]:
        """:meth:`history` up to the first damage, and that damage (None: none): a reader prints the
        records before it, then says it (SPEC §4), as a plain read does. Records below the log start
        offset are left out (gone for every reader)."""
        found, damage = self._query(lambda: self._history(key, include_aborted))
        start = self.log.log_start_offset
        return [r for r in found if r.offset >= start], damage

    def _history(self, key: bytes, include_aborted: bool) -> tuple[list[KeyRecord], CorruptRecordError | None]:
        sealed, active = self._segments()
        if active is None:
            return [], None
        hashed = key_hash(key)
        aborted = {} if include_aborted else _aborted_by_producer([*sealed, active])
        out: list[KeyRecord] = []
        for segment in [*sealed, active]:
            found, damage = self._candidates(segment, key, hashed, aborted, segment is active)
            out += found
            if damage is not None:
                return out, damage
        return out, None

    def key_for_digest(self, digest: bytes) -> bytes | None:
        """The key whose SHA-256 is ``digest`` and whose name is that digest (``$sha256:`` names), if
        the partition has a record of it."""
        return self._query(lambda: self._key_for_digest(digest))

    def _key_for_digest(self, digest: bytes) -> bytes | None:
        sealed, active = self._segments()
        if active is None:
            return None
        unknown: CorruptRecordError | None = None  # a batch too large to inflate gone past: it may hold it
        for segment in [active, *reversed(sealed)]:
            index = None if segment is active else self._index(segment)
            if index is None:
                for step in scan_entries(segment, segment.size, upper=self.log.segments.upper(segment.base_offset)):
                    if isinstance(step, ScanDamage):
                        step.raise_it()
                    if isinstance(step, ScanSkip):
                        unknown = unknown or step.error
                        continue
                    for _rel, key in step.got.longs:
                        if key_sha256(key) == digest:
                            return key
                continue
            skipped = index.skipped(segment.log_path)
            if skipped is not None:
                unknown = unknown or skipped.error
            hashed = index.long_key(digest)
            entries = index.find(*hashed) if hashed is not None else []
            for rel, _flags in entries:
                found = self._key_at(segment, segment.base_offset + rel)
                if found is not None and key_sha256(found) == digest:
                    return found
        if unknown is not None:
            raise unknown
        return None

    def _key_at(self, segment: LogSegment, offset: int) -> bytes | None:
        view = segment.find(offset)
        if view is None:
            return None
        batch = view.decode()
        for found, key in zip(batch.offsets, batch.keys, strict=True):
            if found == offset:
                key_: bytes | None = key
                return key_
        return None

    def table(self, *, tombstones: bool = False) -> Table:
        """The table as of now (``tombstones``: keys whose latest record is a tombstone stay in it, for a
        listing of every key). Close it when done."""
        return self._query(lambda: self._table(tombstones))

    def _table(self, tombstones: bool) -> Table:
        sealed, active = self._segments()
        segments = [*sealed, active] if active is not None else []
        aborted = _aborted_by_producer(segments)
        sources: list[_Source] = []
        for segment in sealed:
            index = self.store.get(segment, self.log.topic, self.log.partition,
                                   upper=self.log.segments.upper(segment.base_offset))
            assert index is not None
            damage = index.damage(segment.log_path)
            if damage is not None:
                raise damage
            sources.append(self._source(segment, index, aborted))
        temporary = None
        if active is not None and active.size:
            index = self._held_whole(active)  # made by the lookups or the table before, of all of it
            if index is None:
                index = temporary = _temporary_index(active)
            try:
                damage = index.damage(active.log_path)
                if damage is not None:
                    raise damage
                sources.append(self._source(active, index, aborted))
            except BaseException:
                if temporary is not None:
                    temporary.close()
                raise
            if temporary is not None and self._keep_active(active, temporary):
                temporary = None  # kept for the lookups that follow: closed when replaced, not with the table
        try:
            return Table(sources, tombstones, temporary, self.log.log_start_offset)
        except BaseException:
            if temporary is not None:
                temporary.close()
            raise

    def _source(self, segment: LogSegment, index: SegmentKeyIndex, aborted: _Aborted) -> _Source:
        txns = index.transactional_batches() if aborted and index.txns else []
        span = max(index.next_offset - index.base_offset, 0)
        return _Source(segment, index, _aborted_ranges(txns, index.base_offset, aborted), span)

    def count_keys(self) -> int:
        """How many keys have a latest record (tombstones included)."""
        with self.table(tombstones=True) as table:
            return table.keys


def _temporary_index(segment: LogSegment) -> SegmentKeyIndex:
    """An index of the active segment as it is now, in a temporary file of this process (removed when
    the index is closed or dropped)."""
    f, path = temporary_index_file()
    key = ["active", segment.base_offset, segment.size]
    try:
        with f:
            build_key_index(segment, f, key, size=segment.size)
            return SegmentKeyIndex.open(f, key, path, temporary=True)
    except BaseException:
        os.unlink(path)
        raise

