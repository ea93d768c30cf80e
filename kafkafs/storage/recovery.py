"""Loading a partition folder, and recovering it after an unclean shutdown (Kafka's LogLoader).

Writable loads put the folder in order before anything reads it:

1. ``.cleaned`` files (a compaction or split that did not reach its swap) are deleted, and so are
   ``.swap`` files at or above the smallest ``.cleaned`` offset (part of the same unfinished operation:
   Kafka's KAFKA-6264 rule); ``.deleted`` files (retention that did not finish) are deleted;
2. the remaining ``.swap`` files (an operation that did reach its swap) are completed: the segments
   whose base offsets fall in the swapped range are deleted and each ``.swap`` becomes a segment, its
   indexes rebuilt; index files whose ``.log`` is gone are deleted;
3. after an unclean shutdown every segment from the one holding the recovery point on is recovered
   (batches re-validated, indexes rebuilt, the invalid tail cut); when a segment is cut, the segments
   after it are deleted, since their offsets no longer follow (Kafka does the same);
4. an index that is missing, or (the active segment's) fails its sanity check, or a ``.txnindex``
   that fails its check (any segment's), is rebuilt from the ``.log``.

Rebuilding a segment's ``.txnindex`` needs the transactions still undecided at its base offset. Kafka
keeps them in producer-state snapshots; here they come from the batch headers of the segments before
it, read only when the segment holds an ABORT marker, and carried from one recovered segment to the
next (and into the Log, when they reach its end).

Read-only loads change nothing: they take the plain ``.log`` files and ignore the rest, from a listing
taken while no segment was being created (:func:`_list`: a broker may be rolling meanwhile).

Loading is a function of the folder, the settings and a segment factory, as Kafka's ``LogLoader`` is:
it returns a :class:`LoadResult` that the :class:`~kafkafs.storage.log.Log` applies.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple, Protocol

from ..errors import CorruptRecordError, NeedsRecovery, doing
from . import names
from .config import LogConfig
from .records import TornBatchError
from .recovery_plan import left_by_unclean_stop, refuse_cutting_batches, unclean_or_unindexed, zeros_from
from .safefiles import LISTINGS, regular_entry
from .segment import LogSegment
from .segments import LogSegments
from .transactions import ProducerTransactions, abort_markers, txn_index_difference

__all__ = ["load_segments", "LoadResult", "RecoveryReport"]

log = logging.getLogger("kafkafs.recovery")


class RecoveryReport:
    """What loading did to a folder, for ``kafkafs recover`` and the logs."""

    def __init__(self) -> None:
        self.deleted_files: list[str] = []
        self.swapped_in: list[str] = []
        #: Every segment re-validated; ``rebuilt_indexes`` those whose index files came out different,
        #: ``rebuilt_files`` those files (the report is exact: nothing else changed).
        self.recovered_segments: list[str] = []
        self.rebuilt_indexes: list[str] = []
        self.rebuilt_files: list[str] = []
        #: Index files that were right but not what a rebuild writes (a close's time index entry, a
        #: broker's index interval counted from a restart): rewritten as a recovery builds them, no damage.
        self.rewritten_files: list[str] = []
        #: Of ``rebuilt_files``, those an unclean stop or a missing index leaves, as a broker rebuilds them
        #: at every unclean start: the active segment's (preallocated, untrimmed, or behind the log) and a
        #: missing ``.index`` or ``.timeindex``. No damage (SPEC §4: ``recover`` exits 0 for them).
        self.restored_files: list[str] = []
        self.truncated_bytes = 0
        #: Zeros a broker preallocated the active segment with, trimmed after an unclean stop, as its start
        #: trims them (:func:`.recovery_plan.zeros_from`): no damage.
        self.trimmed_bytes = 0
        self.deleted_segments: list[str] = []
        #: Batches kept although readers refuse them (``<file> position <n>: <reason>``, ``kept_problem``):
        #: their CRC holds, and Kafka's recovery checks only sizes, CRCs and header offsets, so a broker
        #: keeps them (and every batch after them). Damage all the same: ``verify`` and readers say them.
        self.kept_batches: list[str] = []
        #: The load followed an unclean stop (no clean-shutdown marker): a compaction or deletion it cut
        #: short (``.cleaned``, ``.swap``, an index whose ``.log`` went) is what such a stop leaves, and
        #: finishing or undoing it is routine, as a broker's start does it (Kafka logs it at INFO:
        #: "interrupted swap operation, which is recoverable"): no damage (review21 R21-8).
        self.after_unclean_stop = False

    def changed(self) -> bool:
        return bool(
            self.deleted_files or self.swapped_in or self.truncated_bytes or self.rebuilt_indexes or self.deleted_segments
            or self.trimmed_bytes
        )

    def no_damage_lines(self) -> list[str]:
        """What ``recover`` says it rewrote or rebuilt that was no damage (valid indexes written as a
        recovery builds them; what an unclean stop or a lost index leaves)."""
        out = []
        if self.rewritten_files:
            out.append(f"wrote {', '.join(sorted(self.rewritten_files))} as a recovery builds them (nothing wrong there)")
        if self.restored_files:
            out.append(f"rebuilt {', '.join(sorted(self.restored_files))} (as after an unclean stop: nothing wrong there)")
        if self.trimmed_bytes:
            out.append(f"trimmed {self.trimmed_bytes} preallocated zero bytes after the last batch (as a broker's start "
                       "does: nothing wrong there)")
        if self.after_unclean_stop and self._leftovers():
            done = [f"completed swap {f}" for f in self.swapped_in] + [
                f"deleted leftover {f}" for f in self.deleted_files if not f.endswith(names.DELETED)]
            out.append(f"finished an interrupted compaction or deletion ({', '.join(done)}), as a broker's start does "
                       "after an unclean stop: nothing wrong there")
        return out

    def _leftovers(self) -> bool:
        """Whether the load finished or undid a compaction or deletion cut short (not counting
        :meth:`pending_deletions`)."""
        return len(self.pending_deletions()) < len(self.deleted_files) or bool(self.swapped_in)

    def damaged_files(self) -> list[str]:
        """The index files rebuilt because they were wrong (not what an unclean stop leaves)."""
        restored = set(self.restored_files)
        return [f for f in self.rebuilt_files if f not in restored]

    def pending_deletions(self) -> list[str]:
        """The ``.deleted`` files removed: retention and compaction leave them for a later removal
        (``file.delete.delay.ms``), as Kafka does; a removal, not a repair."""
        return [f for f in self.deleted_files if f.endswith(names.DELETED)]

    def damaged(self) -> bool:
        """Whether something was wrong, as ``verify`` would have said before the recovery: something
        :meth:`repaired`, or batches :attr:`kept_batches` as Kafka keeps them."""
        return self.repaired() or bool(self.kept_batches)

    def repaired(self) -> bool:
        """Whether damage was repaired: bytes cut, segments deleted after a cut, a damaged index file
        replaced, an interrupted compaction finished or undone. Removing pending deletions and
        rebuilding what an unclean stop leaves (:attr:`restored_files`) are not."""
        return bool(
            self._leftovers() and not self.after_unclean_stop or self.truncated_bytes
            or self.damaged_files() or self.deleted_segments
        )

    def lines(self) -> list[str]:
        out = []
        for f in self.deleted_files:
            out.append(f"deleted leftover {f}")
        for f in self.swapped_in:
            out.append(f"completed swap {f}")
        for f in self.deleted_segments:
            out.append(f"deleted segment {f} (after a truncated one)")
        for f in self.rebuilt_indexes:
            out.append(f"rebuilt indexes of {f}")
        if self.truncated_bytes:
            out.append(f"truncated {self.truncated_bytes} invalid bytes")
        if self.kept_batches:
            out.append(f"kept {len(self.kept_batches)} batch(es) whose records do not decode or whose offsets do not follow, "
                       f"as Kafka's recovery keeps them (CRC valid; damage to verify and readers): {', '.join(self.kept_batches)}")
        return out


def _unlink(path: Path, report: RecoveryReport) -> None:
    try:
        os.unlink(path)
        report.deleted_files.append(path.name)
    except FileNotFoundError:
        pass


class _Listing:
    """A folder's segment files, sorted out by kind."""

    def __init__(self) -> None:
        self.logs: dict[int, int] = {}  # base offset -> size of the plain .log
        self.swaps: list[int] = []  # base offsets of .log.swap files
        self.temp: list[str] = []  # .cleaned, .deleted, index .swap files: to delete
        self.cleaned: list[int] = []
        self.indexes: dict[int, list[str]] = {}  # base offset -> plain index file names (writable loads)

    def committed_swaps(self) -> list[int]:
        """The base offsets of the ``.log.swap`` files a broker's recovery completes, in order (as
        :func:`~kafkafs.storage.names.committed_swaps` of the listed names)."""
        if not self.swaps:
            return []
        below = min(self.cleaned, default=None)
        return sorted(base for base in self.swaps if below is None or base < below)


