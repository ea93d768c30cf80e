"""Offsets of the streaming source: ``{"topic": {"0": 42}}``, the next offset to read per partition.

A micro-batch reads ``start..end`` (end exclusive) of every partition; ``end`` is the log end offset
of the files when Spark asks (:meth:`~kafkafs.storage.log.Log.log_end_offset` after a fresh open, so
appends by other processes count), capped by ``maxOffsetsPerTrigger`` spread over the partitions in
proportion to what each has waiting, as Spark's Kafka source does, and held back while fewer than
``minOffsetsPerTrigger`` offsets wait, for at most ``maxTriggerDelay`` (:class:`TriggerDelay`).
Partitions that appear later are read from their start.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..errors import InvalidInput
from .dataloss import report_data_loss
from .discovery import discover_partitions, iter_logs
from .options import EARLIEST, LATEST, ReadOptions, check_assigned
from .plan import offset_for_timestamp, stable_end

__all__ = [
    "Offsets",
    "to_json",
    "from_json",
    "log_ends",
    "initial_offsets",
    "cap_offsets",
    "micro_batch_ranges",
    "TriggerDelay",
]

Offsets = dict[tuple[str, int], int]


def to_json(offsets: Offsets) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def from_json(data: dict | None) -> Offsets:
    out: Offsets = {}
    for topic, parts in (data or {}).items():
        for partition, offset in parts.items():
            out[(topic, int(partition))] = int(offset)
    return out


def log_ends(options: ReadOptions) -> tuple[Offsets, Offsets]:
    """``(log start offsets, log end offsets)`` of every wanted partition, read now; with
    ``read_committed`` the end is the last stable offset, so that a transaction still in progress is
    read once it has ended instead of being passed over."""
    starts: Offsets = {}
    ends: Offsets = {}
    committed = options.isolation_level == "read_committed"
    for _d, log_ in iter_logs(discover_partitions(options)):
        key = (log_.topic, log_.partition)
        starts[key] = log_.log_start_offset
        ends[key] = stable_end(log_, log_.log_end_offset) if committed else log_.log_end_offset
    return starts, ends


def initial_offsets(options: ReadOptions) -> Offsets:
    """Where a new query starts: ``startingOffsets`` (default latest) or a starting timestamp."""
    out: Offsets = {}
    committed = options.isolation_level == "read_committed"
    parts = discover_partitions(options)
    check_assigned(options, ((t, p) for _d, t, p in parts))  # as Spark checks a new query's start
    for _d, log_ in iter_logs(parts):
        topic, partition = log_.topic, log_.partition
        latest = stable_end(log_, log_.log_end_offset) if committed else log_.log_end_offset
        ts = options.starting_timestamp.for_partition(topic, partition) if options.starting_timestamp else None
        if ts is not None:
            found = offset_for_timestamp(log_, ts, committed)
            if found is None and options.starting_by_timestamp_strategy == "error":
                raise InvalidInput(
                    f"No offset matched from request of topic-partition {topic}-{partition} and timestamp {ts}. "
                    "(option startingOffsetsByTimestampStrategy=latest starts such partitions at their end)"
                )
            out[(topic, partition)] = latest if found is None else found
            continue
        spec = options.starting.for_partition(topic, partition)
        if spec == EARLIEST:
            out[(topic, partition)] = log_.log_start_offset
        elif spec == LATEST:
            out[(topic, partition)] = latest
        else:
            if spec < log_.log_start_offset:
                report_data_loss(
                    options.fail_on_data_loss,
                    f"Starting offset for {topic}-{partition} was {spec} but consumer reset to {log_.log_start_offset}.",
                )
            out[(topic, partition)] = max(spec, log_.log_start_offset)
    return out


def cap_offsets(start: Offsets, end: Offsets, max_rows: int | None) -> Offsets:
    """``end`` limited to about ``max_rows`` offsets in all, shared by what each partition has waiting."""
    if max_rows is None:
        return dict(end)
    lag = {k: max(0, e - start.get(k, e)) for k, e in end.items()}
    total = sum(lag.values())
    if total <= max_rows:
        return dict(end)
    out: Offsets = {}
    for k, e in end.items():
        s = start.get(k, e)
        share = lag[k] * max_rows // total
        if lag[k] and share == 0:
            share = 1  # keep every partition moving
        out[k] = min(e, s + share)
    return out


def micro_batch_ranges(options: ReadOptions, begin: Offsets, stop: Offsets) -> dict[tuple[str, int], tuple[str, int, int]]:
    """``{(topic, partition): (logdir, start, end)}`` of one micro-batch, with Spark's data-loss checks:
    a partition folder that went away, offsets that retention deleted while the query was stopped or
    behind, a partition that appeared with its first offsets already deleted, an end below the start (a
    start past the log end, a truncated log). ``failOnDataLoss=true``
    fails the query; ``false`` logs and reads what is left."""
    where = {}
    starts: Offsets = {}
    for d, log_ in iter_logs(discover_partitions(options)):
        key = (log_.topic, log_.partition)
        where[key] = d
        starts[key] = log_.log_start_offset
    fail = options.fail_on_data_loss
    out = {}
    for key, e in sorted(stop.items()):
        name = f"{key[0]}-{key[1]}"
        if key not in where:
            report_data_loss(fail, f"Partitions {name} have been deleted.")
            continue
        if key in begin:
            s = begin[key]
            if s < starts[key]:
                report_data_loss(fail, f"Could not read records in offset [{s}, {starts[key]}) for topic partition {name}: the log now starts at {starts[key]}.")
                s = starts[key]
        else:
            s = starts[key]
            if s != 0:
                report_data_loss(fail, f"Added partition {name} starts from {s} instead of 0.")
        if e < s:
            report_data_loss(fail, f"Partition {name} offset was changed from {s} to {e}. This could either be a user "
                                   "error that the start offset is set too high and this is the first batch, or the "
                                   "kafka topic-partition is broken, and some data may have been missed.")
        elif e > s:
            out[key] = (where[key], s, e)
    return out


class TriggerDelay:
    """``minOffsetsPerTrigger`` and ``maxTriggerDelay``, as Spark's Kafka source holds micro-batches back:
    a trigger finds fewer new offsets than the minimum (in all partitions) and the last batch is less
    than the delay ago: no batch (the start offsets again). The first trigger always runs. Used by the
    stream reader's one thread (Spark's calls of ``latestOffset`` come one at a time)."""

    def __init__(self, min_offsets: int, max_delay_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.min_offsets = min_offsets
        self.max_delay_ms = max_delay_ms
        self.clock = clock
        self.last_ms: float | None = None  # when the last batch was let through

    def holds(self, begin: Offsets, ends: Offsets) -> bool:
        now = self.clock() * 1000
        if self.last_ms is None or now - self.last_ms >= self.max_delay_ms:
            self.last_ms = now
            return False
        if sum(end - begin.get(key, 0) for key, end in ends.items()) < self.min_offsets:
            return True
        self.last_ms = now
        return False
