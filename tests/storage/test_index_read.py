"""A read-only index's file read with preads (kafkafs/storage/index_read.py): the live entries of a
preallocated file a broker is writing, growth read incrementally (the known bytes reused, the last
entry read again), and a file cut short read as zeros, never past its end."""

from __future__ import annotations

import os
import struct
from pathlib import Path

from kafkafs.format.index import OFFSET_INDEX
from kafkafs.storage.index_read import pread_all, read_entries


def _entries(*pairs: tuple[int, int]) -> bytes:
    return b"".join(struct.pack(">II", rel, pos) for rel, pos in pairs)


def _read(path: Path, old_entries: int = 0, old_data: bytes | None = None):
    fd = os.open(path, os.O_RDONLY)
    try:
        return read_entries(fd, OFFSET_INDEX, old_entries, old_data)
    finally:
        os.close(fd)


def test_the_live_entries_of_a_preallocated_file(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(_entries((10, 4096), (20, 8192)) + bytes(8 * 98))  # 100 slots, 2 written
    got = _read(path)
    assert got.entries == 2 and got.max_entries == 100 and got.length == 800
    assert got.data == _entries((10, 4096), (20, 8192))


def test_an_empty_file_has_no_bytes_to_read(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(bytes(80))
    got = _read(path)
    assert got.entries == 0 and got.data is None and got.max_entries == 10


def test_growth_reuses_what_was_read_and_reads_the_last_entry_again(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(_entries((10, 4096), (20, 8192)) + bytes(8 * 8))
    first = _read(path)
    assert first.entries == 2
    unchanged = _read(path, first.entries, first.data)
    assert unchanged.data is first.data  # nothing changed: no copy
    with open(path, "r+b") as f:  # the broker appends a third entry
        f.seek(16)
        f.write(_entries((30, 12288)))
    grown = _read(path, first.entries, first.data)
    assert grown.entries == 3 and grown.data == _entries((10, 4096), (20, 8192), (30, 12288))


def test_a_known_count_past_the_file_is_not_trusted(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(_entries((10, 4096)))  # the owner truncated it to one entry
    got = _read(path, 5, _entries((10, 4096), (20, 8192), (30, 1), (40, 2), (50, 3)))
    assert got.entries == 1 and got.data == _entries((10, 4096))


def test_pread_all_reads_zeros_past_the_end(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    fd = os.open(path, os.O_RDONLY)
    try:
        assert pread_all(fd, 6, 1) == b"bc\0\0\0\0"
        assert pread_all(fd, 2, 0) == b"ab"
    finally:
        os.close(fd)