#: A read-only load lists a folder changed less than this long ago (nanoseconds) more than once.
SETTLED_NS = 2_000_000_000


def _list(directory: Path, writable: bool, mtime_before: int | None = None) -> _Listing:
    """The folder's files. Read-only, beside a broker that may roll meanwhile: a listing is no snapshot
    (a segment created while readdir runs can be missed while a later one is seen, and a segment's size
    can be read before its last batches), so unless the folder did not change during the listing nor
    just before it, it is listed again until a listing shows no segment past the highest of the listing
    before; that one is taken: every segment below that highest was whole before it began (a broker
    creates segments in base offset order), and the last one is read again by every refresh.
    ``mtime_before``: the folder's mtime from a stat made earlier (the open's: one stat fewer); an
    earlier look only widens the window a change is looked for in."""
    if writable:
        return _list_once(directory, writable)
    with doing("list {path}"):
        changed = os.stat(directory).st_mtime_ns if mtime_before is None else mtime_before
        out = _list_once(directory, writable)
        if os.stat(directory).st_mtime_ns == changed and time.time_ns() - changed > SETTLED_NS:
            return out
    for _ in range(LISTINGS - 1):
        top = max(out.logs, default=None)
        again = _list_once(directory, writable)
        newest = max(again.logs, default=None)
        if top is None or newest is None or newest <= top:
            return again
        out = again
    out.logs = {base: size for base, size in out.logs.items() if top is None or base <= top}
    return out


