"""``.index`` and ``.timeindex`` dumps and checks, as ``DumpLogSegments.dumpIndex`` / ``dumpTimeIndex``.

Standard output, per entry: ``offset: N position: P`` and ``timestamp: T offset: N`` (none with
``--verify-index-only``); ``FILE is empty.`` for an offset index without entries; ``FILE passed sanity
check.`` for ``--index-sanity-check``. Both stop at the first entry after slot 0 whose offset is the
base offset (the zero-filled tail of a preallocated index). The offset index entry must name the last
offset of the batch at its position; a time entry must name a batch's last offset and that batch's
largest record timestamp, timestamps increasing. What does not hold is collected and printed to
standard error at the end (:class:`IndexErrors`), in Kafka's words and order.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Iterator
from typing import TextIO

from ..errors import CorruptRecordError, UnsafeFileError, describe_os_error, tag_os_error
from ..format.batch import decode_batch, read_batch_header
from ..storage.safefiles import read_regular_file
from .javaorder import java_hashmap_order
from .options import DumpOptions

__all__ = ["IndexErrors", "dump_index", "dump_time_index"]

_OFFSET_ENTRY = struct.Struct(">iI")  # relative offset, position (Java ints; positions kept unsigned)
_TIME_ENTRY = struct.Struct(">qi")
_NO_TIMESTAMP = -1


def java_path(name: str) -> str:
    """What Java's ``new File(name).toString`` gives: runs of ``/`` made one, no trailing ``/``."""
    collapsed = re.sub("/+", "/", name)
    return collapsed[:-1] if len(collapsed) > 1 and collapsed.endswith("/") else collapsed


def _absolute(name: str) -> str:
    """Java's ``File.getAbsolutePath``: joined to the working directory, not otherwise normalised."""
    name = java_path(name)
    return name if os.path.isabs(name) else java_path(os.getcwd() + "/" + name)


class IndexErrors:
    """What the index checks found, kept until every file is dumped (Kafka prints it last).
    Not shared between threads."""

    def __init__(self) -> None:
        # file (its absolute path, Kafka's map key) -> pairs, in the order Kafka recorded them
        self.offset_mismatches: dict[str, list[tuple[int, int]]] = {}
        self.time_mismatches: dict[str, list[tuple[int, int]]] = {}
        self.out_of_order: dict[str, list[tuple[int, int]]] = {}
        self.not_found: dict[str, list[tuple[int, int]]] = {}
        self.gaps: dict[str, list[tuple[int, int]]] = {}
        self._keys: dict[str, str] = {}  # name -> its absolute path, made once a file
        #: Of the findings, those a live or killed broker's active segment shows in its preallocated,
        #: zero-filled index (:func:`_preallocated_active`): printed as Kafka prints them, no damage.
        self.no_damage = 0

    def add(self, table: dict[str, list[tuple[int, int]]], name: str, pairs: list[tuple[int, int]]) -> None:
        """Keep ``pairs`` for ``name`` in ``table`` (Kafka's ``computeIfAbsent(file, ..)`` then a put)."""
        if not pairs:
            return
        key = self._keys.get(name)
        if key is None:
            key = self._keys[name] = _absolute(name)
        table.setdefault(key, []).extend(pairs)

    @staticmethod
    def _in_kafkas_order(table: dict[str, list[tuple[int, int]]]) -> list[tuple[str, list[tuple[int, int]]]]:
        """Kafka 4 keeps each kind in a ``java.util.HashMap`` keyed by the file's absolute path, one
        ``computeIfAbsent`` a finding (a file's findings come together, files in the order dumped)."""
        calls = [key for key, pairs in table.items() for _ in pairs]
        return [(key, table[key]) for key in java_hashmap_order(calls)]

    @staticmethod
    def _tree(pairs: list[tuple[int, int]], *, descending: bool = False) -> list[tuple[int, int]]:
        """A ``TreeMap<Long, Long>`` of the pairs: one a key (the last put wins), sorted by key."""
        return sorted(dict(pairs).items(), reverse=descending)

    def non_consecutive(self, name: str, gaps: list[tuple[int, int]]) -> None:
        self.add(self.gaps, name, gaps)

    def print(self, err: TextIO) -> int:
        """Print everything in Kafka's order; return how many problems (gaps are not problems, nor the
        findings counted in :attr:`no_damage`)."""
        problems = 0
        for name, pairs in self._in_kafkas_order(self.offset_mismatches):
            print(f"Mismatches in :{name}", file=err)
            for index_offset, log_offset in self._tree(pairs, descending=True):  # TreeMap(reverseOrder())
                print(f"  Index offset: {index_offset}, log offset: {log_offset}", file=err)
            problems += len(pairs)
        for name, pairs in self._in_kafkas_order(self.time_mismatches):
            print(f"Found timestamp mismatch in :{name}", file=err)
            for a, b in pairs:
                print(f"  Index timestamp: {a}, log timestamp: {b}", file=err)
            problems += len(pairs)
        for name, pairs in self._in_kafkas_order(self.out_of_order):
            print(f"Found out of order timestamp in :{name}", file=err)
            for a, b in pairs:
                print(f"  Index timestamp: {a}, Previously indexed timestamp: {b}", file=err)
            problems += len(pairs)
        for name, pairs in self._in_kafkas_order(self.not_found):
            print(f"The following indexed offsets are not found in :{name}", file=err)  # Kafka 4.x's words
            for a, b in pairs:
                print(f"Indexed offset: {a}, found log offset: {b}", file=err)
            problems += len(pairs)
        for name, pairs in self._in_kafkas_order(self.gaps):
            print(f"Non-consecutive offsets in {name}", file=err)
            for a, b in self._tree(pairs):
                print(f"  {a} is followed by {b}", file=err)
        return problems - self.no_damage


