"""Open files of the tree: bytes from memory, files of the partition folder (never through a link),
the append file telling the tree what it appended."""

from __future__ import annotations

import os

import pytest

from kafkafs.errors import NotFound, NotPermitted
from kafkafs.fs.tree.handles import AppendHandle, BytesHandle, Handle, OSFileHandle
from kafkafs.storage.logdir import LogDir

from ..conftest import SMALL_SEGMENTS


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
