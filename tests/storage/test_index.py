"""What the indexes share (AbstractIndex): creation, preallocation, trimming, renames, read-only files a
live broker writes, real files, threads. Entry semantics: test_offset_index.py, test_time_index.py."""

from __future__ import annotations

import os
import random
import shutil
import struct
import threading
from pathlib import Path

import pytest

from kafkafs.errors import InvalidInput, KafkafsError, ReadOnlyError
from kafkafs.storage.index import DEFAULT_MAX_INDEX_SIZE
from kafkafs.storage.offset_index import OffsetIndex, OffsetPosition
from kafkafs.storage.time_index import TimeIndex, TimestampOffset

from .conftest import BASE, PARTITION, _monotonic  # noqa: F401 (index and tindex are conftest fixtures)

# -- files: creation, preallocation, trimming, renames --------------------------------------------------


def test_lazy_creation_and_preallocation(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.index"
    idx = OffsetIndex(path, 100, max_index_size=1000 * 8 + 5)
    assert not path.exists() and idx._state is None
    assert idx.entries == 0
    assert path.stat().st_size == 8000  # rounded down to whole entries
    assert idx.max_entries == 1000
    idx.append(110, 4200)
    idx.flush()
    data = path.read_bytes()
    assert data[:8] == struct.pack(">II", 10, 4200) and data[8:] == bytes(7992)
    idx.trim_to_valid_size()
    assert path.stat().st_size == 8
    assert idx.is_full()
    idx.reset()
    assert path.stat().st_size == 8000 and idx.entries == 0
    idx.close()
    assert path.stat().st_size == 0


def test_default_size_is_segment_index_bytes(tmp_path: Path) -> None:
    with TimeIndex(tmp_path / "0.timeindex", 0) as idx:
        assert idx.length == DEFAULT_MAX_INDEX_SIZE - DEFAULT_MAX_INDEX_SIZE % 12
        assert idx.max_entries == 873813


def test_bad_max_index_size(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput):
        _ = OffsetIndex(tmp_path / "0.index", 0, max_index_size=7).entries
    assert not (tmp_path / "0.index").exists()


def test_reopen_after_a_crash_finds_the_entries(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    idx = OffsetIndex(path, 0, max_index_size=4096)
    for i in range(1, 20):
        idx.append(i * 3, i * 4096)
    idx.flush()
    # no close: the file stays preallocated, as after a crash
    again = OffsetIndex(path, 0, max_index_size=4096)
    assert again.entries == 19
    assert again.lookup(31) == OffsetPosition(30, 10 * 4096)
    again.append(60, 20 * 4096)
    again.close()
    assert path.stat().st_size == 20 * 8
    idx.close_handler()


def test_never_opened_close_creates_nothing(tmp_path: Path) -> None:
    idx = TimeIndex(tmp_path / "0.timeindex", 0)
    idx.close()
    assert not (tmp_path / "0.timeindex").exists()


def test_rename_and_delete(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    idx = OffsetIndex(path, 0, max_index_size=80)
    idx.append(5, 50)
    deleted = tmp_path / "00000000000000000000.index.deleted"
    idx.rename(deleted)
    assert idx.path == deleted and deleted.exists() and not path.exists()
    idx.append(9, 90)  # the map survives the rename
    assert idx.lookup(9) == OffsetPosition(9, 90)
    assert idx.delete()
    assert not deleted.exists()
    with pytest.raises(KafkafsError):
        _ = idx.entries
    lazy = OffsetIndex(tmp_path / "1.index", 1)
    lazy.rename(tmp_path / "1.index.swap")  # nothing on disk yet: not an error
    assert lazy.path.name == "1.index.swap"
    assert not lazy.delete()


# -- read-only, and a file a live broker is writing -----------------------------------------------------


def test_read_only_missing_file_is_empty_until_it_appears(tmp_path: Path) -> None:
    path = tmp_path / "7.index"
    ro = OffsetIndex(path, 7, writable=False)
    assert ro.entries == 0
    assert ro.lookup(100) == OffsetPosition(7, 0)
    assert not path.exists()
    with OffsetIndex(path, 7, max_index_size=80) as w:
        w.append(9, 100)
        assert ro.refresh() == 1
        assert ro.lookup(100) == OffsetPosition(9, 100)
    ro.close()


def test_read_only_follows_a_live_writer(tmp_path: Path) -> None:
    path = tmp_path / "0.timeindex"
    writer = TimeIndex(path, 1000, max_index_size=12 * 100)
    writer.maybe_append(10, 1005)
    reader = TimeIndex(path, 1000, writable=False)
    assert reader.entries == 1
    assert reader.length == 1200
    for i in range(2, 40):
        writer.maybe_append(i * 10, 1000 + i * 5)
    assert reader.entries == 1  # until asked to look again
    assert reader.refresh() == 39
    assert reader.lookup(255) == TimestampOffset(250, 1125)
    assert reader.last_entry == TimestampOffset(390, 1195)
    assert reader.refresh() == 39
    writer.maybe_append(400, 1200, skip_full_check=True)
    writer.close()  # roll: the broker trims the file under the reader
    assert path.stat().st_size == 40 * 12
    assert reader.lookup(395) == TimestampOffset(390, 1195)  # the old snapshot stays readable
    assert reader.refresh() == 40
    assert reader.length == 480
    reader.sanity_check()
    with pytest.raises(ReadOnlyError):
        reader.maybe_append(500, 1300)
    with pytest.raises(ReadOnlyError):
        reader.truncate_to(1100)
    with pytest.raises(ReadOnlyError):
        reader.resize(12)
    reader.flush()  # nothing to do
    reader.close()
    assert path.stat().st_size == 480  # a reader never resizes


def test_read_only_broker_file_with_half_written_entry(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    data = bytearray(8 * 1000)
    struct.pack_into(">II", data, 0, 5, 4100)
    struct.pack_into(">II", data, 8, 11, 8300)
    struct.pack_into(">I", data, 16, 17)  # relative offset written, position not yet
    path.write_bytes(bytes(data))
    with OffsetIndex(path, 0, writable=False) as ro:
        assert ro.entries == 2
        with path.open("r+b") as f:
            f.seek(20)
            f.write(struct.pack(">I", 12500))
        assert ro.refresh() == 3
        assert ro.lookup(20) == OffsetPosition(17, 12500)


def test_read_only_real_files() -> None:
    log_size = (PARTITION / "00000000000000000000.log").stat().st_size
    with OffsetIndex(PARTITION / "00000000000000000000.index", 0, writable=False) as idx:
        assert idx.entries == 14 and idx.length == 112
        idx.sanity_check(log_size=log_size)
        entries = list(idx)
        assert entries[0] == OffsetPosition(60, 4388)
        assert entries[-1] == OffsetPosition(830, 61784)
        assert idx.lookup(59) == OffsetPosition(0, 0)
        assert idx.lookup(60) == OffsetPosition(60, 4388)
        assert idx.lookup(500) == OffsetPosition(475, 35296)
        assert idx.lookup(10_000) == OffsetPosition(830, 61784)
    with TimeIndex(PARTITION / "00000000000000000000.timeindex", 0, writable=False) as tidx:
        assert tidx.entries == 15
        tidx.sanity_check()
        times = list(tidx)
        assert [t.offset for t in times[:14]] == [e.offset for e in entries]
        assert times[-1] == TimestampOffset(1721659255114, 861)
        assert tidx.lookup(times[3].timestamp + 1) == times[3]
    with OffsetIndex(PARTITION / "00000000000000000862.index", 862, writable=False) as empty:
        assert empty.entries == 0 and empty.lookup(900) == OffsetPosition(862, 0)
    with TimeIndex(PARTITION / "00000000000000000862.timeindex", 862, writable=False) as roll:
        assert list(roll) == [TimestampOffset(0x191_2205_A714, 868)]


def test_real_index_entries_point_at_batch_ends() -> None:
    log = (PARTITION / "00000000000000000000.log").read_bytes()
    with OffsetIndex(PARTITION / "00000000000000000000.index", 0, writable=False) as idx:
        for offset, position in idx:
            assert position < len(log)
            base, length = struct.unpack_from(">qi", log, position)
            (last_delta,) = struct.unpack_from(">i", log, position + 23)
            assert base + last_delta == offset
            assert position + 12 + length <= len(log)


def test_real_files_as_a_live_broker_had_them(tmp_path: Path) -> None:
    """The same entries in a preallocated, zero-filled file: read-only and writable opens agree."""
    for name, cls, n in (
        ("00000000000000000000.index", OffsetIndex, 14),
        ("00000000000000000000.timeindex", TimeIndex, 15),
    ):
        copy = tmp_path / name
        data = (PARTITION / name).read_bytes()
        copy.write_bytes(
            data + bytes(10 * 1024 * 1024 - len(data) - (10 * 1024 * 1024) % (8 if n == 14 else 12))
        )
        with cls(copy, 0, writable=False) as ro:
            assert ro.entries == n
            assert ro.length > 10_000_000
        with cls(copy, 0) as rw:
            assert rw.entries == n
        assert copy.read_bytes() == data  # closing a writable index trims it to the broker's sealed file
    assert sorted(os.listdir(PARTITION)) == sorted(os.listdir(PARTITION))  # fixtures untouched


def test_writable_copy_of_real_files(tmp_path: Path) -> None:
    shutil.copy(PARTITION / "00000000000000000000.index", tmp_path)
    with OffsetIndex(tmp_path / "00000000000000000000.index", 0, max_index_size=4096) as idx:
        assert idx.entries == 14 and idx.is_full()
        assert idx.resize(4096)  # becoming active again
        idx.append(900, 65000)
        idx.truncate_to(830)
        assert idx.entries == 13 and idx.last_offset == 770
    assert (tmp_path / "00000000000000000000.index").stat().st_size == 13 * 8


# -- threads --------------------------------------------------------------------------------------------


def test_lookups_race_appends_and_resizes(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "0.index", 0, max_index_size=64)
    stop = threading.Event()
    errors: list[str] = []

    def writer() -> None:
        for i in range(1, 3000):
            if idx.is_full():
                idx.resize(idx.length * 2)
            idx.append(i * 2, i * 10)
        stop.set()

    def reader() -> None:
        rng = random.Random(3)
        while not stop.is_set() and not errors:
            target = rng.randrange(0, 6000)
            found = idx.lookup(target)
            if found.offset > target and found != OffsetPosition(0, 0):
                errors.append(f"lookup({target}) = {found}")
            if found.offset and found.position != found.offset * 5:
                errors.append(f"lookup({target}) = {found}: torn entry")

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not errors, errors[:5]
    assert idx.entries == 2999
    assert idx.lookup(5999) == OffsetPosition(5998, 29990)
    idx.close()


def test_read_only_maps_only_the_entries_and_follows_a_shrink(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    writer = OffsetIndex(path, 0, max_index_size=8 * 500)
    for i in range(1, 101):
        writer.append(i, i * 10)
    reader = OffsetIndex(path, 0, writable=False)
    assert reader.entries == 100
    mm = reader._state.mm  # white box: the map must not reach past what a trim keeps
    assert mm is not None and len(mm) == 800
    writer.truncate_to(41)  # follower truncation, then a roll
    writer.close()
    assert path.stat().st_size == 320
    assert reader.refresh() == 40
    assert len(reader._state.mm) == 320
    assert reader.lookup(1000) == OffsetPosition(40, 400)
    reader.close()
