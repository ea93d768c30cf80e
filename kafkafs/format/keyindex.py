"""The entries of a key index (sans-io): what each record of a segment adds, sorted, looked up, and
the table's rule over them. The files and the queries are :mod:`kafkafs.storage.keyindex`'s.

An entry is :data:`ENTRY_SIZE` (24) bytes, native byte order: ``h1 u64, h2 u64`` (the two
little-endian halves of the key's MD5: the hash the cleaner's offset map keys records by, so that the
table and compaction agree on what "the same key" is), ``rel u32`` (the offset less the segment's base
offset) and ``flags u32`` (:data:`TOMBSTONE`: the value is null; :data:`TRANSACTIONAL`: the record is
in a transactional batch, so an ABORT marker may yet void it). Records of control batches and records
without a key have none. Entries sort by ``(h1, h2, rel)``.

Besides the entries, indexing gives each transactional data batch as ``(base offset, last offset,
producer id)`` (three int64s: the aborted ranges are only known when the query runs, from the
``.txnindex`` files) and each key whose name (:mod:`.keynames`) would be a ``$sha256:`` digest as
``(rel, key)``.

The functions run in the compiled kernel (``_kernel_keys.h``) when it is built; the ``*_reference``
functions are the definition it is tested against byte for byte, and serve machines without it.
Stateless; thread-safe.
"""

from __future__ import annotations

import hashlib
import struct
from array import array
from collections.abc import Sequence
from typing import Any, NamedTuple

from ..errors import CorruptRecordError
from . import Buffer
from . import kernel as _kernel
from .batchheader import BatchHeader
from .jsonspan import span_sections
from .keynames import NAME_MAX, name_length
from .recordfilter import KernelFilter, RecordFilter
from .records import DecodedBatch, decode_records

__all__ = [
    "ENTRY",
    "ENTRY_SIZE",
    "TOMBSTONE",
    "TRANSACTIONAL",
    "TXN",
    "KeyEntries",
    "key_hash",
    "span_entries",
    "section_entries",
    "batch_entries",
    "sort_entries",
    "prefix_counts",
    "find_entries",
    "table_latest",
]

ENTRY = struct.Struct("=QQII")
ENTRY_SIZE = ENTRY.size
TXN = struct.Struct("=qqq")
TOMBSTONE = 1
TRANSACTIONAL = 2
_HALVES = struct.Struct("<QQ")
_MAX_REL = 2**32 - 1


class KeyEntries(NamedTuple):
    """What indexing some batches gave: ``entries`` (packed, in record order), ``txns`` (packed
    :data:`TXN` triples), ``longs`` ([(rel, key)]) and, from :func:`span_entries`, ``consumed`` (the
    bytes of the buffer taken)."""

    entries: bytes
    txns: bytes
    longs: list[tuple[int, bytes]]
    consumed: int = 0


def key_hash(key: bytes) -> tuple[int, int]:
    """``(h1, h2)`` of a key."""
    return _HALVES.unpack(hashlib.md5(key, usedforsecurity=False).digest())


def _filter_arg(record_filter: RecordFilter | None) -> KernelFilter | None:
    return None if record_filter is None or record_filter.empty else record_filter.kernel_arg()


# ---------------------------------------------------------------------------------------------- building


def batch_entries(batch: DecodedBatch, seg_base: int, record_filter: RecordFilter | None = None) -> KeyEntries:
    """The entries of a decoded batch (any magic, decompressed: the slow path, and the reference).
    ``CorruptRecordError`` when an offset is outside the segment's 32-bit range."""
    h = batch.header
    if h.magic == 2 and h.is_control:
        return KeyEntries(b"", b"", [])
    transactional = h.magic == 2 and h.is_transactional
    flag = TRANSACTIONAL if transactional else 0
    out = bytearray()
    longs = []
    for offset, key, value, headers in zip(batch.offsets, batch.keys, batch.values, batch.headers, strict=True):
        if key is None:
            continue
        rel = offset - seg_base
        if rel < 0 or rel > _MAX_REL:
            raise CorruptRecordError(f"record offset {offset} is outside its segment's range", h.position)
        if record_filter is not None and not record_filter.accepts(offset, key, headers):
            continue
        h1, h2 = key_hash(key)
        out += ENTRY.pack(h1, h2, rel, flag | (TOMBSTONE if value is None else 0))
        if len(key) > 80 and name_length(key) > NAME_MAX:
            longs.append((rel, bytes(key)))
    txns = TXN.pack(h.base_offset, h.last_offset, h.producer_id) if transactional else b""
    return KeyEntries(bytes(out), txns, longs)


