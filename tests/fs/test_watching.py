"""Records another process appends are found by inotify events (kafkafs/fs/watching.py), not by polling:
a watched partition is refreshed soon after an append, once per burst of appends, and never while
nothing changes. Through a mount: ``records.jsonl`` shows another process's record within a second."""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kafkafs.format.jsonview import ProducerRecord
from kafkafs.fs.tree.nodes import VOLATILE_TIMEOUT, WATCHED_TIMEOUT
from kafkafs.fs.watching import ChangeWatcher
from kafkafs.storage.logdir import LogDir

from .conftest import SMALL_SEGMENTS, tree_of


def test_an_append_by_another_process_is_seen_once_per_burst(tmp_path):
    with LogDir(tmp_path, SMALL_SEGMENTS, writable=True) as d:
        d.create_partition("w", 0).append_records([ProducerRecord(None, None, b"first", ())])
    tree = tree_of(tmp_path)
    watcher = ChangeWatcher(burst=0.2)
    told: list[str] = []
    watcher.on_folder_event = told.append  # the folder's changes, for the kernel's cached attributes
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
        with LogDir(tmp_path, SMALL_SEGMENTS, writable=True) as d:  # another process's appends
            log_ = d.log("w-0")
            log_.append_records([ProducerRecord(None, None, b"a%d" % i, ()) for i in range(3)])
            for i in range(20):  # a burst: appends within the burst window ride on one refresh
                log_.append_records([ProducerRecord(None, None, b"b%d" % i, ())], flush=True)
        assert seen.wait(5)
        time.sleep(0.6)
        assert state.log.log_end_offset == 24
        assert changes[-1] == 24
        assert watcher.refreshes - settled < 10  # 21 appends (and the close): a few bursts
        assert 0 < len(told) <= watcher.refreshes and set(told) == {"w-0"}  # once a burst, not an event
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
        assert not watcher.watch(state)  # False: the caller keeps polling it
    finally:
        watcher.stop()
        tree.close()


def test_folders_that_cannot_be_watched_are_said_once(tmp_path, caplog):
    """R24-2: the poll loop asks the watcher again at every turn for every partition it cannot watch
    (past the inotify watch limit: thousands of a broker's folders); that is said once, not once a
    folder a turn."""
    with LogDir(tmp_path, SMALL_SEGMENTS, writable=True) as d:
        for p in range(3):
            d.create_partition("w", p)
    tree = tree_of(tmp_path)
    watcher = ChangeWatcher()
    try:
        states = [tree.partitions.state(f"w-{p}") for p in range(3)]
        for p in range(3):
            (tmp_path / f"w-{p}").rename(tmp_path / f"gone-{p}")
        with caplog.at_level(logging.INFO, logger="kafkafs"):
            for _turn in range(4):
                assert not any(watcher.watch(state) for state in states)
                assert watcher.watch_folder(tmp_path / "w-0") is None
        said = [r.getMessage() for r in caplog.records if "cannot watch" in r.getMessage()]
        assert len(said) == 1, said
        assert said[0].startswith("w-0: cannot watch for new records: No such file or directory; polling it")
    finally:
        watcher.stop()
        tree.close()


