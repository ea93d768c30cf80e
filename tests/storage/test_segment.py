"""LogSegment: the scenarios of Kafka's LogSegmentTest, ported (not copied), plus kafkafs's own reads."""

from __future__ import annotations

import errno
import logging
import os
import random
import struct
from pathlib import Path

import pytest

from kafkafs.errors import CorruptRecordError, InvalidInput, ReadOnlyError
from kafkafs.format.batch import encode_batch, scan_batches
from kafkafs.storage.records import CHUNK_BYTES
from kafkafs.storage.segment import LogSegment

from .helpers import Clock, batch, config, headers_of, kafka_indexes, tree_fingerprint

# As Kafka's LogSegmentTest: an index entry every 10 bytes, room for 1000 bytes of entries.
CFG = config(index_interval_bytes=10, segment_index_bytes=1000)


def segment(tmp_path: Path, base: int, cfg=CFG, clock: Clock | None = None) -> LogSegment:
    return LogSegment(tmp_path, base, cfg, writable=True, clock=clock or Clock())


def append(seg: LogSegment, data: bytes) -> None:
    seg.append(data, list(scan_batches(data)))


def offsets_in(seg: LogSegment, start: int = 0) -> list[int]:
    out = []
    for view in seg.read_from(start):
        out.extend(view.decode().offsets)
    return out


def values_of(view) -> list[bytes]:
    return view.decode().values


# -- offsets that do not fit ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "base, batch_base, last_delta",
    [
        (0, 0, 2**31),  # largest offset - base > Integer.MAX_VALUE
        (1, 0, 0),  # below the base offset
        (100, 10, 0),
        (2**31, 0, 0),
        (2**31, 2**32, 0),
    ],
)
def test_append_offset_overflow(tmp_path: Path, base: int, batch_base: int, last_delta: int) -> None:
    seg = segment(tmp_path, base)
    data = batch(1, base_offset=batch_base, last_offset_delta=min(last_delta, 2**31 - 1))
    headers = list(scan_batches(data))
    if last_delta >= 2**31:
        headers = [headers[0]._replace(last_offset_delta=last_delta)]
    with pytest.raises(InvalidInput):
        seg.append(data, headers)
    assert seg.size == 0 and seg.log_path.stat().st_size == 0  # nothing was written
    assert seg.should_roll(messages_size=10, max_timestamp=0, max_offset=base + 2**31, now=0) == "offset overflow"
    seg.close()


# -- reads ----------------------------------------------------------------------------------------------


def test_read_on_empty_segment(tmp_path: Path) -> None:
    seg = segment(tmp_path, 40)
    assert seg.find(40) is None
    assert list(seg.read_from(40)) == []
    assert seg.next_offset == 40 and seg.max_timestamp == -1
    seg.close()


def test_read_before_first_offset(tmp_path: Path) -> None:
    seg = segment(tmp_path, 40)
    append(seg, batch([b"hello", b"there", b"little", b"bee"], base_offset=50))
    view = seg.find(41)
    assert view is not None and values_of(view) == [b"hello", b"there", b"little", b"bee"]
    assert offsets_in(seg, 41) == [50, 51, 52, 53]
    seg.close()


def test_read_after_last(tmp_path: Path) -> None:
    seg = segment(tmp_path, 40)
    append(seg, batch([b"hello", b"there"], base_offset=50))
    assert seg.find(52) is None
    assert seg.find(51) is not None
    seg.close()


def test_read_from_gap(tmp_path: Path) -> None:
    seg = segment(tmp_path, 40)
    append(seg, batch([b"hello", b"there"], base_offset=50))
    append(seg, batch([b"alpha", b"beta"], base_offset=60))
    view = seg.find(55)
    assert view is not None and values_of(view) == [b"alpha", b"beta"]
    seg.close()


