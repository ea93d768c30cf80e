"""The file of a key index (:mod:`.keyindex`): its layout, reading it with every block checked, and
writing it.

A file::

    [0, 4096)          "KAFKAFS-KEYS\\n", u32 length, the head (JSON: version, kafkafs version, the
                       segment's key, counts, where each section is), zeros
    data               the entries sorted by (h1, h2, rel); the fanout: 2**bits + 1 uint64, entry
                       index of the first entry whose h1 starts with each bits-long prefix; the
                       transactional batches; the long keys (sha256, h1, h2; sorted)
    CRC table          a CRC-32C of every 4 KiB block of data
    BLAKE2b            of the head's 4 KiB and the CRC table

:meth:`SegmentKeyIndex.open` uses a file only when its head holds the expected key and the BLAKE2b
holds; each block read afterwards is checked against its CRC-32C as it is read (so a lookup reads a few
blocks, not the file), and a block that fails raises :class:`DamagedIndex`.

Threads: a :class:`SegmentKeyIndex` is immutable once written; reads use ``pread`` and may come from
any thread. A :class:`BlockWriter` belongs to the one thread building the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import threading
from array import array
from bisect import bisect_left
from pathlib import Path
from typing import Any, BinaryIO

from .. import __version__
from ..errors import CorruptRecordError
from ..format.crc import crc32c
from ..format.keyindex import ENTRY, ENTRY_SIZE, TXN, find_entries

__all__ = ["DamagedIndex", "SegmentKeyIndex", "BlockWriter", "FORMAT_VERSION", "HEAD_SIZE", "BLOCK", "LONG",
           "fanout_bits"]

#: 2: the last batch of a segment judged against the next segment's base; 3: damage kept as the batch's
#: own error (reason and position), so that it is said as every other reader says that batch
FORMAT_VERSION = 3
MAGIC = b"KAFKAFS-KEYS\n"
HEAD_SIZE = 4096
BLOCK = 4096
_DIGEST = 32
_LEN = struct.Struct(">I")
_U64 = struct.Struct("<Q")
#: A long key's row: its SHA-256, then its hash halves.
LONG = struct.Struct("=32sQQ")


class DamagedIndex(Exception):
    """An index file failed a check while it was read (``index``: that index, when it was open): it
    must be rebuilt."""

    def __init__(self, reason: str, index: SegmentKeyIndex | None = None) -> None:
        super().__init__(reason)
        self.index = index


def fanout_bits(entries: int) -> int:
    """About 16 entries a fanout bucket, at most 2**20 buckets."""
    bits = 0
    while bits < 20 and (entries >> (bits + 4)) > 0:
        bits += 1
    return bits


# -------------------------------------------------------------------------------------------- reading


class SegmentKeyIndex:
    """One segment's key index file, open for reading (see the module's docstring)."""

    def __init__(self, file: BinaryIO, head: dict[str, Any], crcs: array[int], path: Path | None) -> None:
        self._file = file
        self._fd = file.fileno()
        self.path = path
        self.head = head
        self._crcs = crcs
        self.base_offset: int = head["base"]
        self.entries: int = head["entries"]
        self.bits: int = head["bits"]
        self.txns: int = head["txns"]
        self.longs: int = head["longs"]
        #: None, or {"offset", "position", "reason"}: the scan stopped at damage there (see :meth:`damage`).
        self.damaged: dict[str, Any] | None = head["damaged"]
        self.next_offset: int = head["next_offset"]
        self._entries_at = 0
        self._fanout_at = self.entries * ENTRY_SIZE
        self._txns_at = self._fanout_at + ((1 << self.bits) + 1) * 8
        self._longs_at = self._txns_at + self.txns * TXN.size
        self._txn_cache: list[tuple[int, int, int]] | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<SegmentKeyIndex base={self.base_offset} entries={self.entries}>"

    def damage(self, log_path: str | os.PathLike[str]) -> CorruptRecordError | None:
        """The damage the scan of the segment at ``log_path`` stopped at, as the error its batch raises
        to any reader (same reason, file and position: the mount logs a damage once per file and
        position, whichever view meets it); None when the index is whole."""
        if self.damaged is None:
            return None
        return CorruptRecordError(self.damaged["reason"], self.damaged["position"], str(log_path))

    @classmethod
    def open(cls, file: BinaryIO, key: list[Any], path: Path | None = None) -> SegmentKeyIndex:
        """Check the file's head (its key must be ``key``), size and checksum; DamagedIndex otherwise."""
        fd = file.fileno()
        size = os.fstat(fd).st_size
        first = os.pread(fd, HEAD_SIZE, 0)
        if len(first) < HEAD_SIZE or not first.startswith(MAGIC):
            raise DamagedIndex("not a key index")
        (length,) = _LEN.unpack_from(first, len(MAGIC))
        start = len(MAGIC) + _LEN.size
        try:
            head = json.loads(first[start : start + length])
            data_size = int(head["data_size"])
            blocks = int(head["blocks"])
        except (ValueError, KeyError, TypeError) as exc:
            raise DamagedIndex(f"unreadable head: {exc}") from None
        if head.get("version") != FORMAT_VERSION or head.get("kafkafs") != __version__ or head.get("key") != key:
            raise DamagedIndex("stale: written for another file, version or kafkafs")
        if blocks != -(-data_size // BLOCK) or size != HEAD_SIZE + data_size + 4 * blocks + _DIGEST:
            raise DamagedIndex("its size does not match its head")
        tail = os.pread(fd, 4 * blocks + _DIGEST, HEAD_SIZE + data_size)
        if hashlib.blake2b(first + tail[:-_DIGEST], digest_size=_DIGEST).digest() != tail[-_DIGEST:]:
            raise DamagedIndex("checksum mismatch")
        crcs = array("I")
        crcs.frombytes(tail[:-_DIGEST])
        return cls(file, head, crcs, path)

    def close(self) -> None:
        """Close the file now (reads after it fail with EBADF, never from another file)."""
        self._fd = -1
        self._file.close()

    def read(self, position: int, size: int) -> bytes:
        """``size`` bytes of data from ``position``, each 4 KiB block checked; DamagedIndex when one fails."""
        if size <= 0:
            return b""
        first = position // BLOCK
        last = (position + size - 1) // BLOCK
        start = first * BLOCK
        raw = os.pread(self._fd, (last + 1) * BLOCK - start, HEAD_SIZE + start)
        data_size = self.head["data_size"]
        crcs = self._crcs
        view = memoryview(raw)
        for b in range(first, last + 1):
            lo = (b - first) * BLOCK
            hi = min(lo + BLOCK, data_size - start)
            if b >= len(crcs) or hi > len(raw) or crc32c(view[lo:hi]) != crcs[b]:
                raise DamagedIndex(f"{self.path or 'a temporary key index'}: block {b} fails its check", self)
        at = position - start
        return raw[at : at + size]

    def _fanout(self, i: int, j: int) -> tuple[int, int]:
        """Entry indexes where fanout buckets ``i`` and ``j`` start."""
        if j == i + 1:
            a, b = struct.unpack("<QQ", self.read(self._fanout_at + 8 * i, 16))
            return a, b
        return (_U64.unpack(self.read(self._fanout_at + 8 * i, 8))[0],
                _U64.unpack(self.read(self._fanout_at + 8 * j, 8))[0])

    def entry_bytes(self, lo: int, hi: int) -> bytes:
        """Entries ``lo:hi`` (packed)."""
        return self.read(self._entries_at + lo * ENTRY_SIZE, (hi - lo) * ENTRY_SIZE) if hi > lo else b""

    def find(self, h1: int, h2: int) -> list[tuple[int, int]]:
        """``[(rel, flags)]`` of the hash, by rel."""
        if not self.entries:
            return []
        bucket = h1 >> (64 - self.bits) if self.bits else 0
        lo, hi = self._fanout(bucket, bucket + 1)
        return find_entries(self.entry_bytes(lo, hi), h1, h2)

    def slice(self, prefix: int, bits: int) -> bytes:
        """The entries whose h1 starts with the ``bits``-long ``prefix`` (sorted)."""
        if not self.entries:
            return b""
        if bits <= self.bits:
            shift = self.bits - bits
            lo, hi = self._fanout(prefix << shift, (prefix + 1) << shift)
            return self.entry_bytes(lo, hi)
        coarse = prefix >> (bits - self.bits)
        lo, hi = self._fanout(coarse, coarse + 1) if self.bits else (0, self.entries)
        data = self.entry_bytes(lo, hi)
        heads = [ENTRY.unpack_from(data, i)[0] >> (64 - bits) for i in range(0, len(data), ENTRY_SIZE)]
        a, b = bisect_left(heads, prefix), bisect_left(heads, prefix + 1)
        return data[a * ENTRY_SIZE : b * ENTRY_SIZE]

    def transactional_batches(self) -> list[tuple[int, int, int]]:
        """``(base offset, last offset, producer id)`` of each transactional data batch, by offset."""
        cached = self._txn_cache
        if cached is None:
            raw = self.read(self._txns_at, self.txns * TXN.size)
            cached = [TXN.unpack_from(raw, i) for i in range(0, len(raw), TXN.size)]
            with self._lock:
                self._txn_cache = cached
        return cached

    def long_key(self, digest: bytes) -> tuple[int, int] | None:
        """``(h1, h2)`` of the long key whose SHA-256 is ``digest``, if the segment has it."""
        lo, hi = 0, self.longs
        size = LONG.size
        while lo < hi:
            mid = (lo + hi) // 2
            sha, h1, h2 = LONG.unpack(self.read(self._longs_at + mid * size, size))
            if sha == digest:
                return h1, h2
            if sha < digest:
                lo = mid + 1
            else:
                hi = mid
        return None


# -------------------------------------------------------------------------------------------- writing


class BlockWriter:
    """Writes data after the head, a CRC-32C per 4 KiB block."""

    def __init__(self, file: BinaryIO) -> None:
        self.file = file
        self.crcs = array("I")
        self.size = 0
        self._pending = bytearray()
        file.seek(HEAD_SIZE)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.size += len(data)
        pending = self._pending
        pending += data
        whole = len(pending) - len(pending) % BLOCK
        if whole:
            view = memoryview(pending)
            for at in range(0, whole, BLOCK):
                self.crcs.append(crc32c(view[at : at + BLOCK]))
            self.file.write(view[:whole])
            view.release()
            del pending[:whole]

    def finish(self, head: dict[str, Any]) -> None:
        if self._pending:
            self.crcs.append(crc32c(self._pending))
            self.file.write(self._pending)
            self._pending = bytearray()
        head = dict(head, data_size=self.size, blocks=len(self.crcs))
        body = json.dumps(head, separators=(",", ":")).encode()
        first = MAGIC + _LEN.pack(len(body)) + body
        if len(first) > HEAD_SIZE:
            raise ValueError("key index head too large")
        first += bytes(HEAD_SIZE - len(first))
        table = self.crcs.tobytes()
        self.file.write(table)
        self.file.write(hashlib.blake2b(first + table, digest_size=_DIGEST).digest())
        self.file.seek(0)
        self.file.write(first)
        self.file.flush()


