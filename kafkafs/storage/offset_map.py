"""The cleaner's offset map: key hash -> latest offset, in a fixed amount of memory (Kafka's
SkimpyOffsetMap, reduced).

Keys are never stored, only their 128-bit MD5 (as Kafka hashes them), in three flat ``array('q')``
columns (two hash halves and the offset: 24 bytes a slot, Kafka's own figure), so the map takes the
memory it is given (``log.cleaner.dedupe.buffer.size``) and not a byte more, whatever the keys. Slots
are found by open addressing with double hashing over a prime number of slots: the first half of the
hash picks the slot, the second the stride, so long runs of taken slots never form. The cleaner stops
filling it at ``log.cleaner.io.buffer.load.factor`` of its slots (:attr:`OffsetMap.full`) and cleans in
several rounds when the dirty part of a log holds more keys than that.

The two hot loops, :meth:`OffsetMap.put_many` (building the map) and :meth:`OffsetMap.retain_flags`
(cleaning), run in the compiled kernel when it is built (``omap_put`` / ``omap_retain`` in
``format/_kernel_omap.h``: its own MD5 and the same probe, with the GIL released), and otherwise in
Python (:meth:`OffsetMap.put_many_py`, :meth:`OffsetMap.retain_flags_py`, the reference it is tested
against slot for slot).

Not thread-safe: one cleaner (thread) owns a map and reuses it round after round (:meth:`clear`).
"""

from __future__ import annotations

import hashlib
import struct
from array import array
from typing import Any

from ..format.kernel import KERNEL

_OMAP_PUT = getattr(KERNEL, "omap_put", None)
_OMAP_RETAIN = getattr(KERNEL, "omap_retain", None)

__all__ = ["OffsetMap", "BYTES_PER_ENTRY"]

#: Bytes a slot takes: a 16-byte hash and an 8-byte offset.
BYTES_PER_ENTRY = 24

try:  # the plain call is measurably faster per key than one passing usedforsecurity
    hashlib.md5(b"")
    _md5 = hashlib.md5
except ValueError:  # a FIPS build refuses MD5 unless told it is not for security

    def _md5(data: bytes) -> Any:  # type: ignore[misc]  # the FIPS fallback of the same function
        return hashlib.md5(data, usedforsecurity=False)

_split = struct.Struct("<qq").unpack


def _is_prime(n: int) -> bool:
    if n < 4:
        return n >= 2
    if n % 2 == 0:
        return False
    f = 3
    while f * f <= n:
        if n % f == 0:
            return False
        f += 2
    return True


def _prime_at_most(n: int) -> int:
    while n > 2 and not _is_prime(n):
        n -= 1
    return max(n, 2)


