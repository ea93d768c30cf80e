"""What a writable load recovers, and whether it may (:mod:`.recovery` runs it).

After an unclean stop a load recovers the segments from the recovery point on (and any that lacks an
index). Cutting data is asked for, never a side effect: a writer other than ``kafkafs recover`` cuts
only a torn tail of the last segment (what a crash mid-write leaves) and refuses a partition whose
recovery would cut whole batches (:class:`~kafkafs.errors.NeedsRecovery`, before anything changes).

The functions keep no state and only read; safe from any thread that may read the segments.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import NeedsRecovery
from . import names
from .recovery_walk import KafkaDiscardsSegment, RecoveryWalk
from .segment import LogSegment
from .segments import LogSegments

__all__ = ["unclean_or_unindexed", "refuse_cutting_batches", "writer_refusal", "recovery_cut", "zeros_from",
           "left_by_unclean_stop"]

#: Bytes read at a time when looking for where a preallocated segment's zeros start.
_ZERO_CHUNK = 1 << 20


def unclean_or_unindexed(
    existing: set[str], segments: LogSegments, recovery_point: int | None, clean_shutdown: bool
) -> dict[int, LogSegment]:
    """The segments a writable load recovers whatever their indexes say, by base offset: after an
    unclean stop those from the recovery point on, and any segment with data that lacks its
    ``.index`` or ``.timeindex`` (``existing``: the folder's names)."""
    needs: dict[int, LogSegment] = {}
    if not clean_shutdown:
        needs = {s.base_offset: s for s in segments.from_offset(recovery_point or 0)}
    for segment in segments:
        base = segment.base_offset
        missing = any(names.segment_file_name(base, ext) not in existing for ext in (names.INDEX, names.TIME_INDEX))
        if base not in needs and missing and segment.size > 0:
            needs[base] = segment
    return needs


def writer_refusal(directory: Path, segments: LogSegments, recovery_point: int | None, clean_shutdown: bool) -> str | None:
    """Why a writable load (not ``kafkafs recover``) would refuse this folder because its recovery would
    cut whole batches (:class:`~kafkafs.errors.NeedsRecovery`'s message), read only: what ``clean
    --dry-run`` says; None when it would not."""
    try:
        existing = set(os.listdir(directory))
        refuse_cutting_batches(segments, unclean_or_unindexed(existing, segments, recovery_point, clean_shutdown))
    except NeedsRecovery as exc:
        return str(exc)
    return None


def refuse_cutting_batches(segments: LogSegments, needs: dict[int, LogSegment]) -> None:
    """:class:`~kafkafs.errors.NeedsRecovery` before anything is changed when recovering ``needs`` would
    cut more than a torn tail at the end of the last segment (what a crash mid-write leaves): whole
    batches, the valid ones after a damaged one, or the segments after a cut one. A broker's unclean
    start cuts them; a writer that was asked to append or clean does not (``kafkafs recover`` does)."""
    last = segments.last()
    for base in sorted(needs):
        segment = needs[base]
        higher = segments.higher(base)
        found = recovery_cut(segment, higher.base_offset if higher is not None else None)
        if found is None:
            continue
        position, why, torn = found
        if torn and segment is last:
            continue
        at = f"position {position}: "
        raise NeedsRecovery(
            f"{segment.log_path}: {at}{why.removeprefix(at)}; refusing to write: recovering it would cut "
            f"{segment.size - position} bytes" + ("" if segment is last else " and every later segment")
            + " (whole batches, not a torn tail); `kafkafs recover` cuts them as a broker's unclean start does"
        )


def recovery_cut(segment: LogSegment, upper: int | None = None) -> tuple[int, str, bool] | None:
    """Where :meth:`~.segment.LogSegment.recover` would cut, read only: (position, why, torn), None when it would cut
    nothing. ``torn``: the bytes from there to the end are a torn tail (zeros, or a start of a batch
    shorter than its header says): what a crash mid-write leaves, no whole batch lost."""
    walk = _walk(segment, upper, strict=False)
    if walk is None:
        walk = _walk(segment, upper, strict=True)
    assert walk is not None
    valid, why = walk.valid, walk.cut or ""
    size = segment.size
    if valid >= size:
        return None
    rest = segment.read_at(valid, min(size - valid, 1 << 20))
    torn = not rest.strip(b"\0") and size - valid <= len(rest)
    if not torn and len(rest) >= 12:
        length = int.from_bytes(rest[8:12], "big", signed=True)
        torn = length > 0 and 12 + length > size - valid
    elif not torn:
        torn = True  # fewer bytes than a batch's size field needs
    return valid, why or "bytes after the last whole batch", torn


def _walk(segment: LogSegment, upper: int | None, *, strict: bool) -> RecoveryWalk | None:
    """The recovery walk of ``segment`` run to its end (:mod:`.recovery_walk`); None when Kafka's recovery
    would give the segment up (not ``strict``)."""
    walk = RecoveryWalk(segment.base_offset, upper, segment.config.index_interval_bytes, strict=strict)
    try:
        for _ in walk.steps(segment.batches(0)):
            pass
        walk.finish()
    except KafkaDiscardsSegment:
        return None
    return walk


def zeros_from(segment: LogSegment) -> int | None:
    """Where the zeros that end ``segment``'s ``.log`` start, when the file is as a broker with
    ``preallocate`` leaves its active segment (Kafka creates it at the segment size, zero-filled, and
    trims it only at a roll or a clean stop): the file exactly as long as the topic's segment size
    (``internal.segment.bytes`` or ``segment.bytes``), or the topic's ``preallocate`` set. None when the
    file is not such. The bytes from the last whole batch to that place are zeros when it is at or
    below the batch's end: a preallocated tail, what ``verify`` notes and ``recover`` trims as no damage
    after an unclean stop (Kafka's recovery trims it at every unclean start)."""
    size, config = segment.size, segment.config
    if size == 0 or not (config.preallocate or size == config.segment_size):
        return None
    end = size
    while end > 0:
        start = max(end - _ZERO_CHUNK, 0)
        chunk = segment.read_at(start, end - start)
        last = len(chunk.rstrip(b"\0"))
        if last:
            return start + last
        end = start
    return 0


def snapshot_left_by_unclean_stop(snapshot: str, recovery_point: int | None, clean_shutdown: bool) -> bool:
    """Whether a producer ``<offset>.snapshot`` (file name) is what an unclean stop leaves, so that
    whatever it holds is no damage (``verify`` notes it, ``recover`` removes it and exits 0; SPEC §4):
    after an unclean stop, one above the recovery point (0 when the checkpoint has no entry). Kafka is
    the judge: its LogLoader then rebuilds the producer state up to the first segment it recovers (the
    one holding the recovery point) and deletes every snapshot past it unread ("Deleted producer state
    snapshot", INFO); a power loss leaves such a file empty or cut (written at a roll, flushed later).
    One at or below the recovery point was flushed and is read, as is any after a clean stop: damage."""
    offset = int(snapshot.split(".", 1)[0])
    return not clean_shutdown and offset > (recovery_point or 0)


def left_by_unclean_stop(active: bool, clean_shutdown: bool) -> bool:
    """Whether a segment's index files are what an unclean stop leaves, so that whatever they hold is no
    damage (``verify`` and ``recover`` judge by this one rule; SPEC §4): the active segment's after an
    unclean stop. Kafka is the judge: at an unclean start its LogLoader recovers every segment from
    the recovery point on (the active one always), rebuilding their indexes whatever they hold, and a
    crash leaves the active segment's preallocated, untrimmed or behind its log. After a clean stop it
    recovers nothing and checks no offset or time index (``LogSegment.sanityCheck`` checks only the
    ``.txnindex``): the broker serves them as they are, so a wrong one there is damage."""
    return active and not clean_shutdown
