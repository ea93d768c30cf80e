"""Transactions as a partition and its coordinator see them, offline (SPEC §3 ``transactions.json`` and
``transactions/<id>.json``, §4 ``kafkafs transactions``): which transaction is open where, which is
hanging and holding back the last stable offset.

- A partition's own view: the transactions open at its log end (the producer state: the latest
  producer snapshot, then the batches after it; without a snapshot, from the start of the first
  segment, not the log start: a transaction that began below a log start kafka-delete-records or
  retention moved stays open in a broker's producer state, review10 R10-10), each with its producer
  id and epoch, first offset (below the log start then), the timestamp of its first record and of its
  producer's last batch; the last stable offset (the first offset of the earliest open transaction,
  raised to the log start as Kafka's first unstable offset is, else the log end offset); the aborted transactions
  of its ``.txnindex`` files (first offset, and the ABORT marker's offset), and of a segment whose
  ``.index`` is missing those a broker's recovery writes (:func:`.transactions.segment_aborted`).
- The coordinator's view: ``__transaction_state`` replayed, the latest record of each transactional
  id (a tombstone removes it): its state, producer id and epoch, timeout and partitions, and when the
  transaction started (``transactionStartTimestampMs``, the coordinator's clock).
- A transaction open in a partition is hanging (SPEC §3, read as Kafka decides, §9):

  1. when the coordinator's latest record of its producer says it ended (``Empty``,
     ``CompleteCommit``, ``CompleteAbort``, ``Dead``), or is about to end an earlier epoch of the
     producer (``PrepareCommit``, ``PrepareAbort``, ``PrepareEpochFence`` with an epoch older than the
     transaction's; a newer one is this transaction's end: transaction version 2 bumps the epoch as it
     prepares, a fence bumps it too), or does not name the partition: at once;
  2. when the record lists it open in the partition: once it is older than the record's timeout,
     measured from the record's start (the coordinator's clock, never the records' CreateTimes, which
     a client sets: review10 R10-1);
  3. when there is no record of its producer: once it is older than ``transaction.max.timeout.ms``,
     measured from its first record's timestamp.

  On a live broker this agrees with ``kafka-transactions find-hanging`` (whose coordinator aborts a
  transaction past its timeout within its cleanup interval); it is stricter on a stopped broker's
  directory (a transaction its coordinator would abort at its next start) and where a record ended
  (find-hanging waits until the producer's last batch is 15 minutes old).

Damage (:mod:`.replay`): ``__transaction_state`` is read past damage. A transactional id's records
all lie in one partition, any of them in any batch of it, so an id with a record in a partition that
met damage is *damaged* (its record cannot be known exactly), every other id is exact. A partition's
view needs the coordinator only to judge ``hanging``: of a transaction whose producer's id is damaged,
or is not found while some of ``__transaction_state`` is damaged (its record may be in those bytes),
the judgement is not known (:meth:`CoordinatorView.judge` raises the damage); the partition's own
batches are read as before.

Functions only; each call reads afresh.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import CorruptRecordError
from ..format.decoders.internal import transaction_key, transaction_value
from .producer_state import ProducerState
from .replay import KnownDamage, replayable_batches
from .transactions import segment_aborted

if TYPE_CHECKING:
    from .log import Log
    from .logdir import LogDir

__all__ = [
    "TRANSACTION_TOPIC",
    "TXN_STATES",
    "ENDED",
    "replay_transactions",
    "TransactionsReplay",
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
#: States in which the coordinator is ending a transaction (its markers not all written yet).
ENDING = {"PrepareCommit", "PrepareAbort", "PrepareEpochFence"}


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


@dataclass
class TransactionsReplay(KnownDamage):
    """``__transaction_state`` replayed: the latest readable record of each transactional id, and the damage."""

    records: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> transactions/<id>.json
    #: partition folder -> the first damage its replay met
    damage: dict[str, CorruptRecordError] = field(default_factory=dict)
    #: transactional id -> the partition folder its records were read in
    where: dict[str, set[str]] = field(default_factory=dict)
    #: transactional id -> its record's transaction start (the coordinator's clock; -1: none)
    started: dict[str, int] = field(default_factory=dict)

    def ids(self) -> list[str]:
        """Every id with a record, and every damaged id (whether it has one is not known), sorted."""
        return sorted(set(self.records) | set(self.damaged()))

    def exact(self) -> dict[str, dict[str, Any]]:
        """id -> its ``transactions/<id>.json`` object, for every id known exactly, sorted."""
        return {t: r for t, r in sorted(self.records.items()) if self.damage_of(t) is None}

    def record(self, tid: str) -> dict[str, Any] | None:
        """``tid``'s object, None when it has none; a damaged id raises its damage."""
        damage = self.damage_of(tid)
        if damage is not None:
            raise damage
        return self.records.get(tid)


