"""A small file's bytes kept in memory while it is rebuilt, to put back when the rebuild fails.

Recovery rebuilds a segment's index files in place: it empties them, grows the offset and time indexes
to ``segment.index.bytes`` and writes the entries as it reads the ``.log``. A read that fails halfway
(a disk error, a ``.log`` the process may not open) or a full disk would otherwise leave a sealed
segment's trimmed index as a preallocated file of zeros, damage that was not there (review23 R23-1).
:func:`copy_file` keeps what the file holds (or that there was none), :func:`put_back` makes the file
hold exactly that again: the same length and bytes, or no file.

Only the stretches that are not zeros are kept (a preallocated index is mostly a hole), in chunks at
fixed positions; putting back writes only the chunks that differ, so a trimmed index costs a write or
two and a preallocated one no more than its entries. Files are opened without following links
(:func:`~.safefiles.open_file`).

Thread safety: the functions keep no state; the caller holds whatever lock guards the file.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from ..errors import doing
from .safefiles import open_file

__all__ = ["FileCopy", "copy_file", "put_back"]

#: Bytes compared (and kept, when not all zeros) at a time.
_CHUNK = 1 << 16


class FileCopy(NamedTuple):
    """What a file held: its length (None: there was no file) and its chunks that are not all zeros,
    by position (every position a multiple of the chunk size)."""

    path: Path
    length: int | None
    chunks: dict[int, bytes]


def _chunks_with_data(fd: int, length: int) -> Iterator[int]:
    """The chunk positions below ``length`` where the file may hold bytes other than zeros: those that
    overlap its data, as ``SEEK_DATA`` / ``SEEK_HOLE`` tell them (a preallocated index is a hole past its
    entries: none of it is read), or all of them where the file system cannot tell."""
    pos = 0  # the first chunk position not given yet
    while pos < length:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
            end = os.lseek(fd, start, os.SEEK_HOLE)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                return  # a hole from ``pos`` to the end
            if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                raise
            start, end = pos, length  # no way to tell: every chunk
        first = max(pos, start - start % _CHUNK)
        for at in range(first, min(end, length), _CHUNK):
            yield at
            pos = at + _CHUNK
        if first >= min(end, length):
            return  # data past ``length`` only


def copy_file(path: str | os.PathLike[str]) -> FileCopy:
    """What ``path`` holds now (no file is a copy too: :func:`put_back` then removes one)."""
    try:
        fd = open_file(path, os.O_RDONLY)
    except FileNotFoundError:
        return FileCopy(Path(path), None, {})
    chunks: dict[int, bytes] = {}
    try:
        with doing("read {path}", path):
            length = os.fstat(fd).st_size
            for at in _chunks_with_data(fd, length):
                data = os.pread(fd, min(_CHUNK, length - at), at)
                if data.count(0) != len(data):
                    chunks[at] = data
    finally:
        os.close(fd)
    return FileCopy(Path(path), length, chunks)


def put_back(copy: FileCopy) -> None:
    """Make ``copy.path`` hold what it held when ``copy`` was taken: the same length and bytes (only the
    chunks that differ are written), or no file when there was none."""
    path = copy.path
    length = copy.length
    if length is None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return
    fd = open_file(path, os.O_RDWR | os.O_CREAT)
    try:
        with doing("write {path}", path):
            os.ftruncate(fd, length)
            for at in sorted(set(copy.chunks).union(_chunks_with_data(fd, length))):
                want = copy.chunks.get(at) or bytes(min(_CHUNK, length - at))
                if os.pread(fd, len(want), at) != want:
                    view = memoryview(want)
                    while view:
                        view = view[os.pwrite(fd, view, at + len(want) - len(view)):]
    finally:
        os.close(fd)
