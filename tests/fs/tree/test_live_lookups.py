"""Lookups past a read-only partition's known end read the log again once before they answer (SPEC §3
"Live": what another process appended shows up within a second).

Beside a live broker, a read-only mount answered ENOENT for ``by-offset/N.json`` of an offset the
broker had acknowledged 1.5 s earlier (trust3's soak at load 20): the lookup itself never refreshed the
partition, and the refreshes that did run (the inotify watcher's, a ``stat``'s) were rate-limited or
skipped while another thread held the refresh. Here the writer is a writable :class:`Log` in this
process (the broker) and the rate limit is long, as if a refresh had just run: every lookup below
answered ENOENT, or a range short of its records, before the fix.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from kafkafs.errors import NotFound
from kafkafs.format.jsonview import render_batch_jsonl, render_record_pretty
from kafkafs.fs.tree.root import Tree
from kafkafs.fs.views import partition as partition_view
from kafkafs.storage.log import Log
from kafkafs.storage.logdir import LogDir

from ...storage.helpers import Clock, config, open_log, read_offset, record

TS = 1_763_700_000_000


@pytest.fixture
def live(tmp_path: Path, monkeypatch):
    """(writer, tree): a writable log of ``t-0`` (the broker) and a read-only tree over its folder that
    has looked at the partition once; no rate-limited refresh runs during the test."""
    monkeypatch.setattr(partition_view, "REFRESH_INTERVAL", 3600.0)
    writer = open_log(tmp_path / "logs" / "t-0", config(segment_bytes=1 << 20), clock=Clock(TS))  # the records' time
    writer.append_records([record(b"old-%d" % k, ts=TS + k) for k in range(10)])
    tree = Tree(LogDir(tmp_path / "logs"))
    assert tree.read_file("t-0/by-offset/9.json")  # the partition is loaded and looked at
    yield writer, tree
    tree.close()
    writer.close()


def _append(writer: Log, n: int, ts: int) -> None:
    writer.append_records([record(b"new-%d" % k, ts=ts + k) for k in range(n)])


def test_a_record_appended_after_the_last_look_resolves(live):
    writer, tree = live
    _append(writer, 5, TS + 100)
    node = tree.resolve("t-0/by-offset")
    assert node.lookup_now("12.json") is None  # past the known end: a worker looks (it reads the folder)
    batch, i = read_offset(writer, 12)
    assert tree.read_file("t-0/by-offset/12.json") == render_record_pretty("t", 0, batch, i)
    with pytest.raises(NotFound):  # past the real end it is still ENOENT
        tree.resolve("t-0/by-offset/15.json")


def test_a_time_past_every_known_record_resolves(live):
    writer, tree = live
    _append(writer, 5, TS + 1000)
    batch, i = read_offset(writer, 10)
    assert tree.read_file(f"t-0/by-time/{TS + 1000}.json") == render_record_pretty("t", 0, batch, i)
    with pytest.raises(NotFound):
        tree.resolve(f"t-0/by-time/{TS + 5000}.json")


def test_an_offset_range_past_the_known_end_holds_the_new_records(live):
    writer, tree = live
    _append(writer, 5, TS + 100)
    expected = b"".join(render_batch_jsonl("t", 0, b) for b in writer.read(8, 12))
    assert tree.read_file("t-0/by-offset/8-12.jsonl") == expected


def test_a_time_range_holds_the_new_records(live):
    writer, tree = live
    _append(writer, 5, TS + 100)
    expected = b"".join(render_batch_jsonl("t", 0, b) for b in writer.read(10, 14))
    assert tree.read_file(f"t-0/by-time/{TS + 100}..{TS + 200}.jsonl") == expected


def test_lookups_at_once_share_one_refresh(live, monkeypatch):
    """Eight lookups past the end at the same moment read the folder once or twice, not eight times."""
    writer, tree = live
    _append(writer, 5, TS + 100)
    state = tree.partitions.state("t-0")
    calls = []
    gate = threading.Event()
    real = type(state.log).refresh

    def slow_refresh(log):
        calls.append(1)
        gate.wait(5)
        return real(log)

    monkeypatch.setattr(type(state.log), "refresh", slow_refresh)
    found = []
    threads = [threading.Thread(target=lambda: found.append(state.record_finder.find(12))) for _ in range(8)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while not calls and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # the others are waiting for the refresh that runs
    gate.set()
    for t in threads:
        t.join(10)
    assert len(found) == 8 and all(f is not None for f in found)
    assert 1 <= len(calls) <= 2


def test_a_read_write_mount_answers_past_its_end_on_the_loop(tmp_path: Path):
    """A writable log knows its own appends: a lookup past its end is ENOENT at once, no worker trip."""
    writer = open_log(tmp_path / "logs" / "t-0", config())
    writer.append_records([record(b"v")])
    writer.close()
    tree = Tree(LogDir(tmp_path / "logs", writable=True), rw=True)
    try:
        with pytest.raises(NotFound):
            tree.resolve("t-0/by-offset").lookup_now("5.json")
    finally:
        tree.close()
