"""A partition with 10,000 segments: it opens, reads any offset, and keeps the number of open files
bounded (the handle budget), without running out of descriptors. How fast it opens is bench/storage.py's
to measure (``--segments 10000``), not a timed test's."""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import pytest

from kafkafs.format.batch import encode_batch
from kafkafs.format.jsonview import ProducerRecord
from kafkafs.storage.handles import HandleBudget
from kafkafs.storage.log import Log

from .helpers import read_offset

SEGMENTS = 10_000
PER_SEGMENT = 3
T0 = 1_600_000_000_000


def _write(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def build(directory: Path, segments: int) -> None:
    """Segment files written directly, as a broker leaves sealed ones: a ``.log`` with one batch of 3
    records, an empty ``.index`` (one batch: no entry) and a ``.timeindex`` with the roll entry."""
    directory.mkdir(parents=True)
    for i in range(segments):
        base = PER_SEGMENT * i
        ts = T0 + i * 1000
        data = encode_batch([(ts + j, None, b"%d" % (base + j), ()) for j in range(PER_SEGMENT)], base_offset=base)
        prefix = str(directory / f"{base:020d}")
        _write(prefix + ".log", data)
        _write(prefix + ".index", b"")
        _write(prefix + ".timeindex", struct.pack(">qI", ts + PER_SEGMENT - 1, PER_SEGMENT - 1))
    _write(str(directory / "leader-epoch-checkpoint"), b"0\n0\n")  # the batches carry no epoch (-1)


@pytest.fixture(scope="module")
def partition(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("many") / "big-0"
    build(directory, SEGMENTS)
    return directory


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_opens_and_reads_any_offset(partition: Path) -> None:
    log = Log.open(partition)
    assert len(log.segments) == SEGMENTS
    end = SEGMENTS * PER_SEGMENT
    assert log.log_end_offset == end and log.log_start_offset == 0
    rng = random.Random(1)
    for offset in [0, 1, end - 1] + rng.sample(range(end), 500):
        found = read_offset(log, offset)
        assert found is not None
        batch, i = found
        assert batch.offsets[i] == offset and batch.values[i] == b"%d" % offset
    assert read_offset(log, end) is None
    for segment_number in rng.sample(range(SEGMENTS), 50):
        target = T0 + segment_number * 1000 + 1
        assert log.offset_for_timestamp(target) == (segment_number * PER_SEGMENT + 1, target)
    assert [r.offset for r in log.records(15_000, 15_010)] == list(range(15_000, 15_011))
    log.close()


def test_opens_writable_and_appends_to_the_last_segment(partition: Path, tmp_path: Path) -> None:
    log = Log.open(partition, writable=True, clean_shutdown=True)
    assert log.last_recovery.rebuilt_indexes == []  # type: ignore[union-attr]
    last = log.active_segment
    assert last is not None and last.base_offset == (SEGMENTS - 1) * PER_SEGMENT
    before = sorted(os.listdir(partition))
    # nothing appended: closing writes the last segment's index files back as they were
    log.close()
    assert sorted(os.listdir(partition)) == before
    assert (partition / f"{last.base_offset:020d}.timeindex").stat().st_size == 12


def test_a_full_scan_keeps_open_files_bounded(partition: Path) -> None:
    budget = HandleBudget(limit=50)
    baseline = open_fds()
    log = Log.open(partition, budget=budget)
    expected = 0
    peak = 0
    for n, record in enumerate(log.records()):
        assert record.offset == expected
        expected += 1
        if n % 500 == 0:
            peak = max(peak, open_fds() - baseline)
    assert expected == SEGMENTS * PER_SEGMENT
    for target in range(T0, T0 + SEGMENTS * 1000, 997 * 1000):  # by time: touches every time index
        assert log.offset_for_timestamp(target) is not None
        peak = max(peak, open_fds() - baseline)
    assert len(budget) <= 50
    assert peak <= 50 * 3 + 5, peak
    log.close()
    assert open_fds() <= baseline + 1


def test_appending_after_reopening_a_copy(tmp_path: Path) -> None:
    """A smaller copy, writable: the engine appends to the last of many segments and rolls as usual."""
    directory = tmp_path / "big-0"
    build(directory, 500)
    log = Log.open(directory, writable=True, clean_shutdown=True)
    result = log.append_records([ProducerRecord(T0 + 10**7, None, b"new", ())])
    assert result.first_offset == 1500 and len(log.segments) == 500
    log.roll()
    log.append_records([ProducerRecord(T0 + 10**7, None, b"newer", ())])
    log.close()
    reader = Log.open(directory)
    assert len(reader.segments) == 501
    assert [r.value for r in reader.records(1499)] == [b"1499", b"new", b"newer"]
    reader.close()
