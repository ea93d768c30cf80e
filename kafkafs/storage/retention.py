"""Retention (``cleanup.policy`` has ``delete``): whole segments go (Kafka's ``deleteOldSegments``).

Segments whose newest record is older than ``retention.ms``, or that push the partition past
``retention.bytes`` (oldest first), are renamed ``.deleted``; the log start offset moves past them, and
their files go ``file.delete.delay.ms`` later (:meth:`Log.delete_expired_files`). The active segment is
never deleted by size; by time, it is rolled first, as Kafka does.

Threads: called from the one thread that cleans a log (the ``clean`` command or the mount's cleaner);
the deletion itself takes the log's writer lock (:meth:`Log.delete_segments`).
"""

from __future__ import annotations

from .segment import LogSegment

__all__ = ["apply_retention", "retention_doomed"]


def retention_doomed(target, now_ms: int) -> list[LogSegment]:
    """The segments retention would delete now, oldest first."""
    config = target.config
    if not config.delete:
        return []
    segments = list(target.segments)
    doomed: list[LogSegment] = []
    if config.retention_ms >= 0:
        for segment in segments:
            if segment.size and segment.max_timestamp < now_ms - config.retention_ms:
                doomed.append(segment)
            else:
                break
    if config.retention_bytes >= 0:
        total = sum(s.size for s in segments)
        for segment in segments[:-1]:
            if total - segment.size < config.retention_bytes:
                break
            if segment not in doomed:
                doomed.append(segment)
            total -= segment.size
    return doomed


def apply_retention(target, now_ms: int, *, dry_run: bool = False) -> list[str]:
    """Delete the segments past ``retention.ms`` / ``retention.bytes``; return what was (or would be) done."""
    doomed = retention_doomed(target, now_ms)
    lines = [
        f"{target.name}: {'would delete' if dry_run else 'deleted'} {s.log_path.name} "
        f"(offsets {s.base_offset}..{s.next_offset - 1}, {s.size} bytes)"
        for s in doomed
    ]
    if doomed and not dry_run:
        target.delete_segments(doomed, "retention")
    return lines
