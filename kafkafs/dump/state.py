"""The partition's state files: producer snapshots, transaction indexes, the leader epoch checkpoint.

- ``.snapshot`` (``DumpLogSegments.dumpProducerIdSnapshot``), one line a producer::

      "producerId: P producerEpoch: E coordinatorEpoch: C currentTxnFirstOffset: OptionalLong[..] lastTimestamp: T "
      + [if it has a batch] "firstSequence: F lastSequence: L lastOffset: O offsetDelta: D timestamp: T"

  A damaged snapshot prints Kafka's ``CorruptSnapshotException`` message on standard error.
- ``.txnindex`` (``dumpTxnIndex``): ``version: V producerId: P firstOffset: F lastOffset: L lastStableOffset: S``.
- ``leader-epoch-checkpoint``: Kafka's tool has no reader for it; kafkafs prints one
  ``epoch: E startOffset: O`` line an entry, the names of Kafka's ``EpochEntry`` fields.
"""

from __future__ import annotations

from typing import TextIO

from ..errors import CorruptRecordError
from ..format.checkpoint import parse_epoch_checkpoint
from ..format.producer_snapshot import parse_producer_snapshot
from ..format.txnindex import parse_txn_index

__all__ = ["dump_producer_snapshot", "dump_txn_index", "dump_epoch_checkpoint"]


def _read(name: str) -> bytes:
    with open(name, "rb") as f:
        return f.read()


def _optional(value: int) -> str:
    return f"OptionalLong[{value}]" if value >= 0 else "OptionalLong.empty"


def dump_producer_snapshot(name: str, out: TextIO, err: TextIO) -> int:
    try:
        entries = parse_producer_snapshot(_read(name))
    except CorruptRecordError as exc:
        print(exc.reason, file=err)
        return 1
    for e in entries:
        line = (
            f"producerId: {e.producer_id} producerEpoch: {e.epoch} coordinatorEpoch: {e.coordinator_epoch} "
            f"currentTxnFirstOffset: {_optional(e.current_txn_first_offset)} lastTimestamp: {e.timestamp} "
        )
        if e.last_offset >= 0:
            line += (
                f"firstSequence: {e.first_sequence} lastSequence: {e.last_sequence} lastOffset: {e.last_offset} "
                f"offsetDelta: {e.offset_delta} timestamp: {e.timestamp}"
            )
        out.write(line + "\n")
    return 0


def dump_txn_index(name: str, out: TextIO, err: TextIO) -> int:
    try:
        entries = parse_txn_index(_read(name))
    except CorruptRecordError as exc:
        print(f"kafkafs: {name}: {exc}", file=err)
        return 1
    for t in entries:
        out.write(
            f"version: {t.version} producerId: {t.producer_id} firstOffset: {t.first_offset} "
            f"lastOffset: {t.last_offset} lastStableOffset: {t.last_stable_offset}\n"
        )
    return 0


def dump_epoch_checkpoint(name: str, out: TextIO, err: TextIO) -> int:
    try:
        entries = parse_epoch_checkpoint(_read(name))
    except CorruptRecordError as exc:
        print(f"kafkafs: {name}: {exc}", file=err)
        return 1
    for epoch, start in entries:
        out.write(f"epoch: {epoch} startOffset: {start}\n")
    return 0
