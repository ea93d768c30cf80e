"""Retention and compaction, as ``kafkafs clean`` runs them (Kafka's LogCleaner and retention, reduced).

Retention (``cleanup.policy`` has ``delete``): whole segments whose newest record is older than
``retention.ms``, or that push the partition past ``retention.bytes`` (oldest first), are renamed
``.deleted`` and removed; the log start offset moves past them.

Compaction (``cleanup.policy`` has ``compact``): over the sealed segments (never the active one), an
offset map of key hashes keeps the latest offset per key; each segment is rewritten without the older
records into ``.cleaned`` files, renamed ``.swap``, and swapped in for the original. Offsets are kept,
so a compacted log has gaps. Tombstones (null values) older than ``delete.retention.ms`` go too.
Control batches and records without a key are kept.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterator

from ..format.batch import encode_batch, read_batch_header
from .log import Log
from .segment import LogSegment

__all__ = ["apply_retention", "compact", "clean_logdir"]

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


def compact(target: Log, now_ms: int, *, dry_run: bool = False) -> list[str]:
    """Compact the sealed segments of ``target``; return a line per rewritten segment."""
    config = target.config
    if not config.compact:
        return []
    sealed = list(target.segments.values())[:-1]
    if not sealed:
        return []
    horizon = now_ms - config.min_compaction_lag_ms
    latest: dict[bytes, int] = {}
    for segment in sealed:
        for _view, batch in _records(segment):
            if batch.is_control:
                continue
            for offset, key, ts in zip(batch.offsets, batch.keys, batch.timestamps, strict=True):
                if key is not None and ts <= horizon:
                    latest[_key_hash(key)] = offset
    tombstone_horizon = now_ms - config.delete_retention_ms
    lines = []
    for segment in sealed:
        kept_batches: list[bytes] = []
        removed = 0
        for view, batch in _records(segment):
            h = view.header
            if batch.is_control or h.magic != 2:
                kept_batches.append(view.raw())
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
        if not removed:
            continue
        lines.append(
            f"{target.name}: {'would compact' if dry_run else 'compacted'} {segment.log_path.name}: "
            f"{removed} superseded record(s) removed"
        )
        if not dry_run:
            _swap_in(target, segment, kept_batches)
    return lines


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
        cleaned.on_become_inactive()
        cleaned.flush()
        cleaned.change_suffix(".swap")
        target.segments.remove(old.base_offset)
        old.delete()
        cleaned.change_suffix("")
        dfd = os.open(target.dir, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        target.segments.put(cleaned.base_offset, cleaned)


def clean_logdir(logdir, *, dry_run: bool = False, now_ms: int | None = None) -> list[str]:
    """Retention then compaction for every partition of a writable :class:`LogDir`."""
    import time

    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    lines: list[str] = []
    for name in logdir.partition_names():
        target = logdir.log(name)
        lines.extend(apply_retention(target, now, dry_run=dry_run))
        lines.extend(compact(target, now, dry_run=dry_run))
    if not lines:
        lines.append("nothing to clean")
    return lines