def section_entries(data: Buffer, header: BatchHeader, seg_base: int, record_filter: RecordFilter | None = None) -> KeyEntries:
    """The entries of one v2 batch's records section ``data`` (decompressed; the CRC checked by the
    caller). ``CorruptRecordError`` for damage, as decoding says it."""
    kernel = _kernel.KERNEL
    if kernel is None:
        return section_entries_reference(data, header, seg_base, record_filter)
    try:
        entries, txns, longs = kernel.keys_section(
            data, header.base_offset, header.last_offset, header.first_timestamp, header.max_timestamp,
            header.attributes, header.producer_id, header.record_count, seg_base, _filter_arg(record_filter),
        )
    except CorruptRecordError as exc:
        raise CorruptRecordError(exc.reason, header.position) from None
    return KeyEntries(entries, txns, longs)


def section_entries_reference(data: Buffer, header: BatchHeader, seg_base: int,
                              record_filter: RecordFilter | None = None) -> KeyEntries:
    """:func:`section_entries` in Python."""
    try:
        batch = decode_records(bytes(data), header)
    except (IndexError, ValueError, OverflowError) as exc:
        raise CorruptRecordError(f"records do not parse: {exc}", header.position) from None
    if any(offset < header.base_offset for offset in batch.offsets):
        raise CorruptRecordError("record offset below the batch's", header.position)
    return batch_entries(batch, seg_base, record_filter)


def span_entries(buf: Buffer, seg_base: int, record_filter: RecordFilter | None = None) -> KeyEntries:
    """The entries of the whole uncompressed v2 batches at the start of ``buf`` (bytes of a ``.log``
    from a batch boundary), up to the first batch it does not take (compressed, legacy, damaged in any
    way, or cut off; ``consumed`` says where), as :func:`.jsonspan.render_span_jsonl` walks them."""
    kernel = _kernel.KERNEL
    if kernel is None:
        return span_entries_reference(buf, seg_base, record_filter)
    return KeyEntries(*kernel.keys_span(buf, seg_base, _filter_arg(record_filter)))


def span_entries_reference(buf: Buffer, seg_base: int, record_filter: RecordFilter | None = None) -> KeyEntries:
    """:func:`span_entries` in Python (the definition)."""
    pos = 0
    entries, txns, longs = [], [], []
    for header, section in span_sections(buf):
        try:
            got = section_entries_reference(section, header, seg_base, record_filter)
        except CorruptRecordError:
            break
        entries.append(got.entries)
        txns.append(got.txns)
        longs.extend(got.longs)
        pos = header.end
    return KeyEntries(b"".join(entries), b"".join(txns), longs, pos)


# ---------------------------------------------------------------------------------------------- sorted


def _sort_key(raw: bytes) -> tuple[int, int, int]:
    return ENTRY.unpack(raw)[:3]


def sort_entries(entries: bytearray) -> None:
    """Sort packed entries in place by ``(h1, h2, rel)``."""
    if len(entries) % ENTRY_SIZE:
        raise ValueError("not a whole number of key entries")
    kernel = _kernel.KERNEL
    if kernel is not None:
        kernel.keys_sort(entries)
        return
    entries[:] = sort_entries_reference(entries)


def sort_entries_reference(entries: Buffer) -> bytes:
    rows = [bytes(entries[i : i + ENTRY_SIZE]) for i in range(0, len(entries), ENTRY_SIZE)]
    rows.sort(key=_sort_key)
    return b"".join(rows)


