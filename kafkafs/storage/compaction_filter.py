"""What compaction keeps of one batch (Kafka's ``LogCleaner`` record filter with ``MemoryRecords.filterTo``).

For a v2 batch, in Kafka's order:

1. The transaction state (:class:`~kafkafs.storage.transactions.CleanedTransactions`) says whether the
   batch may be discarded: a data batch of an aborted transaction, a transaction marker whose
   transaction has no batch left, an empty control batch.
2. A data batch that may be discarded goes with all its records. A control batch that may be
   discarded goes once its delete horizon has passed; before that it stays, and the first cleaning
   that finds it discardable gives it a horizon (``now + delete.retention.ms``).
3. Otherwise each record of a data batch is judged (``shouldRetainRecord``): a record past the offset
   map's latest offset stays; a record without a key goes; a keyed record stays when it is its key's
   latest and has a value, or is a tombstone whose batch has no delete horizon yet or one still in the
   future. Control records stay.
4. A batch that keeps a record without a value (a tombstone), or a discardable marker, and has no
   horizon yet is rewritten with one (KIP-534: attribute bit 6, base timestamp = the horizon; records
   keep their timestamps). A batch that keeps everything is copied byte for byte; otherwise it is
   rewritten with the records it keeps, its last offset delta unchanged (the producer's last sequence
   stays right).
5. A batch that keeps no record goes, except the last data batch of a producer that is still active
   (or its last marker when it has no data batch), which stays as an empty batch (``RETAIN_EMPTY``):
   the producer's sequence and epoch must survive for idempotence and fencing; and the batch just
   below the first offset the round may not clean, which keeps the log's last offset.

Legacy (magic 0/1) messages follow the same record rule, except that a tombstone's fate is not in its
batch: it stays while the segment holding it was modified after the last cleaned segment's
modification time less ``delete.retention.ms`` (Kafka's ``legacyDeleteHorizonMs``). What stays of a
legacy entry is written as a v2 batch, even when every record stays, as Kafka 4.x's cleaner does
(KAFKA-13093, ``MemoryRecords.buildRetainedRecordsInto`` builds magic 2): its codec and timestamp type
(CreateTime for magic 0), base offset the first record's kept, no producer, leader epoch -1, and a
delete horizon when it keeps a tombstone.

Pure functions over one batch; no state beyond their arguments (thread-safe).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..format.batch import BatchHeader, Codec, encode_batch
from ..format.crc import crc32c
from .offset_map import OffsetMap
from .records import BatchView
from .transactions import CleanedTransactions

__all__ = [
    "DELETE_HORIZON_FLAG",
    "GroupResult",
    "clean_batch",
    "clean_legacy",
    "empty_batch",
    "last_of_active_producer",
]

#: Attribute bit 6 (KIP-534): the batch's base timestamp is its delete horizon.
DELETE_HORIZON_FLAG = 0x40
_ATTRIBUTES_AT = 21


@dataclass
class CleanStats:
    """What compaction read and wrote; ``tick`` (if set) is called after every batch read. Written by the
    one thread compacting; other threads may read the counters (plain ints) for progress."""

    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    map_bytes_read: int = 0
    rounds: int = 0
    tick: Callable[[], None] | None = None

    @property
    def reclaimed(self) -> int:
        return max(self.bytes_read - self.bytes_written, 0)


@dataclass
class GroupResult:
    """What the cleaning of one group of segments did (counts of records and batches)."""

    removed: int = 0  #: records superseded by a later one of their key, or tombstones past their horizon
    aborted: int = 0  #: records of aborted transactions
    keyless: int = 0  #: records without a key
    markers: int = 0  #: control batches removed (transaction markers past their delete horizon)
    horizons: int = 0  #: batches given a delete horizon
    empties: int = 0  #: empty batches removed (left by an earlier cleaning)
    expired: int = 0  #: tombstones removed past their delete horizon (within ``removed``)

    @property
    def changed(self) -> bool:
        return bool(self.removed or self.aborted or self.keyless or self.markers or self.horizons or self.empties)


def last_of_active_producer(h: BatchHeader, active: dict[int, tuple[int, int]]) -> bool:
    """Whether ``h`` is what Kafka keeps (at least as an empty batch) for an active producer: the batch
    holding its last data offset, or, when it has none, a marker of its current epoch."""
    last = active.get(h.producer_id)
    if last is None or h.producer_id < 0:
        return False
    last_data_offset, epoch = last
    if last_data_offset >= 0:
        return h.last_offset == last_data_offset
    return h.is_control and h.producer_epoch == epoch


def _set_delete_horizon(data: bytearray) -> None:
    """Mark a freshly encoded v2 batch's base timestamp as its delete horizon, and fix its CRC."""
    attributes = int.from_bytes(data[_ATTRIBUTES_AT:_ATTRIBUTES_AT + 2], "big") | DELETE_HORIZON_FLAG
    data[_ATTRIBUTES_AT:_ATTRIBUTES_AT + 2] = attributes.to_bytes(2, "big")
    data[17:21] = crc32c(memoryview(data)[_ATTRIBUTES_AT:]).to_bytes(4, "big")