def test_a_mount_without_inotify_polls_every_partition(logdir_copy, tmp_path):
    """R24-1: a user with no inotify instance left (``max_user_instances``, shared by every program of
    the user) got a mount that died as it started and left a dead mount point behind; now it mounts,
    says why it polls, and serves. The limit is lowered in a user namespace of the test's own."""
    probe = subprocess.run(["unshare", "-U", "-r", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no user namespaces here: {probe.stderr.decode().strip()}")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    cli = f"{shlex.quote(sys.executable)} -m kafkafs"
    script = (
        "echo 0 > /proc/sys/user/max_inotify_instances || exit 99; "
        f"{cli} mount {shlex.quote(str(logdir_copy))} {shlex.quote(str(mnt))} || exit 98; "
        f"head -c 1 {shlex.quote(str(mnt))}/orders-0/records.jsonl; s=$?; "
        f"{cli} umount {shlex.quote(str(mnt))} || exit 97; exit $s"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(["unshare", "-U", "-r", "-m", "--propagation", "private", "sh", "-c", script],
                          capture_output=True, text=True, timeout=60, env=env)
    if done.returncode == 99:
        pytest.skip("cannot lower the inotify instance limit in a user namespace here")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == "{"
    assert "cannot watch partition folders for new records: Too many open files (the user's inotify " \
        "instances are used up: /proc/sys/fs/inotify/max_user_instances); polling every partition instead" \
        in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_the_first_stat_of_a_topic_sizes_its_other_partitions_ahead(tmp_path):
    """``ls -l MOUNT/*/records.jsonl`` stats one file at a time: the first stat of a topic's
    records.jsonl starts sizing the topic's other partitions in the background (not other topics')."""
    with LogDir(tmp_path, SMALL_SEGMENTS, writable=True) as d:
        for name, p in (("t", 0), ("t", 1), ("t", 2), ("u", 0)):
            d.create_partition(name, p).append_records([ProducerRecord(1, None, b"v%d" % i, ()) for i in range(50)])
    tree = tree_of(tmp_path)
    try:
        size = tree.resolve("t-0/records.jsonl").attr().size
        assert size > 0
        deadline = time.monotonic() + 10
        states = tree.partitions
        while time.monotonic() < deadline:
            sized = [name for name in ("t-1", "t-2") if states.state(name).cached_composition() is not None]
            if len(sized) == 2:
                break
            time.sleep(0.05)
        assert sized == ["t-1", "t-2"]
        assert "u-0" not in [s.name for s in states.open_states()]  # another topic: not sized ahead
        assert tree.resolve("t-2/records.jsonl").attr().size == size  # the same records, the same size
    finally:
        tree.close()


def _sizing_threads(tmp_path, cache_dir) -> tuple[set[str], set[str]]:
    """A first stat of ``t-0/records.jsonl`` (topic ``t``: seven partitions); the threads that opened the
    other partitions, and those that laid them out (composed ``records.jsonl``), once all six are."""
    from kafkafs.fs.tree.partitions import Partitions
    from kafkafs.fs.tree.root import Tree
    from kafkafs.fs.views.layoutcache import LayoutCache
    from kafkafs.fs.views.partition import PartitionState

    opened: set[str] = set()
    composed: set[str] = set()
    state_of, composition_of = Partitions.state, PartitionState.composition

    def state(self, name):
        if name not in self._states and name != "t-0":
            opened.add(threading.current_thread().name)
        return state_of(self, name)

    def composition(self):
        if self.name != "t-0":
            composed.add(threading.current_thread().name)
        return composition_of(self)

    tree = Tree(LogDir(tmp_path / "logs", SMALL_SEGMENTS), cache=LayoutCache(cache_dir))
    Partitions.state, PartitionState.composition = state, composition  # type: ignore[method-assign]
    try:
        assert tree.resolve("t-0/records.jsonl").attr().size > 0
        deadline = time.monotonic() + 10
        names = [f"t-{p}" for p in range(1, 7)]
        while time.monotonic() < deadline:
            states = {s.name: s for s in tree.partitions.open_states()}
            if all(n in states and states[n].cached_composition() is not None for n in names):
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the other partitions were not sized ahead")
    finally:
        Partitions.state, PartitionState.composition = state_of, composition_of  # type: ignore[method-assign]
        tree.close()
    return opened, composed


def _seven_partitions(tmp_path) -> None:
    (tmp_path / "logs").mkdir()
    with LogDir(tmp_path / "logs", SMALL_SEGMENTS, writable=True) as d:
        for p in range(7):
            d.create_partition("t", p).append_records([ProducerRecord(1, None, b"v%d" % i, ()) for i in range(50)])


def test_siblings_the_layout_cache_holds_are_opened_and_laid_out_on_one_thread(tmp_path):
    """Opening a partition is one at a time (under the partitions' guard): sizing a topic's other
    partitions ahead when the layout cache holds every segment (nothing to lay out, a first ``cat
    MOUNT/*/records.jsonl`` after the size summary answered the stats) is one thread's work, not four
    threads waiting for the guard and the GIL beside the FUSE loop (issue 25)."""
    _seven_partitions(tmp_path)
    cache_dir = tmp_path / "cache"
    _sizing_threads(tmp_path, cache_dir)  # lays every segment out into the layout cache
    opened, composed = _sizing_threads(tmp_path, cache_dir)
    assert len(opened) == 1 and opened == composed


def test_siblings_to_lay_out_are_laid_out_on_several_threads(tmp_path):
    """Without the layout cache (a first ``ls -l`` of a new mount) the other partitions are laid out in
    parallel (the kernel's length pass releases the GIL), off the thread that opens them."""
    _seven_partitions(tmp_path)
    opened, composed = _sizing_threads(tmp_path, tmp_path / "cache")
    assert len(opened) == 1
    assert len(composed) >= 2


def _append_elsewhere(logdir, name: str, value: bytes) -> None:
    with LogDir(logdir, SMALL_SEGMENTS, writable=True) as d:  # another process's append
        d.log(name).append_records([ProducerRecord(None, None, value, ())], flush=True)


def test_a_partition_watched_from_before_it_loads_needs_no_first_refresh(tmp_path):
    """A read-only mount watches a partition folder before loading its log: nothing can change unseen in
    between, so no refresh runs until an event comes; records.jsonl's size is then kept by the kernel
    (a long timeout: events invalidate it) and a stat does not look at the folder again."""
    with LogDir(tmp_path, SMALL_SEGMENTS, writable=True) as d:
        d.create_partition("w", 0).append_records([ProducerRecord(None, None, b"first", ())])
    tree = tree_of(tmp_path)
    watcher = ChangeWatcher(burst=0.05)
    watcher.start()
    tree.partitions.watch_folder = watcher.watch_folder
    try:
        state = tree.partitions.state("w-0")
        assert state.watched
        attr = tree.resolve("w-0/records.jsonl").attr()
        assert attr.timeout == WATCHED_TIMEOUT
        time.sleep(0.3)
        assert watcher.refreshes == 0  # nothing changed since the watch began: nothing refreshed
        _append_elsewhere(tmp_path, "w-0", b"second")
        deadline = time.monotonic() + 5
        while state.log.log_end_offset != 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert state.log.log_end_offset == 2  # the event refreshed it
        assert tree.resolve("w-0/records.jsonl").attr().size > attr.size
    finally:
        watcher.stop()
        tree.close()


def test_an_event_between_the_watch_and_the_load_refreshes_the_partition_once_bound(tmp_path):
    with LogDir(tmp_path, SMALL_SEGMENTS, writable=True) as d:
        d.create_partition("x", 0).append_records([ProducerRecord(None, None, b"first", ())])
    tree = tree_of(tmp_path)
    watcher = ChangeWatcher(burst=0.05)
    watcher.start()
    raced = []

    def watch_folder(path):
        bind = watcher.watch_folder(path)
        _append_elsewhere(tmp_path, "x-0", b"raced")  # after the watch began, before the partition is bound
        time.sleep(0.3)  # the watcher reads the events while the folder has no partition yet
        raced.append(watcher.refreshes)
        return bind

    tree.partitions.watch_folder = watch_folder
    try:
        state = tree.partitions.state("x-0")
        assert raced == [0] and state.watched
        deadline = time.monotonic() + 5
        while watcher.refreshes < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)
        assert watcher.refreshes == 1  # the events that came before the bind: one refresh once bound
        assert state.log.log_end_offset == 2
    finally:
        watcher.stop()
        tree.close()


def test_an_unwatched_partition_keeps_the_short_timeout(tmp_path):
    with LogDir(tmp_path, SMALL_SEGMENTS, writable=True) as d:
        d.create_partition("w", 0).append_records([ProducerRecord(None, None, b"first", ())])
    tree = tree_of(tmp_path)  # no watcher: polled, so the kernel keeps the size briefly
    try:
        assert not tree.partitions.state("w-0").watched
        assert tree.resolve("w-0/records.jsonl").attr().timeout == VOLATILE_TIMEOUT
    finally:
        tree.close()


def test_records_jsonl_of_a_sized_watched_partition_is_looked_up_on_the_loop(tmp_path):
    """``ls -l MOUNT/*/records.jsonl``: once a partition is open, watched and sized (a sibling's stat
    sized it ahead), its records.jsonl is looked up without a worker trip (``lookup_now``), the same
    file a worker's lookup gives; otherwise the lookup goes to a worker (None)."""
    with LogDir(tmp_path, SMALL_SEGMENTS, writable=True) as d:
        d.create_partition("w", 0).append_records([ProducerRecord(None, None, b"v%d" % i, ()) for i in range(30)])
    tree = tree_of(tmp_path)
    watcher = ChangeWatcher()
    watcher.start()
    try:
        folder = tree.resolve("w-0")
        assert folder.lookup_now("records.jsonl") is None  # not open yet
        tree.partitions.watch_folder = watcher.watch_folder
        state = tree.partitions.state("w-0")
        assert state.watched
        assert folder.lookup_now("records.jsonl") is None  # open, not sized yet
        assert folder.lookup_now("partition.json") is None  # only records.jsonl
        state.composition()  # sized (as a sibling's stat sizes it ahead)
        now = folder.lookup_now("records.jsonl")
        assert now is not None
        looked = folder.lookup("records.jsonl")
        assert now.stream is looked.stream
        assert now.attr().size == looked.attr().size > 0
        state.watched = False  # polled instead: every stat looks at the folder, in a worker
        assert folder.lookup_now("records.jsonl") is None
    finally:
        watcher.stop()
        tree.close()
