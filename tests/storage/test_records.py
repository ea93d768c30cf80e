"""FileRecords: a ``.log`` as a sequence of batches (positional reads and writes, chunked scans that
stop at a partial batch or zero fill, damage placed in the file, the descriptor's life)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kafkafs.errors import CorruptRecordError, KafkafsError, UnsafeFileError
from kafkafs.format.batch import encode_batch, read_batch_header
from kafkafs.storage.records import CHUNK_BYTES, FileRecords

LIMIT = 64 * 1024 * 1024


def _batches(n: int, size: int = 50, base: int = 0) -> list[bytes]:
    return [encode_batch([(1000 + i, None, b"v" * size, ())], base_offset=base + i) for i in range(n)]


def _records(tmp_path: Path, data: bytes = b"", *, writable: bool = False) -> FileRecords:
    path = tmp_path / "00000000000000000000.log"
    if data or not path.exists():
        path.write_bytes(data)
    return FileRecords(path, writable=writable, max_batch_size=LIMIT)


def test_batches_in_file_order_with_positions(tmp_path: Path) -> None:
    parts = _batches(5)
    data = b"".join(parts)
    records = _records(tmp_path, data)
    assert records.open(create=False) == len(data)
    views = list(records.batches(0, len(data)))
    positions = [sum(len(p) for p in parts[:i]) for i in range(5)]
    assert [v.position for v in views] == positions
    assert [v.header.base_offset for v in views] == [0, 1, 2, 3, 4]
    assert [v.raw() for v in views] == parts
    assert [v.header.base_offset for v in records.batches(positions[3], len(data))] == [3, 4]
    assert [v.header.base_offset for v in records.batches(0, positions[2])] == [0, 1]  # the end bounds it


def test_a_partial_batch_or_zero_fill_at_the_end_stops_quietly(tmp_path: Path) -> None:
    parts = _batches(3)
    whole = b"".join(parts)
    cut = whole + parts[0][:30]
    records = _records(tmp_path, cut)
    assert len(list(records.batches(0, len(cut)))) == 3
    zeroed = whole + bytes(4096)
    (tmp_path / "00000000000000000000.log").write_bytes(zeroed)
    assert len(list(records.batches(0, len(zeroed)))) == 3


def test_damage_is_raised_with_its_file_and_position_after_the_good_batches(tmp_path: Path) -> None:
    parts = _batches(3)
    data = b"".join(parts) + b"\x00" * 8 + b"\x7f\xff\xff\xff" + b"garbage!" * 4
    records = _records(tmp_path, data)
    seen = []
    with pytest.raises(CorruptRecordError) as info:
        for view in records.batches(0, len(data)):
            seen.append(view.header.base_offset)
    assert seen == [0, 1, 2]
    assert info.value.position == sum(len(p) for p in parts)
    assert info.value.file == str(records.path)


def test_a_batch_larger_than_a_chunk_gets_a_read_of_its_own(tmp_path: Path) -> None:
    parts = [*_batches(2), encode_batch([(1, None, b"x" * (CHUNK_BYTES + 999), ())], base_offset=2), *_batches(2, base=3)]
    data = b"".join(parts)
    records = _records(tmp_path, data)
    views = list(records.batches(0, len(data)))
    assert [v.header.base_offset for v in views] == [0, 1, 2, 3, 4]
    assert views[2].decode().values[0] == b"x" * (CHUNK_BYTES + 999)


def test_writes_truncation_and_renames(tmp_path: Path) -> None:
    records = FileRecords(tmp_path / "00000000000000000000.log", writable=True, max_batch_size=LIMIT)
    assert records.open(create=True) == 0
    parts = _batches(3)
    records.write_at(parts[0], 0)
    records.write_at(parts[1] + parts[2], len(parts[0]))
    records.fsync()
    assert records.stat_size() == sum(map(len, parts))
    assert records.read_at(len(parts[0]), len(parts[1])) == parts[1]
    records.truncate(len(parts[0]))
    assert records.stat_size() == len(parts[0])
    moved = tmp_path / "00000000000000000000.log.swap"
    records.rename(moved)
    assert records.path == moved and moved.exists()
    assert read_batch_header(records.read_at(0, len(parts[0])), 0).base_offset == 0  # the descriptor followed
    records.close()
    with pytest.raises(KafkafsError, match="closed"):
        records.read_at(0, 1)


def test_release_reopens_on_next_use_and_tells_the_owner(tmp_path: Path) -> None:
    opened = []
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"".join(_batches(2)))
    records = FileRecords(path, writable=False, max_batch_size=LIMIT, on_open=lambda: opened.append(1))
    handle = records.handle()
    records.release()
    assert os.fstat(handle.fd)  # a reader holding the old handle still reads
    assert records.handle() is not handle and len(opened) == 2


def test_a_missing_file_is_damage_and_a_link_is_never_followed(tmp_path: Path) -> None:
    missing = FileRecords(tmp_path / "00000000000000000007.log", writable=False, max_batch_size=LIMIT)
    with pytest.raises(CorruptRecordError, match="missing"):
        missing.open(create=False)
    target = tmp_path / "elsewhere.log"
    target.write_bytes(b"".join(_batches(1)))
    link = tmp_path / "00000000000000000000.log"
    os.symlink(target, link)
    with pytest.raises(UnsafeFileError):
        FileRecords(link, writable=True, max_batch_size=LIMIT).open(create=False)


def test_a_reopen_that_finds_another_file_is_refused(tmp_path):
    """Another process's compaction swapped a new file in under the name: a released descriptor is not
    silently reopened on it (the positions laid out belong to the old file)."""
    from kafkafs.errors import SegmentClosedError

    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(encode_batch([(1, None, b"old", ())]))
    records = FileRecords(path, writable=False, max_batch_size=LIMIT)
    old = records.read_at(0, 100)
    records.release()
    assert records.read_at(0, 100) == old  # the same file: reopened
    records.release()
    swap = tmp_path / "swap"
    swap.write_bytes(encode_batch([(1, None, b"new", ())]))
    os.replace(swap, path)
    with pytest.raises(SegmentClosedError):
        records.read_at(0, 100)


def test_a_reopen_after_another_processs_retention_reads_the_deleted_file_or_says_it_is_gone(tmp_path):
    """fix62's finding: a read-only reader whose descriptor was released (the handle budget) reopens by name;
    another process's retention had renamed the file ``.deleted`` (Kafka's way), and the reopen said
    "segment file is missing" (damage: EIO on a mount). It reads the same file (inode) there; once that
    is unlinked too, the segment is gone (SegmentClosedError: ESTALE), not damaged. A writer's own file
    that vanished stays damage."""
    from kafkafs.errors import SegmentClosedError

    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(encode_batch([(1, None, b"old", ())]))
    records = FileRecords(path, writable=False, max_batch_size=LIMIT)
    old = records.read_at(0, 100)
    records.release()
    deleted = tmp_path / "00000000000000000000.log.deleted"
    os.rename(path, deleted)
    assert records.read_at(0, 100) == old
    records.release()
    assert records.read_at(0, 100) == old and records.path == path  # (the name stays: the segment's)
    records.release()
    other = tmp_path / "other"
    other.write_bytes(encode_batch([(1, None, b"new", ())]))
    os.replace(other, deleted)  # another file under that name: not this segment's
    with pytest.raises(SegmentClosedError):
        records.read_at(0, 100)
    os.unlink(deleted)
    with pytest.raises(SegmentClosedError, match="no longer on disk"):
        records.read_at(0, 100)
    mine = tmp_path / "00000000000000000009.log"
    mine.write_bytes(encode_batch([(1, None, b"mine", ())]))
    writer = FileRecords(mine, writable=True, max_batch_size=LIMIT)
    writer.read_at(0, 100)
    writer.release()
    os.rename(mine, tmp_path / "00000000000000000009.log.deleted")  # not by the writer: damage
    with pytest.raises(CorruptRecordError, match="missing"):
        writer.read_at(0, 100)


def _evict(path: Path) -> bool:
    """Drop a clean file's pages from the page cache; False where the file system keeps them (tmpfs).
    The check reads the last byte without waiting: a miss starts reading ahead from there, so the
    file's first pages stay out of the cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        probe = bytearray(1)
        try:
            os.preadv(fd, [probe], os.fstat(fd).st_size - 1, os.RWF_NOWAIT)
        except BlockingIOError:
            return True
        return False
    finally:
        os.close(fd)


