"""Scanning a segment for its key entries, and building its key index file in bounded memory.

:func:`scan_entries` reads a segment in chunks of 1 MiB: the kernel indexes whole runs of uncompressed
batches (:func:`~kafkafs.format.keyindex.span_entries`), the others are decoded one by one; damage ends
the scan with a :class:`ScanDamage`. :func:`build_key_index` keeps up to :data:`RUN_BYTES` of entries
in memory, and past that sorts them and spills them to a temporary file in 256 buckets by hash prefix;
at the end each bucket is read back, sorted and written in order (:class:`~.keyfile.BlockWriter`), so
memory stays bounded whatever the number of keys. Long keys' digests are kept the same way (sorted
runs, merged). Damage stops the scan: the file records where (``damaged``); offsets out of order are
damage as every reader judges them (:mod:`.validation`). A batch too large to inflate (valid data) is
gone past: its records have no entries, the file records the first such batch and the last offset of
the newest (``skipped``: a key's latest record is known when one of it follows them, review19 R19-2). :class:`KeyConfirmer` checks a key index's
candidates (hash matches) against the records.

Each call owns what it makes, safe from any thread; a :class:`KeyConfirmer` belongs to one query.
"""

from __future__ import annotations

import heapq
import os
import tempfile
from array import array
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple, NoReturn

from .. import __version__
from ..errors import CorruptRecordError, UninflatableBatch, tag_os_error
from ..format.batch import records_section, validate_batch
from ..format.batchheader import BatchHeader, v2_offsets
from ..format.jsonspan import cut_off
from ..format.keyindex import (
    ENTRY,
    ENTRY_SIZE,
    TXN,
    KeyEntries,
    batch_entries,
    key_hash,
    prefix_counts,
    section_entries,
    sort_entries,
    span_entries,
)
from ..format.keynames import key_sha256
from ..format.recordfilter import RecordFilter
from .cachedir import segment_path
from .keyfile import FORMAT_VERSION, LONG, BlockWriter, Skipped, fanout_bits
from .records import BatchView
from .segments import is_sealed
from .validation import in_order, offsets_problem

if TYPE_CHECKING:
    from .segment import LogSegment

__all__ = ["Scanned", "ScanDamage", "ScanSkip", "Skipped", "scan_entries", "build_key_index", "KeyConfirmer",
           "RUN_BYTES", "LONG_RUN"]


#: Entries kept in memory while building before they are sorted and spilled (bytes).
RUN_BYTES = 16 << 20
#: Buckets of a spill (by the top bits of h1): each is sorted alone at the end.
SPILL_BITS = 8
#: Long keys (their digests) kept in memory while building before they are spilled.
LONG_RUN = 65536
#: Bytes of log read per step.
CHUNK_BYTES = 1 << 20


class _Entries:
    """Entries while a segment is scanned: in memory up to :data:`RUN_BYTES`, then sorted and spilled
    by bucket to a temporary file."""

    def __init__(self, tmpdir: str | None) -> None:
        self.tmpdir = tmpdir
        self.run = bytearray()
        self.count = 0
        self.spill: BinaryIO | None = None
        self.blocks: list[list[tuple[int, int]]] = [[] for _ in range(1 << SPILL_BITS)]

    def add(self, entries: bytes) -> None:
        self.run += entries
        self.count += len(entries) // ENTRY_SIZE
        if len(self.run) >= RUN_BYTES:
            self._spill()

    def _spill(self) -> None:
        run = self.run
        sort_entries(run)
        counts = array("Q", bytes(8 << SPILL_BITS))
        prefix_counts(run, SPILL_BITS, counts)
        if self.spill is None:
            self.spill = tempfile.TemporaryFile(prefix="kafkafs-keys-", dir=self.tmpdir)  # noqa: SIM115
        at = 0
        for b, n in enumerate(counts):
            if n:
                pos = self.spill.seek(0, os.SEEK_END)
                self.spill.write(memoryview(run)[at * ENTRY_SIZE : (at + n) * ENTRY_SIZE])
                self.blocks[b].append((pos, n * ENTRY_SIZE))
                at += n
        self.run = bytearray()

    def sorted_parts(self) -> Iterator[bytearray]:
        """The entries, sorted, in consecutive parts."""
        if self.spill is None:
            sort_entries(self.run)
            yield self.run
            return
        if self.run:
            self._spill()
        self.spill.flush()
        fd = self.spill.fileno()
        for blocks in self.blocks:
            if not blocks:
                continue
            part = bytearray()
            for pos, size in blocks:
                part += os.pread(fd, size, pos)
            sort_entries(part)  # runs come in scan order, and the sort keeps it for equal hashes
            yield part

    def close(self) -> None:
        if self.spill is not None:
            self.spill.close()
            self.spill = None