#: A record to encode: (timestamp, key, value, headers), as :func:`encode_batch` takes it.
_Row = tuple[int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]


def _encode_like(h: BatchHeader, rows: Sequence[_Row], *, offset_deltas: Sequence[int] | None = None,
                 compression: Codec = Codec.NONE, first_timestamp: int | None = None,
                 max_timestamp: int | None = None) -> bytes:
    """``rows`` as a batch that keeps ``h``'s base offset, last offset delta, LogAppendTime, leader
    epoch, producer fields and control flag; the rest as :func:`encode_batch` takes it."""
    return encode_batch(
        rows,
        base_offset=h.base_offset,
        last_offset_delta=h.last_offset_delta,  # as Kafka: the producer's last sequence stays right
        log_append_time=h.max_timestamp if h.timestamp_type == 1 else None,
        partition_leader_epoch=h.partition_leader_epoch,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        transactional=h.is_transactional,
        control=h.is_control,
        offset_deltas=offset_deltas,
        compression=compression,
        first_timestamp=first_timestamp,
        max_timestamp=max_timestamp,
    )


def empty_batch(h: BatchHeader) -> bytes:
    """The header of a batch whose records all went (Kafka's ``RETAIN_EMPTY``: no delete horizon), as
    ``DefaultRecordBatch.writeEmptyHeader`` writes it: base timestamp -1 (NO_TIMESTAMP), the max
    timestamp kept."""
    return _encode_like(h, [], first_timestamp=-1, max_timestamp=h.max_timestamp)


def _judge(omap: OffsetMap, keys: list[bytes | None], values: list[bytes | None], offsets: list[int],
           drop_deletes: bool, result: GroupResult) -> bytearray | list[bool]:
    """Kafka's ``shouldRetainRecord`` for each record of a data batch (a mutable sequence of truth
    values); ``drop_deletes``: its tombstones are past their delete horizon."""
    keep = omap.retain_flags(keys, offsets)
    latest = omap.latest_offset
    for i in range(len(keep)):
        if keep[i]:
            if drop_deletes and values[i] is None and offsets[i] <= latest:
                keep[i] = False  # a tombstone past its delete horizon
                result.expired += 1
                result.removed += 1
        elif keys[i] is None:
            result.keyless += 1
        else:
            result.removed += 1
    return keep


