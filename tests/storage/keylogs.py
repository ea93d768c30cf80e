"""Partitions for the key tests, and what a brute-force reading of them says.

:func:`fill` appends random records (keyed, keyless, tombstones; committed, aborted and open
transactions; markers) and returns the model of every record appended; :func:`brute` reads a model
the obvious way: which records count for ``by-key/`` and ``table.jsonl`` (data records with a key, not
in an aborted transaction), each key's latest, each key's history, the table.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from kafkafs.format.batch import encode_batch, encode_control_batch

from .helpers import as_history


@dataclass
class Rec:
    offset: int
    key: bytes | None
    value: bytes | None
    pid: int = -1  # transactional: the producer
    control: bool = False


@dataclass
class Model:
    records: list[Rec] = field(default_factory=list)
    aborted_pids: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # pid -> [(first, marker)]
    open: dict[int, int] = field(default_factory=dict)  # pid -> first offset of its open transaction


def random_key(rnd: random.Random, keys: int) -> bytes:
    k = rnd.randrange(keys)
    kind = k % 10
    if kind == 0:
        return bytes([0xFF, k & 0xFF, k >> 8])  # not UTF-8
    if kind == 1 and k < 40:
        return b"huge-%d-" % k + b"x" * 300  # named by its digest
    if k == 2:
        return b""
    if kind == 3:
        return b"/a%d/.%%" % k
    return b"key-%d" % k


def fill(log, rnd: random.Random, batches: int, *, keys: int = 300, per_batch: int = 10, txn: bool = True,
         decide_all: bool = False) -> Model:
    """Append ``batches`` random batches to a writable ``log``; with ``decide_all`` every transaction is
    committed or aborted at the end. Some records have no key, also on a compacted topic (as written
    before the topic was compacted: :func:`~tests.storage.helpers.as_history`)."""
    with as_history(log):
        return _fill(log, rnd, batches, keys=keys, per_batch=per_batch, txn=txn, decide_all=decide_all)


def _fill(log, rnd: random.Random, batches: int, *, keys: int, per_batch: int, txn: bool, decide_all: bool) -> Model:
    model = Model()
    pids = [101, 102, 103]

    def data_rows(n):
        rows = []
        for _ in range(n):
            key = None if rnd.random() < 0.05 else random_key(rnd, keys)
            value = None if rnd.random() < 0.1 else b"v%d" % rnd.randrange(10**6)
            rows.append((1000 + len(model.records), key, value, ()))
        return rows

    for _ in range(batches):
        r = rnd.random()
        if txn and r < 0.15:
            pid = rnd.choice(pids)
            rows = data_rows(rnd.randrange(1, per_batch + 1))
            res = log.append_batches(encode_batch(rows, transactional=True, producer_id=pid, producer_epoch=0,
                                                  base_sequence=0))
            model.open.setdefault(pid, res.first_offset)
            for i, row in enumerate(rows):
                model.records.append(Rec(res.first_offset + i, row[1], row[2], pid))
        elif txn and r < 0.22 and model.open:
            pid = rnd.choice(sorted(model.open))
            _marker(log, model, pid, "ABORT" if rnd.random() < 0.5 else "COMMIT")
        else:
            rows = data_rows(rnd.randrange(1, per_batch + 1))
            res = log.append_records(rows)
            for i, row in enumerate(rows):
                model.records.append(Rec(res.first_offset + i, row[1], row[2]))
    if decide_all:
        for pid in sorted(model.open):
            _marker(log, model, pid, "ABORT" if rnd.random() < 0.5 else "COMMIT")
    return model


def _marker(log, model: Model, pid: int, kind: str) -> None:
    res = log.append_batches(encode_control_batch(kind, producer_id=pid, producer_epoch=0, timestamp=1000))
    first = model.open.pop(pid)
    if kind == "ABORT":
        model.aborted_pids.setdefault(pid, []).append((first, res.first_offset))
    model.records.append(Rec(res.first_offset, None, None, pid, control=True))


def counted(model: Model) -> list[Rec]:
    """The records by-key/ and table.jsonl count."""
    out = []
    for r in model.records:
        if r.control or r.key is None:
            continue
        if r.pid >= 0 and any(first <= r.offset < marker for first, marker in model.aborted_pids.get(r.pid, ())):
            continue
        out.append(r)
    return out


def brute(model: Model) -> tuple[dict[bytes, Rec], dict[bytes, list[int]], list[int]]:
    """(latest record per key, offsets per key, the table's offsets)."""
    latest: dict[bytes, Rec] = {}
    history: dict[bytes, list[int]] = {}
    for r in counted(model):
        latest[r.key] = r
        history.setdefault(r.key, []).append(r.offset)
    table = sorted(r.offset for r in latest.values() if r.value is not None)
    return latest, history, table


def table_offsets(table) -> list[int]:
    """The offsets a :class:`~kafkafs.storage.keytable.Table` keeps, read from its bitmaps."""
    out = []
    for part in table.parts():
        bits, base = part.filter.bits, part.filter.bits_base
        for i, byte in enumerate(bits):
            while byte:
                low = byte & -byte
                out.append(base + 8 * i + low.bit_length() - 1)
                byte ^= low
    return out
