"""Staging and publishing appends without Spark: all or nothing, nothing left behind."""

from __future__ import annotations

import pyarrow as pa
import pytest

from kafkafs.errors import InvalidInput, InvalidName, RecordTooLargeError
from kafkafs.spark.publish import commit_staged
from kafkafs.spark.write import Stager, discard_job, staging_root, start_job
from kafkafs.storage.config import Settings
from kafkafs.storage.log import Log
from kafkafs.storage.logdir import LogDir

from .conftest import engine_rows
from .helpers import kafka_python_decode

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def _rows_batch(n: int, start: int = 0, topic: str | None = "t") -> pa.RecordBatch:
    cols = {
        "value": pa.array([f"value-{i}" for i in range(start, start + n)], pa.string()),
        "key": pa.array([None if i % 3 == 0 else f"k{i}".encode() for i in range(start, start + n)], pa.binary()),
        "partition": pa.array([i % 2 for i in range(start, start + n)], pa.int32()),
        "timestamp": pa.array([1_700_000_000_000_000 + i * 1000 for i in range(start, start + n)], pa.timestamp("us", "UTC")),
        "headers": pa.array([[("h", b"x")] if i % 4 == 0 else None for i in range(start, start + n)], HEADERS),
    }
    if topic is not None:
        cols["topic"] = pa.array([topic] * n, pa.string())
    return pa.RecordBatch.from_pydict(cols)


def test_stage_then_commit_appends_every_row_in_order(tmp_path):
    root = staging_root(str(tmp_path), None)
    start_job(root, "job-1")
    files = []
    for task in range(2):
        stager = Stager(root, "job-1", f"task-{task}", topic=None, settings=Settings({"segment.bytes": 4096}))
        stager.add(_rows_batch(500, start=task * 500))
        files += stager.finish()
    assert {(f.topic, f.partition) for f in files} == {("t", 0), ("t", 1)}
    appended = commit_staged(str(tmp_path), files, Settings({"segment.bytes": 4096}))
    assert appended == {("t", 0): (0, 499), ("t", 1): (0, 499)}
    discard_job(root, "job-1")
    assert not root.exists()
    rows = engine_rows(tmp_path)
    assert len(rows) == 1000
    p0 = [r for r in rows if r[1] == 0]
    assert [r[6] for r in p0[:3]] == [b"value-0", b"value-2", b"value-4"]
    assert p0[0][5] is None and p0[1][5] == b"k2"
    assert p0[0][7] == [("h", b"x")] and p0[1][7] is None
    assert p0[1][3] == 1_700_000_000_002
    decoded = kafka_python_decode(tmp_path)
    assert [(d[0], d[1], d[2], d[3], d[4], d[5]) for d in sorted(decoded)] == [
        (r[0], r[1], r[2], r[3], r[5], r[6]) for r in rows
    ]
    with LogDir(tmp_path) as ld:
        assert len(ld.log("t-0").segments) >= 2, "segment.bytes rolls apply to published batches"
        sizes = [view.size for _segment, view in ld.log("t-0").batches()]
        assert len(sizes) > 1 and max(sizes) <= 4096, "staged batches stay within the segment size (R17-5)"


def test_topic_option_wins_and_bad_topics_fail(tmp_path):
    root = staging_root(str(tmp_path), None)
    start_job(root, "job")
    stager = Stager(root, "job", "task", topic="other")
    stager.add(_rows_batch(4))
    assert {f.topic for f in stager.finish()} == {"other"}
    bad = Stager(root, "job", "task-2", topic="bad topic!")
    with pytest.raises(InvalidName):
        bad.add(_rows_batch(1))
    bad.discard()
    assert not (root / "job" / "task-2").exists()


def test_writes_to_kafkas_internal_topics_fail(tmp_path):
    from kafkafs.errors import InternalTopicRefused
    from kafkafs.spark.write import check_write_schema

    with pytest.raises(InternalTopicRefused, match="__consumer_offsets is a Kafka internal topic"):
        check_write_schema([("value", "binary")], "__consumer_offsets")  # the topic option: in the driver
    root = staging_root(str(tmp_path), None)
    start_job(root, "job")
    bad = Stager(root, "job", "task", topic="__cluster_metadata")
    with pytest.raises(InternalTopicRefused, match="__cluster_metadata"):
        bad.add(_rows_batch(1))
    bad.discard()
    assert not list(tmp_path.glob("__*"))


def test_too_large_batch_appends_nothing(tmp_path):
    with LogDir(tmp_path, writable=True) as ld:
        ld.create_partition("t", 0).append_records([(1, None, b"before", [])])
    root = staging_root(str(tmp_path), None)
    start_job(root, "job")
    stager = Stager(root, "job", "task", topic="t")
    stager.add(_rows_batch(10))
    big = pa.RecordBatch.from_pydict({"value": pa.array([b"x" * 5000], pa.binary())})
    stager.add(big)
    files = stager.finish()
    with pytest.raises(RecordTooLargeError, match="max.message.bytes"):
        commit_staged(str(tmp_path), files, Settings({"max.message.bytes": 4000}))
    assert [r[6] for r in engine_rows(tmp_path)] == [b"before"]


def test_failure_mid_commit_truncates_back(tmp_path, monkeypatch):
    with LogDir(tmp_path, writable=True) as ld:
        ld.create_partition("t", 0).append_records([(1, None, b"before", [])])
        ld.create_partition("t", 1)
    root = staging_root(str(tmp_path), None)
    start_job(root, "job")
    stager = Stager(root, "job", "task", topic=None)
    stager.add(_rows_batch(20000))
    files = stager.finish()
    calls = {"n": 0}
    real = Log.append_batches

    def failing(self, data, **kw):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(28, "No space left on device")
        return real(self, data, **kw)

    monkeypatch.setattr(Log, "append_batches", failing)
    with pytest.raises(OSError, match="No space"):
        commit_staged(str(tmp_path), files, Settings())
    monkeypatch.undo()
    assert [r[6] for r in engine_rows(tmp_path)] == [b"before"]
    with LogDir(tmp_path, writable=True) as ld:
        assert ld.log("t-0").log_end_offset == 1


def test_tasks_of_a_finished_job_clean_up_after_themselves(tmp_path):
    root = staging_root(str(tmp_path), None)
    start_job(root, "job")
    late = Stager(root, "job", "task-late", topic="t")
    late.add(_rows_batch(10))
    discard_job(root, "job")  # the driver aborted while the task was still running
    assert not root.exists()
    with pytest.raises(InvalidInput, match="is over"):
        Stager(root, "job", "task-later", topic="t")
    assert not root.exists(), "a task starting after the abort creates nothing"
    late.dir.mkdir(parents=True)  # the abort raced with the task creating files
    with pytest.raises(InvalidInput, match="is over"):
        late.finish()
    assert not root.exists()


@pytest.mark.parametrize("codec", ["gzip", "lz4", "zstd", "snappy"])
def test_compressed_staging(tmp_path, codec):
    root = staging_root(str(tmp_path), None)
    start_job(root, "job")
    stager = Stager(root, "job", "task", topic="z", compression=codec)
    stager.add(_rows_batch(100))
    commit_staged(str(tmp_path), stager.finish(), Settings())
    discard_job(root, "job")
    assert len(engine_rows(tmp_path)) == 100
    assert len(kafka_python_decode(tmp_path)) == 100