def replay_transactions(logdir: LogDir) -> TransactionsReplay:
    """Every ``__transaction_state`` partition of ``logdir`` replayed, past damage (the latest record of
    each id; a tombstone removes it)."""
    replay = TransactionsReplay()
    out = replay.records
    for name in logdir.topic_partition_names(TRANSACTION_TOPIC):
        damage: list[CorruptRecordError] = []
        for h, batch in replayable_batches(logdir.log(name), damage):
            if h.magic == 2 and h.is_control:
                continue
            for key, value in zip(batch.keys, batch.values, strict=True):
                try:
                    tid = transaction_key(key)["data"]["transactionalId"] if key is not None else None
                except CorruptRecordError as exc:
                    log.debug("%s: a record does not decode: %s", name, exc)
                    continue
                if not isinstance(tid, str):
                    continue
                replay.where.setdefault(tid, set()).add(name)
                try:
                    body = transaction_value(value)
                except CorruptRecordError as exc:
                    log.debug("%s: a record does not decode: %s", name, exc)
                    continue
                if body is None:
                    out.pop(tid, None)
                    replay.started.pop(tid, None)
                else:
                    out[tid] = _id_view(body["data"])
                    start = body["data"].get("transactionStartTimestampMs")
                    replay.started[tid] = start if isinstance(start, int) else -1
        if damage:
            replay.damage[name] = damage[0]
    return replay


class CoordinatorView:
    """What the coordinator's records say of producers: producer id -> (record, its transaction's start).

    ``replay``: where the records came from, when damage may hide some (see the module's docstring), and
    the transactions' starts (without it, a record's start is not known: its transaction is timed from
    its first record's timestamp)."""

    def __init__(self, ids: dict[str, dict[str, Any]], max_timeout_ms: int,
                 replay: TransactionsReplay | None = None) -> None:
        self.ids = ids
        self.max_timeout_ms = max_timeout_ms
        self.by_producer: dict[int, tuple[dict[str, Any], int]] = {}
        self.damaged_producers: dict[int, CorruptRecordError] = {}
        self.unknown: CorruptRecordError | None = None  # damage that may hold any producer's record
        started = replay.started if replay is not None else {}
        for tid, record in ids.items():
            pid = record.get("producerId")
            if pid is not None and pid >= 0:
                self.by_producer[pid] = (record, started.get(tid, -1))
        if replay is not None and replay.damage:
            self.unknown = next(iter(replay.damage.values()))
            for tid, damage in replay.damaged().items():
                pid = (replay.records.get(tid) or {}).get("producerId")
                if pid is not None and pid >= 0:
                    self.by_producer.pop(pid, None)
                    self.damaged_producers[pid] = damage

    @classmethod
    def of(cls, replay: TransactionsReplay, max_timeout_ms: int) -> CoordinatorView:
        """The view of a replay: its exact ids, and its damage."""
        return cls(replay.exact(), max_timeout_ms, replay)

    def judge(self, topic: str, partition: int, producer_id: int, epoch: int, first_timestamp: int,
              now_ms: int) -> bool:
        """Whether a transaction of ``producer_id`` at ``epoch`` open in ``topic-partition`` since
        ``first_timestamp`` (its first record's) hangs (see the module's docstring); raises the damage
        of ``__transaction_state`` that may hold the producer's record
        (:class:`~kafkafs.errors.CorruptRecordError`): then whether it hangs is not known."""
        damage = self.damaged_producers.get(producer_id)
        if damage is not None:
            raise damage
        found = self.by_producer.get(producer_id)
        if found is None:
            if self.unknown is not None:
                raise self.unknown
            return now_ms - first_timestamp > self.max_timeout_ms
        record, start = found
        state = record["state"]
        named = any(p["topic"] == topic and partition in p["partitions"] for p in record["partitions"])
        if state in ENDED or not named:
            return True
        record_epoch = record.get("producerEpoch")
        if state in ENDING and isinstance(record_epoch, int) and record_epoch < epoch:
            return True  # the coordinator ends an earlier epoch's transaction: never this one
        timeout = record.get("timeout")
        timeout = self.max_timeout_ms if not isinstance(timeout, int) or timeout < 0 else timeout
        return now_ms - (start if start >= 0 else first_timestamp) > timeout


