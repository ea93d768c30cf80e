"""``minPartitions`` holds whenever the data has that many batches, with or without index files
(SPEC §5): without an index entry to cut at, a segment is cut at its batches' starts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kafkafs.spark.positions import balanced_groups
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir

from .conftest import engine_rows
from .helpers import kafka_python_decode, plan, read_plan


def _no_indexes(path: Path) -> None:
    for index in [*path.rglob("*.index"), *path.rglob("*.timeindex")]:
        index.unlink()


@pytest.fixture
def forty_batches(tmp_path) -> Path:
    """400 records in 40 batches of 10, one segment, and no index files (as the issue found them)."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    with LogDir(logdir, Settings({"index.interval.bytes": 1 << 30}), writable=True) as ld:
        log = ld.create_partition("events", 0)
        for b in range(40):
            log.append_records([(1_700_000_000_000 + b * 10 + i, None, b"record %d" % (b * 10 + i), [])
                                for i in range(10)])
    _no_indexes(logdir)
    return logdir


def test_min_partitions_without_index_files(forty_batches):
    assert len(plan(forty_batches).splits) == 1
    for wanted in (2, 3, 8, 13, 40):
        p = plan(forty_batches, minPartitions=wanted)
        assert len(p.splits) == wanted, wanted
        sizes = [s.size for s in p.splits]
        assert max(sizes) - min(sizes) <= 2 * max(sizes) // 3 + 100, sizes  # about even
        assert read_plan(p) == engine_rows(forty_batches)
    # more splits than batches cannot be: one batch a split
    assert len(plan(forty_batches, minPartitions=100).splits) == 40
    assert read_plan(plan(forty_batches, minPartitions=100)) == engine_rows(forty_batches)


def test_min_partitions_with_an_offset_range_and_no_index(forty_batches):
    p = plan(forty_batches, minPartitions=4, startingOffsets='{"events": {"0": 95}}',
             endingOffsets='{"events": {"0": 305}}')
    assert len(p.splits) == 4
    assert [r[2] for r in read_plan(p)] == list(range(95, 305))


def test_min_partitions_on_a_broker_log_without_index_files(fixtures_dir, tmp_path):
    """kafka-logs-b: a broker's log directory whose preallocated index files were not kept."""
    copy = tmp_path / "b"
    shutil.copytree(fixtures_dir / "kafka-logs-b", copy)
    batches = {name: len(kafka_python_batches(copy / name)) for name in ("wanjohi-0", "quickstart-events-0")}
    wanted = min(batches["wanjohi-0"], 6)
    p = plan(copy, subscribe="wanjohi", minPartitions=wanted)
    assert len(p.splits) == wanted
    expect = sorted((t, pt, o, v) for t, pt, o, _ts, _k, v, _h in kafka_python_decode(copy) if t == "wanjohi")
    assert sorted((r[0], r[1], r[2], r[6]) for r in read_plan(p)) == expect


def kafka_python_batches(partition: Path) -> list[int]:
    from kafka.record.memory_records import MemoryRecords

    records = MemoryRecords(sorted(partition.glob("*.log"))[0].read_bytes())
    out = []
    while records.has_next():
        out.append(records.next_batch().base_offset)
    return out


def test_skewed_batches_still_give_the_splits_asked_for(tmp_path):
    """One segment of one huge batch and another of many small ones: the small ones are cut finer."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    with LogDir(logdir, writable=True) as ld:
        ld.create_partition("big", 0).append_records([(1_700_000_000_000, None, b"x" * 200_000, [])])
        small = ld.create_partition("small", 0)
        for i in range(20):
            small.append_records([(1_700_000_000_000 + i, None, b"s%d" % i, [])])
    _no_indexes(logdir)
    p = plan(logdir, minPartitions=8)
    assert len(p.splits) == 8
    assert read_plan(p) == engine_rows(logdir)


@pytest.mark.parametrize(
    ("sizes", "groups", "starts"),
    [
        ([10] * 10, 5, [2, 4, 6, 8]),
        ([10] * 3, 5, [1, 2]),
        ([1000, 1, 1, 1], 3, [1, 2]),
        ([1, 1, 1, 1000], 3, [2, 3]),
        ([5], 4, []),
        ([], 4, []),
    ],
)
def test_balanced_groups(sizes, groups, starts):
    assert balanced_groups(sizes, groups) == starts
