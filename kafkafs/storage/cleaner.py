"""Retention and compaction, as ``kafkafs clean`` runs them (Kafka's LogCleaner and retention, reduced).

Retention (``cleanup.policy`` has ``delete``): whole segments whose newest record is older than
``retention.ms``, or that push the partition past ``retention.bytes`` (oldest first), are renamed
``.deleted``; the log start offset moves past them, and their files go ``file.delete.delay.ms`` later
(each clean run starts by removing those whose delay has passed; a writable open removes the rest).

Compaction (``cleanup.policy`` has ``compact``): over the cleanable segments, an offset map of key
hashes keeps the latest offset per key; each segment is rewritten without the older records into
``.cleaned`` files, renamed ``.swap``, and swapped in for the original, which is renamed ``.deleted``.
Offsets are kept, so a compacted log has gaps. Tombstones (null values) older than
``delete.retention.ms`` go too. Control batches and records without a key are kept. As in Kafka, the
cleanable segments are the sealed ones below the first offset of any transaction still undecided and
below the first segment holding records younger than ``min.compaction.lag.ms``; records of aborted
transactions (``.txnindex``) neither count as a key's latest value nor stay, and each rewritten segment
keeps its ``.txnindex`` entries (the markers stay). After compacting a partition, the offset it was
cleaned up to goes to the log directory's ``cleaner-offset-checkpoint``.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterator

from ..errors import UnsafeFileError
from ..format.batch import encode_batch, read_batch_header
from ..format.txnindex import AbortedTxn
from .log import Log
from .segment import LogSegment

__all__ = ["apply_retention", "compact", "cleanable_segments", "clean_logdir"]

log = logging.getLogger("kafkafs.cleaner")


def apply_retention(target: Log, now_ms: int, *, dry_run: bool = False) -> list[str]:
    """Delete the segments past ``retention.ms`` / ``retention.bytes``; return what was (or would be) done."""
    config = target.config
    if not config.delete:
        return []
    segments = [s for s in target.segments.values()]
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
    lines = [
        f"{target.name}: {'would delete' if dry_run else 'deleted'} {s.log_path.name} "
        f"(offsets {s.base_offset}..{s.next_offset - 1}, {s.size} bytes)"
        for s in doomed
    ]
    if doomed and not dry_run:
        target.delete_segments(doomed, "retention")
    return lines


def _key_hash(key: bytes) -> bytes:
    return hashlib.md5(key, usedforsecurity=False).digest()


def _records(segment: LogSegment) -> Iterator:
    for view in segment.batches(0):
        yield view, view.decode(file=str(segment.log_path))


def cleanable_segments(target: Log, now_ms: int) -> list[LogSegment]:
    """The segments compaction may rewrite: sealed, wholly below the first undecided transaction's first
    offset and below the first segment that holds records younger than ``min.compaction.lag.ms``
    (Kafka's first uncleanable offset)."""
    sealed = list(target.segments.values())[:-1]
    if not sealed:
        return []
    upper = target.active_segment.base_offset  # type: ignore[union-attr]
    undecided = target.first_undecided_offset()
    if undecided is not None:
        upper = min(upper, undecided)
    lag = target.config.min_compaction_lag_ms
    out = []
    for segment in sealed:
        if segment.next_offset > upper:
            break
        if lag > 0 and segment.max_timestamp > now_ms - lag:
            break
        out.append(segment)
    return out


class _Aborted:
    """Which transactional batches belong to aborted transactions (from the ``.txnindex`` files)."""

    def __init__(self, entries: list[AbortedTxn]) -> None:
        self.by_producer: dict[int, list[tuple[int, int]]] = {}
        for e in entries:
            self.by_producer.setdefault(e.producer_id, []).append((e.first_offset, e.last_offset))

    def __contains__(self, header) -> bool:
        spans = self.by_producer.get(header.producer_id)
        if not spans or not header.is_transactional or header.is_control:
            return False
        return any(first <= header.base_offset <= last for first, last in spans)


def compact(target: Log, now_ms: int, *, dry_run: bool = False) -> list[str]:
    """Compact the cleanable segments of ``target``; return a line per rewritten segment."""
    return _compact(target, now_ms, dry_run=dry_run)[0]


def _compact(target: Log, now_ms: int, *, dry_run: bool) -> tuple[list[str], int | None]:
    """Compaction, and the offset the log is then cleaned up to (None when nothing was cleanable)."""
    config = target.config
    if not config.compact:
        return [], None
    segments = cleanable_segments(target, now_ms)
    if not segments:
        return [], None
    aborted = _Aborted([e for s in target.segments.values() for e in s.txn_index.entries()])
    horizon = now_ms - config.min_compaction_lag_ms
    latest: dict[bytes, int] = {}
    for segment in segments:
        for view, batch in _records(segment):
            if batch.is_control or view.header in aborted:
                continue
            for offset, key, ts in zip(batch.offsets, batch.keys, batch.timestamps, strict=True):
                if key is not None and ts <= horizon:
                    latest[_key_hash(key)] = offset
    tombstone_horizon = now_ms - config.delete_retention_ms
    lines = []
    for segment in segments:
        kept_batches: list[bytes] = []
        removed = dropped = 0
        for view, batch in _records(segment):
            h = view.header
            if batch.is_control or h.magic != 2:
                kept_batches.append(view.raw())
                continue
            if h in aborted:
                dropped += len(batch)
                continue
            keep = []
            for i, (offset, key, value, ts) in enumerate(
                zip(batch.offsets, batch.keys, batch.values, batch.timestamps, strict=True)
            ):
                if key is not None and ts <= horizon and latest.get(_key_hash(key), offset) != offset:
                    continue
                if key is not None and value is None and ts < tombstone_horizon:
                    continue
                keep.append(i)
            removed += len(batch) - len(keep)
            if len(keep) == len(batch):
                kept_batches.append(view.raw())
            elif keep:
                base = batch.offsets[keep[0]]
                rows = [(batch.timestamps[i], batch.keys[i], batch.values[i], batch.headers[i]) for i in keep]
                kept_batches.append(
                    encode_batch(
                        rows,
                        base_offset=base,
                        offset_deltas=[batch.offsets[i] - base for i in keep],
                        compression=h.compression,
                        log_append_time=h.max_timestamp if h.timestamp_type == 1 else None,
                        partition_leader_epoch=h.partition_leader_epoch,
                        producer_id=h.producer_id,
                        producer_epoch=h.producer_epoch,
                        base_sequence=h.base_sequence,
                        transactional=h.is_transactional,
                    )
                )
        if not removed and not dropped:
            continue
        what = f"{removed} superseded record(s) removed"
        if dropped:
            what += f", {dropped} record(s) of aborted transactions"
        lines.append(
            f"{target.name}: {'would compact' if dry_run else 'compacted'} {segment.log_path.name}: {what}"
        )
        if not dry_run:
            _swap_in(target, segment, kept_batches)
    return lines, segments[-1].next_offset


def _swap_in(target: Log, old: LogSegment, batches: list[bytes]) -> None:
    """Write ``batches`` as ``.cleaned``, rename to ``.swap``, replace ``old`` (crash-safe at each step:
    recovery deletes a ``.cleaned`` and completes a ``.swap``)."""
    with target._lock:
        cleaned = LogSegment(target.dir, old.base_offset, target.config, writable=True, suffix=".cleaned")
        data = b"".join(batches)
        headers = []
        pos = 0
        while pos < len(data):
            h = read_batch_header(data, pos)
            headers.append(h)
            pos = h.end
        if headers:
            cleaned.append(data, headers)
        cleaned.txn_index.write_entries(old.txn_index.entries())  # every marker is kept
        cleaned.on_become_inactive()
        cleaned.flush()
        cleaned.change_suffix(".swap")
        target.segments.remove(old.base_offset)
        target.schedule_deletion(old)
        cleaned.change_suffix("")
        dfd = os.open(target.dir, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        target.segments.put(cleaned.base_offset, cleaned)


def clean_logdir(logdir, *, dry_run: bool = False, now_ms: int | None = None) -> list[str]:
    """Retention then compaction for every partition of a writable :class:`LogDir`: first the files of
    segments deleted earlier whose ``file.delete.delay.ms`` has passed go, and at the end the
    ``cleaner-offset-checkpoint`` records how far each compacted partition is cleaned."""
    import time

    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    lines: list[str] = []
    cleaned: dict[tuple[str, int], int] = {}
    for name in logdir.partition_names():
        try:
            target = logdir.log(name)
        except UnsafeFileError:  # holds a link: refused, untouched (logdir.refused says why)
            continue
        if not dry_run:
            target.delete_expired_files()
        lines.extend(apply_retention(target, now, dry_run=dry_run))
        compacted, cleaned_to = _compact(target, now, dry_run=dry_run)
        lines.extend(compacted)
        if cleaned_to is not None:
            cleaned[(target.topic, target.partition)] = cleaned_to
    if cleaned and not dry_run:
        logdir.update_cleaner_checkpoint(cleaned)
    if not lines:
        lines.append("nothing to clean")
    return lines
