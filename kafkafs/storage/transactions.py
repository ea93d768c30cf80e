"""Transactions: the ``.txnindex`` file of a segment, and the ongoing transactions of a partition.

:class:`TransactionIndex` is Kafka's ``TransactionIndex``: an append-only file of
:class:`~kafkafs.format.txnindex.AbortedTxn` entries, created with its first entry (a segment that
never saw an aborted transaction has none), truncated with the segment, renamed and deleted with it.
Appends are rare (one per aborted transaction), so the file is opened per operation and holds no
descriptor.

:class:`ProducerTransactions` is the part of Kafka's ``ProducerStateManager`` that the index needs:
for each producer with a transaction in progress, the offset of its first batch. A transactional data
batch of a producer without one starts one; a COMMIT or ABORT marker ends it, and an ABORT becomes an
index entry whose last stable offset is the first offset of the earliest other undecided transaction
(or the marker's offset + 1). :meth:`ProducerTransactions.apply` takes the events of one append:
like Kafka's ``UnifiedLog.append``, the transactions started anywhere in the append count as undecided
when the last stable offsets of the ones it completes are computed; recovery applies one batch at a time,
as Kafka's ``LogSegment.recover`` does.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import CorruptRecordError, InvalidInput, UnsafeFileError
from ..format.txnindex import (
    ENTRY_SIZE,
    AbortedTxn,
    TxnEvent,
    check_txn_index,
    encode_aborted_txn,
    parse_txn_index,
    transaction_event,
)
from .safefiles import open_file

if TYPE_CHECKING:
    from .segment import LogSegment

__all__ = ["TransactionIndex", "ProducerTransactions", "segment_events"]

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _truncate(path: Path, size: int) -> None:
    """Truncate through a descriptor opened without following links (never ``os.truncate(path)``)."""
    fd = open_file(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, size)
    finally:
        os.close(fd)


_UNKNOWN = object()


class TransactionIndex:
    """A segment's ``.txnindex`` (``path`` follows renames)."""

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
            if last is not None and txn.last_offset <= last:  # type: ignore[operator]
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


class ProducerTransactions:
    """The undecided transactions of a partition: producer id -> offset of its first batch."""

    __slots__ = ("current",)

    def __init__(self, current: dict[int, int] | None = None) -> None:
        self.current: dict[int, int] = dict(current or {})

    def __repr__(self) -> str:
        return f"ProducerTransactions({self.current})"

    def copy(self) -> ProducerTransactions:
        return ProducerTransactions(self.current)

    def first_undecided_offset(self) -> int | None:
        """The first offset of the earliest transaction still in progress (what bounds the last stable
        offset), or None."""
        return min(self.current.values(), default=None)

    def undecided(self, producer_id: int, offset: int) -> bool:
        """Whether a batch of ``producer_id`` at ``offset`` belongs to a transaction still in progress."""
        first = self.current.get(producer_id)
        return first is not None and first <= offset

    def apply(self, events: Iterable[TxnEvent]) -> list[AbortedTxn]:
        """Apply the events of one append, in order; return the index entries of the transactions it aborts."""
        current = self.current
        ongoing = {first: pid for pid, first in current.items()}  # Kafka's ongoingTxns, by first offset
        completed: list[tuple[TxnEvent, int]] = []
        for event in events:
            pid = event.producer_id
            if event.kind == "data":
                if pid not in current:
                    current[pid] = event.offset
                    ongoing[event.offset] = pid
            else:
                first = current.pop(pid, None)
                if first is not None:  # a marker without a transaction changes nothing (Kafka emits none)
                    completed.append((event, first))
        aborted: list[AbortedTxn] = []
        for event, first in completed:
            if event.kind == "ABORT":
                pid = event.producer_id
                lso = min((f for f, p in ongoing.items() if p != pid), default=event.offset + 1)
                aborted.append(AbortedTxn(pid, first, event.offset, lso))
            ongoing.pop(first, None)
        return aborted

    def apply_one(self, event: TxnEvent) -> list[AbortedTxn]:
        return self.apply((event,))

    @classmethod
    def scan(cls, segments: Iterable[LogSegment], state: ProducerTransactions | None = None) -> ProducerTransactions:
        """Build (or continue) the state from the batch headers of ``segments``, oldest first; only
        transaction markers are decoded. Damage ends the scan (recovery deals with it)."""
        state = state if state is not None else cls()
        for segment in segments:
            for event in segment_events(segment):
                state.apply_one(event)
        return state


def segment_events(segment: LogSegment, start_position: int = 0) -> Iterator[TxnEvent]:
    """The transaction events of a segment's batches (headers only, markers decoded)."""
    try:
        for view in segment.batches(start_position):
            h = view.header
            if h.magic == 2 and h.producer_id >= 0 and (h.is_transactional or h.is_control):
                try:
                    event = transaction_event(view.buf, h)
                except CorruptRecordError:
                    continue
                if event is not None:
                    yield event
    except CorruptRecordError:
        return
