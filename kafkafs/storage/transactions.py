"""The ongoing transactions of a partition (the ``.txnindex`` file itself: :mod:`kafkafs.storage.txnindex`),
what compaction tracks of them (:class:`CleanedTransactions`), and a partition's aborted transactions
as a reader sees them (:func:`segment_aborted`).

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

import heapq
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import CorruptRecordError
from ..format.batch import BatchHeader
from ..format.records import control_type_of
from ..format.txnindex import AbortedTxn, TxnEvent, transaction_event
from .names import INDEX, LOG, segment_file_name
from .records import BatchView

if TYPE_CHECKING:
    from .segment_files import SegmentFiles

__all__ = ["CleanedTransactions", "ProducerTransactions", "batch_events", "segment_aborted", "rebuilt_aborted",
           "txn_index_difference", "abort_markers"]


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
    def scan(
        cls, segments: Iterable[Iterator[BatchView]], state: ProducerTransactions | None = None
    ) -> ProducerTransactions:
        """Build (or continue) the state from the batches of ``segments`` (each a segment's
        ``batches()``), oldest first; only transaction markers are decoded. Damage ends a segment's
        scan (recovery deals with it)."""
        state = state if state is not None else cls()
        for views in segments:
            for event in batch_events(views):
                state.apply_one(event)
        return state


def batch_events(views: Iterator[BatchView]) -> Iterator[TxnEvent]:
    """The transaction events of one segment's batches (headers only, markers decoded); damage ends them."""
    try:
        for view in views:
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


def segment_aborted(segments: Sequence[SegmentFiles]) -> Iterator[tuple[SegmentFiles, list[AbortedTxn]]]:
    """Each segment of a partition (``segments``: all of them, oldest first) with its aborted
    transactions: its ``.txnindex`` entries; for a segment whose offset index file is missing (a copied
    broker directory whose index files were not kept), the entries a broker's recovery writes when it
    loads such a segment and rebuilds its indexes (Kafka's ``LogSegment.recover``: the partition's
    transaction markers replayed from its first segment, headers read, markers decoded). A ``.txnindex``
    lost beside a kept ``.index`` is trusted, as a broker trusts it.

    The replay is kept while the segments (base offsets and sizes) stay the same; a segment's entries
    are read as the iteration reaches it. Safe from any thread."""
    rebuilt = _rebuilt(segments)
    for s in segments:
        yield s, rebuilt[s.base_offset] if s.base_offset in rebuilt else s.txn_index.entries()


_REBUILT_KEPT = 64
# key: (folder, each segment's (base offset, size), each replayed segment's (base offset, inode, ctime))
_RebuiltKey = tuple[str, tuple[tuple[int, int], ...], tuple[tuple[int, int, int], ...]]
_rebuilt_cache: OrderedDict[_RebuiltKey, dict[int, list[AbortedTxn]]] = OrderedDict()
_rebuilt_lock = threading.Lock()


def _rebuilt(segments: Sequence[SegmentFiles]) -> dict[int, list[AbortedTxn]]:
    """base offset -> rebuilt entries, for the segments without their offset index file."""
    if not segments:
        return {}
    directory = segments[0].dir
    try:
        with os.scandir(directory) as it:  # one listing, not a stat a segment
            entries = {e.name: e for e in it}
    except OSError:
        return {}
    missing = {s.base_offset for s in segments if s.size and segment_file_name(s.base_offset, INDEX) not in entries}
    if not missing:
        return {}
    # the replayed segments' files by identity too: a file replaced by one of the same size (a marker
    # ABORT <-> COMMIT is as long) is replayed again, not answered from the earlier file's replay
    replayed = []
    for base in sorted(missing):
        entry = entries.get(segment_file_name(base, LOG))
        try:
            # ctime, not mtime: any write moves it, and no one can put it back (utime can mtime: review27 R27-7)
            changed = entry.stat(follow_symlinks=False).st_ctime_ns if entry is not None else -1
        except OSError:
            changed = -1
        replayed.append((base, entry.inode() if entry is not None else -1, changed))
    key = (str(directory), tuple((s.base_offset, s.size) for s in segments), tuple(replayed))
    with _rebuilt_lock:
        found = _rebuilt_cache.get(key)
        if found is not None:
            _rebuilt_cache.move_to_end(key)
            return found
    out = rebuilt_aborted(segments, missing)
    with _rebuilt_lock:
        _rebuilt_cache[key] = out
        while len(_rebuilt_cache) > _REBUILT_KEPT:
            _rebuilt_cache.popitem(last=False)
    return out


def rebuilt_aborted(
    segments: Sequence[SegmentFiles], only: set[int] | None = None, unreadable: list[OSError] | None = None
) -> dict[int, list[AbortedTxn]]:
    """base offset -> the ``.txnindex`` entries a recovery of the whole partition writes for each segment
    (``segments``: all of them, oldest first; ``only``: just these base offsets): the transaction markers
    replayed from the first segment, one batch at a time (:meth:`ProducerTransactions.apply_one`), as
    :meth:`LogSegment.recover <kafkafs.storage.segment.LogSegment.recover>` rebuilds them (and Kafka's
    ``LogSegment.recover``). Damage ends a segment's events, as it ends a recovery's walk there. With
    ``unreadable``, a segment that cannot be read (an OS error, appended there) ends the replay: it and
    the segments after it are left out (their entries are not known), instead of raising."""
    state = ProducerTransactions()
    out: dict[int, list[AbortedTxn]] = {}
    for segment in segments:
        entries: list[AbortedTxn] = []
        try:
            for event in batch_events(segment.batches()):
                entries += state.apply_one(event)
        except OSError as exc:
            if unreadable is None:
                raise
            unreadable.append(exc)
            break
        if only is None or segment.base_offset in only:
            out[segment.base_offset] = entries
    return out