class _Longs:
    """The long keys' (sha256, h1, h2) rows: sorted runs spilled past :data:`LONG_RUN`, merged at the end."""

    def __init__(self, tmpdir: str | None) -> None:
        self.tmpdir = tmpdir
        self.rows: set[bytes] = set()
        self.runs: list[BinaryIO] = []

    def add(self, longs: list[tuple[int, bytes]]) -> None:
        for _rel, key in longs:
            h1, h2 = key_hash(key)
            self.rows.add(LONG.pack(key_sha256(key), h1, h2))
        if len(self.rows) >= LONG_RUN:
            run = tempfile.TemporaryFile(prefix="kafkafs-longs-", dir=self.tmpdir)  # noqa: SIM115
            run.write(b"".join(sorted(self.rows)))
            run.seek(0)
            self.runs.append(run)
            self.rows = set()

    def merged(self) -> Iterator[bytes]:
        def read_run(f: BinaryIO) -> Iterator[bytes]:
            while True:
                row = f.read(LONG.size)
                if len(row) < LONG.size:
                    return
                yield row

        last = None
        for row in heapq.merge(sorted(self.rows), *(read_run(f) for f in self.runs)):
            if row != last:
                yield row
                last = row

    def close(self) -> None:
        for f in self.runs:
            f.close()
        self.runs = []


class _TooLarge(Exception):
    """The batch :func:`_slow_batch` read is valid but too large to inflate: ``error`` (its own), where the
    next batch starts (``after``), its first offset (None for a legacy wrapper: not in its header) and its
    last offset."""

    def __init__(self, error: UninflatableBatch, after: int, first: int | None, last: int) -> None:
        super().__init__(error)
        self.error, self.after, self.first, self.last = error, after, first, last


def _slow_batch(segment: LogSegment, pos: int, size: int, record_filter: RecordFilter | None,
                expect: int | None, upper: int | None) -> tuple[KeyEntries, int, int] | None:
    """The entries of the one batch at ``pos`` the kernel did not take, where the next batch starts and
    its last offset; None at the end. CorruptRecordError for damage: offsets that do not fit between
    the batch before it (``expect``: one past its last offset) and the one after it (``upper``: the
    next segment's base offset, for the last batch), as every reader judges them
    (:func:`~kafkafs.storage.validation.in_order`); and bytes that are not a whole batch at the end of
    a sealed segment (one ``upper`` follows: :func:`~kafkafs.storage.segments.is_sealed`): a torn
    batch, not a write in progress."""
    file = str(segment.log_path)
    judged = next(in_order(segment.batches(pos, size, sealed=is_sealed(upper)), next_offset=expect,
                           upper=upper, segment_base=segment.base_offset), None)
    if judged is None:
        return None
    view, problem = judged
    if problem is not None:
        raise CorruptRecordError(problem, view.position, file)
    h = view.header
    try:
        if h.magic == 2:
            validate_batch(view.buf, h)
            got = section_entries(records_section(view.buf, h), h, segment.base_offset, record_filter)
            last = h.last_offset
        else:
            batch = view.decode(file=file)
            got = batch_entries(batch, segment.base_offset, record_filter)
            last = batch.offsets[-1] if batch.offsets else h.last_offset
    except CorruptRecordError as exc:
        error = exc.at(file, view.base) if exc.file is None else exc
        if isinstance(error, UninflatableBatch):  # valid data (its CRC held): the scan goes on past it
            raise _TooLarge(error, view.position + h.size, h.base_offset if h.magic == 2 else None,
                            h.last_offset) from None
        raise error from None
    return got, view.position + h.size, last


def _batch_rels(view: BatchView, seg_base: int, record_filter: RecordFilter) -> list[int]:
    """The rel offsets of the records of one batch that the filter accepts (the batch checked whole)."""
    raw = view.raw()
    got = span_entries(raw, seg_base, record_filter)
    if got.consumed != len(raw):
        h = view.header._replace(position=0)
        if h.magic == 2:
            validate_batch(raw, h)
            got = section_entries(records_section(raw, h), h, seg_base, record_filter)
        else:
            got = batch_entries(view.decode(), seg_base, record_filter)
    return [ENTRY.unpack_from(got.entries, i)[2] for i in range(0, len(got.entries), ENTRY.size)]


def _may_hold(header: BatchHeader, offset: int) -> bool:
    """Whether the batch of ``header`` may hold ``offset``: between its base and last offsets; for a
    compressed magic 0/1 wrapper, up to its offset (the header's base offset is the wrapper's own, its
    LAST inner offset: the first one is known only once it is decompressed, review16 R16-3)."""
    if header.magic < 2 and header.record_count < 0:
        return offset <= header.last_offset
    return header.base_offset <= offset <= header.last_offset


