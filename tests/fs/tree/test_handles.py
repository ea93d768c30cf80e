"""Open files of the tree: bytes from memory, files of the partition folder (never through a link),
the append file telling the tree what it appended."""

from __future__ import annotations

import os
import threading

import pytest

from kafkafs.errors import NotFound, NotPermitted
from kafkafs.fs.tree.handles import AppendHandle, BytesHandle, Handle, OSFileHandle, RecordsHandle
from kafkafs.fs.views import layout, reading
from kafkafs.storage.logdir import LogDir

from ..conftest import SMALL_SEGMENTS, build_logdir, expected_jsonl, tree_of


def test_the_base_handle_is_read_only():
    handle = Handle()
    with pytest.raises(NotPermitted):
        handle.write(0, b"x")
    with pytest.raises(NotPermitted):
        handle.read(0, 1)
    handle.flush()
    handle.fsync()
    handle.release()


def test_bytes_handle_serves_from_memory():
    handle = BytesHandle(b"hello", keep_cache=False, direct_io=True)
    assert not handle.blocking and not handle.keep_cache and handle.direct_io
    assert handle.read(1, 3) == b"ell" and handle.read(10, 3) == b""


def test_os_file_handle_reads_and_never_follows_a_link(tmp_path):
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"0123456789")
    handle = OSFileHandle(path, keep_cache=True)
    assert handle.read(2, 3) == b"234"
    handle.release()
    handle.release()  # twice is harmless
    os.symlink(path, tmp_path / "link.log")
    with pytest.raises(NotFound):
        OSFileHandle(tmp_path / "link.log", keep_cache=False)
    with pytest.raises(NotFound):
        OSFileHandle(tmp_path / "missing.log", keep_cache=False)


def test_append_handle_tells_the_tree_after_records_are_in(logdir_copy):
    from kafkafs.fs.tree.root import Tree

    tree = Tree(LogDir(logdir_copy, SMALL_SEGMENTS, writable=True), rw=True)
    try:
        state = tree.partitions.state("orders-0")
        end = state.log.log_end_offset
        told = []
        handle = AppendHandle(state, lambda s, before: told.append((s.name, before)))
        assert handle.direct_io and handle.read(0, 10) == b""
        assert handle.write(0, b"partial") == 7 and told == []  # no whole line yet
        handle.write(7, b" line\nnext")
        assert len(told) == 1 and told[0][0] == "orders-0" and state.log.log_end_offset == end + 1
        handle.flush()  # close: the partial line too
        assert len(told) == 2 and state.log.log_end_offset == end + 2
        handle.fsync()
    finally:
        tree.close()


def test_records_handle_reads_on_the_loop_wait_for_a_span_being_rendered_never_a_worker(monkeypatch, tmp_path):
    """What the FUSE loop does with a read of records.jsonl (Operations.read): ``read_now`` from memory,
    else ``read_soon``: the span it needs is claimed (from the first read on; nothing at open) and
    rendered on a prefill thread, and ``wake`` is called once it is; then ``read_now`` answers, no
    worker. A read that runs past the end (the kernel reads whole pages) is answered up to the end."""
    held: list = []
    monkeypatch.setattr(reading, "_submit", lambda fn, *args: held.append((fn, args)))  # prefills run when told
    monkeypatch.setattr(layout, "GROUP_BYTES", 1024)  # small pieces and spans, laid out afresh
    monkeypatch.setattr(reading, "READ_AHEAD_BYTES", 4 * 1024)
    logdir = build_logdir(tmp_path / "logs")
    tree = tree_of(logdir)
    try:
        want = expected_jsonl(logdir, "orders-0")
        stream = tree.partitions.records_generations("orders-0").current()
        assert len(stream.view.parts) > 1  # several segments
        stream.told(stream.view.total)  # the lookup gave the kernel the size (a read past it: a worker's)
        handle = RecordsHandle(stream)
        assert not held  # nothing rendered at open: the kernel may hold the file's pages already
        assert handle.read_now(0, 4096) is None
        out, waits = b"", 0
        while len(out) < len(want):  # 4 KiB reads, as the kernel's: the last one past the end
            got = handle.read_now(len(out), 4096)
            if got is None:
                woken = threading.Event()
                assert handle.read_soon(len(out), 4096, woken.set)  # never a worker
                waits += 1
                assert not woken.is_set()
                while held:
                    fn, args = held.pop(0)
                    fn(*args)  # the prefill threads render what was claimed
                assert woken.is_set()
                got = handle.read_now(len(out), 4096)
            assert got is not None
            out += bytes(got)
        assert out == want and 0 < waits < len(want) // 4096
        assert handle.read_now(len(want), 4096) is None and not handle.read_soon(len(want), 4096, print)
        handle.release()
    finally:
        tree.close()


def test_snapshots_one_content_at_a_time_for_size_and_reads():
    """review14 R14-9: a generated file's getattr and its open files share one snapshot: an open serves
    what its lookup just sized, an open file not read yet takes a newer snapshot, and while the file is
    open (SNAPSHOT_PIN) its stat answers the snapshot its reads return."""
    from kafkafs.fs.tree.handles import SNAPSHOT_FRESH, SNAPSHOT_PIN, Snapshots

    now = [0.0]
    content = [b"first"]
    renders = []

    def render() -> bytes:
        renders.append(content[0])
        return content[0]

    snaps = Snapshots(clock=lambda: now[0])
    assert snaps.attr_data(render) == b"first"  # the lookup
    content[0] = b"second, longer"
    a = snaps.open(render)  # right after its lookup: what the lookup sized
    assert a.read_now(0, 100) == b"first" and len(renders) == 1
    now[0] += SNAPSHOT_PIN / 2
    assert snaps.attr_data(render) == b"first"  # open somewhere: kept
    a.release_now()
    assert snaps.attr_data(render) == b"second, longer"  # closed: rendered anew
    b = snaps.open(render)
    content[0] = b"third"
    now[0] += SNAPSHOT_PIN + 1  # held open past the pin: a stat renders anew; b, read already, keeps its bytes
    assert b.read_now(0, 100) == b"second, longer"
    assert snaps.attr_data(render) == b"third"
    assert b.read_now(0, 100) == b"second, longer"
    c = snaps.open(render)  # not read yet: takes the next snapshot its fstat answers
    content[0] = b"4th"
    now[0] += SNAPSHOT_PIN + 1
    assert snaps.attr_data(render) == b"4th" and c.read_now(0, 100) == b"4th"
    b.release_now()
    c.release_now()
    now[0] += SNAPSHOT_FRESH * 2  # not open, and the last lookup is old: an open renders
    content[0] = b"5th"
    assert snaps.open(render).read_now(0, 100) == b"5th"
