"""Kafka's ``.index`` and ``.timeindex`` entries and the searches over them (sans-io).

Offset index entry, 8 bytes: ``relativeOffset u32, position u32``, big-endian. Time index entry, 12
bytes: ``timestamp i64, relativeOffset u32``. Offsets are relative to the segment's base offset; Kafka
reads both fields as Java ints, so a value over ``2**31 - 1`` is corrupt (Kafka would see a negative).
Keys increase strictly: relative offsets and positions in the offset index, timestamps in the time index
(whose offsets never decrease). An entry's offset is the LAST offset of a batch: in the offset index, of
the batch that starts at ``position``; in the time index, of the batch that holds ``timestamp``, the
largest timestamp seen so far in the segment.

The searches take any buffer (``bytes``, ``mmap``, ``memoryview``) plus the number of valid entries in
it, and read one field per probe with a precompiled ``struct.unpack_from``: no slicing, no entry objects. Like Kafka's ``AbstractIndex`` they
look at the last 8 KiB of entries (the "warm" section, where almost every lookup of a live log lands)
before the rest, so a lookup near the end touches the same few pages every time.

How many entries does a buffer hold? A sealed index is trimmed: every whole entry is valid. An active
one is preallocated and zero-filled past its last entry, and Kafka does not zero what ``truncateTo``
drops. ``live_entry_count`` documents the rule used here.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from kafkafs.errors import CorruptRecordError, InvalidInput

from . import Buffer  # the storage layer hands its maps in; this layer opens none

__all__ = [
    "OFFSET_ENTRY_SIZE",
    "TIME_ENTRY_SIZE",
    "NO_TIMESTAMP",
    "MAX_RELATIVE_OFFSET",
    "MAX_POSITION",
    "OffsetPosition",
    "TimestampOffset",
    "Field",
    "IndexLayout",
    "OFFSET_KEY",
    "OFFSET_POSITION",
    "TIME_KEY",
    "TIME_OFFSET",
    "OFFSET_INDEX",
    "TIME_INDEX",
    "encode_offset_entry",
    "decode_offset_entry",
    "encode_time_entry",
    "decode_time_entry",
    "round_down_to_entry",
    "floor_slot",
    "ceiling_slot",
    "live_entry_count",
    "check_offset_index",
    "check_time_index",
]

OFFSET_ENTRY_SIZE = 8
TIME_ENTRY_SIZE = 12
#: Kafka's ``RecordBatch.NO_TIMESTAMP``: what a time lookup below the first entry returns.
NO_TIMESTAMP = -1
#: Largest relative offset Kafka can store (``Integer.MAX_VALUE``); a segment rolls before passing it.
MAX_RELATIVE_OFFSET = 2**31 - 1
#: Largest file position an offset index entry can hold (a Java int).
MAX_POSITION = 2**31 - 1
_MAX_TIMESTAMP = 2**63 - 1
_WARM_BYTES = 8192


_OFFSET_ENTRY = struct.Struct(">II")
_TIME_ENTRY = struct.Struct(">qI")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")


class OffsetPosition(NamedTuple):
    """An offset index entry made absolute: the batch holding ``offset`` starts at ``position``."""

    offset: int
    position: int


class TimestampOffset(NamedTuple):
    """A time index entry made absolute: no record after ``offset`` is needed to reach ``timestamp``."""

    timestamp: int
    offset: int


@dataclass(frozen=True, slots=True)
class Field:
    """One column of an index: its place in every entry and how to read it."""

    name: str
    entry_size: int
    at: int
    unpack_from: Callable[..., tuple[int]]


@dataclass(frozen=True, slots=True)
class IndexLayout:
    """What an index's entries look like: size, the sorted key, the other column.

    ``written_last`` are the fields that every real entry after slot 0 has non-zero and that the broker
    stores last, so a zero there means "not (completely) written yet" (see ``live_entry_count``).
    """

    name: str
    entry_size: int
    key: Field
    value: Field
    written_last: tuple[Field, ...]


OFFSET_KEY = Field("relative offset", OFFSET_ENTRY_SIZE, 0, _U32.unpack_from)
OFFSET_POSITION = Field("position", OFFSET_ENTRY_SIZE, 4, _U32.unpack_from)
TIME_KEY = Field("timestamp", TIME_ENTRY_SIZE, 0, _I64.unpack_from)
TIME_OFFSET = Field("relative offset", TIME_ENTRY_SIZE, 8, _U32.unpack_from)

OFFSET_INDEX = IndexLayout(
    "offset index", OFFSET_ENTRY_SIZE, OFFSET_KEY, OFFSET_POSITION, (OFFSET_KEY, OFFSET_POSITION)
)
TIME_INDEX = IndexLayout("time index", TIME_ENTRY_SIZE, TIME_KEY, TIME_OFFSET, (TIME_OFFSET,))


# -- entries -------------------------------------------------------------------------------------------


def _check_relative_offset(relative_offset: int) -> None:
    if not 0 <= relative_offset <= MAX_RELATIVE_OFFSET:
        raise InvalidInput(f"relative offset {relative_offset} does not fit an index entry")


def encode_offset_entry(relative_offset: int, position: int) -> bytes:
    """The 8 bytes of an offset index entry."""
    _check_relative_offset(relative_offset)
    if not 0 <= position <= MAX_POSITION:
        raise InvalidInput(f"position {position} does not fit an index entry")
    return _OFFSET_ENTRY.pack(relative_offset, position)


def encode_time_entry(timestamp: int, relative_offset: int) -> bytes:
    """The 12 bytes of a time index entry."""
    if not 0 <= timestamp <= _MAX_TIMESTAMP:
        raise InvalidInput(f"timestamp {timestamp} cannot be indexed")
    _check_relative_offset(relative_offset)
    return _TIME_ENTRY.pack(timestamp, relative_offset)


def _decode(entry: struct.Struct, buf: Buffer, slot: int) -> tuple[int, int]:
    at = slot * entry.size
    if slot < 0 or at + entry.size > len(buf):
        raise CorruptRecordError(f"index entry {slot} is past the end of a {len(buf)}-byte buffer", at)
    return entry.unpack_from(buf, at)


def decode_offset_entry(buf: Buffer, slot: int = 0) -> tuple[int, int]:
    """``(relative_offset, position)`` of the entry in ``slot``."""
    return _decode(_OFFSET_ENTRY, buf, slot)


def decode_time_entry(buf: Buffer, slot: int = 0) -> tuple[int, int]:
    """``(timestamp, relative_offset)`` of the entry in ``slot``."""
    return _decode(_TIME_ENTRY, buf, slot)


def round_down_to_entry(nbytes: int, entry_size: int) -> int:
    """``nbytes`` rounded down to whole entries, e.g. a preallocation size (67, 8) -> 64."""
    return nbytes - nbytes % entry_size


# -- search --------------------------------------------------------------------------------------------


def _check_entries(buf: Buffer, entries: int, field: Field) -> None:
    if entries < 0 or entries * field.entry_size > len(buf):
        raise InvalidInput(
            f"{entries} entries of {field.entry_size} bytes do not fit a {len(buf)}-byte buffer"
        )


def _count_below(buf: Buffer, entries: int, target: int, field: Field) -> int:
    """How many of the first ``entries`` slots have ``field`` < ``target`` (they come first: ``field``
    must not decrease). The warm tail (the last :data:`_WARM_BYTES`, where most lookups land) is tried
    before the rest, so a lookup near the end touches only recent pages."""
    _check_entries(buf, entries, field)
    unpack, size, at = field.unpack_from, field.entry_size, field.at
    first_hot = max(0, entries - 1 - _WARM_BYTES // size)
    if entries and unpack(buf, first_hot * size + at)[0] < target:
        lo, hi = first_hot + 1, entries
    else:
        lo, hi = 0, first_hot
    # invariant: every slot before lo is < target, every slot from hi on is >= target
    while lo < hi:
        mid = (lo + hi) >> 1
        if unpack(buf, mid * size + at)[0] < target:
            lo = mid + 1
        else:
            hi = mid
    return lo


def floor_slot(buf: Buffer, entries: int, target: int, field: Field) -> int:
    """The last slot whose ``field`` is <= ``target``, or -1 (empty, or every entry is larger).

    ``field`` must not decrease over the first ``entries`` slots of ``buf``; ``target`` is an int.
    """
    return _count_below(buf, entries, target + 1, field) - 1


def ceiling_slot(buf: Buffer, entries: int, target: int, field: Field) -> int:
    """The first slot whose ``field`` is >= ``target``, or -1 (empty, or every entry is smaller).

    ``field`` must not decrease over the first ``entries`` slots of ``buf``.
    """
    count = _count_below(buf, entries, target, field)
    return count if count < entries else -1


# -- how many entries are real -------------------------------------------------------------------------


def live_entry_count(
    raw_entries: int, entry_at: Callable[[int], bytes], layout: IndexLayout, known: int = 0
) -> int:
    """How many leading entries of an index file are real, reading only O(log n) of them.

    ``raw_entries`` is the number of whole entries in the file; ``entry_at(slot)`` returns the bytes of
    one entry (short or missing bytes read as zeros); ``known`` is a count found earlier, taken as a
    lower bound so that following a growing file costs one or two reads.

    The rule, which also reads sealed (trimmed) files correctly:

    - From slot 1 on, a real entry never has zero in a ``layout.written_last`` field. Offset index:
      relative offsets and positions strictly increase from slot 0, so both are > 0 (Kafka never indexes
      a segment's first batch, whose position is 0; ``kafka-dump-log`` stops at relative offset 0
      after slot 0 for the same reason). Time index: the relative offset, because the broker stores
      it after the timestamp (and an entry for the base offset itself can only be the roll entry of a
      one-batch segment, which is alone). So the first slot >= 1 with such a zero ends the index, and
      an entry the broker is still writing is not counted, or (offset index) is counted with position
      0, which only makes a reader scan from the start of the segment.
    - Slot 0 counts unless it is all zeros and nothing follows it. Every whole entry counts when the
      last one is not zero, the common case of a sealed file, in one read.

    Zero-filled tails make the predicate monotonic, hence the binary search. What it cannot tell: the
    stale entries that a broker's ``truncateTo`` leaves behind past its real end until the next
    append overwrites them, look real. Callers bound them by the log's size.
    """
    if raw_entries <= 0:
        return 0
    size = layout.entry_size
    fields = layout.written_last

    def is_end(slot: int) -> bool:
        entry = entry_at(slot)
        if len(entry) < size:
            return True
        return any(f.unpack_from(entry, f.at)[0] == 0 for f in fields)

    lo, hi = max(1, min(known, raw_entries)), raw_entries
    if lo < hi and is_end(lo):
        hi = lo
    elif lo < hi and not is_end(hi - 1):
        lo = hi
    while lo < hi:
        mid = (lo + hi) >> 1
        if is_end(mid):
            hi = mid
        else:
            lo = mid + 1
    if lo == 1 and not any(entry_at(0)):
        return 0
    return lo


# -- sanity --------------------------------------------------------------------------------------------


def _prefix(buf: Buffer, entries: int, size: int) -> bytes | memoryview:
    if entries < 0 or entries * size > len(buf):
        raise InvalidInput(f"{entries} entries of {size} bytes do not fit a {len(buf)}-byte buffer")
    part = buf[: entries * size]
    return part if isinstance(part, bytes | memoryview) else bytes(part)


def check_offset_index(buf: Buffer, entries: int, log_size: int | None = None) -> str | None:
    """Why the first ``entries`` offset index entries are not a valid index, or None if they are.

    Kafka's ``sanityCheck`` rules (no relative offset a Java int would see as negative) plus what
    ``kafka-dump-log --verify-index-only`` and a correct writer imply: relative offsets and positions
    strictly increase, and (given ``log_size``) every position lies inside the log.
    """
    prev_rel = prev_pos = -1
    for slot, (rel, pos) in enumerate(_OFFSET_ENTRY.iter_unpack(_prefix(buf, entries, OFFSET_ENTRY_SIZE))):
        if rel > MAX_RELATIVE_OFFSET:
            return f"entry {slot}: relative offset {rel} overflows (negative to Kafka)"
        if pos > MAX_POSITION:
            return f"entry {slot}: position {pos} overflows (negative to Kafka)"
        if rel <= prev_rel:
            return f"entry {slot}: relative offset {rel} is not larger than {prev_rel} before it"
        if pos <= prev_pos:
            return f"entry {slot}: position {pos} is not larger than {prev_pos} before it"
        if log_size is not None and pos >= log_size:
            return f"entry {slot}: position {pos} is past the end of the {log_size}-byte log"
        prev_rel, prev_pos = rel, pos
    return None


def check_time_index(buf: Buffer, entries: int) -> str | None:
    """Why the first ``entries`` time index entries are not a valid index, or None if they are.

    Timestamps strictly increase and start above ``NO_TIMESTAMP`` (``maybeAppend`` appends only a larger
    timestamp, and the first must beat -1); relative offsets never decrease and fit a Java int.
    """
    prev_ts, prev_rel = NO_TIMESTAMP, 0
    for slot, (ts, rel) in enumerate(_TIME_ENTRY.iter_unpack(_prefix(buf, entries, TIME_ENTRY_SIZE))):
        if rel > MAX_RELATIVE_OFFSET:
            return f"entry {slot}: relative offset {rel} overflows (negative to Kafka)"
        if ts <= prev_ts:
            return f"entry {slot}: timestamp {ts} is not larger than {prev_ts} before it"
        if rel < prev_rel:
            return f"entry {slot}: relative offset {rel} is smaller than {prev_rel} before it"
        prev_ts, prev_rel = ts, rel
    return None
