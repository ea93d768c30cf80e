"""The partition's state files: producer snapshots, transaction indexes, the leader epoch checkpoint.

- ``.snapshot`` (``DumpLogSegments.dumpProducerIdSnapshot``), one line a producer::

      "producerId: P producerEpoch: E coordinatorEpoch: C currentTxnFirstOffset: OptionalLong[..] lastTimestamp: T"
      + [if it has a batch] " firstSequence: F lastSequence: L lastOffset: O offsetDelta: D timestamp: T"

  (Kafka 4.4's Java tool: no space after ``lastTimestamp: T`` for a producer without batch metadata.)

  A damaged snapshot prints Kafka's ``CorruptSnapshotException`` message on standard error.
- ``.txnindex`` (``dumpTxnIndex``): ``version: V producerId: P firstOffset: F lastOffset: L lastStableOffset: S``.
- ``leader-epoch-checkpoint`` and the other state files: Kafka 4's tool ignores them (``Ignoring
  unknown file``), and so does this one (``files.py``); the mount's ``partition.json`` shows the epochs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TextIO, TypeVar

from ..errors import CorruptRecordError
from ..format.producer_snapshot import ProducerEntry, parse_producer_snapshot
from ..format.txnindex import CURRENT_VERSION, ENTRY_SIZE, parse_txn_index
from ..storage.safefiles import read_regular_file
from .indexes import _absolute

__all__ = ["dump_producer_snapshot", "dump_txn_index"]

T = TypeVar("T")


def _read(name: str) -> bytes:
    return read_regular_file(name, follow=True)  # never a FIFO waited on


def _optional(value: int) -> str:
    return f"OptionalLong[{value}]" if value >= 0 else "OptionalLong.empty"


def _dump(
    name: str,
    out: TextIO,
    err: TextIO,
    parse: Callable[[bytes], Iterable[T]],
    line: Callable[[T], str],
    complaint: Callable[[str, CorruptRecordError], str] = lambda name, exc: f"kafkafs: {name}: {exc}",
) -> int:
    """Write ``line(entry)`` for each entry ``parse`` finds in the file ``name``; the exit code (1, after
    ``complaint`` on ``err``, for a damaged file)."""
    try:
        entries = parse(_read(name))
    except CorruptRecordError as exc:
        print(complaint(name, exc), file=err)
        return 1
    for entry in entries:
        out.write(line(entry) + "\n")
    return 0


def _snapshot_line(e: ProducerEntry) -> str:
    line = (
        f"producerId: {e.producer_id} producerEpoch: {e.epoch} coordinatorEpoch: {e.coordinator_epoch} "
        f"currentTxnFirstOffset: {_optional(e.current_txn_first_offset)} lastTimestamp: {e.timestamp}"
    )
    if e.last_offset >= 0:
        line += (
            f" firstSequence: {e.first_sequence} lastSequence: {e.last_sequence} lastOffset: {e.last_offset} "
            f"offsetDelta: {e.offset_delta} timestamp: {e.timestamp}"
        )
    return line


def dump_producer_snapshot(name: str, out: TextIO, err: TextIO) -> int:
    # a damaged snapshot: Kafka's CorruptSnapshotException message alone
    return _dump(name, out, err, parse_producer_snapshot, _snapshot_line, lambda _name, exc: exc.reason)


def _txn_version_complaint(name: str, exc: CorruptRecordError) -> str:
    """An entry of a version Kafka does not know: Kafka's ``TransactionIndex`` message (its tool stops
    there with a stack trace, before printing any entry); anything else in kafkafs's words."""
    data = _read(name)
    for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
        version = int.from_bytes(data[pos : pos + 2], "big", signed=True)
        if version != CURRENT_VERSION:
            return (
                f"kafkafs: Unexpected aborted transaction version {version} in transaction index "
                f"{_absolute(name)}, supported version range is 0 to {CURRENT_VERSION}"
            )
    return f"kafkafs: {name}: {exc}"


def dump_txn_index(name: str, out: TextIO, err: TextIO) -> int:
    return _dump(
        name,
        out,
        err,
        parse_txn_index,
        lambda t: (
            f"version: {t.version} producerId: {t.producer_id} firstOffset: {t.first_offset} "
            f"lastOffset: {t.last_offset} lastStableOffset: {t.last_stable_offset}"
        ),
        _txn_version_complaint,
    )
