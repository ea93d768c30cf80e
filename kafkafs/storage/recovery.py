"""Loading a partition folder, and recovering it after an unclean shutdown (Kafka's LogLoader).

Writable loads put the folder in order before anything reads it:

1. ``.cleaned`` files (a compaction that did not reach its swap) are deleted;
2. ``.swap`` files (a compaction or split that did) are completed: the segments their offsets cover
   are deleted and the swap becomes the segment, with its indexes rebuilt;
3. ``.deleted`` files (retention that did not finish) are deleted, and so are index files whose
   ``.log`` is gone;
4. after an unclean shutdown every segment from the one holding the recovery point on is recovered
   (batches re-validated, indexes rebuilt, the invalid tail cut; when a segment is cut, the segments
   after it are deleted, since their offsets no longer follow);
5. an index that is missing or fails its sanity check is rebuilt from the ``.log``.

Read-only loads change nothing: they take the plain ``.log`` files and ignore the rest.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from ..errors import CorruptRecordError
from .segment import LogSegment

if TYPE_CHECKING:
    from .log import Log

__all__ = ["load_segments", "RecoveryReport"]

log = logging.getLogger("kafkafs.recovery")

_SUFFIXES = (".deleted", ".cleaned", ".swap")
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
    if rest not in _EXTENSIONS:
        return None
    return int(name[:20]), rest, suffix


def _unlink(path, report: RecoveryReport) -> None:
    try:
        os.unlink(path)
        report.deleted_files.append(os.path.basename(path))
    except FileNotFoundError:
        pass


def load_segments(target: Log, *, recovery_point: int | None, clean_shutdown: bool) -> RecoveryReport:
    """Fill ``target.segments`` from its folder; see the module docstring for what writable loads fix."""
    report = RecoveryReport()
    target.last_recovery = report
    directory = target.dir
    entries = {e.name: e for e in os.scandir(directory)}
    logs: dict[int, int] = {}  # base offset -> size
    swaps: list[int] = []
    index_files: dict[int, list[str]] = {}
    for name, entry in entries.items():
        parts = _split(name)
        if parts is None:
            continue
        base, ext, suffix = parts
        if not target.writable:
            if ext == ".log" and not suffix:
                logs[base] = entry.stat().st_size
            continue
        if suffix in (".cleaned", ".deleted"):
            _unlink(directory / name, report)
        elif suffix == ".swap":
            if ext == ".log":
                swaps.append(base)
            else:
                _unlink(directory / name, report)  # indexes of a swap are rebuilt
        elif ext == ".log":
            logs[base] = entry.stat().st_size
        else:
            index_files.setdefault(base, []).append(name)

    if target.writable:
        for base in sorted(swaps):
            _complete_swap(target, base, logs, report)
        for base, names in index_files.items():
            if base not in logs:
                for name in names:
                    _unlink(directory / name, report)

    for base in sorted(logs):
        segment = LogSegment(directory, base, target.config, writable=target.writable, size=logs[base])
        target.segments.put(base, segment)

    if not target.writable:
        return report

    existing = set(os.listdir(directory))
    needs_recovery: list[LogSegment] = []
    if not clean_shutdown:
        start = recovery_point or 0
        floor = target.segments.floor(start)
        needs_recovery = list(target.segments.values(floor[0] if floor else None))
    for segment in target.segments.values():
        if segment in needs_recovery:
            continue
        missing = segment.offset_index.path.name not in existing or segment.time_index.path.name not in existing
        if missing and segment.size > 0:
            needs_recovery.append(segment)
            continue
        if segment is target.active_segment or segment.size == 0:
            try:
                segment.sanity_check()
            except CorruptRecordError as exc:
                log.warning("%s: %s; rebuilding the indexes", segment.log_path, exc.reason)
                needs_recovery.append(segment)
    needs_recovery.sort(key=lambda s: s.base_offset)
    for segment in needs_recovery:
        if segment.base_offset not in target.segments:
            continue
        cut = segment.recover(max_inflated_bytes=max(64 << 20, target.config.max_message_bytes * 64))
        report.recovered_segments.append(segment.log_path.name)
        report.rebuilt_indexes.append(segment.log_path.name)
        if cut:
            log.warning("%s: truncated %d invalid bytes at position %d", segment.log_path, cut, segment.size)
            report.truncated_bytes += cut
            for base, later in list(target.segments.items(segment.base_offset, from_inclusive=False)):
                target.segments.remove(base)
                report.deleted_segments.append(later.log_path.name)
                later.delete()
    return report


def _complete_swap(target: Log, base: int, logs: dict[int, int], report: RecoveryReport) -> None:
    """Replace the segments a ``.swap`` covers with it (Kafka completes a swap that reached disk)."""
    directory = target.dir
    swap = LogSegment(directory, base, target.config, writable=True, suffix=".swap")
    try:
        swap.recover()
        end = swap.next_offset
    finally:
        swap.close_handlers()
    for old in sorted(b for b in logs if base <= b < max(end, base + 1)):
        for ext in _EXTENSIONS:
            _unlink(directory / f"{old:020d}{ext}", report)
        del logs[old]
    for ext in (".index", ".timeindex"):
        _unlink(directory / f"{base:020d}{ext}", report)
    os.replace(directory / f"{base:020d}.log.swap", directory / f"{base:020d}.log")
    logs[base] = os.stat(directory / f"{base:020d}.log").st_size
    report.swapped_in.append(f"{base:020d}.log.swap")