def test_nowait_reads_only_what_the_page_cache_holds(tmp_path: Path) -> None:
    """``nowait`` (the FUSE loop's lookups) reads the same batches as a plain scan while the file is
    cached, and raises WouldBlock instead of waiting for the disk once its pages are dropped."""
    from kafkafs.errors import WouldBlock

    parts = _batches(64, size=16_000)  # about 1 MiB
    data = b"".join(parts)
    records = _records(tmp_path, data)
    records.open(create=False)
    plain = [v.raw() for v in records.batches(0, len(data))]
    assert [v.raw() for v in records.batches(0, len(data), nowait=True)] == plain == parts
    if not _evict(records.path):
        pytest.skip("this file system keeps the file's pages (tmpfs): nothing to wait for")
    with pytest.raises(WouldBlock):
        list(records.batches(0, len(data), nowait=True))
    assert [v.raw() for v in records.batches(0, len(data))] == parts  # a blocking read brings them back
    assert [v.raw() for v in records.batches(0, len(data), nowait=True)] == parts


def test_an_open_whose_descriptor_is_given_back_at_once_still_says_the_size(tmp_path: Path) -> None:
    """review26 R26-4: ``open`` read the descriptor off a handle it did not hold, so a release at that
    moment (the handle budget, from the owner's ``on_open`` or another thread) closed it before the
    ``fstat``: EBADF (or another file's size, had the number been reused meanwhile)."""
    data = b"".join(_batches(3))
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    records = FileRecords(path, writable=False, max_batch_size=LIMIT, on_open=lambda: records.release())
    assert records.open(create=False) == len(data)
    assert [v.header.base_offset for v in records.batches(0, len(data))] == [0, 1, 2]  # opened again
