"""The streaming sink's exactly-once commit, without Spark: replays, and the states a kill leaves."""

from __future__ import annotations

import pyarrow as pa
import pytest

from kafkafs.spark.publish import intent_of, staged_batches
from kafkafs.spark.sink import SinkConflict, SinkLog, commit_micro_batch
from kafkafs.spark.write import Stager, staging_root, start_job
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir

from .helpers import kafka_python_decode


def _stage(logdir, job: str, lo: int, hi: int):
    """Rows lo..hi-1 of topic out (2 partitions, keys k<i>), staged in several batches per partition."""
    root = staging_root(str(logdir), None)
    start_job(root, job)
    stager = Stager(root, job, "task", topic="out", logdir=str(logdir), new_topic_partitions=2)
    for a in range(lo, hi, 50):
        ids = range(a, min(a + 50, hi))
        stager.add(pa.RecordBatch.from_pydict({
            "key": pa.array([b"k%d" % i for i in ids]),
            "value": pa.array([b"row-%d" % i for i in ids]),
        }))
        for pending in stager._pending.values():
            stager._encode(pending)  # one staged batch per 50 rows: several appends per partition
    return stager.finish()


def _values(logdir) -> list[bytes]:
    return sorted(r[5] for r in kafka_python_decode(logdir))


def _expect(lo: int, hi: int) -> list[bytes]:
    return sorted(b"row-%d" % i for i in range(lo, hi))


def test_a_replayed_batch_is_appended_once(tmp_path):
    sink = tmp_path / "checkpoint" / "kafkalog-sink"
    tmp_path = tmp_path / "logs"
    tmp_path.mkdir()
    first = commit_micro_batch(str(tmp_path), sink, 0, _stage(tmp_path, "a", 0, 300), Settings(), new_topic_partitions=2)
    assert first is not None and set(first) == {"out-0", "out-1"}
    assert commit_micro_batch(str(tmp_path), sink, 0, _stage(tmp_path, "b", 0, 300), Settings()) is None
    commit_micro_batch(str(tmp_path), sink, 1, _stage(tmp_path, "c", 300, 400), Settings())
    assert _values(tmp_path) == _expect(0, 400)
    assert SinkLog(sink).entry(1)["offsets"] and SinkLog(sink).pending() is None


def _killed_commit(tmp_path, sink, batch_id: int, files, appended_batches: int | None) -> None:
    """What a commit leaves when killed after ``pending`` and ``appended_batches`` appends (None: all)."""
    with LogDir(tmp_path, Settings(), writable=True) as ld:
        SinkLog(sink).begin(batch_id, intent_of(ld, files))
        n = 0
        for sf in files:
            log = ld.create_partition(sf.topic, sf.partition)
            for data in staged_batches(sf.path):
                if appended_batches is not None and n == appended_batches:
                    return
                log.append_batches(data, flush=True)
                n += 1


@pytest.mark.allow_warnings("a killed commit is repaired with a warning")
@pytest.mark.parametrize("appended", [0, 1, 3, None])
def test_a_commit_killed_at_any_point_leaves_each_row_once(tmp_path, appended):
    sink = tmp_path / "checkpoint" / "kafkalog-sink"
    tmp_path = tmp_path / "logs"
    tmp_path.mkdir()
    commit_micro_batch(str(tmp_path), sink, 0, _stage(tmp_path, "a", 0, 200), Settings(), new_topic_partitions=2)
    _killed_commit(tmp_path, sink, 1, _stage(tmp_path, "b", 200, 500), appended)
    if appended:
        assert _values(tmp_path) != _expect(0, 200)  # the kill left part of batch 1 in the log
    # the restarted query replays batch 1 (its rows staged anew) and goes on with batch 2
    commit_micro_batch(str(tmp_path), sink, 1, _stage(tmp_path, "c", 200, 500), Settings())
    commit_micro_batch(str(tmp_path), sink, 2, _stage(tmp_path, "d", 500, 600), Settings())
    assert _values(tmp_path) == _expect(0, 600)
    assert SinkLog(sink).pending() is None


def test_foreign_appends_after_a_partial_batch_stop_the_query(tmp_path):
    sink = tmp_path / "checkpoint" / "kafkalog-sink"
    tmp_path = tmp_path / "logs"
    tmp_path.mkdir()
    files = _stage(tmp_path, "a", 0, 300)
    _killed_commit(tmp_path, sink, 0, files, 1)
    with LogDir(tmp_path, writable=True) as ld:
        ld.log(f"out-{files[0].partition}").append_records([(None, None, b"someone else", [])])
    with pytest.raises(SinkConflict, match="appended by someone else"):
        commit_micro_batch(str(tmp_path), sink, 0, _stage(tmp_path, "b", 0, 300), Settings())
