"""file_copy: what a file held, put back after a failed rebuild (review23 R23-1)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from kafkafs.errors import UnsafeFileError
from kafkafs.storage.file_copy import copy_file, put_back


def test_a_file_that_was_not_there_is_removed(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    copy = copy_file(path)
    assert copy.length is None
    path.write_bytes(bytes(4096))
    put_back(copy)
    assert not path.exists()
    put_back(copy)  # still none: nothing to do


def test_a_trimmed_file_grown_and_rewritten_holds_its_bytes_again(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.timeindex"
    data = os.urandom(150_000)  # past two chunks
    path.write_bytes(data)
    copy = copy_file(path)
    with open(path, "r+b") as f:
        f.truncate(10 * 1024 * 1024)  # preallocated, as a rebuild grows it
        f.write(bytes(70_000))  # emptied, then entries written again
        f.write(b"\x01" * 100)
    put_back(copy)
    assert path.read_bytes() == data


def test_a_preallocated_file_keeps_its_length_and_zeros(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    with open(path, "wb") as f:
        f.write(b"\x00\x00\x00\x05\x00\x00\x10\x00")
        f.truncate(1 << 20)  # a hole past the entry
    copy = copy_file(path)
    assert list(copy.chunks) == [0]  # only the stretch that is not zeros is kept
    with open(path, "r+b") as f:
        f.seek(300_000)
        f.write(b"\x07" * 8)
        f.truncate(2 << 20)
    put_back(copy)
    data = path.read_bytes()
    assert len(data) == 1 << 20 and data[:8] == b"\x00\x00\x00\x05\x00\x00\x10\x00" and not any(data[8:])


def test_an_empty_file_stays_empty(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    path.touch()
    copy = copy_file(path)
    path.write_bytes(b"x" * 24)
    put_back(copy)
    assert path.exists() and path.stat().st_size == 0


def test_a_link_is_never_followed(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"secret")
    (tmp_path / "00000000000000000000.index").symlink_to(target)
    with pytest.raises(UnsafeFileError):
        copy_file(tmp_path / "00000000000000000000.index")


def test_without_seek_data_every_chunk_is_compared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "00000000000000000000.timeindex"
    with open(path, "wb") as f:
        f.truncate(300_000)
        f.seek(200_000)
        f.write(b"\x09" * 12)
    data = path.read_bytes()

    def lseek(fd: int, pos: int, how: int) -> int:
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr("kafkafs.storage.file_copy.os.lseek", lseek)
    copy = copy_file(path)
    assert list(copy.chunks) == [196_608]
    path.write_bytes(b"\x01" * 500_000)
    put_back(copy)
    assert path.read_bytes() == data