def _segment_files(name: str, err: TextIO) -> tuple[int, bytes, str, bytes] | None:
    """(base offset, the .log's bytes, the .log's path, the index's own bytes) for an index file, or
    None after one line."""
    base_name = os.path.basename(name)
    head = base_name.split(".")[0]
    if not head.isdigit():
        print(
            f"kafkafs: error: {name}: not a segment file name (<20-digit base offset>{base_name[base_name.find('.') :]})",
            file=err,
        )
        return None
    log_path = os.path.join(os.path.dirname(os.path.abspath(name)), head + ".log")
    try:
        data = read_regular_file(log_path, follow=True)  # a FIFO there is refused, never waited on (fix38)
    except OSError as exc:
        print(
            f"kafkafs: error: {describe_os_error(tag_os_error(exc, 'read {path}', log_path))} "
            "(an index is checked against its .log)",
            file=err,
        )
        return None
    except UnsafeFileError as exc:
        print(f"kafkafs: error: {exc} (an index is checked against its .log)", file=err)
        return None
    return int(head), data, log_path, _read(name)


def _read(name: str) -> bytes:
    """The bytes of the file ``name`` names: a regular file (a link followed), never a FIFO waited on."""
    return read_regular_file(name, follow=True)


def _last_offset_at(log: bytes, position: int, limit: int) -> int:
    """The last offset of the batch that starts at ``position``, or -1 if none fits ``limit`` bytes."""
    try:
        h = read_batch_header(log, position, min(len(log), position + limit))
    except CorruptRecordError:
        return -1
    return -1 if h is None else h.last_offset


