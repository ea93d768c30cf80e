"""A segment's ``.txnindex`` file (Kafka's ``TransactionIndex``), a peer of the offset and time indexes.

An append-only file of :class:`~kafkafs.format.txnindex.AbortedTxn` entries, created with its first
entry (a segment that never saw an aborted transaction has none), truncated with the segment, renamed
and deleted with it. Appends are rare (one per aborted transaction), so the file is opened per
operation and holds no descriptor.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..errors import CorruptRecordError, InvalidInput, UnsafeFileError
from ..format.txnindex import ENTRY_SIZE, AbortedTxn, check_txn_index, encode_aborted_txn, parse_txn_index
from .file_copy import FileCopy, put_back
from .safefiles import open_file

__all__ = ["TransactionIndex"]

_UNKNOWN = object()


def _truncate(path: Path, size: int) -> None:
    """Truncate through a descriptor opened without following links (never ``os.truncate(path)``)."""
    fd = open_file(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, size)
    finally:
        os.close(fd)


class TransactionIndex:
    """A segment's ``.txnindex`` (``path`` follows renames).

    Threads: safe to share. Changes (append, reset, truncation, rename, delete) serialise on a lock;
    readers (:meth:`entries`) take none and read whole entries of the file as it is.
    """

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._lock = threading.Lock()
        self._last_offset: object | int | None = _UNKNOWN  # of the last entry; None when empty
        self._dirty = False

    def __repr__(self) -> str:
        return f"<TransactionIndex {self.path.name}>"

    def exists(self) -> bool:
        return self.path.exists()

    def _read(self) -> bytes:
        try:
            fd = open_file(self.path, os.O_RDONLY)
        except (FileNotFoundError, UnsafeFileError):  # a link is never followed: as if there were none
            return b""
        with os.fdopen(fd, "rb") as f:
            return f.read()

    def entries(self) -> list[AbortedTxn]:
        """Every whole entry, in file order (none when the file does not exist)."""
        try:
            return parse_txn_index(self._read())
        except CorruptRecordError as exc:
            raise exc.at(str(self.path)) from None

    def __iter__(self) -> Iterator[AbortedTxn]:
        return iter(self.entries())

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry (the file is created by the first); its marker offset must follow the last one's."""
        with self._lock:
            last = self._last_offset
            if last is _UNKNOWN:
                entries = self.entries()
                last = entries[-1].last_offset if entries else None
            if last is not None and txn.last_offset <= last:  # type: ignore[operator]  # _UNKNOWN was replaced above
                raise InvalidInput(
                    f"{self.path}: aborted transaction ending at {txn.last_offset} does not follow {last}"
                )
            fd = open_file(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                size = os.fstat(fd).st_size
                if size % ENTRY_SIZE:  # a torn entry from a crash: Kafka would not read it either
                    os.ftruncate(fd, size - size % ENTRY_SIZE)
                os.write(fd, encode_aborted_txn(txn))
            finally:
                os.close(fd)
            self._last_offset = txn.last_offset
            self._dirty = True

    def reset(self) -> None:
        """Remove every entry; an existing file stays, empty (Kafka's ``reset`` truncates it)."""
        with self._lock:
            try:
                _truncate(self.path, 0)
                self._dirty = True
            except FileNotFoundError:
                pass
            self._last_offset = None

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or past ``offset``."""
        with self._lock:
            entries = self.entries()
            for i, entry in enumerate(entries):
                if entry.last_offset >= offset:
                    _truncate(self.path, i * ENTRY_SIZE)
                    self._dirty = True
                    self._last_offset = entries[i - 1].last_offset if i else None
                    return

    def write_entries(self, entries: Iterable[AbortedTxn]) -> None:
        """Append ``entries`` in order (a cleaner copies the entries of the segment it rewrites)."""
        for entry in entries:
            self.append(entry)

    def flush(self) -> None:
        """fsync what was written since the last flush."""
        with self._lock:
            if not self._dirty:
                return
            try:
                fd = open_file(self.path, os.O_RDONLY)
            except FileNotFoundError:
                self._dirty = False
                return
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            self._dirty = False

    def rename(self, path: Path) -> None:
        """Move the file (if there is one) to ``path``; later operations use ``path``."""
        with self._lock:
            try:
                os.replace(self.path, path)
            except FileNotFoundError:
                pass
            self.path = path

    def put_back(self, copy: FileCopy) -> None:
        """After a rebuild that failed: the file holds what ``copy`` kept again (:mod:`.file_copy`)."""
        with self._lock:
            self._last_offset = _UNKNOWN
            self._dirty = False
            put_back(copy)

    def delete(self) -> bool:
        """Remove the file; False if there was none."""
        with self._lock:
            self._last_offset = None
            self._dirty = False
            try:
                os.unlink(self.path)
                return True
            except FileNotFoundError:
                return False

    def sanity_check(self) -> None:
        """``CorruptRecordError`` for a torn entry, an unknown version, a marker below the base offset or
        marker offsets that do not increase (Kafka rebuilds the index from the log then)."""
        data = self._read()
        if len(data) % ENTRY_SIZE:
            raise CorruptRecordError(
                f"size {len(data)} is not a whole number of {ENTRY_SIZE}-byte entries", len(data) - len(data) % ENTRY_SIZE,
                str(self.path),
            )
        try:
            check_txn_index(parse_txn_index(data), self.base_offset)
        except CorruptRecordError as exc:
            raise exc.at(str(self.path)) from None