def prefix_counts(entries: Buffer, bits: int, counts: array[int]) -> None:
    """Add to ``counts`` (``array('Q')`` of ``2**bits``) how many entries have each value of the top
    ``bits`` of h1."""
    kernel = _kernel.KERNEL
    if kernel is not None:
        kernel.keys_counts(entries, bits, counts)
        return
    n = len(entries) // ENTRY_SIZE
    if bits == 0:
        counts[0] += n
        return
    for i in range(0, n * ENTRY_SIZE, ENTRY_SIZE):
        counts[ENTRY.unpack_from(entries, i)[0] >> (64 - bits)] += 1


def find_entries(entries: Buffer, h1: int, h2: int) -> list[tuple[int, int]]:
    """``[(rel, flags)]`` of the hash ``(h1, h2)`` in sorted entries, by rel."""
    kernel = _kernel.KERNEL
    if kernel is not None:
        found: list[tuple[int, int]] = kernel.keys_find(entries, h1, h2)
        return found
    return find_entries_reference(entries, h1, h2)


def find_entries_reference(entries: Buffer, h1: int, h2: int) -> list[tuple[int, int]]:
    out = []
    for i in range(0, len(entries) - len(entries) % ENTRY_SIZE, ENTRY_SIZE):
        a, b, rel, flags = ENTRY.unpack_from(entries, i)
        if a == h1 and b == h2:
            out.append((rel, flags))
    return out


# ---------------------------------------------------------------------------------------------- the table


def table_latest(
    slices: Sequence[Any], aborted: Sequence[Any], bitmaps: Sequence[Any], tombstones: bool = False
) -> tuple[int, int]:
    """The latest entry of each hash over ``slices`` (sorted entries, newest segment first): for each
    hash, the last entry of the newest slice that has one outside that slice's ``aborted`` ranges
    (None, or an ``array('I')`` of sorted, disjoint inclusive ``[lo, hi]`` rel pairs, which void only
    transactional entries). When that entry is not a tombstone (or ``tombstones``), its hash is kept:
    bit ``rel`` of its slice's bitmap (None: not marked) is set. Returns ``(kept, distinct)``: the
    hashes kept, and every hash that has a latest entry."""
    kernel = _kernel.KERNEL
    if kernel is not None:
        counts: tuple[int, int] = kernel.keys_table(slices, aborted, bitmaps, tombstones)
        return counts
    return table_latest_reference(slices, aborted, bitmaps, tombstones)


def _aborted(ranges: array[int] | None, rel: int) -> bool:
    if ranges is None:
        return False
    for i in range(0, len(ranges) - 1, 2):
        if ranges[i] <= rel <= ranges[i + 1]:
            return True
    return False


def table_latest_reference(slices: Sequence[Any], aborted: Sequence[Any], bitmaps: Sequence[Any],
                           tombstones: bool = False) -> tuple[int, int]:
    """:func:`table_latest` in Python (the definition)."""
    seen: set[tuple[int, int]] = set()
    kept = 0
    for entries, ranges, bits in zip(slices, aborted, bitmaps, strict=True):
        ranges = None if ranges is None else array("I", bytes(ranges))
        latest: dict[tuple[int, int], tuple[int, int]] = {}
        for i in range(0, len(entries), ENTRY_SIZE):
            h1, h2, rel, flags = ENTRY.unpack_from(entries, i)
            if flags & TRANSACTIONAL and _aborted(ranges, rel):
                continue
            latest[(h1, h2)] = (rel, flags)  # entries of a hash come by rel: the last one stays
        for hash_, (rel, flags) in latest.items():
            if hash_ in seen:
                continue
            seen.add(hash_)
            if tombstones or not flags & TOMBSTONE:
                kept += 1
                if bits is not None and rel < len(bits) * 8:
                    bits[rel >> 3] |= 1 << (rel & 7)
    return kept, len(seen)