def _entries(data: bytes, base: int, entry: struct.Struct, rel_at: int) -> Iterator[tuple[int, int]]:
    """``(offset, the entry's other field)`` of each whole entry of an index (the relative offset is
    field ``rel_at`` of ``entry``), up to the first after slot 0 whose offset is the base offset: the
    zero-filled tail of a preallocated index."""
    for i in range(len(data) // entry.size):
        fields = entry.unpack_from(data, i * entry.size)
        offset = base + fields[rel_at]
        if offset == base and i > 0:
            return
        yield offset, fields[1 - rel_at]


def _preallocated_active(name: str, data: bytes, entry_size: int) -> bool:
    """Whether the index file ``name`` (its bytes ``data``) is an active segment's preallocated index
    with no entry yet: zeros only, longer than one entry (a broker creates the active segment's indexes
    at ``segment.index.bytes``, zero-filled, and trims them at a roll or a clean stop), and no ``.log``
    with a higher base offset beside it. Kafka's tool reads its slot 0 as an entry at the base offset,
    position 0, and prints the mismatch it finds there; it is no damage (``verify`` agrees; a sealed
    segment's index is trimmed, and zeros there are damage)."""
    if len(data) <= entry_size or data.count(0) != len(data):
        return False
    folder = os.path.dirname(os.path.abspath(name))
    base = os.path.basename(name).split(".")[0]
    try:
        with os.scandir(folder) as listing:
            return not any(e.name.endswith(".log") and len(e.name) == 24 and e.name[:20].isdigit()
                           and e.name[:20] > base for e in listing)
    except OSError:
        return False


def _report_sanity(name: str, problem: str | None, out: TextIO, err: TextIO) -> int:
    """Say what an index's sanity check found (as Kafka's tool does); the exit code."""
    if problem:
        print(f"kafkafs: {problem}", file=err)
        return 1
    print(f"{java_path(name)} passed sanity check.", file=out)
    return 0


def _size_problem(what: str, name: str, data: bytes, entry_size: int) -> str | None:
    """Kafka's complaint about an index whose size is not a whole number of entries, else None."""
    if len(data) % entry_size:
        return (
            f"{what} {_absolute(name)} is corrupt, found {len(data)} bytes which is neither positive nor a "
            f"multiple of {entry_size}"
        )
    return None


def _offset_sanity(name: str, data: bytes, base: int) -> str | None:
    entries = len(data) // 8
    if entries:
        rel, _pos = _OFFSET_ENTRY.unpack_from(data, (entries - 1) * 8)
        if base + rel < base:
            return (
                f"Corrupt index found, index file {_absolute(name)} has non-zero size but the last offset "
                f"is {base + rel} which is less than the base offset {base}"
            )
    return _size_problem("Index file", name, data, 8)


def dump_index(name: str, out: TextIO, err: TextIO, options: DumpOptions, errors: IndexErrors) -> int:
    found = _segment_files(name, err)
    if found is None:
        return 1
    base, log, _log_path, data = found
    entries = len(data) // 8
    if entries == 0:
        print(f"{java_path(name)} is empty.", file=out)
        return 0
    if options.index_sanity_check:
        return _report_sanity(name, _offset_sanity(name, data, base), out, err)
    mismatches = []
    for offset, position in _entries(data, base, _OFFSET_ENTRY, 0):
        last = _last_offset_at(log, position, options.max_message_size)
        if last != offset:
            mismatches.append((offset, last))
        if not options.verify_index_only:
            out.write(f"offset: {offset} position: {position}\n")
    if mismatches:
        errors.add(errors.offset_mismatches, name, mismatches)
        if _preallocated_active(name, data, _OFFSET_ENTRY.size):
            errors.no_damage += len(mismatches)
    return 0  # the mismatches are counted when printed


_WARM_ENTRIES = 8192 // 8  # AbstractIndex.warmEntries() of an offset index: 8 KiB of entries


def _lookup(index: bytes, base: int, target: int) -> int:
    """Kafka's ``OffsetIndex.lookup(target).position`` on an index opened read-only, step for step:
    every whole entry counts (a zero-filled tail too), a binary search of the "hot" last 1024 entries
    when the target is past the first of them, else of the rest (``AbstractIndex.indexSlotRangeFor``);
    no slot (target below the first entry) is position 0. On a damaged index (entries out of order)
    this finds what Kafka finds, which a linear scan would not."""
    entries = len(index) // 8

    def offset_at(slot: int) -> int:
        return base + _OFFSET_ENTRY.unpack_from(index, slot * 8)[0]

    def search(lo: int, hi: int) -> int:
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            found = offset_at(mid)
            if found > target:
                hi = mid - 1
            elif found < target:
                lo = mid
            else:
                return mid
        return lo

    if entries == 0:
        return 0
    first_hot = max(0, entries - 1 - _WARM_ENTRIES)
    if offset_at(first_hot) < target:
        slot = search(first_hot, entries - 1)
    elif offset_at(0) > target:
        return 0
    else:
        slot = search(0, first_hot)
    return _OFFSET_ENTRY.unpack_from(index, slot * 8)[1]


def _time_sanity(name: str, data: bytes, base: int) -> str | None:
    entries = len(data) // 12
    if entries:
        first_ts = _TIME_ENTRY.unpack_from(data, 0)[0]
        last_ts, rel = _TIME_ENTRY.unpack_from(data, (entries - 1) * 12)
        where = (
            f"Corrupt time index found, time index file ({_absolute(name)}) has non-zero size but the last"
        )
        if last_ts < first_ts:
            return f"{where} timestamp is {last_ts} which is less than the first timestamp {first_ts}"
        if base + rel < base:
            return f"{where} offset is {base + rel} which is less than the first offset {base}"
    return _size_problem("Time index file", name, data, 12)


def dump_time_index(name: str, out: TextIO, err: TextIO, options: DumpOptions, errors: IndexErrors) -> int:
    found = _segment_files(name, err)
    if found is None:
        return 1
    base, log, log_path, data = found
    if options.index_sanity_check:
        return _report_sanity(name, _time_sanity(name, data, base), out, err)
    try:
        index = _read(log_path[: -len(".log")] + ".index")
    except FileNotFoundError:
        index = b""
    problems = 0
    prev = _NO_TIMESTAMP
    preallocated = _preallocated_active(name, data, _TIME_ENTRY.size)
    for offset, timestamp in _entries(data, base, _TIME_ENTRY, 1):
        batch = None
        pos = _lookup(index, base, offset)
        try:
            while True:
                h = read_batch_header(log, pos)
                if h is None or h.last_offset >= offset:
                    batch = h
                    break
                pos = h.end
        except CorruptRecordError:
            batch = None
        if batch is None or batch.last_offset != offset:
            errors.add(errors.not_found, name, [(offset, -1 if batch is None else batch.last_offset)])
            errors.no_damage += preallocated
        else:
            try:
                max_ts = max(decode_batch(log, batch, validate=False, ordered=False).timestamps, default=_NO_TIMESTAMP)
            except CorruptRecordError as exc:
                print(
                    f"kafkafs: {log_path}: position {batch.position}: records do not decode: {exc.reason}",
                    file=err,
                )
                problems += 1
                max_ts = _NO_TIMESTAMP
            if max_ts != timestamp:
                errors.add(errors.time_mismatches, name, [(timestamp, max_ts)])
                errors.no_damage += preallocated
            if prev >= timestamp:
                errors.add(errors.out_of_order, name, [(timestamp, prev)])
                errors.no_damage += preallocated
        if not options.verify_index_only:
            out.write(f"timestamp: {timestamp} offset: {offset}\n")
        prev = timestamp
    return problems
