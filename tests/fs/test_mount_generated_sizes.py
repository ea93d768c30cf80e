"""The small JSON files the mount generates (``groups/<g>.json``, ``transactions/<id>.json``,
``<p>/transactions.json``, ``<p>/partition.json``) report their exact size in ``stat`` (SPEC §3) also
while what they show changes: an open file's ``fstat`` answers the size of the bytes its reads return,
and a ``stat`` of the name right after a change answers the new size (no attributes kept by the kernel:
review14 R14-9, 538 of 3,040 reads of a live log directory differed)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir

from ..storage.groupslogs import commit_key, commit_value, txn_key, txn_value


def _build(path: Path) -> None:
    with LogDir(path, Settings(), writable=True) as logdir:
        logdir.create_partition("orders", 0).append_records([(1, None, b"x", ())] * 5)
        logdir.create_partition("__consumer_offsets", 0).append_records(
            [(1, commit_key("g", "orders", 0), commit_value(1), ())])
        logdir.create_partition("__transaction_state", 0).append_records(
            [(1, txn_key("tx"), txn_value(7, 0, "Empty", {}), ())])


def _change(logdir: LogDir, step: int) -> None:
    """A change that makes every generated file of the test longer or shorter than before."""
    logdir.log("__consumer_offsets-0").append_records(
        [(1, commit_key("g", "orders", 0), commit_value(10 ** (step % 6), metadata="m" * (step * 7 % 40)), ())])
    logdir.log("__transaction_state-0").append_records(
        [(1, txn_key("tx"), txn_value(7, step, "Ongoing" if step % 2 else "CompleteCommit",
                                      {"orders": [0]} if step % 2 else {}), ())])
    logdir.log("orders-0").append_records([(1, None, b"y", ())] * (1 + step % 3))
    logdir.flush()


FILES = ["groups/g.json", "transactions/tx.json", "orders-0/transactions.json", "orders-0/partition.json"]


def test_generated_json_sizes_stay_exact_while_the_content_changes(tmp_path, mounted):
    logs = tmp_path / "logs"
    logs.mkdir()
    _build(logs)
    m = mounted(logs)
    before = {name: (m / name).read_bytes() for name in FILES}
    mismatches = []
    with LogDir(logs, Settings(), writable=True) as writer:
        for step in range(1, 4):
            handles = {name: open(m / name, "rb", buffering=0) for name in FILES}
            try:
                _change(writer, step)
                time.sleep(0.2)  # the mount has seen the change (inotify or its own refresh)
                sizes = {name: os.fstat(f.fileno()).st_size for name, f in handles.items()}
                _change(writer, step + 3)  # and again before the reads (Python's read() does an fstat of its own)
                time.sleep(0.2)
                for name, f in handles.items():
                    data = f.read()
                    json.loads(data)
                    if sizes[name] != len(data):
                        mismatches.append((step, name, "fstat", sizes[name], len(data)))
                    stat = os.stat(m / name).st_size  # the name: what an open of it reads now
                    now = (m / name).read_bytes()
                    if stat != len(now):
                        mismatches.append((step, name, "stat", stat, len(now)))
            finally:
                for f in handles.values():
                    f.close()
    after = {name: (m / name).read_bytes() for name in FILES}
    assert all(before[name] != after[name] for name in FILES)  # every file did change
    assert mismatches == []