def _list_once(directory: Path, writable: bool) -> _Listing:
    out = _Listing()
    with doing("list {path}"), os.scandir(directory) as entries:
        for entry in entries:
            parts = names.parse_segment_file_name(entry.name)
            if parts is not None and not regular_entry(entry):
                continue  # a link is never a segment (safefiles); writers refused the folder already
            if parts is None:
                continue
            base, ext, suffix = parts
            if not suffix and ext == names.LOG:
                try:
                    out.logs[base] = entry.stat().st_size
                except FileNotFoundError:  # deleted by its owner since the listing
                    pass
            elif suffix == names.SWAP and ext == names.LOG:
                out.swaps.append(base)
            elif suffix == names.CLEANED:
                out.cleaned.append(base)
                if writable:
                    out.temp.append(entry.name)
            elif not writable:
                continue
            elif suffix:
                out.temp.append(entry.name)
            else:
                out.indexes.setdefault(base, []).append(entry.name)
    return out


class SegmentMaker(Protocol):
    """Makes the segment at ``base_offset`` of the folder being loaded; ``size``: its ``.log``'s size
    as listed (:meth:`LocalLog._new_segment <kafkafs.storage.local_log.LocalLog._new_segment>`)."""

    def __call__(self, base_offset: int, *, size: int | None = None) -> LogSegment: ...


class LoadResult(NamedTuple):
    """What loading found and did: the segments (in order), the report, the undecided transactions at
    the log end when recovery computed them (None: not known), whether files came or went, and (read-only
    loads) the committed swaps the listing showed, which the log takes in (a writable load completes them)."""

    segments: list[LogSegment]
    report: RecoveryReport
    transactions: ProducerTransactions | None
    dir_dirty: bool
    swaps: list[int]


def load_segments(
    directory: Path,
    config: LogConfig,
    make_segment: SegmentMaker,
    *,
    writable: bool,
    recovery_point: int | None,
    clean_shutdown: bool,
    recover_all: bool = False,
    mtime_before: int | None = None,
) -> LoadResult:
    """The segments of a folder (``make_segment(base, size=...)`` makes each); see the module docstring
    for what writable loads fix. ``clean_shutdown``: how the last writer stopped; ``recover_all``:
    recover from the recovery point on even after a clean stop (``kafkafs recover``). ``mtime_before``:
    the folder's mtime (ns) from a stat made before this call (read-only: the listing's first look)."""
    report = RecoveryReport()
    report.after_unclean_stop = not clean_shutdown
    listing = _list(directory, writable, mtime_before)
    if writable:
        _remove_temporary_files(directory, config, listing, report)
    segments = LogSegments()
    for base in sorted(listing.logs):
        segments.add(make_segment(base, size=listing.logs[base]))
    transactions = None
    if writable:
        transactions = _recover_segments(directory, segments, recovery_point, clean_shutdown, report, recover_all)
    return LoadResult(list(segments), report, transactions, writable and report.changed(),
                      [] if writable else listing.committed_swaps())


