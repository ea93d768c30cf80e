"""The records a Kafka broker refuses to append, whatever their bytes: Kafka's ``LogValidator`` rules
for a record, applied by :meth:`~kafkafs.storage.log.Log.append_batches` (every writer: the mount's
``append``, ``kafkafs produce``, Spark's writes) before anything is written (SPEC §3, §9).

- A compacted topic (``cleanup.policy`` holding ``compact``: ``compact`` and ``compact,delete``) takes
  only records with a key, tombstones included (``validateKey``: ``INVALID_RECORD``, "Compacted topic
  cannot accept message without key in topic partition ..."): the cleaner would drop a keyless record
  at its next pass (``LogCleaner.shouldRetainRecord``), so accepting one would be a loss said nowhere.
- A ``CreateTime`` topic takes only timestamps within ``[now - message.timestamp.before.max.ms, now +
  message.timestamp.after.max.ms]`` (``validateTimestamp``: ``INVALID_TIMESTAMP``; Kafka 4's defaults:
  no bound before, one hour after, KIP-1030); a record without a timestamp (-1) passes, and a
  ``LogAppendTime`` topic takes any (the broker writes its own).

One bad record refuses everything given at once (Kafka fails the whole batch), nothing appended.

Cost: with Kafka's defaults on a topic that is not compacted, the check reads each batch's header only
(its ``maxTimestamp``, which kafkafs's encoders compute and the CRC covers); the records are decoded
when the topic is compacted, when ``message.timestamp.before.max.ms`` is set, or to name the record a
header refuses.

Thread safety: pure functions of their arguments.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import InvalidInput, RecordTooLargeError
from ..format.batch import NO_TIMESTAMP, BatchHeader, DecodedBatch, decode_batch, scan_batches
from .config import LONG_MAX, LogConfig

__all__ = ["RecordRefused", "check_appendable", "check_batch_sizes", "check_batches"]


class RecordRefused(InvalidInput):
    """A record a Kafka broker would refuse (see the module). ``index``: its place among the records
    given at once (0 for the first), so a caller that knows which line made which record can name it;
    ``reason``: the message without that place."""

    def __init__(self, reason: str, index: int, *, where: str | None = None) -> None:
        self.reason = reason
        self.index = index
        super().__init__(f"{where or f'record {index + 1}'}: {reason}")

    def at_line(self, first_line: int) -> RecordRefused:
        """The same refusal named by its line, when record ``i`` came from line ``first_line + i``."""
        return RecordRefused(self.reason, self.index, where=f"line {first_line + self.index}")


def check_appendable(buf: bytes | bytearray, headers: Sequence[BatchHeader], config: LogConfig, partition: str,
                     now: int) -> None:
    """Raise :class:`RecordRefused` for the first record of the whole batches ``headers`` of ``buf``
    that Kafka's rules refuse on a topic with ``config`` (``partition``: the partition's name, for the
    message), at the time ``now`` (epoch ms)."""
    compact = config.compact
    check_time = not config.log_append_time
    before = config.message_timestamp_before_max_ms
    after = config.message_timestamp_after_max_ms
    latest = now + after
    deep = compact or (check_time and before != LONG_MAX)
    index = 0
    for h in headers:
        if deep or (check_time and h.max_timestamp != NO_TIMESTAMP and h.max_timestamp > latest):
            batch = decode_batch(buf, h, validate=False)
            if compact and not h.is_control:  # a control record always has a key
                _check_keys(batch, config, partition, index)
            if check_time:
                _check_timestamps(batch, now, before, after, index)
        index += max(h.record_count, 0)


def check_batch_sizes(headers: Sequence[BatchHeader], config: LogConfig, *, client: bool) -> None:
    """Raise ``RecordTooLargeError`` for the first batch larger than ``max.message.bytes``, or, for a
    ``client``'s batches (what a producer sends), than :attr:`~.config.LogConfig.max_batch_bytes` (also
    the segment size: Kafka's UnifiedLog.append, RECORD_LIST_TOO_LARGE)."""
    limit, name = ((config.max_batch_bytes, config.batch_limit) if client
                   else (config.max_message_bytes, f"max.message.bytes={config.max_message_bytes}"))
    for h in headers:
        if h.size > limit:
            raise RecordTooLargeError(f"batch of {h.size} bytes is larger than {name}")


def check_batches(data: bytes, config: LogConfig, partition: str, now: int) -> None:
    """:func:`check_batch_sizes` (a client's) and :func:`check_appendable` of the whole batches ``data``
    (kafkafs's own encoding: not validated here), for a writer that must know before it creates the
    partition."""
    headers = list(scan_batches(data))
    check_batch_sizes(headers, config, client=True)
    check_appendable(data, headers, config, partition, now)


def _check_keys(batch: DecodedBatch, config: LogConfig, partition: str, first: int) -> None:
    for i, key in enumerate(batch.keys):
        if key is None:
            kind = "a tombstone" if batch.values[i] is None else "a record"
            raise RecordRefused(
                f"{kind} without a key cannot go to a compacted topic (cleanup.policy={config.cleanup_policy}; "
                f"a Kafka broker refuses it: Compacted topic cannot accept message without key in topic "
                f"partition {partition})", first + i)


def _check_timestamps(batch: DecodedBatch, now: int, before: int, after: int, first: int) -> None:
    for i, ts in enumerate(batch.timestamps):
        if ts == NO_TIMESTAMP:
            continue
        if now - ts > before or ts - now > after:
            name, limit, side = (("message.timestamp.after.max.ms", after, "after") if ts > now
                                 else ("message.timestamp.before.max.ms", before, "before"))
            raise RecordRefused(
                f"timestamp {ts} lies more than {name}={limit} {side} now ({now}); a Kafka broker refuses it "
                f"(INVALID_TIMESTAMP: the timestamp should be within [{now - before}, {now + after}])", first + i)
