"""Transactions as a partition and its coordinator see them, offline (SPEC §3 ``transactions.json`` and
``transactions/<id>.json``, §4 ``kafkafs transactions``): which transaction is open where, which is
hanging and holding back the last stable offset.

- A partition's own view: the transactions open at its log end (the producer state: the latest
  producer snapshot, then the batches after it), each with its producer id and epoch, first offset,
  the timestamp of its first record and of its producer's last batch; the last stable offset (the
  first offset of the earliest open transaction, else the log end offset); the aborted transactions
  of its ``.txnindex`` files (first offset, and the ABORT marker's offset).
- The coordinator's view: ``__transaction_state`` replayed, the latest record of each transactional
  id (a tombstone removes it): its state, producer id and epoch, timeout and partitions.
- A transaction open in a partition is hanging when the coordinator's record of its producer says it
  ended (``Empty``, ``CompleteCommit``, ``CompleteAbort``, ``Dead``) or does not name the partition,
  or when it has been open longer than its timeout (the record's ``transactionTimeoutMs``, else
  ``transaction.max.timeout.ms``), counted from its first record's timestamp.

Functions only; each call reads afresh.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..errors import CorruptRecordError
from ..format.decoders.internal import transaction_key, transaction_value
from .producer_state import ProducerState

if TYPE_CHECKING:
    from .log import Log
    from .logdir import LogDir

__all__ = [
    "TRANSACTION_TOPIC",
    "TXN_STATES",
    "ENDED",
    "read_transaction_ids",
    "partition_transactions",
    "CoordinatorView",
]

log = logging.getLogger("kafkafs.txnstate")

TRANSACTION_TOPIC = "__transaction_state"
#: Kafka's TransactionState ids and names (as ``kafka-transactions describe`` prints them).
TXN_STATES = {0: "Empty", 1: "Ongoing", 2: "PrepareCommit", 3: "PrepareAbort", 4: "CompleteCommit",
              5: "CompleteAbort", 6: "Dead", 7: "PrepareEpochFence"}
#: States in which the coordinator holds no transaction open.
ENDED = {"Empty", "CompleteCommit", "CompleteAbort", "Dead"}


def _id_view(data: dict[str, Any]) -> dict[str, Any]:
    """``transactions/<id>.json``: state, producerId, producerEpoch, timeout, partitions."""
    status = data.get("transactionStatus")
    partitions = [{"topic": p.get("topic"), "partitions": sorted(p.get("partitionIds") or ())}
                  for p in data.get("transactionPartitions") or ()]
    return {
        "state": TXN_STATES.get(status, f"Unknown({status})") if isinstance(status, int) else f"Unknown({status})",
        "producerId": data.get("producerId"),
        "producerEpoch": data.get("producerEpoch"),
        "timeout": data.get("transactionTimeoutMs"),
        "partitions": sorted(partitions, key=lambda p: p["topic"] or ""),
    }


def read_transaction_ids(logdir: LogDir) -> dict[str, dict[str, Any]]:
    """transactional id -> its ``transactions/<id>.json`` object, from every ``__transaction_state``
    partition of ``logdir`` (the latest record of each id)."""
    out: dict[str, dict[str, Any]] = {}
    for name in logdir.topic_partition_names(TRANSACTION_TOPIC):
        log_ = logdir.log(name)
        for segment, view in log_.batches():
            h = view.header
            if h.magic == 2 and h.is_control:
                continue
            batch = view.decode(file=str(segment.log_path))
            for key, value in zip(batch.keys, batch.values, strict=True):
                try:
                    tid = transaction_key(key)["data"]["transactionalId"] if key is not None else None
                    body = transaction_value(value)
                except CorruptRecordError as exc:
                    log.debug("%s: a record does not decode: %s", name, exc)
                    continue
                if tid is None:
                    continue
                if body is None:
                    out.pop(tid, None)
                else:
                    out[tid] = _id_view(body["data"])
    return dict(sorted(out.items()))


class CoordinatorView:
    """What the coordinator's records say of producers: producer id -> (transactional id, record)."""

    def __init__(self, ids: dict[str, dict[str, Any]], max_timeout_ms: int) -> None:
        self.ids = ids
        self.max_timeout_ms = max_timeout_ms
        self.by_producer: dict[int, tuple[str, dict[str, Any]]] = {}
        for tid, record in ids.items():
            pid = record.get("producerId")
            if pid is not None and pid >= 0:
                self.by_producer[pid] = (tid, record)

    def judge(self, topic: str, partition: int, producer_id: int, first_timestamp: int, now_ms: int
              ) -> tuple[bool, str | None, int]:
        """(hanging, transactional id or None, the timeout that applies) of a transaction open in
        ``topic-partition``."""
        found = self.by_producer.get(producer_id)
        if found is None:
            return now_ms - first_timestamp > self.max_timeout_ms, None, self.max_timeout_ms
        tid, record = found
        timeout = record.get("timeout")
        timeout = self.max_timeout_ms if timeout is None or timeout < 0 else timeout
        named = any(p["topic"] == topic and partition in p["partitions"] for p in record["partitions"])
        ended = record["state"] in ENDED or not named
        return ended or now_ms - first_timestamp > timeout, tid, timeout


def _first_timestamp(log_: Log, offset: int) -> int:
    """The timestamp of the record at ``offset`` (the first of a transaction), -1 when unknown."""
    try:
        view = log_.locate(offset)
        if view is None:
            return -1
        batch = view.decode()
    except CorruptRecordError:
        return -1
    for found, ts in zip(batch.offsets, batch.timestamps, strict=True):
        if found >= offset:
            stamp: int = ts
            return stamp
    return -1


def partition_transactions(log_: Log, now_ms: int, coordinator: CoordinatorView | None = None) -> dict[str, Any]:
    """``transactions.json`` of one partition (SPEC §3's keys, in order)."""
    state = ProducerState(log_.dir, writable=False)
    state.load(list(log_.segments), log_.log_start_offset, log_.log_end_offset)
    coordinator = coordinator or CoordinatorView({}, 900_000)
    open_: list[dict[str, Any]] = []
    for entry in sorted(state.entries.values(), key=lambda e: (e.current_txn_first_offset, e.producer_id)):
        first = entry.current_txn_first_offset
        if first < 0:
            continue
        first_ts = _first_timestamp(log_, first)
        hanging, _tid, _timeout = coordinator.judge(log_.topic, log_.partition, entry.producer_id, first_ts, now_ms)
        open_.append({
            "producerId": entry.producer_id, "producerEpoch": entry.epoch, "firstOffset": first,
            "firstTimestamp": first_ts, "lastTimestamp": entry.timestamp,
            "ageMs": now_ms - first_ts if first_ts >= 0 else None, "hanging": hanging,
        })
    aborted = [
        {"producerId": e.producer_id, "firstOffset": e.first_offset, "lastOffset": e.last_offset}
        for segment in list(log_.segments) for e in segment.txn_index.entries()
    ]
    lso: int = min((int(t["firstOffset"]) for t in open_), default=log_.log_end_offset)
    return {"lastStableOffset": lso, "open": open_, "abortedRanges": aborted}