def interrupted_leftovers(names_in_folder: Iterable[str]) -> list[str]:
    """The files of a partition folder that a writable load removes or completes as damage (what
    :meth:`RecoveryReport.repaired` counts, so that ``verify`` says what ``recover`` will: SPEC §4):
    ``.cleaned`` and ``.swap`` files (a compaction or split cut short) and index files whose ``.log`` is
    gone, sorted. ``.deleted`` files (retention's pending removals) are no damage."""
    listed = set(names_in_folder)
    out = []
    for name in listed:
        parts = names.parse_segment_file_name(name)
        if parts is None:
            continue
        base, ext, suffix = parts
        if suffix in (names.CLEANED, names.SWAP):
            out.append(name)
        elif not suffix and ext != names.LOG and names.segment_file_name(base, names.LOG) not in listed:
            out.append(name)
    return sorted(out)


def _remove_temporary_files(directory: Path, config: LogConfig, listing: _Listing, report: RecoveryReport) -> None:
    min_cleaned = min(listing.cleaned, default=None)
    for name in listing.temp:
        _unlink(directory / name, report)
    for base in sorted(listing.swaps):
        if min_cleaned is not None and base >= min_cleaned:
            # part of a compaction or split that had not finished writing all its segments
            _unlink(directory / names.segment_file_name(base, names.LOG, names.SWAP), report)
        else:
            _complete_swap(directory, config, base, listing, report)
    for base, files in listing.indexes.items():
        if base not in listing.logs:
            for name in files:
                _unlink(directory / name, report)


def _complete_swap(directory: Path, config: LogConfig, base: int, listing: _Listing, report: RecoveryReport) -> None:
    """Replace the segments a ``.swap`` covers with it (Kafka completes a swap that reached disk).

    The swap's offset range is read from its batch headers by a read-only segment, so nothing (no
    index file) is created under the ``.swap`` name.
    """
    swap = LogSegment(directory, base, config, writable=False, suffix=names.SWAP)
    try:
        end = swap.next_offset
    finally:
        swap.close_handlers()
    for old in sorted(b for b in listing.logs if base <= b < max(end, base + 1)):
        for ext in names.SEGMENT_EXTENSIONS:
            _unlink(directory / names.segment_file_name(old, ext), report)
        del listing.logs[old]
        listing.indexes.pop(old, None)
    for ext in (names.INDEX, names.TIME_INDEX, names.TXN_INDEX):
        _unlink(directory / names.segment_file_name(base, ext), report)
    os.replace(directory / names.segment_file_name(base, names.LOG, names.SWAP), directory / names.segment_file_name(base, names.LOG))
    listing.logs[base] = os.stat(directory / names.segment_file_name(base, names.LOG)).st_size
    report.swapped_in.append(names.segment_file_name(base, names.LOG, names.SWAP))


class _Transactions:
    """The undecided transactions as recovery goes from segment to segment: ``state`` holds every batch
    of the segments up to the one at ``upto`` (None: nothing known)."""

    def __init__(self, segments: LogSegments) -> None:
        self.segments = segments
        self.state: ProducerTransactions | None = None
        self.upto: int | None = None
        self.asked = False
        self.given: ProducerTransactions | None = None

    def _valid_at(self, base: int) -> bool:
        if self.state is None:
            return False
        lower = self.segments.lower(base)
        return (lower.base_offset if lower else None) == self.upto

    def before(self, base: int) -> Callable[[bool], ProducerTransactions | None]:
        """The provider :meth:`LogSegment.recover` takes, for the segment at ``base``."""
        self.asked = False
        self.given = None

        def provide(need: bool) -> ProducerTransactions | None:
            self.asked = True
            if not self._valid_at(base):
                self.state = None
                if not need:
                    return None
                self.state = ProducerTransactions.scan(s.batches() for s in self.segments.values(None, base))
            self.given = self.state
            return self.state

        return provide

    def after(self, base: int) -> None:
        if self.asked:
            self.upto = base if self.given is not None else None
            if self.given is None:
                self.state = None
        elif self._valid_at(base):
            self.upto = base  # no transactional batch in it: the state holds past it too


