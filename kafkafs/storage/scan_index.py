"""The in-memory sparse index of a read-only segment without usable index files."""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator

from ..errors import CorruptRecordError
from .index_read import DISK_ERRNOS
from .records import BatchView

__all__ = ["ScanIndex"]


class ScanIndex:
    """An in-memory sparse index for a read-only segment that has no usable ``.index`` (a broker's
    preallocated files were not kept, or the index is empty): built once by scanning batch headers,
    one entry every ``index.interval.bytes``, and extended as the file grows. Each entry is a batch's
    position, its base offset and the largest timestamp of the batches before it, so offset and time
    lookups start their scan near the target instead of at position 0.

    Threads: the owning segment extends it under its lock; lookups take none (the arrays only grow,
    and an entry is complete before the array holding it is longer).
    """

    __slots__ = ("positions", "bases", "max_before", "covered", "running_max", "last_entry", "unreadable_at",
                 "crc_checked", "crc_failed_at")

    def __init__(self) -> None:
        self.positions = array("q", [0])
        self.bases = array("q", [-1])
        self.max_before = array("q", [-1])
        self.covered = 0  # end of the last batch scanned
        self.running_max = -1
        self.last_entry = 0
        #: the segment's size when a scan met bytes the disk would not give (not scanned again at that size)
        self.unreadable_at: int | None = None
        #: end of the batches from position 0 whose CRC a time lookup saw hold (:attr:`max_before` is read
        #: from maxTimestamp, inside the CRC: a lookup passes over a batch by it only once it holds), and
        #: the position of the first batch whose CRC failed (None: none met yet)
        self.crc_checked = 0
        self.crc_failed_at: int | None = None

    def extend(self, views: Iterator[BatchView], interval: int, size: int | None = None) -> None:
        """Index the batches of ``views`` (the segment's from :attr:`covered` up to its ``size``); damage,
        or bytes the disk will not give (EIO), end it there: the reads that need them meet them."""
        try:
            for view in views:
                h = view.header
                position = view.position
                if position - self.last_entry >= interval:
                    self.positions.append(position)
                    self.bases.append(h.base_offset)
                    self.max_before.append(self.running_max)
                    self.last_entry = position
                if h.max_timestamp > self.running_max:
                    self.running_max = h.max_timestamp
                self.covered = position + h.size
        except CorruptRecordError:
            pass  # reads that need the damaged part will meet it themselves
        except OSError as exc:
            if exc.errno not in DISK_ERRNOS:
                raise
            self.unreadable_at = size  # lookups past it scan from the last entry and meet the error

    def position_for_offset(self, offset: int) -> int:
        """Position of the last entry whose batch starts at or below ``offset``."""
        return self.positions[max(bisect_right(self.bases, offset) - 1, 0)]

    def position_for_timestamp(self, timestamp: int) -> int:
        """Position of the last entry before which no batch reaches ``timestamp``."""
        return self.positions[max(bisect_left(self.max_before, timestamp) - 1, 0)]