def abort_markers(segment: SegmentFiles) -> set[tuple[int, int]]:
    """(producer id, offset) of each ABORT marker of ``segment`` (damage ends them)."""
    return {(e.producer_id, e.offset) for e in batch_events(segment.batches(0)) if e.kind == "ABORT"}


def txn_index_difference(
    kept: Sequence[AbortedTxn], rebuilt: Sequence[AbortedTxn], abort_markers: set[tuple[int, int]]
) -> tuple[list[AbortedTxn], list[AbortedTxn]]:
    """How a segment's ``.txnindex`` entries ``kept`` differ from what a recovery's rebuild writes
    (``rebuilt``, :func:`rebuilt_aborted`), as (entries kept that are wrong, entries rebuilt that are not
    kept); both empty when the file is right. An extra entry is right when it names an ABORT marker of
    its producer in the segment (``abort_markers``: (producer id, offset)) for which the rebuild writes
    no entry: Kafka's cleaner removes an aborted transaction's records, keeps its marker until the delete
    horizon and writes the cleaned segment's entry (``CleanedTransactionMetadata``), while a rebuild
    finds no transaction for a marker alone. An entry's last stable offset may be above the rebuild's: a
    follower appends a fetched run of batches at once and computes it once the whole run is in, so a
    transaction begun after the marker in that run counts (Kafka's ``lastStableOffset(completedTxn)``:
    the first offset of another producer's ongoing transaction, else the marker's offset + 1); below
    the rebuild's it is wrong. ``recover`` replaces a file that differs (damage) and ``verify`` says it:
    one rule for both (SPEC §4)."""
    rebuilt_lso = {_txn_key(e): e.last_stable_offset for e in rebuilt}
    rebuilt_markers = {(e.producer_id, e.last_offset) for e in rebuilt}

    def right(e: AbortedTxn) -> bool:
        lso = rebuilt_lso.get(_txn_key(e))
        if lso is not None:
            return e.last_stable_offset >= lso
        return (e.producer_id, e.last_offset) in abort_markers and (e.producer_id, e.last_offset) not in rebuilt_markers

    wrong = [e for e in kept if not right(e)]
    found = {_txn_key(e) for e in kept if _txn_key(e) in rebuilt_lso and right(e)}
    return wrong, [e for e in rebuilt if _txn_key(e) not in found]


def _txn_key(e: AbortedTxn) -> tuple[int, int, int, int]:
    """What of a ``.txnindex`` entry the log decides exactly (all but its last stable offset)."""
    return e.producer_id, e.first_offset, e.last_offset, e.version


@dataclass(slots=True)
class _Aborted:
    """An aborted transaction the cleaning has reached: its entry, and whether a batch of it was read."""

    entry: AbortedTxn
    read: bool = False


class CleanedTransactions:
    """What compaction knows of transactions as it walks a log in offset order (Kafka's
    ``CleanedTransactionMetadata``), for one cleaning round, carried from group to group.

    - :meth:`add_aborted` takes the ``.txnindex`` entries that overlap the segments about to be read;
      an entry becomes *ongoing* for its producer once a batch at or past its first offset is read.
    - :meth:`on_batch`: a transactional data batch of a producer with an ongoing aborted transaction
      may be discarded (True); any other transactional batch marks its producer's transaction as
      seen (it is committed, or still to be decided).
    - :meth:`on_control`: whether a control batch may be discarded. An ABORT marker may go only once
      no batch of its transaction was read in this round; while one was, the marker stays and its
      entry goes to :attr:`cleaned` (the ``.txnindex`` of the segment being written). A COMMIT marker
      may go once no batch of its transaction was read. Other control batches stay; an empty one
      (already cleaned) may go.

    "May go" is not "goes": compaction keeps such a marker until its batch's delete horizon
    (``delete.retention.ms`` after the cleaning that found it discardable) has passed.

    Not thread-safe: one compaction owns it.
    """

    def __init__(self) -> None:
        self._pending: list[tuple[int, int, AbortedTxn]] = []  # heap by first offset
        self._seq = 0
        self._aborted: dict[int, _Aborted] = {}  # by producer id
        self._committed: set[int] = set()
        #: Entries of the ABORT markers kept so far, for the segment being written (the caller empties it).
        self.cleaned: list[AbortedTxn] = []

    def add_aborted(self, entries: Iterable[AbortedTxn]) -> None:
        for entry in entries:
            self._seq += 1
            heapq.heappush(self._pending, (entry.first_offset, self._seq, entry))

    def _reach(self, offset: int) -> None:
        pending = self._pending
        while pending and pending[0][0] <= offset:
            entry = heapq.heappop(pending)[2]
            self._aborted.setdefault(entry.producer_id, _Aborted(entry))

    def on_batch(self, header: BatchHeader) -> bool:
        """A data batch read; True when it belongs to an aborted transaction."""
        self._reach(header.last_offset)
        if not header.is_transactional:
            return False
        ongoing = self._aborted.get(header.producer_id)
        if ongoing is not None:
            ongoing.read = True
            return True
        self._committed.add(header.producer_id)
        return False

    def on_control(self, header: BatchHeader, first_key: bytes | None, empty: bool) -> bool:
        """A control batch read (``first_key``: its first record's key); True when it may be discarded."""
        self._reach(header.last_offset)
        if empty:
            return True
        kind = control_type_of(first_key)
        pid = header.producer_id
        if kind == "ABORT":
            ongoing = self._aborted.pop(pid, None)
            if ongoing is not None and ongoing.read:
                self.cleaned.append(ongoing.entry)
                return False
            return True
        if kind == "COMMIT":
            if pid in self._committed:
                self._committed.discard(pid)
                return False
            return True
        return False
