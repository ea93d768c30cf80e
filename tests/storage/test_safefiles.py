"""Link safety: files inside a partition folder are opened without following links, listings keep
regular files only, writers refuse a folder holding a link, checkpoints are written atomically."""

from __future__ import annotations

import os

import pytest

from kafkafs.errors import UnsafeFileError
from kafkafs.storage.safefiles import (
    check_partition_folder,
    is_regular_file,
    open_file,
    regular_files,
    write_atomically,
)


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "t-0"
    d.mkdir()
    (d / "00000000000000000000.log").write_bytes(b"data")
    (tmp_path / "elsewhere").write_bytes(b"secret")
    return d


def test_open_file_refuses_a_link(folder):
    fd = open_file(folder / "00000000000000000000.log", os.O_RDONLY)
    try:
        assert os.read(fd, 10) == b"data"
    finally:
        os.close(fd)
    os.symlink(folder.parent / "elsewhere", folder / "00000000000000000001.log")
    with pytest.raises(UnsafeFileError):
        open_file(folder / "00000000000000000001.log", os.O_RDONLY)
    assert is_regular_file(folder / "00000000000000000000.log")
    assert not is_regular_file(folder / "00000000000000000001.log") and not is_regular_file(folder / "missing")


@pytest.mark.allow_warnings("a link in a partition folder is skipped with a warning (SPEC §3)")
def test_listings_and_writers(folder):
    check_partition_folder(folder)  # nothing unsafe yet
    os.symlink(folder.parent / "elsewhere", folder / "00000000000000000001.index")
    assert regular_files(folder) == ["00000000000000000000.log"]
    with pytest.raises(UnsafeFileError):
        check_partition_folder(folder)


def test_write_atomically_replaces_whole(tmp_path):
    path = tmp_path / "recovery-point-offset-checkpoint"
    write_atomically(path, b"0\n1\nt 0 5\n")
    write_atomically(path, b"0\n0\n")
    assert path.read_bytes() == b"0\n0\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recovery-point-offset-checkpoint"]  # no temporary left


def test_a_folder_that_keeps_getting_new_files_is_listed_a_bounded_number_of_times(folder, monkeypatch):
    """regular_files_in_order lists again while a listing shows new keys past the listing before; a
    writer that adds a higher file before every listing stops it after LISTINGS listings, and the names
    past what is sure (the newest, which may have a missed one below it) are left for the next look."""
    from kafkafs.storage import safefiles
    from kafkafs.storage.names import log_file_base_offset

    real, calls = safefiles.regular_files, []

    def listing(directory):
        calls.append(1)
        (folder / f"{len(calls):020d}.log").write_bytes(b"")  # the writer rolled again meanwhile
        return real(directory)

    monkeypatch.setattr(safefiles, "regular_files", listing)
    names = safefiles.regular_files_in_order(folder, log_file_base_offset, {0})
    assert len(calls) == safefiles.LISTINGS
    assert sorted(names) == [f"{k:020d}.log" for k in range(safefiles.LISTINGS)]  # not the last one made
    calls.clear()
    monkeypatch.setattr(safefiles, "regular_files", real)
    assert safefiles.regular_files_in_order(folder, log_file_base_offset, set(range(20))) == real(folder)


def test_is_dir_and_is_link_answer_as_pathlib(tmp_path) -> None:
    """safefiles.is_dir / is_link (a partition's open stats a str, not a Path: issue 25) say what Path.is_dir
    and Path.is_symlink say: a folder, a file, links to each, a dangling link, a loop, a name under a file,
    nothing there."""
    from pathlib import Path

    from kafkafs.storage.safefiles import is_dir, is_link

    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_bytes(b"x")
    os.symlink("d", tmp_path / "ld")
    os.symlink("f", tmp_path / "lf")
    os.symlink("gone", tmp_path / "dangling")
    os.symlink("loop", tmp_path / "loop")
    for name in ("d", "f", "ld", "lf", "dangling", "loop", "loop/x", "f/x", "missing", "d/missing/x"):
        path = Path(tmp_path / name)
        assert (is_dir(str(path)), is_link(str(path))) == (path.is_dir(), path.is_symlink()), name
    assert is_dir(str(tmp_path / "d")) and is_link(str(tmp_path / "ld")) and not is_link(str(tmp_path / "d"))
