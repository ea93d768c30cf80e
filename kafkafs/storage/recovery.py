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

Read-only loads change nothing: they take the plain ``.log`` files and ignore the rest.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import CorruptRecordError
from .segment import LogSegment, segment_file_name
from .transactions import ProducerTransactions

if TYPE_CHECKING:
    from .log import Log

__all__ = ["load_segments", "RecoveryReport"]

log = logging.getLogger("kafkafs.recovery")

_SUFFIXES = (".deleted", ".cleaned", ".swap")
_LONG_MAX = 2**63 - 1
_EXTENSIONS = (".log", ".index", ".timeindex", ".txnindex")


class RecoveryReport:
    """What loading did to a folder, for ``kafkafs recover`` and the logs."""

    def __init__(self) -> None:
        self.deleted_files: list[str] = []
        self.swapped_in: list[str] = []
        self.recovered_segments: list[str] = []
        self.rebuilt_indexes: list[str] = []
        self.truncated_bytes = 0
        self.deleted_segments: list[str] = []

    def changed(self) -> bool:
        return bool(
            self.deleted_files or self.swapped_in or self.truncated_bytes or self.rebuilt_indexes or self.deleted_segments
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
        return out


def _split(name: str) -> tuple[int, str, str] | None:
    """``00000000000000000042.log.swap`` -> ``(42, ".log", ".swap")``; None for other files."""
    if len(name) < 21 or not name[:20].isdigit() or name[20] != ".":
        return None
    rest = name[20:]
    suffix = ""
    for s in _SUFFIXES:
        if rest.endswith(s):
            suffix = s
            rest = rest[: -len(s)]
            break
    if rest not in _EXTENSIONS or int(name[:20]) > _LONG_MAX:  # Kafka's offsets are longs
        return None
    return int(name[:20]), rest, suffix


def _regular(entry: os.DirEntry) -> bool:
    try:
        if entry.is_file(follow_symlinks=False):
            return True
    except OSError:
        return False
    log.warning("%s is not a regular file: skipped, never followed", entry.path)
    return False


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
        self.indexes: dict[int, list[str]] = {}  # base offset -> plain index file names


def _list(directory: Path, writable: bool) -> _Listing:
    out = _Listing()
    with os.scandir(directory) as entries:
        for entry in entries:
            parts = _split(entry.name)
            if parts is not None and not _regular(entry):
                continue  # a link is never a segment (safefiles); writers refused the folder already
            if parts is None:
                continue
            base, ext, suffix = parts
            if not suffix and ext == ".log":
                try:
                    out.logs[base] = entry.stat().st_size
                except FileNotFoundError:  # deleted by its owner since the listing
                    pass
            elif not writable:
                continue
            elif suffix == ".swap" and ext == ".log":
                out.swaps.append(base)
            elif suffix:
                out.temp.append(entry.name)
                if suffix == ".cleaned":
                    out.cleaned.append(base)
            else:
                out.indexes.setdefault(base, []).append(entry.name)
    return out


def load_segments(target: Log, *, recovery_point: int | None, clean_shutdown: bool) -> RecoveryReport:
    """Fill ``target.segments`` from its folder; see the module docstring for what writable loads fix."""
    report = RecoveryReport()
    directory = target.dir
    listing = _list(directory, target.writable)
    if target.writable:
        _remove_temporary_files(target, listing, report)
    for base in sorted(listing.logs):
        segment = target._new_segment(base, size=listing.logs[base])
        target.segments.put(base, segment)
    if target.writable:
        _recover_segments(target, recovery_point, clean_shutdown, report)
        if report.changed():
            target._dir_dirty = True
    return report


def _remove_temporary_files(target: Log, listing: _Listing, report: RecoveryReport) -> None:
    directory = target.dir
    min_cleaned = min(listing.cleaned, default=None)
    for name in listing.temp:
        _unlink(directory / name, report)
    for base in sorted(listing.swaps):
        if min_cleaned is not None and base >= min_cleaned:
            # part of a compaction or split that had not finished writing all its segments
            _unlink(directory / segment_file_name(base, ".log.swap"), report)
        else:
            _complete_swap(target, base, listing, report)
    for base, names in listing.indexes.items():
        if base not in listing.logs:
            for name in names:
                _unlink(directory / name, report)


def _complete_swap(target: Log, base: int, listing: _Listing, report: RecoveryReport) -> None:
    """Replace the segments a ``.swap`` covers with it (Kafka completes a swap that reached disk).

    The swap's offset range is read from its batch headers by a read-only segment, so nothing (no
    index file) is created under the ``.swap`` name.
    """
    directory = target.dir
    swap = LogSegment(directory, base, target.config, writable=False, suffix=".swap")
    try:
        end = swap.next_offset
    finally:
        swap.close_handlers()
    for old in sorted(b for b in listing.logs if base <= b < max(end, base + 1)):
        for ext in _EXTENSIONS:
            _unlink(directory / segment_file_name(old, ext), report)
        del listing.logs[old]
        listing.indexes.pop(old, None)
    for ext in (".index", ".timeindex", ".txnindex"):
        _unlink(directory / segment_file_name(base, ext), report)
    os.replace(directory / segment_file_name(base, ".log.swap"), directory / segment_file_name(base, ".log"))
    listing.logs[base] = os.stat(directory / segment_file_name(base, ".log")).st_size
    report.swapped_in.append(segment_file_name(base, ".log.swap"))


class _Transactions:
    """The undecided transactions as recovery goes from segment to segment: ``state`` holds every batch
    of the segments up to the one at ``upto`` (None: nothing known)."""

    def __init__(self, target: Log) -> None:
        self.target = target
        self.state: ProducerTransactions | None = None
        self.upto: int | None = None
        self.asked = False
        self.given: ProducerTransactions | None = None

    def _valid_at(self, base: int) -> bool:
        if self.state is None:
            return False
        lower = self.target.segments.lower(base)
        return (lower[0] if lower else None) == self.upto

    def before(self, base: int):
        """The provider :meth:`LogSegment.recover` takes, for the segment at ``base``."""
        self.asked = False
        self.given = None

        def provide(need: bool) -> ProducerTransactions | None:
            self.asked = True
            if not self._valid_at(base):
                self.state = None
                if not need:
                    return None
                segments = [s for b, s in self.target.segments.items() if b < base]
                self.state = ProducerTransactions.scan(segments)
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


def _recover_segments(target: Log, recovery_point: int | None, clean_shutdown: bool, report: RecoveryReport) -> None:
    existing = set(os.listdir(target.dir))
    needs: dict[int, LogSegment] = {}
    if not clean_shutdown:
        floor = target.segments.floor(recovery_point or 0)
        needs = dict(target.segments.items(floor[0] if floor else None))
    last = target.segments.last()
    for base, segment in target.segments.items():
        if base in needs:
            continue
        missing = any(segment_file_name(base, ext) not in existing for ext in (".index", ".timeindex"))
        if missing and segment.size > 0:
            needs[base] = segment
        elif last is not None and base == last[0]:
            try:
                segment.sanity_check()
            except CorruptRecordError as exc:
                log.warning("%s: %s; rebuilding the indexes", segment.log_path, exc.reason)
                needs[base] = segment
        if base not in needs and segment_file_name(base, ".txnindex") in existing:
            try:
                segment.txn_index.sanity_check()
            except CorruptRecordError as exc:
                log.warning("%s: %s; rebuilding the indexes", segment.txn_index.path, exc.reason)
                needs[base] = segment
    transactions = _Transactions(target)
    for base in sorted(needs):
        segment = needs[base]
        if base not in target.segments:  # deleted after a truncated one before it
            continue
        higher = target.segments.higher(base)
        cut = segment.recover(transactions=transactions.before(base), upper=higher[0] if higher else None)
        transactions.after(base)
        report.recovered_segments.append(segment.log_path.name)
        report.rebuilt_indexes.append(segment.log_path.name)
        if cut:
            log.warning("%s: truncated %d invalid bytes at position %d", segment.log_path, cut, segment.size)
            report.truncated_bytes += cut
            for later_base, later in list(target.segments.items(base, from_inclusive=False)):
                target.segments.remove(later_base)
                report.deleted_segments.append(later.log_path.name)
                later.delete()
    last = target.segments.last()
    if transactions.state is not None and last is not None and transactions.upto == last[0]:
        target._txn = transactions.state  # the state at the log end: no need to scan again
