"""Streaming reads: new records show up in a running query."""

from __future__ import annotations

import time

import pytest

from kafkafs.storage.logdir import LogDir

pytestmark = pytest.mark.spark


def _wait(predicate, timeout: float = 120.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.25)
    return False


#: Spark's own words when a Python worker it started did not connect back within its fixed 10 s (no
#: setting changes it): on a loaded machine the interpreter can take that long to start. Nothing of
#: kafkafs ran yet, so the query is started again (twice at most); any other failure fails the test.
WORKER_DID_NOT_START = "Python worker failed to connect back"


def test_stream_picks_up_appended_records(spark, generated, writable_copy):
    copy = writable_copy(generated)
    with LogDir(copy) as ld:
        before = sum(1 for _ in ld.log("audit-0").records())

    def start():
        return (
            spark.readStream.format("kafkalog")
            .option("topics", "audit")
            .option("startingOffsets", "earliest")
            .load(str(copy))
            .selectExpr("offset", "CAST(value AS STRING) AS value")
            .writeStream.format("memory")
            .queryName("audit_stream")
            .trigger(processingTime="500 milliseconds")
            .start()
        )

    query = start()
    try:
        count = lambda: spark.sql("SELECT count(*) FROM audit_stream").collect()[0][0]  # noqa: E731
        for _ in range(2):
            _wait(lambda q=query: count() == before or not q.isActive)
            failed = None if query.isActive else query.exception()
            if failed is None or WORKER_DID_NOT_START not in str(failed):
                break
            query = start()
        assert count() == before, ("the records present at the start arrive", query.exception())
        with LogDir(copy, writable=True) as ld:
            ld.log("audit-0").append_records([(None, None, b"late-1", []), (None, b"k", b"late-2", [])])
        assert _wait(lambda: count() == before + 2), "appended records arrive"
        rows = spark.sql("SELECT offset, value FROM audit_stream ORDER BY offset").collect()
        assert [r.offset for r in rows] == list(range(before + 2))
        assert [r.value for r in rows[-2:]] == ["late-1", "late-2"]
        assert query.exception() is None
    finally:
        query.stop()


def test_max_offsets_per_trigger_with_available_now(spark, generated, tmp_path):
    sizes: list[int] = []

    def collect(batch, _batch_id):
        sizes.append(batch.count())

    query = (
        spark.readStream.format("kafkalog")
        .option("topics", "audit")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 12)
        .option("minOffsetsPerTrigger", 10)  # AvailableNow is not held back for its last 6 offsets
        .option("maxTriggerDelay", "1h")
        .load(str(generated))
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert sum(sizes) == 30
    assert max(sizes) <= 12 and len([s for s in sizes if s]) == 3