def clean_batch(view: BatchView, file: str, omap: OffsetMap, txns: CleanedTransactions,
                active: dict[int, tuple[int, int]], now_ms: int, delete_retention_ms: int,
                result: GroupResult, stats: CleanStats, round_upper: int = -1) -> bytes | bytearray | None:
    """The bytes of one v2 batch after cleaning (the original ones when nothing changes), or None
    when it goes. ``stats``: the run's;
    ``round_upper``: the first offset the round may not clean (the batch that ends there stays, empty
    if need be, so that its last offset is not lost: Kafka's ``upperBoundOffsetOfCleaningRound``)."""
    h = view.header
    horizon_set = bool(h.attributes & DELETE_HORIZON_FLAG)
    retain_empty = last_of_active_producer(h, active) or h.next_offset == round_upper
    if h.is_control:
        batch = view.decode(file=file)
        n = len(batch)
        discardable = txns.on_control(h, batch.keys[0] if n else None, n == 0)
        discard_records = discardable and horizon_set and h.first_timestamp <= now_ms
    else:
        discardable = discard_records = txns.on_batch(h)
        if discard_records and not retain_empty:  # Kafka's BatchRetention.DELETE: the records are not read
            result.aborted += max(h.record_count, 0)
            return None
        batch = view.decode(file=file)
        n = len(batch)
    if discard_records:
        if h.is_control:
            result.markers += 1
        else:
            result.aborted += n
        if not retain_empty:
            return None
    stats.records_read += n
    keys, values, offsets = batch.keys, batch.values, batch.offsets
    keep: bytearray | list[bool]
    if discard_records:
        keep = [False] * n
    elif h.is_control:
        keep = [True] * n
    else:
        keep = _judge(omap, keys, values, offsets, horizon_set and now_ms >= h.first_timestamp, result)
    kept = [i for i in range(n) if keep[i]]
    stats.records_kept += len(kept)
    if not kept:
        if retain_empty:
            return empty_batch(h)
        result.empties += n == 0
        return None
    need_horizon = not horizon_set and (
        any(values[i] is None for i in kept) or (discardable and h.is_control)
    )
    if len(kept) == n and not need_horizon:
        return view.raw()
    base = h.base_offset
    timestamps, headers = batch.timestamps, batch.headers
    rows = [(timestamps[i], keys[i], values[i], headers[i]) for i in kept]
    first_ts = now_ms + delete_retention_ms if need_horizon else (h.first_timestamp if horizon_set else None)
    data = bytearray(
        _encode_like(
            h,
            rows,
            offset_deltas=[offsets[i] - base for i in kept],
            first_timestamp=first_ts,
            compression=Codec(h.compression),
        )
    )
    if need_horizon or horizon_set:
        _set_delete_horizon(data)
        result.horizons += need_horizon
    return data


def clean_legacy(view: BatchView, file: str, omap: OffsetMap, txns: CleanedTransactions, retain_deletes: bool,
                 now_ms: int, delete_retention_ms: int, result: GroupResult, stats: CleanStats) -> bytes | None:
    """The v2 batch of what stays of one magic 0/1 entry after cleaning, or None when no record does.
    ``retain_deletes``: Kafka's ``retainLegacyDeletesAndTxnMarkers`` for its segment."""
    h = view.header
    txns.on_batch(h)  # never transactional, but the aborted transactions it passes are taken in order
    batch = view.decode(file=file)
    n = len(batch)
    stats.records_read += n
    keys, values, offsets = batch.keys, batch.values, batch.offsets
    keep = _judge(omap, keys, values, offsets, not retain_deletes, result)
    kept = [i for i in range(n) if keep[i]]
    stats.records_kept += len(kept)
    if not kept:
        return None
    timestamps = batch.timestamps
    base = offsets[kept[0]]
    # Kafka's filterTo: a batch that keeps a tombstone and has no delete horizon (no legacy entry has
    # one) gets now + delete.retention.ms
    need_horizon = any(values[i] is None for i in kept)
    data = bytearray(encode_batch(
        [(timestamps[i], keys[i], values[i], ()) for i in kept],
        base_offset=base,
        offset_deltas=[offsets[i] - base for i in kept],
        compression=Codec(h.attributes & 0x07),
        log_append_time=h.max_timestamp if h.timestamp_type == 1 else None,
        first_timestamp=now_ms + delete_retention_ms if need_horizon else None,
    ))
    if need_horizon:
        _set_delete_horizon(data)
        result.horizons += 1
    return bytes(data)