def _torn_end(segment: LogSegment) -> tuple[int, str] | None:
    """(position, reason) where bytes that are no whole batch start at the end of the active segment of
    a cleanly stopped log, or None: bytes that are no batch header (:attr:`LogSegment.torn_tail`), or a
    last batch the file ends inside (a reader takes that for a write in progress; after a clean stop
    it is a batch cut short: review23 R23-6)."""
    torn = segment.torn_tail
    if torn is not None:
        return torn
    try:
        segment.check_whole()
    except TornBatchError as exc:
        position = exc.position if exc.position is not None else 0
        return position, "the file ends inside the batch that starts there (a batch cut short)"
    return None


def _recover_segments(
    directory: Path, segments: LogSegments, recovery_point: int | None, clean_shutdown: bool, report: RecoveryReport,
    recover_all: bool = False,
) -> ProducerTransactions | None:
    """Recover what needs it (module docstring, steps 3 and 4; ``recover_all``: from the recovery point
    on whatever the shutdown was); return the undecided transactions at the log end when they came out
    of it."""
    existing = set(os.listdir(directory))
    needs = unclean_or_unindexed(existing, segments, recovery_point, clean_shutdown and not recover_all)
    last = segments.last()
    for segment in segments:
        base = segment.base_offset
        if base in needs:
            continue
        if segment is last:
            try:
                segment.sanity_check()
            except CorruptRecordError as exc:
                log.warning("%s: %s; rebuilding the indexes", segment.log_path, exc.reason)
                needs[base] = segment
            torn = _torn_end(segment) if base not in needs and not recover_all else None
            if torn is not None:
                # after a clean stop (the marker) no write was cut short: bytes after the last whole
                # batch are damage, and a batch appended after them could never be read (a broker then
                # fails to start: review22 R22-1); cutting them is `kafkafs recover`'s to do
                raise NeedsRecovery(
                    f"{segment.log_path}: position {torn[0]}: {torn[1]}; refusing to write: "
                    f"{segment.size - torn[0]} bytes after the last whole batch although the last writer "
                    "stopped cleanly; `kafkafs recover` cuts them"
                )
        if base not in needs and names.segment_file_name(base, names.TXN_INDEX) in existing:
            try:
                segment.txn_index.sanity_check()
            except CorruptRecordError as exc:
                log.warning("%s: %s; rebuilding the indexes", segment.txn_index.path, exc.reason)
                needs[base] = segment
    if not recover_all:
        refuse_cutting_batches(segments, needs)
    transactions = _Transactions(segments)
    for base in sorted(needs):
        segment = needs[base]
        if base not in segments:  # deleted after a truncated one before it
            continue
        before = segment.index_state()
        higher = segments.higher(base)
        undecodable: list[tuple[int, str]] = []
        zeros = zeros_from(segment) if left_by_unclean_stop(segment is last, clean_shutdown) else None
        cut = segment.recover(transactions=transactions.before(base),
                              upper=higher.base_offset if higher is not None else None, undecodable=undecodable)
        report.kept_batches.extend(f"{segment.log_path.name} position {pos}: {why}" for pos, why in undecodable)
        transactions.after(base)
        if cut and zeros is not None and zeros <= segment.size:  # only zeros went: a preallocated tail
            log.info("%s: trimmed %d preallocated zero bytes", segment.log_path, cut)
            report.trimmed_bytes += cut
            cut = 0
        report.recovered_segments.append(segment.log_path.name)
        after = segment.index_state()
        rebuilt = sorted(name for name in after if after[name] != before.get(name))
        # (after an unclean stop the active segment's indexes are restored whatever they hold: said so below)
        right = [name for name in rebuilt
                 if not cut and (_was_right(segment, name, before.get(name), segment is last and clean_shutdown)
                                 or _cleaned_txn_index(segment, name, before.get(name), after.get(name)))]
        report.rewritten_files.extend(right)
        rebuilt = [name for name in rebuilt if name not in right]
        report.restored_files.extend(
            name for name in rebuilt
            if not cut and _left_by_unclean_stop(segment is last, clean_shutdown, name, before.get(name))
        )
        if rebuilt:
            report.rebuilt_indexes.append(segment.log_path.name)
            report.rebuilt_files.extend(rebuilt)
        if cut:
            log.warning("%s: truncated %d invalid bytes at position %d", segment.log_path, cut, segment.size)
            report.truncated_bytes += cut
            for later in list(segments.after(base)):
                segments.remove(later.base_offset)
                report.deleted_segments.append(later.log_path.name)
                later.delete()
    last = segments.last()
    if transactions.state is not None and last is not None and transactions.upto == last.base_offset:
        return transactions.state  # the state at the log end: no need to scan again
    return None