class KeyConfirmer:
    """Whether the record at an offset of ``segment`` has ``key`` (a hash match in a key index is only
    a candidate); a batch read for one candidate answers for the next ones in it. One query's own."""

    def __init__(self, segment: LogSegment, key: bytes) -> None:
        self.segment = segment
        self.filter = RecordFilter(key=key)
        self.view: BatchView | None = None  # the batch read last
        self._rels: set[int] = set()  # the rels of the key in it

    def __call__(self, offset: int) -> bool:
        view = self.view
        if view is None or not _may_hold(view.header, offset):
            view = self.segment.find(offset)
            if view is None or not _may_hold(view.header, offset):
                return False
            self.view = view._replace(segment=self.segment)
            self._rels = set(_batch_rels(view, self.segment.base_offset, self.filter))
        return offset - self.segment.base_offset in self._rels


class Scanned(NamedTuple):
    """What :func:`scan_entries` gives per step: the entries of the batches between ``start`` and
    ``end`` (file positions), and the offset after the last of them (``next_offset``)."""

    got: KeyEntries
    start: int
    end: int
    next_offset: int


class ScanDamage(NamedTuple):
    """Where a scan stopped at damage: the offset after the last good batch, its position, and why."""

    offset: int
    position: int
    error: CorruptRecordError

    def as_dict(self) -> dict[str, Any]:
        """What a key index keeps of it: the offset, and the error's own reason and position (the file
        is the segment's: :meth:`~.keyfile.SegmentKeyIndex.damage` makes the error again)."""
        at = self.error.position if self.error.position is not None else self.position
        return {"offset": self.offset, "position": at, "reason": self.error.reason}

    def raise_it(self) -> NoReturn:
        raise self.error


class ScanSkip(NamedTuple):
    """A batch a scan went past without its records: valid data too large to inflate (review19 R19-2),
    not damage. ``first``: the first offset it may hold (one past the batch before it: a legacy wrapper's
    header holds only its last offset), ``last`` its last offset, ``error`` what a reader that needs its
    records meets (:class:`~kafkafs.errors.UninflatableBatch`)."""

    first: int
    last: int
    position: int
    end: int
    error: CorruptRecordError


def scan_entries(
    segment: LogSegment, size: int, record_filter: RecordFilter | None = None, start: int = 0,
    upper: int | None = None,
) -> Iterator[Scanned | ScanDamage | ScanSkip]:
    """The key entries of ``segment``'s batches from position ``start`` to ``size``, a step at a time
    (whole runs of batches through the kernel, the others one by one); a :class:`ScanDamage` ends them
    when a batch is damaged, its offsets out of order included (each batch judged between its
    neighbours as every reader judges it, :mod:`.validation`; ``upper``: the next segment's base
    offset, None for the last segment; with it the segment is sealed, and a torn end is damage). A batch too
    large to inflate (valid data) gives a :class:`ScanSkip`, and the scan goes on past it. ``record_filter``:
    only the records it accepts."""
    base = segment.base_offset
    next_offset = base
    expect: int | None = None if start else base  # one past the batch before (None: not known)
    pos = start
    want = CHUNK_BYTES
    while pos < size:
        try:
            buf = segment.read_at(pos, min(want, size - pos))
        except OSError as exc:  # named: the store tells a segment it cannot read from a cache it cannot write
            tag_os_error(exc, "read {path}", segment.log_path)
            raise
        if not buf:
            return
        ordered = _in_order(buf, expect, base, upper if pos + len(buf) >= size else None, pos + len(buf) >= size)
        got = span_entries(buf if ordered == len(buf) else memoryview(buf)[:ordered], base, record_filter)
        taken = got.consumed
        if taken:
            last = _last_offset_of(buf, taken)
            next_offset = max(next_offset, last + 1)
            expect = last + 1
            yield Scanned(got, pos, pos + taken, next_offset)
            pos += taken
        if taken == len(buf):
            want = CHUNK_BYTES
            continue
        need = cut_off(buf, taken)
        if need and not (taken == 0 and want >= need) and pos + need <= size:
            want = max(CHUNK_BYTES, need)
            continue
        try:  # the batch the kernel did not take (or whose order needs what lies past the chunk) alone
            found = _slow_batch(segment, pos, size, record_filter, expect, upper)
        except _TooLarge as big:
            first = min(big.first if big.first is not None else expect if expect is not None else next_offset, big.last)
            yield ScanSkip(first, big.last, pos, big.after, big.error.starting_at(first))
            next_offset = max(next_offset, big.last + 1)
            expect = big.last + 1
            pos = big.after
            want = CHUNK_BYTES
            continue
        except CorruptRecordError as exc:
            yield ScanDamage(next_offset, pos, exc)
            return
        if found is None:
            return
        got, after, last = found
        next_offset = max(next_offset, last + 1)
        expect = last + 1
        yield Scanned(got, pos, after, next_offset)
        pos = after
        want = CHUNK_BYTES