class OffsetMap:
    """Fixed slots, hashes only. ``memory`` bytes give ``memory // 24`` slots (rounded down to a prime);
    ``load_factor`` of them may be filled before :attr:`full` says so."""

    def __init__(self, memory: int, load_factor: float = 0.9) -> None:
        slots = _prime_at_most(max(memory // BYTES_PER_ENTRY, 3))
        if int(slots * load_factor) < 1:
            raise ValueError(f"an offset map of {memory} bytes cannot hold a single key")
        self.slots = slots
        self.load_factor = load_factor
        # one slot always stays free, so that every probe ends (load factor 1.0 would fill them all and
        # a key the map does not hold would be looked for forever)
        self.max_entries = min(int(slots * load_factor), slots - 1)
        zeros = array("q", [0])
        self._lo = zeros * slots
        self._hi = zeros * slots
        self._offsets = array("q", [-1]) * slots  # -1: the slot is free
        self.size = 0
        #: The last offset the map has seen (Kafka's ``latestOffset``): records past it keep their place.
        self.latest_offset = -1

    @property
    def full(self) -> bool:
        return self.size >= self.max_entries

    def clear(self) -> None:
        """Empty the map for the next round (the memory stays)."""
        if self.size:
            # in slices: a whole-size temporary would double the memory for a moment
            step = 1 << 16
            free, zero = array("q", [-1]) * step, array("q", [0]) * step
            for start in range(0, self.slots, step):
                end = min(start + step, self.slots)
                self._offsets[start:end] = free[: end - start]
                self._lo[start:end] = zero[: end - start]
                self._hi[start:end] = zero[: end - start]
        self.size = 0
        self.latest_offset = -1

    def put(self, key: bytes, offset: int) -> None:
        """Record ``offset`` as the latest for ``key`` (the caller goes in offset order)."""
        lo, hi = _split(_md5(key).digest())
        self._put(lo, hi, offset)

    def _slot(self, lo: int, hi: int) -> int:
        """The slot that holds the hash ``lo, hi``, else the free slot where it would go (double
        hashing: the step comes from ``hi``)."""
        slots = self.slots
        los, his, offsets = self._lo, self._hi, self._offsets
        s = lo % slots
        step = 0
        while offsets[s] >= 0 and not (los[s] == lo and his[s] == hi):
            if not step:
                step = hi % (slots - 1) + 1
            s = (s + step) % slots
        return s

    def _put(self, lo: int, hi: int, offset: int) -> None:
        s = self._slot(lo, hi)
        if self._offsets[s] < 0:
            self._lo[s] = lo
            self._hi[s] = hi
            self.size += 1
        self._offsets[s] = offset
        if offset > self.latest_offset:
            self.latest_offset = offset

    def put_many(self, keys: list[bytes | None], offsets: list[int], limit: int | None = None) -> int:
        """:meth:`put` each non-null key with its offset (offsets increasing), stopping at the first
        key met once the map holds ``limit`` keys (default :attr:`max_entries`), as Kafka's
        ``buildOffsetMapForSegment`` does (``map.size < maxDesiredMapSize`` before every put, a key
        already in the map included); return how many pairs were taken (a pair with a null key counts
        as taken)."""
        if _OMAP_PUT is None:
            return self.put_many_py(keys, offsets, limit)
        limit = self.max_entries if limit is None else limit
        taken: int
        taken, self.size = _OMAP_PUT(keys, offsets, self._lo, self._hi, self._offsets, limit, self.size)
        self._note_latest(keys, offsets, taken)
        return taken

    def _note_latest(self, keys: list[bytes | None], offsets: list[int], taken: int) -> None:
        """The latest offset put: that of the last key taken (Kafka's ``put`` moves ``latestOffset``;
        a record without a key does not, nor does the batch's end once the map is full)."""
        for i in range(taken - 1, -1, -1):
            if keys[i] is not None:
                if offsets[i] > self.latest_offset:
                    self.latest_offset = offsets[i]
                return

    def put_many_py(self, keys: list[bytes | None], offsets: list[int], limit: int | None = None) -> int:
        """:meth:`put_many` in Python (the reference of the kernel's ``omap_put``): everything the hot
        loop touches is a local."""
        if len(keys) != len(offsets):
            raise ValueError("keys and offsets differ in length")
        limit = self.max_entries if limit is None else limit
        slots = self.slots
        los, his, slot_offsets = self._lo, self._hi, self._offsets
        md5 = _md5
        split = _split
        size = self.size
        taken = len(offsets)
        for i, key in enumerate(keys):
            if key is None:
                continue
            if size >= limit:  # Kafka checks before every put, a key already there included
                taken = i
                break
            lo, hi = split(md5(key).digest())
            s = lo % slots
            step = 0
            while True:
                if slot_offsets[s] < 0:
                    los[s] = lo
                    his[s] = hi
                    slot_offsets[s] = offsets[i]
                    size += 1
                    break
                if los[s] == lo and his[s] == hi:
                    slot_offsets[s] = offsets[i]
                    break
                if not step:
                    step = hi % (slots - 1) + 1
                s = (s + step) % slots
        self.size = size
        self._note_latest(keys, offsets, taken)
        return taken

    def get(self, key: bytes) -> int:
        """The latest offset recorded for ``key``, or -1."""
        lo, hi = _split(_md5(key).digest())
        return self._get(lo, hi)

    def _get(self, lo: int, hi: int) -> int:
        found = self._offsets[self._slot(lo, hi)]
        return found if found >= 0 else -1

    def retain_flags(self, keys: list[bytes | None], offsets: list[int]) -> bytearray | list[bool]:
        """For each record, whether compaction may keep it before its tombstones are judged (Kafka's
        ``shouldRetainRecord``): a record past :attr:`latest_offset` stays; otherwise a record without
        a key goes, and a keyed one stays when it is its key's latest. A mutable sequence of truth
        values (1/0 from the kernel)."""
        if _OMAP_RETAIN is None:
            return self.retain_flags_py(keys, offsets)
        flags: bytearray = _OMAP_RETAIN(keys, offsets, self._lo, self._hi, self._offsets, self.latest_offset)
        return flags

    def retain_flags_py(self, keys: list[bytes | None], offsets: list[int]) -> list[bool]:
        """:meth:`retain_flags` in Python (the reference of the kernel's ``omap_retain``)."""
        slots = self.slots
        los, his, slot_offsets = self._lo, self._hi, self._offsets
        md5 = _md5
        split = _split
        latest = self.latest_offset
        out: list[bool] = []
        add = out.append
        for key, offset in zip(keys, offsets, strict=True):
            if offset > latest:
                add(True)
                continue
            if key is None:
                add(False)
                continue
            lo, hi = split(md5(key).digest())
            s = lo % slots
            step = 0
            while True:
                found = slot_offsets[s]
                if found < 0:
                    add(True)
                    break
                if los[s] == lo and his[s] == hi:
                    add(offset >= found)
                    break
                if not step:
                    step = hi % (slots - 1) + 1
                s = (s + step) % slots
        return out
