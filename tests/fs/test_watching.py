"""Records another process appends are found by inotify events (kafkafs/fs/watching.py), not by polling:
a watched partition is refreshed soon after an append, once per burst of appends, and never while
nothing changes. Through a mount: ``records.jsonl`` shows another process's record within a second."""

from __future__ import annotations

import threading
import time

from kafkafs.format.jsonview import ProducerRecord
from kafkafs.fs.watching import ChangeWatcher
from kafkafs.storage.logdir import LogDir

from .conftest import SMALL_SEGMENTS, tree_of


def _append(path, values) -> None:
    with LogDir(path, SMALL_SEGMENTS, writable=True) as d:
        d.log("w-0").append_records([ProducerRecord(None, None, v, ()) for v in values])


def test_an_append_by_another_process_is_seen_once_per_burst(tmp_path):
    with LogDir(tmp_path, SMALL_SEGMENTS, writable=True) as d:
        d.create_partition("w", 0).append_records([ProducerRecord(None, None, b"first", ())])
    tree = tree_of(tmp_path)
    watcher = ChangeWatcher(burst=0.2)
    changes = []
    seen = threading.Event()
    tree.partitions.add_listener(lambda state: (changes.append(state.log.log_end_offset), seen.set()))
    try:
        state = tree.partitions.state("w-0")
        watcher.start()
        assert watcher.watch(state) and watcher.watch(state)  # once
        time.sleep(0.5)
        settled = watcher.refreshes
        assert settled == 1 and changes == []  # the refresh on watching; nothing had changed
        _append(tmp_path, [b"a%d" % i for i in range(3)])
        for i in range(20):  # a burst: appends within the burst window ride on one refresh
            _append(tmp_path, [b"b%d" % i])
        assert seen.wait(5)
        time.sleep(0.6)
        assert state.log.log_end_offset == 24
        assert changes[-1] == 24
        assert watcher.refreshes - settled <= 4  # 21 appends, a few bursts at most
        quiet = watcher.refreshes
        time.sleep(1.0)
        assert watcher.refreshes == quiet  # nothing changes: nothing is refreshed
    finally:
        watcher.stop()
        tree.close()


def test_a_folder_that_cannot_be_watched_is_left_to_polling(tmp_path):
    with LogDir(tmp_path, SMALL_SEGMENTS, writable=True) as d:
        d.create_partition("w", 0)
    tree = tree_of(tmp_path)
    watcher = ChangeWatcher()
    try:
        state = tree.partitions.state("w-0")
        (tmp_path / "w-0").rename(tmp_path / "gone")
        assert not watcher.watch(state)
        assert not watcher.watching("w-0")
    finally:
        watcher.stop()
        tree.close()