def test_lookups_below_between_and_past_index_entries(tmp_path: Path) -> None:
    """The index's floor entry is where a scan starts: below the first entry (position 0), between two
    entries (the lower one), past the last (the last one); every offset is found from there."""
    seg = segment(tmp_path, 0, config(index_interval_bytes=200, segment_index_bytes=4096))
    for i in range(60):
        append(seg, batch(2, base_offset=2 * i, size=40))
    entries = list(seg.offset_index)
    assert len(entries) >= 5
    first, second, last = entries[0], entries[1], entries[-1]
    assert seg.position_of(first.offset - 1) == 0
    assert seg.position_of(first.offset) == first.position
    assert seg.position_of((first.offset + second.offset) // 2) == first.position
    assert seg.position_of(last.offset + 1000) == last.position
    positions = {h[1]: h[0] for h in headers_of(seg.read_at(0, seg.size))}
    for offset in range(120):
        view = seg.find(offset)
        assert view is not None and view.header.base_offset <= offset <= view.header.last_offset
        assert view.position == positions[view.header.base_offset]
    assert seg.find(120) is None
    seg.close()


def test_reads_across_chunks_and_a_batch_larger_than_a_chunk(tmp_path: Path) -> None:
    seg = segment(tmp_path, 0, config(index_interval_bytes=4096))
    offset = 0
    sizes = [1000] * 300 + [CHUNK_BYTES + 12345] + [777] * 400
    for size in sizes:
        append(seg, batch(1, base_offset=offset, size=size))
        offset += 1
    views = list(seg.batches())
    assert [v.header.base_offset for v in views] == list(range(len(sizes)))
    assert all(len(v.decode().values[0]) == s for v, s in zip(views, sizes, strict=True))
    big = seg.find(300)
    assert big is not None and len(big.decode().values[0]) == CHUNK_BYTES + 12345
    seg.close()


# -- truncation -----------------------------------------------------------------------------------------


def test_truncate(tmp_path: Path) -> None:
    seg = segment(tmp_path, 40)
    offset = 40
    for _ in range(30):
        ms1 = batch([b"hello"], base_offset=offset)
        ms2 = batch([b"hello"], base_offset=offset + 1)
        append(seg, ms1)
        append(seg, ms2)
        assert offsets_in(seg, offset) == [offset, offset + 1]
        seg.truncate_to(offset + 1)
        assert offsets_in(seg, offset) == [offset]
        assert seg.next_offset == offset + 1
        offset += 1
    seg.close()


def test_truncate_empty_segment(tmp_path: Path) -> None:
    """A follower truncating to an empty segment must not leave it rolling for a full index."""
    clock = Clock()
    max_segment_ms = 300_000
    cfg = config(index_interval_bytes=10, segment_index_bytes=1000, segment_ms=max_segment_ms)
    seg = segment(tmp_path, 0, cfg, clock)
    _ = seg.offset_index.entries, seg.time_index.entries  # open both, then close: trimmed to 0 bytes
    seg.close()
    reopened = segment(tmp_path, 0, cfg, clock)
    assert reopened.offset_index.length == 0 and reopened.time_index.length == 0
    clock.sleep(500)
    reopened.truncate_to(57)
    assert reopened.time_waited_for_roll(clock(), -1) == 0
    assert not reopened.offset_index.is_full() and not reopened.time_index.is_full()
    assert reopened.should_roll(messages_size=1024, max_timestamp=-1, max_offset=100, now=clock()) is None
    clock.sleep(max_segment_ms + 1)  # past segment.ms, but an empty segment does not roll for time
    assert reopened.time_waited_for_roll(clock(), -1) == max_segment_ms + 1
    assert reopened.should_roll(messages_size=1024, max_timestamp=-1, max_offset=100, now=clock()) is None
    assert (
        reopened.should_roll(messages_size=1024, max_timestamp=-1, max_offset=2**31 - 1 + 200, now=clock())
        == "offset overflow"
    )
    reopened.close()


def test_reload_largest_timestamp_and_next_offset_after_truncation(tmp_path: Path) -> None:
    size = len(batch([b"hello"]))
    seg = segment(tmp_path, 40, config(index_interval_bytes=2 * size - 1, segment_index_bytes=1000))
    for offset in range(40, 70):
        append(seg, batch([b"hello"], base_offset=offset, ts=offset * 10))
    assert seg.next_offset == 70
    assert seg.time_index.entries == 30 // 2 - 1
    seg.truncate_to(41)
    assert seg.time_index.entries == 0
    assert seg.max_timestamp == 400
    assert seg.next_offset == 41
    seg.close()


def test_truncate_full(tmp_path: Path) -> None:
    clock = Clock()
    seg = segment(tmp_path, 40, clock=clock)
    append(seg, batch([b"hello", b"there"], base_offset=40, ts=-1))  # no timestamps: creation time counts
    clock.sleep(500)
    assert seg.time_waited_for_roll(clock(), -1) == 500
    seg.truncate_to(0)
    assert seg.size == 0 and seg.rolling_timestamp() is None
    assert seg.time_waited_for_roll(clock(), -1) == 0  # created again at the truncation
    assert not seg.time_index.is_full() and not seg.offset_index.is_full()
    assert seg.find(0) is None
    append(seg, batch([b"hello", b"there"], base_offset=40))
    assert offsets_in(seg) == [40, 41]
    seg.close()


def test_truncate_to_an_offset_in_a_gap(tmp_path: Path) -> None:
    """The batch after the gap goes, even though the offset truncated to names no record."""
    seg = segment(tmp_path, 40)
    append(seg, batch([b"first message"], base_offset=40))
    append(seg, batch([b"message after gap"], base_offset=43))
    seg.truncate_to(41)
    assert [v.header.base_offset for v in seg.batches()] == [40]
    seg.close()


def test_truncate_grows_the_indexes_back_for_appends(tmp_path: Path) -> None:
    seg = segment(tmp_path, 0)
    for i in range(20):
        append(seg, batch(1, base_offset=i))
    seg.on_become_inactive()
    assert seg.offset_index.is_full()
    seg.truncate_to(10)
    assert seg.offset_index.length == 1000 and not seg.offset_index.is_full()
    assert seg.time_index.length == 996
    append(seg, batch(1, base_offset=10))
    assert seg.next_offset == 11
    seg.close()


# -- time -----------------------------------------------------------------------------------------------


def test_find_offset_by_timestamp(tmp_path: Path) -> None:
    size = len(batch([b"msg00"]))
    seg = segment(tmp_path, 40, config(index_interval_bytes=2 * size - 1, segment_index_bytes=1000))
    for i in range(40, 50):
        append(seg, batch([b"msg%d" % i], base_offset=i, ts=i * 10))
    assert seg.max_timestamp == 490
    assert seg.find_offset_by_timestamp(420) == (42, 420)  # indexed
    assert seg.find_offset_by_timestamp(421) == (43, 430)
    assert seg.find_offset_by_timestamp(430) == (43, 430)  # not indexed
    assert seg.find_offset_by_timestamp(431) == (44, 440)
    assert seg.find_offset_by_timestamp(491) is None  # past the last
    assert seg.find_offset_by_timestamp(401) == (41, 410)  # before the first entry
    assert seg.find_offset_by_timestamp(399) == (40, 400)  # before the first timestamp
    assert seg.find_offset_by_timestamp(420, starting_offset=45) == (45, 450)
    seg.close()


def test_time_index_stays_monotonic_with_out_of_order_timestamps(tmp_path: Path) -> None:
    seg = segment(tmp_path, 0, config(index_interval_bytes=0, segment_index_bytes=12 * 100))
    stamps = [100, 50, 200, 150, 150, 300, 10, 300, 400, 399]
    for i, ts in enumerate(stamps):
        append(seg, batch(1, base_offset=i, ts=ts))
    seg.on_become_inactive()
    entries = list(seg.time_index)
    assert [e.timestamp for e in entries] == [100, 200, 300, 400]
    assert [e.offset for e in entries] == [0, 2, 5, 8]  # the batch that first reached each maximum
    assert all(a.timestamp < b.timestamp and a.offset <= b.offset for a, b in zip(entries, entries[1:], strict=False))
    assert seg.max_timestamp == 400 and seg.offset_of_max_timestamp == 8
    assert seg.find_offset_by_timestamp(160) == (2, 200)
    assert seg.find_offset_by_timestamp(55) == (0, 100)
    seg.sanity_check()
    seg.close()


def test_next_offset_calculation(tmp_path: Path) -> None:
    seg = segment(tmp_path, 40)
    assert seg.next_offset == 40
    append(seg, batch([b"hello", b"there", b"you"], base_offset=50))
    assert seg.next_offset == 53
    seg.close()


def test_first_batch_timestamp(tmp_path: Path) -> None:
    seg = segment(tmp_path, 1)
    assert seg.rolling_timestamp() is None
    append(seg, batch([b"one"], base_offset=1, ts=1000))
    assert seg.rolling_timestamp() == 1000
    seg.close()
    again = LogSegment(tmp_path, 1, CFG, writable=False)
    assert again.rolling_timestamp() == 1000
    again.close()


# -- files ----------------------------------------------------------------------------------------------


def test_change_file_suffixes(tmp_path: Path) -> None:
    seg = segment(tmp_path, 40)
    log_file, index_file, time_file = seg.log_path, seg.offset_index.path, seg.time_index.path
    assert not index_file.exists() and not time_file.exists()  # indexes are created lazily
    seg.change_suffix(".deleted")
    assert not seg.offset_index.path.exists() and not seg.time_index.path.exists()
    assert seg.log_path == Path(str(log_file) + ".deleted") and seg.log_path.exists()
    assert seg.offset_index.path == Path(str(index_file) + ".deleted")
    assert seg.time_index.path == Path(str(time_file) + ".deleted")
    _ = seg.offset_index.entries
    assert seg.offset_index.path.exists()
    _ = seg.time_index.entries
    assert seg.time_index.path.exists()
    seg.delete()
    assert os.listdir(tmp_path) == []


def test_delete_takes_the_txn_index_along(tmp_path: Path) -> None:
    seg = segment(tmp_path, 0)
    append(seg, batch(1))
    (tmp_path / "00000000000000000000.txnindex").write_bytes(b"")
    seg.change_suffix(".deleted")
    assert (tmp_path / "00000000000000000000.txnindex.deleted").exists()
    seg.delete()
    assert os.listdir(tmp_path) == []


def test_close_trims_and_writes_the_final_time_entry(tmp_path: Path) -> None:
    seg = segment(tmp_path, 0)
    for i in range(30):
        append(seg, batch(1, base_offset=i, ts=1000 + i))
    seg.active = True
    assert seg.offset_index.length == 1000  # preallocated while active
    seg.close()
    data = (tmp_path / "00000000000000000000.log").read_bytes()
    index, timeindex = kafka_indexes(data, 0, 10)
    assert (tmp_path / "00000000000000000000.index").read_bytes() == index
    assert (tmp_path / "00000000000000000000.timeindex").read_bytes() == timeindex
    assert struct.unpack(">qI", timeindex[-12:]) == (1029, 29)


def test_read_only_segment_changes_nothing(tmp_path: Path) -> None:
    seg = segment(tmp_path, 0)
    for i in range(50):
        append(seg, batch(1, base_offset=i, ts=1000 + i))
    seg.flush()  # left active: preallocated indexes, as a live broker has them
    before = tree_fingerprint(tmp_path)
    ro = LogSegment(tmp_path, 0, CFG, writable=False)
    assert ro.next_offset == 50 and ro.max_timestamp == 1049
    assert ro.find_offset_by_timestamp(1020) == (20, 1020)
    ro.sanity_check()
    with pytest.raises(ReadOnlyError):
        append(ro, batch(1, base_offset=50))
    with pytest.raises(ReadOnlyError):
        ro.truncate_to(3)
    with pytest.raises(ReadOnlyError):
        ro.recover()
    ro.close()
    assert tree_fingerprint(tmp_path) == before
    seg.close()


def test_read_only_follows_a_growing_segment(tmp_path: Path) -> None:
    seg = segment(tmp_path, 0)
    append(seg, batch(1, base_offset=0))
    ro = LogSegment(tmp_path, 0, CFG, writable=False)
    assert ro.next_offset == 1
    for i in range(1, 40):
        append(seg, batch(1, base_offset=i, ts=1000 + i))
    assert ro.next_offset == 1  # until refreshed
    assert ro.refresh() == seg.size
    assert ro.next_offset == 40 and ro.max_timestamp == 1039
    assert ro.find(33) is not None
    ro.close()
    seg.close()


# -- recovery -------------------------------------------------------------------------------------------


def _nonsense(path: Path, position: int, size: int, rng: random.Random) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(bytes(rng.randrange(255) for _ in range(size)))


def test_recovery_fixes_corrupt_index(tmp_path: Path) -> None:
    seg = segment(tmp_path, 0)
    for i in range(100):
        append(seg, batch([str(i).encode()], base_offset=i))
    path = seg.offset_index.path
    seg.offset_index.flush()
    _nonsense(path, 5, path.stat().st_size - 5, random.Random(1))
    seg.offset_index.close_handler()
    assert seg.recover() == 0
    for i in range(100):
        view = seg.find(i)
        assert view is not None and view.decode().offsets == [i]
    seg.close()


def test_recovery_fixes_corrupt_time_index(tmp_path: Path) -> None:
    seg = segment(tmp_path, 0)
    for i in range(100):
        append(seg, batch([str(i).encode()], base_offset=i, ts=i * 10))
    path = seg.time_index.path
    seg.time_index.flush()
    _nonsense(path, 5, path.stat().st_size - 5, random.Random(2))
    seg.time_index.close_handler()
    seg.recover()
    for i in range(100):
        assert seg.find_offset_by_timestamp(i * 10) == (i, i * 10)
        if i < 99:
            assert seg.find_offset_by_timestamp(i * 10 + 1) == (i + 1, (i + 1) * 10)
    seg.close()


def test_recovery_with_corrupt_message(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Corrupt a random batch from a random byte in its first 15 to the end; recovery keeps exactly
    the batches before it, and what it says is only the cut (a nonsense magic byte of 3..127 is read as
    v2 since review11 R11-8, so its CRC fails and the cut is logged)."""
    rng = random.Random(7)
    caplog.set_level(logging.WARNING, logger="kafkafs")
    for round_ in range(10):
        directory = tmp_path / str(round_)
        directory.mkdir()
        seg = segment(directory, 0)
        for i in range(20):
            append(seg, batch([str(i).encode()], base_offset=i))
        k = rng.randrange(20)
        position = seg.find(k).position + rng.randrange(15)  # type: ignore[union-attr]
        seg.flush()
        _nonsense(seg.log_path, position, seg.size - position, rng)
        seg.recover()
        assert [v.header.last_offset for v in seg.batches()] == list(range(k))
        assert seg.next_offset == k
        seg.delete()
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert all("cutting from there" in m for m in said), said


def test_recovery_rebuilds_the_indexes_kafka_would(tmp_path: Path) -> None:
    seg = segment(tmp_path, 100, config(index_interval_bytes=300, segment_index_bytes=4096))
    rng = random.Random(3)
    for i in range(200):
        append(seg, batch(rng.randrange(1, 4), base_offset=100 + 3 * i, ts=rng.randrange(10_000), size=rng.randrange(1, 90)))
    seg.active = True
    seg.close()
    data = seg.log_path.read_bytes()
    for path in (seg.offset_index.path, seg.time_index.path):
        path.unlink()
    again = LogSegment(tmp_path, 100, config(index_interval_bytes=300, segment_index_bytes=4096), writable=True)
    assert again.recover() == 0
    index, timeindex = kafka_indexes(data, 100, 300)
    assert again.offset_index.path.read_bytes() == index
    assert again.time_index.path.read_bytes() == timeindex
    again.close()


@pytest.mark.parametrize(
    ("fault", "lost"),
    [("eio", ()), ("eio", (".index",)), ("eio", (".index", ".timeindex")), ("enospc", (".index",)),
     ("enospc", (".index", ".timeindex"))],  # (a full disk needs no page for entries that had one)
    ids=["eio", "eio-lost-index", "eio-lost-both", "enospc-lost-index", "enospc-lost-both"],
)
def test_a_recovery_that_fails_leaves_the_index_files_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str, lost: tuple[str, ...]
) -> None:
    """review23 R23-1: a recovery that failed halfway (a disk error reading the ``.log``, a full disk when
    an index entry needs a page) left a sealed segment's trimmed indexes (or lost ones, which a rebuild
    replaces as no damage) preallocated with zeros: damage, and a time index whose last entry says 0. Now
    every index file holds what it held (or is still missing), byte for byte, and the error goes on."""
    seg = segment(tmp_path, 0)
    for i in range(100):
        append(seg, batch([str(i).encode()], base_offset=i, ts=1000 + i))
    seg.close(seal=True)  # sealed: trimmed indexes
    for suffix in lost:
        (tmp_path / f"00000000000000000000{suffix}").unlink()
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    again = segment(tmp_path, 0)
    if fault == "eio":
        real = again.batches

        def batches(*args, **kwargs):
            for n, view in enumerate(real(*args, **kwargs)):
                if n == 60:
                    raise OSError(errno.EIO, "Input/output error", str(again.log_path))
                yield view

        monkeypatch.setattr(again, "batches", batches)
    else:
        def reserve(path, *args):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))

        monkeypatch.setattr("kafkafs.storage.index.reserve", reserve)
    with pytest.raises(OSError) as failed:
        again.recover()
    assert failed.value.errno == (errno.EIO if fault == "eio" else errno.ENOSPC)
    again.close()
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_zero_filled_tail_ends_the_data_and_recovery_cuts_it(tmp_path: Path) -> None:
    seg = segment(tmp_path, 0)
    for i in range(5):
        append(seg, batch(1, base_offset=i))
    seg.flush()
    size = seg.size
    with open(seg.log_path, "ab") as f:
        f.write(bytes(5000))
    ro = LogSegment(tmp_path, 0, CFG, writable=False)
    assert ro.size == size + 5000
    assert [v.header.base_offset for v in ro.batches()] == [0, 1, 2, 3, 4]  # quietly: no error
    assert ro.next_offset == 5
    ro.close()
    seg.close_handlers()
    again = LogSegment(tmp_path, 0, CFG, writable=True)
    assert again.recover() == 5000 and again.size == size
    again.close()


def test_a_corrupt_batch_is_reported_with_file_and_position(tmp_path: Path) -> None:
    seg = segment(tmp_path, 0)
    for i in range(5):
        append(seg, batch(1, base_offset=i))
    bad = seg.find(3).position  # type: ignore[union-attr]
    seg.flush()
    with open(seg.log_path, "r+b") as f:  # a length no batch can have
        f.seek(bad + 8)
        f.write(struct.pack(">i", 3))
    ro = LogSegment(tmp_path, 0, CFG, writable=False)
    views = ro.batches()
    assert [next(views).header.base_offset for _ in range(3)] == [0, 1, 2]
    with pytest.raises(CorruptRecordError) as info:
        next(views)
    assert info.value.position == bad and info.value.file == str(ro.log_path)
    ro.close()
    seg.close()


@pytest.mark.allow_warnings("a wrong index entry on purpose")
def test_an_index_pointing_where_no_batch_starts_is_not_trusted(tmp_path: Path) -> None:
    seg = segment(tmp_path, 0)
    for i in range(40):
        append(seg, batch(1, base_offset=i))
    seg.active = True
    seg.close()
    path = tmp_path / "00000000000000000000.index"
    data = bytearray(path.read_bytes())
    struct.pack_into(">I", data, 4 * 8 + 4, struct.unpack_from(">I", data, 4 * 8 + 4)[0] + 3)  # entry 4: mid-batch
    path.write_bytes(bytes(data))
    ro = LogSegment(tmp_path, 0, CFG, writable=False)
    for offset in range(40):
        view = ro.find(offset)
        assert view is not None and view.header.base_offset == offset
    ro.close()


def test_index_full_is_a_roll_condition(tmp_path: Path) -> None:
    cfg = config(index_interval_bytes=1, segment_index_bytes=8 * 4)
    seg = segment(tmp_path, 0, cfg)
    offset = 0
    while seg.should_roll(messages_size=100, max_timestamp=0, max_offset=offset, now=0) is None:
        append(seg, batch(1, base_offset=offset))
        offset += 1
    assert seg.should_roll(messages_size=100, max_timestamp=0, max_offset=offset, now=0) == "index full"
    assert seg.time_index.entries == 1  # 32 // 12 = 2 slots, the last kept for the roll entry
    seg.close()


def test_encode_batch_and_segment_agree_on_sizes(tmp_path: Path) -> None:
    seg = segment(tmp_path, 0)
    data = encode_batch([(1, b"k", b"v", (("h", b"x"),))], base_offset=0)
    append(seg, data)
    assert seg.size == len(data) and seg.read_at(0, seg.size) == data
    seg.close()