def build_key_index(
    segment: LogSegment,
    dest: BinaryIO,
    key: list[Any],
    *,
    size: int,
    tmpdir: str | None = None,
    on_bytes: Callable[[int], None] | None = None,
    upper: int | None = None,
) -> dict[str, Any]:
    """Index the first ``size`` bytes of ``segment`` into ``dest`` (a new file opened for writing) under
    ``key``; returns the head. ``on_bytes(n)`` hears of the log bytes read (progress); ``upper``: the
    next segment's base offset (see :func:`scan_entries`)."""
    base = segment.base_offset
    entries = _Entries(tmpdir)
    longs = _Longs(tmpdir)
    txns = tempfile.SpooledTemporaryFile(max_size=4 << 20, dir=tmpdir)  # noqa: SIM115
    ntxns = 0
    damaged = None
    skipped: Skipped | None = None
    next_offset = base
    scanned = 0
    try:
        for step in scan_entries(segment, size, upper=upper):
            if isinstance(step, ScanDamage):  # said by whoever meets it (the mount: once, SPEC §3)
                damaged = step.as_dict()
                break
            if isinstance(step, ScanSkip):  # no entries of its records; the records after it are indexed
                skipped = Skipped.of(skipped, step.first, step.last, step.error)
                next_offset = max(next_offset, step.last + 1)
                scanned = step.end
                if on_bytes is not None:
                    on_bytes(step.end - step.position)
                continue
            got = step.got
            entries.add(got.entries)
            if got.txns:
                txns.write(got.txns)
                ntxns += len(got.txns) // TXN.size
            if got.longs:
                longs.add(got.longs)
            next_offset = step.next_offset
            scanned = step.end
            if on_bytes is not None:
                on_bytes(step.end - step.start)
        bits = fanout_bits(entries.count)
        writer = BlockWriter(dest)
        counts = array("Q", bytes(8 << bits))
        for part in entries.sorted_parts():
            prefix_counts(part, bits, counts)
            writer.write(part)
        fanout = array("Q", [0])
        total = 0
        for c in counts:
            total += c
            fanout.append(total)
        writer.write(fanout.tobytes())
        txns.seek(0)
        while True:
            chunk = txns.read(1 << 20)
            if not chunk:
                break
            writer.write(chunk)
        nlongs = 0
        for row in longs.merged():
            writer.write(row)
            nlongs += 1
        head = {
            "version": FORMAT_VERSION, "kafkafs": __version__, "key": key, "base": base, "entries": entries.count,
            "bits": bits, "txns": ntxns, "longs": nlongs, "damaged": damaged,
            "skipped": skipped.as_dict() if skipped is not None else None, "scanned": scanned,
            "next_offset": next_offset, "path": segment_path(segment.log_path),
        }
        writer.finish(head)
        return head
    finally:
        entries.close()
        longs.close()
        txns.close()


def _in_order(buf: bytes, expect: int | None, segment_base: int, upper: int | None, final: bool) -> int:
    """How many bytes of whole v2 batches at the start of ``buf`` are in order (each judged between
    its neighbours, :func:`~kafkafs.storage.validation.offsets_problem`: the batch after it is read
    from its first 8 bytes; the last batch of ``buf`` is judged only when ``final``, against ``upper``).
    A batch that is not, or cannot be judged from ``buf``, is left to :func:`_slow_batch`, which says
    what is wrong with it, as every reader says it."""
    pos = 0
    n = len(buf)
    while n - pos >= 61 and buf[pos + 16] == 2:
        base, length, delta = v2_offsets(buf, pos)
        after = pos + length + 12
        if length < 49 or after > n:
            break
        if n - after >= 8:
            following: int | None = int.from_bytes(buf[after : after + 8], "big", signed=True)
        elif after == n and final:
            following = upper
        else:
            break
        if offsets_problem(base, delta, 2, next_offset=expect, following=following, segment_base=segment_base):
            break
        expect = base + delta + 1
        pos = after
    return pos


def _last_offset_of(buf: bytes, end: int) -> int:
    """The last offset of the last whole batch that ends at ``end`` in ``buf`` (batches from 0)."""
    pos = 0
    last = -1
    while pos < end:
        base, length, delta = v2_offsets(buf, pos)
        last = base + delta
        pos += length + 12
    return last