def _first_timestamp(log_: Log, offset: int) -> int:
    """The timestamp of the record at ``offset`` (the first of a transaction; it may lie below the log
    start, in the first segment), -1 when unknown."""
    try:
        if offset >= log_.log_start_offset:
            view = log_.locate(offset)
        else:
            below = log_.segments.find(offset)
            view = below[1] if below is not None and below[1].header.base_offset <= offset else None
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


def partition_transactions(log_: Log, now_ms: int, coordinator: CoordinatorView | None = None,
                           damage: list[CorruptRecordError] | None = None) -> dict[str, Any]:
    """``transactions.json`` of one partition (SPEC §3's keys, in order). A transaction whose hanging
    the coordinator's damage hides (:meth:`CoordinatorView.judge`) raises that damage, or, with a
    ``damage`` list, is ``"hanging": null`` and the damage is appended to the list."""
    state = ProducerState(log_.dir, writable=False)
    # without a snapshot, from the first segment's start: a broker's producer state keeps a transaction
    # that began below the log start open (ProducerStateManager.onLogStartOffsetIncremented)
    state.load(log_.segments, log_.log_start_offset, log_.log_end_offset)
    coordinator = coordinator or CoordinatorView({}, 900_000)
    open_: list[dict[str, Any]] = []
    for entry in sorted(state.entries.values(), key=lambda e: (e.current_txn_first_offset, e.producer_id)):
        first = entry.current_txn_first_offset
        if first < 0:
            continue
        first_ts = _first_timestamp(log_, first)
        hanging: bool | None
        try:
            hanging = coordinator.judge(log_.topic, log_.partition, entry.producer_id, entry.epoch, first_ts, now_ms)
        except CorruptRecordError as exc:
            if damage is None:
                raise
            damage.append(exc)
            hanging = None
        open_.append({
            "producerId": entry.producer_id, "producerEpoch": entry.epoch, "firstOffset": first,
            "firstTimestamp": first_ts, "lastTimestamp": entry.timestamp,
            "ageMs": now_ms - first_ts if first_ts >= 0 else None, "hanging": hanging,
        })
    aborted = [
        {"producerId": e.producer_id, "firstOffset": e.first_offset, "lastOffset": e.last_offset}
        for _segment, entries in segment_aborted(list(log_.segments)) for e in entries
    ]
    lso: int = min((max(int(t["firstOffset"]), log_.log_start_offset) for t in open_), default=log_.log_end_offset)
    return {"lastStableOffset": lso, "open": open_, "abortedRanges": aborted}
