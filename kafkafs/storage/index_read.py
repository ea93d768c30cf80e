"""How a read-only index reads its file (:class:`.index.AbstractIndex` with ``writable=False``): the
live entries counted with ``pread`` and read into memory, never mapped. Touching a page of a map past
the end of a file (one its owner truncated), or one the disk cannot read, kills the process with
SIGBUS, where a read raises ``OSError`` (EIO: the reads that need this segment fail, the mount lives
on; issue 20). What an earlier read took is kept; its last entry is read again (it may have been
being written). Functions of a descriptor, no state: safe from any thread."""

from __future__ import annotations

import errno
import mmap
import os
from typing import NamedTuple

from kafkafs.format.index import IndexLayout, live_entry_count

__all__ = ["DISK_ERRNOS", "ReadEntries", "read_entries", "pread_all"]

#: A disk that will not give bytes it holds (EIO and its kin), as opposed to a file that is gone.
DISK_ERRNOS = frozenset({errno.EIO, errno.EUCLEAN, errno.EBADMSG, errno.ENODATA, errno.EREMOTEIO})


class ReadEntries(NamedTuple):
    """What :func:`read_entries` read: the entries' bytes (None when there are none), how many there
    are, how many the file has room for, and the file's size."""

    data: mmap.mmap | bytes | None
    entries: int
    max_entries: int
    length: int


def pread_all(fd: int, size: int, offset: int) -> bytes:
    """``size`` bytes at ``offset`` (short only at the end of the file: zeros there read as no entry)."""
    chunks, done = [], 0
    while done < size:
        chunk = os.pread(fd, size - done, offset + done)
        if not chunk:
            break
        chunks.append(chunk)
        done += len(chunk)
    data = b"".join(chunks)
    return data if len(data) == size else data.ljust(size, b"\0")


def read_entries(fd: int, layout: IndexLayout, old_entries: int = 0,
                 old_data: mmap.mmap | bytes | None = None) -> ReadEntries:
    """Count the live entries of the index file ``fd`` with preads (``kafkafs.format.index``'s rule)
    and read them; ``old_entries`` and ``old_data``: what the last read gave (the bytes of the entries
    before its last are taken from there, not read again)."""
    size = layout.entry_size
    length = os.fstat(fd).st_size
    raw = length // size
    known = 0 if old_entries > raw else old_entries

    def entry_at(slot: int) -> bytes:
        return os.pread(fd, size, slot * size)

    entries = live_entry_count(raw, entry_at, layout, known)
    keep = 0 if old_data is None else min(old_entries, entries) - 1
    data: mmap.mmap | bytes | None
    if keep <= 0 or old_data is None:
        data = pread_all(fd, entries * size, 0) if entries else None
    else:
        tail = pread_all(fd, (entries - keep) * size, keep * size)
        if entries == old_entries and old_data[keep * size : entries * size] == tail:
            data = old_data  # nothing changed: no copy
        else:
            data = old_data[: keep * size] + tail
    return ReadEntries(data, entries, raw, length)
