"""Kafka's ``.txnindex``: the aborted transactions whose ABORT marker is in a segment (sans-io).

An entry is 34 bytes, big-endian (Kafka's ``AbortedTxn``)::

    version i16 (0), producerId i64, firstOffset i64, lastOffset i64, lastStableOffset i64

``firstOffset`` is the first offset of the aborted transaction (its first data batch, possibly in an
earlier segment), ``lastOffset`` the offset of its ABORT marker, and ``lastStableOffset`` the log's last
stable offset once the marker was written: the first offset of the earliest transaction of another
producer still undecided then, or ``lastOffset + 1`` if there was none. Entries are in marker order, so
``lastOffset`` increases strictly. The file is not preallocated and only exists once a segment has an
entry (Kafka creates it lazily); a broker reads whole entries only, so a torn tail is ignored.

:func:`transaction_event` tells what a batch means to the transaction state: a transactional data
batch may start a transaction, a control batch with a producer id ends one (COMMIT or ABORT).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import NamedTuple

from kafkafs.errors import CorruptRecordError

from . import Buffer
from .batch import BatchHeader, control_type_of, decode_batch

__all__ = [
    "ENTRY_SIZE",
    "CURRENT_VERSION",
    "AbortedTxn",
    "TxnEvent",
    "encode_aborted_txn",
    "decode_aborted_txn",
    "parse_txn_index",
    "check_txn_index",
    "collect_aborted_txns",
    "transaction_event",
]

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
CURRENT_VERSION = 0


class AbortedTxn(NamedTuple):
    """One ``.txnindex`` entry."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = CURRENT_VERSION


class TxnEvent(NamedTuple):
    """What one batch does to the transaction state: ``kind`` is ``"data"`` (a transactional data batch
    at ``offset``, its base offset), ``"COMMIT"`` or ``"ABORT"`` (a marker at ``offset``)."""

    kind: str
    producer_id: int
    offset: int


def encode_aborted_txn(txn: AbortedTxn) -> bytes:
    return _ENTRY.pack(txn.version, txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset)


def decode_aborted_txn(buf: Buffer, pos: int = 0) -> AbortedTxn:
    """The entry at ``pos``; ``CorruptRecordError`` for a version newer than Kafka's (0)."""
    version, producer_id, first, last, lso = _ENTRY.unpack_from(buf, pos)
    if version > CURRENT_VERSION or version < 0:
        raise CorruptRecordError(f"aborted transaction entry of unknown version {version}", pos)
    return AbortedTxn(producer_id, first, last, lso, version)


def parse_txn_index(data: Buffer) -> list[AbortedTxn]:
    """Every whole entry of a ``.txnindex``'s content (a partial last entry is ignored, as Kafka does)."""
    return [decode_aborted_txn(data, pos) for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE)]


def check_txn_index(entries: Iterable[AbortedTxn], base_offset: int) -> None:
    """Kafka's sanity check (no marker below the segment's base offset), and strictly increasing marker
    offsets (Kafka refuses to append otherwise); ``CorruptRecordError`` at the bad entry."""
    previous = None
    for i, e in enumerate(entries):
        pos = i * ENTRY_SIZE
        if e.last_offset < base_offset:
            raise CorruptRecordError(
                f"aborted transaction ending at {e.last_offset} is below the segment's base offset {base_offset}", pos
            )
        if e.first_offset > e.last_offset:
            raise CorruptRecordError(f"aborted transaction starts at {e.first_offset}, after its end {e.last_offset}", pos)
        if previous is not None and e.last_offset <= previous:
            raise CorruptRecordError(f"aborted transaction ending at {e.last_offset} does not follow {previous}", pos)
        previous = e.last_offset


def collect_aborted_txns(
    entries: Iterable[AbortedTxn], fetch_offset: int, upper_bound_offset: int
) -> tuple[list[AbortedTxn], bool]:
    """The entries overlapping ``[fetch_offset, upper_bound_offset)``, and whether the search is complete
    (True once an entry's last stable offset reaches the bound, so later segments need not be searched):
    Kafka's ``collectAbortedTxns``."""
    out = []
    for e in entries:
        if e.last_offset >= fetch_offset and e.first_offset < upper_bound_offset:
            out.append(e)
        if e.last_stable_offset >= upper_bound_offset:
            return out, True
    return out, False


def transaction_event(buf: Buffer, header: BatchHeader) -> TxnEvent | None:
    """The :class:`TxnEvent` of the v2 batch ``header`` in ``buf``, or None when it has none: not a
    batch of a producer, not transactional, or a control batch that is empty (cleaned) or not a
    transaction marker. Only control batches are decoded (they hold one tiny record)."""
    if header.magic != 2 or header.producer_id < 0:
        return None
    if header.is_control:
        if header.record_count <= 0:
            return None
        batch = decode_batch(buf, header, validate=False)
        kind = control_type_of(batch.keys[0]) if len(batch) else None
        if kind not in ("ABORT", "COMMIT"):
            return None
        return TxnEvent(kind, header.producer_id, header.base_offset)
    if header.is_transactional:
        return TxnEvent("data", header.producer_id, header.base_offset)
    return None
