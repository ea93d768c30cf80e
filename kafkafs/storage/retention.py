"""Retention (``cleanup.policy`` has ``delete``): whole segments go (Kafka's ``deleteOldSegments``).

Segments whose newest record is older than ``retention.ms``, or that push the partition past
``retention.bytes`` (oldest first), are renamed ``.deleted``; the log start offset moves past them, and
their files go ``file.delete.delay.ms`` later (:meth:`Log.delete_expired_files`). A segment's age is its
newest timestamp, or, when its batches carry none (magic 0), the ``.log``'s modification time (Kafka's
``LogSegment.largestTimestamp``). As in Kafka's ``deletableSegments``, only an empty last segment is
never deleted: a non-empty active segment past either limit is rolled first and goes too. Whatever the
policy, a segment wholly below the log start offset goes (``deleteLogStartOffsetBreachedSegments``).

For ``cleanup.policy=compact,delete`` retention judges the log as compaction left it: Kafka's retention
task leaves compacted logs to the LogCleaner, whose thread compacts first and then runs
``deleteOldSegments`` on every compacted log (:mod:`.cleaner`); a dry run judges the segments its
compaction foresees (:class:`~.compaction.PlannedSegment`).

Threads: called from the one thread that cleans a log (the ``clean`` command or the mount's cleaner);
the deletion itself takes the log's writer lock (:meth:`Log.delete_segments`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from .segment import LogSegment

if TYPE_CHECKING:
    from .log import Log


class SegmentShape(Protocol):
    """What retention looks at in a segment: a :class:`LogSegment`, or a dry run's
    :class:`~.compaction.PlannedSegment`."""

    @property
    def base_offset(self) -> int: ...
    @property
    def next_offset(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...
    @property
    def log_path(self) -> Path: ...
    def last_modified_ms(self) -> int | None: ...

__all__ = ["apply_retention", "retention_doomed"]


def largest_timestamp(segment: SegmentShape) -> int:
    """Kafka's ``LogSegment.largestTimestamp``: the newest timestamp in the segment, or the ``.log``'s
    modification time (ms) when no batch carries one (magic 0 messages, an empty segment)."""
    newest = segment.max_timestamp
    if newest >= 0:
        return newest
    modified = segment.last_modified_ms()
    return 2**63 - 1 if modified is None else modified  # gone or unreadable: not old by any measure here


def retention_doomed(target: Log, now_ms: int, layout: Sequence[SegmentShape] | None = None) -> list[SegmentShape]:
    """The segments retention would delete now, oldest first; of ``layout`` when given (the segments a
    dry run foresees), else of the log as it is."""
    config = target.config
    segments: list[SegmentShape] = list(target.segments if layout is None else layout)
    doomed: list[SegmentShape] = []
    # deleteLogStartOffsetBreachedSegments, for every policy: a segment whose next one starts at or
    # below the log start offset holds nothing readable
    while len(segments) > 1 and segments[1].base_offset <= target.log_start_offset:
        doomed.append(segments.pop(0))
    if not config.delete:
        return doomed
    remaining = sum(s.size for s in segments)
    if segments and not segments[-1].size:
        segments.pop()  # Kafka's isLastSegmentAndEmpty: nothing to delete there
    if config.retention_ms >= 0:
        for segment in segments:
            if largest_timestamp(segment) < now_ms - config.retention_ms:
                doomed.append(segment)
            else:
                break
    if config.retention_bytes >= 0:
        total = remaining
        for segment in segments:
            if total - segment.size < config.retention_bytes:
                break
            if segment not in doomed:
                doomed.append(segment)
            total -= segment.size
    return doomed


def apply_retention(target: Log, now_ms: int, *, dry_run: bool = False,
                    layout: Sequence[SegmentShape] | None = None) -> list[str]:
    """Delete the segments past ``retention.ms`` / ``retention.bytes``; return what was (or would be)
    done. ``layout`` (a dry run): the segments to judge in place of the log's own."""
    doomed = retention_doomed(target, now_ms, layout)
    lines = [
        f"{target.name}: {'would delete' if dry_run else 'deleted'} {s.log_path.name} "
        f"(offsets {s.base_offset}..{s.next_offset - 1}, {s.size} bytes)"
        for s in doomed
    ]
    if doomed and not dry_run:
        segments = [s for s in doomed if isinstance(s, LogSegment)]
        if len(segments) != len(doomed):
            raise ValueError("segments a dry run foresees are not deleted")
        target.delete_segments(segments, "retention")
    return lines
