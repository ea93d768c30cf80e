"""Node shapes: attributes (modes, sizes, times), read-only files, directory listings from entries."""

from __future__ import annotations

import stat

import pytest

from kafkafs.errors import NotFound, NotPermitted
from kafkafs.fs.tree.handles import BytesHandle
from kafkafs.fs.tree.nodes import (
    DIR_TIMEOUT,
    STABLE_TIMEOUT,
    Dir,
    File,
    Key,
    Node,
    dir_attr,
    file_attr,
    ms_to_ns,
    mtime_ns,
)


def test_attributes():
    d = dir_attr(5)
    assert stat.S_ISDIR(d.mode) and d.mode & 0o777 == 0o555 and d.nlink == 2 and d.timeout == DIR_TIMEOUT
    assert dir_attr(5, writable=True).mode & 0o777 == 0o755
    f = file_attr(42, 7, STABLE_TIMEOUT)
    assert stat.S_ISREG(f.mode) and f.mode & 0o777 == 0o444 and (f.size, f.mtime_ns, f.nlink) == (42, 7, 1)
    assert file_attr(0, 7, 0, 0o200).mode & 0o777 == 0o200
    assert ms_to_ns(1_700_000_000_123, 9) == 1_700_000_000_123_000_000 and ms_to_ns(-1, 9) == 9


def test_mtime_of_a_missing_path_is_the_default(tmp_path):
    (tmp_path / "f").write_bytes(b"x")
    assert mtime_ns(tmp_path / "f", 0) == (tmp_path / "f").stat().st_mtime_ns
    assert mtime_ns(tmp_path / "missing", 123) == 123


class _Leaf(File):
    def attr(self):
        return file_attr(3, 0, STABLE_TIMEOUT)

    def _open(self):
        return BytesHandle(b"abc")


class _Folder(Dir):
    def entries(self, start_id):
        names = ["a", "b", "c"]
        for i, name in enumerate(names[start_id:], start_id + 1):
            yield i, name, _Leaf(None, Key("leaf", "p-0", name), self)


def test_files_open_read_only_and_folders_list_their_entries():
    leaf = _Leaf(None, Key("leaf", "p-0", "x"), None)
    assert leaf.partition_name == "p-0" and leaf.open(False).read(1, 10) == b"bc"
    with pytest.raises(NotPermitted):
        leaf.open(True)
    assert leaf.open_now() is None and not leaf.volatile() and leaf.quick_attr() == leaf.attr()
    folder = _Folder(None, ("folder",), None)
    listing = list(folder.listing(1))
    assert [(next_id, name) for next_id, name, _node, _attr in listing] == [(2, b"b"), (3, b"c")]
    assert all(attr.size == 3 for *_rest, attr in listing)
    with pytest.raises(NotFound):
        folder.lookup("a")
    assert Node(None, Key("root"), None).partition_name is None