def _left_by_unclean_stop(active: bool, clean_shutdown: bool, name: str, old: object) -> bool:
    """Whether rebuilding index file ``name`` (it held ``old``, :meth:`index_state`) repaired only what an
    unclean stop or a lost file leaves, as a broker's every unclean start rebuilds it: any index of the
    active segment after an unclean stop (:func:`left_by_unclean_stop`), or a ``.index`` /
    ``.timeindex`` that was missing."""
    if left_by_unclean_stop(active, clean_shutdown):
        return True
    return name.endswith((names.INDEX, names.TIME_INDEX)) and old == (False,)


def _cleaned_txn_index(segment: LogSegment, name: str, old: object, new: object) -> bool:
    """Whether the ``.txnindex`` ``name`` held, as ``old`` (:meth:`index_state`), entries that are right
    beside what a rebuild writes (``new``): :func:`.transactions.txn_index_difference` finds no
    difference (a cleaned segment's entries of ABORT markers kept without their transaction's records)."""
    if not name.endswith(names.TXN_INDEX) or not isinstance(old, tuple) or not isinstance(new, tuple):
        return False
    if len(old) != 2 or not old[0] or old[1] is None or len(new) != 2 or new[1] is None:
        return False
    try:
        markers = abort_markers(segment)
    except CorruptRecordError:
        return False
    wrong, missing = txn_index_difference(old[1], new[1], markers)
    return not wrong and not missing


def _was_right(segment: LogSegment, name: str, old: object, active: bool = False) -> bool:
    """Whether the offset or time index ``name`` held, as ``old`` (:meth:`index_state`), only entries a
    broker could have written for this segment's batches, strictly increasing and trimmed (none at all
    included; or was absent for an empty segment): an offset
    entry is (a batch's last offset, its position), a time entry (the largest timestamp so far, the last
    offset of the first batch holding it) at some batch. What Kafka's ``--verify-index-only`` accepts,
    and what a close or a restart leaves besides a rebuild's own entries. The ``active`` segment's index
    may also be preallocated past its entries, as a running broker keeps it and as a KRaft broker's
    clean stop leaves ``__cluster_metadata``'s (its raft log is not closed through the log manager; the
    broker recovers it at every start): what ``verify`` accepts there too."""
    size = {names.INDEX: 8, names.TIME_INDEX: 12}.get(name[name.rfind("."):])
    if size is not None and old == (False,) and segment.size == 0:
        return True  # no index for an empty segment: nothing was missing (Kafka creates it on open)
    if size is None or not isinstance(old, tuple) or len(old) != 3 or not old[0]:
        return False
    entries, length = old[1], old[2]
    if active and length > size * len(entries):  # preallocated: entries, then the room left
        if not entries:
            return True
    elif length != size * len(entries):
        return False
    elif not entries:
        # trimmed and empty: sparse leaves a segment without entries where a broker counted the index
        # interval from a restart (or wrote with a larger one); what verify and --verify-index-only accept
        return True
    possible = set()
    max_ts, max_at = -1, -1
    try:
        for view in segment.batches(0):
            h = view.header
            if size == 8:
                possible.add((h.last_offset, view.position))
            else:
                if h.max_timestamp > max_ts:
                    max_ts, max_at = h.max_timestamp, h.last_offset
                possible.add((max_ts, max_at))
    except CorruptRecordError:
        return False
    keys = [tuple(e) for e in entries]
    return all(k in possible for k in keys) and all(a[0] < b[0] for a, b in zip(keys, keys[1:], strict=False))
