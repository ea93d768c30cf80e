"""Spark's Kafka source options with their meaning, planned and read without a Spark session:
``includeHeaders``, ``minPartitions``, ``failOnDataLoss``, ``subscribe``/``subscribePattern``/``assign``."""

from __future__ import annotations

import pytest

from kafkafs.errors import InvalidInput, OffsetOutOfRange
from kafkafs.format.batch import encode_batch
from kafkafs.spark.options import parse_read_options
from kafkafs.spark.scan import read_split
from kafkafs.spark.schema import ARROW_SCHEMA, ARROW_SCHEMA_NO_HEADERS
from kafkafs.spark.stream import initial_offsets, micro_batch_ranges
from kafkafs.storage.logdir import LogDir

from .conftest import engine_rows
from .helpers import plan, read_plan


def test_headers_only_with_include_headers(generated):
    bare = [b for s in plan(generated, includeHeaders="false").splits for b in read_split(s)]
    full = [b for s in plan(generated, includeHeaders="true").splits for b in read_split(s)]
    assert bare and all(b.schema.equals(ARROW_SCHEMA_NO_HEADERS) for b in bare)
    assert full and all(b.schema.equals(ARROW_SCHEMA) for b in full)
    default = plan_read_default(generated)
    assert all(b.schema.equals(ARROW_SCHEMA_NO_HEADERS) for s in default.splits for b in read_split(s))
    assert sum(b.num_rows for b in bare) == sum(b.num_rows for b in full) == len(engine_rows(generated))


def plan_read_default(path):
    from kafkafs.spark.plan import plan_read

    return plan_read(parse_read_options({"path": str(path)}))


def test_min_partitions_splits_into_at_least_that_many_tasks(generated):
    base = plan(generated, topics="orders")
    assert len(base.splits) < 12
    more = plan(generated, topics="orders", minPartitions=12)
    assert len(more.splits) >= 12
    assert read_plan(more) == read_plan(base) == [r for r in engine_rows(generated) if r[0] == "orders"]


def test_strategies_choose_partitions(generated):
    def parts(**options):
        return sorted({(p.topic, p.partition) for p in plan(generated, **options).pieces})

    assert parts(subscribe="orders,audit") == [("audit", 0), ("orders", 0), ("orders", 1)]
    assert parts(subscribePattern="ord.*|ev.*") == [("events", 0), ("orders", 0), ("orders", 1)]
    assert parts(assign='{"orders": [1], "audit": [0, 5]}') == [("audit", 0), ("orders", 1)]


def _retention(copy, name: str, segments: int) -> int:
    """Delete the oldest ``segments`` segments of a partition as retention does; the new log start."""
    with LogDir(copy, writable=True) as ld:
        log = ld.log(name)
        log.delete_segments(list(log.segments)[:segments], "retention")
        return log.log_start_offset


def test_reading_offsets_retention_deleted(generated, writable_copy, caplog):
    copy = writable_copy(generated)
    start = _retention(copy, "orders-0", 3)
    assert start > 0
    asked = '{"orders": {"0": 0, "1": -2}}'
    with pytest.raises(OffsetOutOfRange, match=r"failOnDataLoss to false. Reason: Could not read records in offset \[0, \d+\) for topic partition orders-0"):
        plan(copy, topics="orders", startingOffsets=asked)
    rows = read_plan(plan(copy, topics="orders", startingOffsets=asked, failOnDataLoss="false"))
    assert rows == [r for r in engine_rows(copy) if r[0] == "orders"]
    assert min(r[2] for r in rows if r[1] == 0) == start
    assert "Could not read records in offset [0, " in caplog.text
    assert read_plan(plan(copy, topics="orders")) == rows  # earliest is the log start: no loss


def test_ending_offsets_past_the_log_end(generated, caplog):
    """Spark's Kafka source reads a batch range [start, end) record by record and, at the latest offset
    before ``end``, the consumer's fetch finds nothing: KafkaDataConsumer reports it as data loss
    (KAFKA_DATA_LOSS.COULD_NOT_READ_OFFSET_RANGE, "Could not read records in offset [latest, end) for
    topic partition ..."): the read fails with failOnDataLoss=true (the default), and with false logs it
    and reads up to the latest offset. An end past the log end used to read to the end with no word;
    a start past the end too (with an end past it) read nothing silently."""
    with LogDir(generated) as ld:
        latest = ld.log("orders-0").log_end_offset
    past = f'{{"orders": {{"0": {latest + 7}, "1": -1}}}}'
    with pytest.raises(OffsetOutOfRange, match=rf"failOnDataLoss to false. Reason: Could not read records in offset "
                                               rf"\[{latest}, {latest + 7}\) for topic partition orders-0"):
        plan(generated, topics="orders", endingOffsets=past)
    with pytest.raises(OffsetOutOfRange, match=rf"offset \[{latest + 3}, {latest + 7}\) for topic partition orders-0"):
        plan(generated, topics="orders", endingOffsets=past, startingOffsets=f'{{"orders": {{"0": {latest + 3}, "1": -2}}}}')
    rows = read_plan(plan(generated, topics="orders", endingOffsets=past, failOnDataLoss="false"))
    assert rows == [r for r in engine_rows(generated) if r[0] == "orders"]
    assert f"Could not read records in offset [{latest}, {latest + 7}) for topic partition orders-0" in caplog.text
    # an end at the log end is no loss
    at = f'{{"orders": {{"0": {latest}, "1": -1}}}}'
    assert read_plan(plan(generated, topics="orders", endingOffsets=at)) == rows


def test_segment_deleted_between_planning_and_reading(generated, writable_copy, caplog):
    copy = writable_copy(generated)
    strict = plan(copy, topics="orders")
    lenient = plan(copy, topics="orders", failOnDataLoss="false")
    start = _retention(copy, "orders-0", 2)
    with pytest.raises(OffsetOutOfRange, match="segment was deleted after the read was planned"):
        read_plan(strict)
    rows = read_plan(lenient)
    assert rows == [r for r in engine_rows(copy) if r[0] == "orders"]
    assert min(r[2] for r in rows if r[1] == 0) == start > 0
    assert "Could not read records in offset [0, ...) for topic partition orders-0: its segment was deleted" in caplog.text


def test_compaction_gap_is_not_data_loss(tmp_path):
    with LogDir(tmp_path, writable=True) as ld:
        log = ld.create_partition("t", 0)
        rows = [(1000 + i, b"k%d" % i, b"v%d" % i, ()) for i in range(3)]
        log.append_batches(encode_batch(rows, offset_deltas=[0, 4, 9]))  # offsets 0, 4, 9 kept
        log.append_records([(2000, None, b"after", [])])
    got = read_plan(plan(tmp_path, startingOffsets='{"t": {"0": 2}}', failOnDataLoss="true"))
    assert [r[2] for r in got] == [4, 9, 10]


def test_stream_data_loss(generated, writable_copy, caplog):
    copy = writable_copy(generated)
    start = _retention(copy, "orders-0", 3)
    strict = parse_read_options({"path": str(copy), "topics": "orders"}, streaming=True)
    lenient = parse_read_options({"path": str(copy), "topics": "orders", "failOnDataLoss": "false"}, streaming=True)
    begin = {("orders", 0): 5, ("orders", 1): 0}
    stop = {("orders", 0): 1000, ("orders", 1): 1000, ("orders", 7): 3}
    with pytest.raises(OffsetOutOfRange, match=r"Could not read records in offset \[5, \d+\) for topic partition orders-0"):
        micro_batch_ranges(strict, begin, stop)
    ranges = micro_batch_ranges(lenient, begin, stop)
    assert {k: v[1:] for k, v in ranges.items()} == {("orders", 0): (start, 1000), ("orders", 1): (0, 1000)}
    assert "Partitions orders-7 have been deleted." in caplog.text
    # a new query asked to start where retention already deleted
    asked = {"startingOffsets": '{"orders": {"0": 3, "1": 0}}'}
    with pytest.raises(OffsetOutOfRange, match=f"Starting offset for orders-0 was 3 but consumer reset to {start}"):
        initial_offsets(parse_read_options({"path": str(copy), "topics": "orders", **asked}, streaming=True))
    lenient_start = parse_read_options(
        {"path": str(copy), "topics": "orders", "failOnDataLoss": "false", **asked}, streaming=True
    )
    assert initial_offsets(lenient_start) == {("orders", 0): start, ("orders", 1): 0}
    # a partition that shows up with its first records already deleted
    with pytest.raises(OffsetOutOfRange, match="Added partition orders-0 starts from"):
        micro_batch_ranges(strict, {("orders", 1): 0}, {("orders", 0): 1000, ("orders", 1): 1000})


def test_stream_started_past_the_log_end(generated, caplog):
    """A stream whose startingOffsets is past a partition's latest offset: Spark's Kafka source takes the
    latest offset as the batch's end and, planning [start, latest) with latest < start, reports data
    loss (KafkaOffsetReader.getOffsetRangesFromResolvedOffsets: KAFKA_DATA_LOSS.PARTITION_OFFSET_CHANGED):
    failOnDataLoss=true fails the query; false logs it, and the next batches read from the latest
    offset on. kafkalog held the end at the start ("never move backwards"), so the query waited,
    silently, and then passed over every record below the asked offset."""
    from kafkafs.spark.errors import IllegalArgumentException
    from kafkafs.spark.source import KafkaLogStreamReader

    with LogDir(generated) as ld:
        latest = ld.log("orders-0").log_end_offset
    asked = {"path": str(generated), "subscribe": "orders",
             "startingOffsets": f'{{"orders": {{"0": {latest + 50}, "1": -2}}}}'}
    strict = KafkaLogStreamReader(asked)
    start = strict.initialOffset()
    end = strict.latestOffset(start, None)
    assert start["orders"]["0"] == latest + 50 and end["orders"]["0"] == latest
    with pytest.raises(IllegalArgumentException, match=f"Partition orders-0 offset was changed from {latest + 50} to "
                                                       f"{latest}. This could either be a user error"):
        strict.partitions(start, end)
    lenient = KafkaLogStreamReader({**asked, "failOnDataLoss": "false"})
    start = lenient.initialOffset()
    end = lenient.latestOffset(start, None)
    parts = lenient.partitions(start, end)
    assert {(p.topic, p.partition) for s in [x.value for x in parts] for p in s.pieces} == {("orders", 1)}
    assert f"Partition orders-0 offset was changed from {latest + 50} to {latest}" in caplog.text


def _append(logdir, n: int) -> None:
    from kafkafs.format.jsonview import ProducerRecord

    with LogDir(logdir, writable=True) as d:
        log_ = d.log("t-0") if (logdir / "t-0").exists() else d.create_partition("t", 0)
        start = log_.log_end_offset
        log_.append_records([ProducerRecord(1_763_700_000_000 + start + i, None, b"v%d" % i, ()) for i in range(n)])


def test_min_offsets_per_trigger_holds_a_micro_batch_back_until_max_trigger_delay(tmp_path):
    """review25 R25-5: minOffsetsPerTrigger and maxTriggerDelay were taken and did nothing (Spark's Kafka
    source holds a micro-batch back while fewer offsets than the minimum wait, for at most the delay)."""
    from kafkafs.spark.source import KafkaLogStreamReader

    _append(tmp_path, 5)
    reader = KafkaLogStreamReader({"path": str(tmp_path), "startingOffsets": "earliest",
                                   "minOffsetsPerTrigger": "10", "maxTriggerDelay": "1h"})
    start = reader.initialOffset()
    first = reader.latestOffset(start, None)  # the first trigger runs, as Spark's (its last trigger: never)
    assert first == {"t": {"0": 5}}
    _append(tmp_path, 3)
    assert reader.latestOffset(first, None) == first  # 3 < 10 waiting: no batch
    _append(tmp_path, 8)
    second = reader.latestOffset(first, None)
    assert second == {"t": {"0": 16}}  # 11 waiting
    _append(tmp_path, 1)
    assert reader.latestOffset(second, None) == second
    reader._delay.last_ms -= 3_600_000  # an hour later: the delay let it through
    assert reader.latestOffset(second, None) == {"t": {"0": 17}}
    now = KafkaLogStreamReader({"path": str(tmp_path), "startingOffsets": "earliest", "minOffsetsPerTrigger": "100"})
    begin = now.initialOffset()
    now.prepareForTriggerAvailableNow()  # reads what there is: it would wait for nothing
    assert now.latestOffset(begin, None) == {"t": {"0": 17}}


@pytest.mark.parametrize("options, said", [
    ({"minOffsetsPerTrigger": "50", "maxOffsetsPerTrigger": "10"},
     "The value of minOffsetPerTrigger(50) is higher than the maxOffsetsPerTrigger(10)."),
    ({"maxTriggerDelay": "soon"}, "option maxTriggerDelay: 'soon': Time must be specified as seconds (s)"),
    ({"maxRecordsPerPartition": "0"}, "maxRecordsPerPartition must be positive"),
])
def test_sparks_checks_of_the_trigger_options(options, said):
    with pytest.raises(InvalidInput) as caught:
        parse_read_options({"path": "/x", **options}, streaming=True)
    assert str(caught.value).startswith(said)


def test_options_kafkalog_does_not_apply_are_said(caplog):
    """R25-5: maxRecordsPerPartition (Spark splits a task at that many records) was passed over in silence;
    in a batch read the trigger options get Spark's own warnings."""
    import logging

    with caplog.at_level(logging.WARNING, logger="kafkafs.spark"):
        o = parse_read_options({"path": "/x", "maxRecordsPerPartition": "100", "minOffsetsPerTrigger": "5",
                                "maxTriggerDelay": "30s"})
    said = [r.getMessage() for r in caplog.records]
    assert said == ["minOffsetsPerTrigger option ignored in batch queries",
                    "maxTriggerDelay option ignored in batch queries",
                    "option maxRecordsPerPartition is not supported by kafkalog and is ignored: a task reads whole "
                    "batches, cut by bytes (maxBytesPerPartition; minPartitions for more tasks)"], said
    assert o.min_offsets_per_trigger == 5
    assert parse_read_options({"path": "/x", "maxTriggerDelay": "30s"}, streaming=True).max_trigger_delay_ms == 30_000
    assert parse_read_options({"path": "/x"}).max_trigger_delay_ms == 15 * 60_000  # Spark's default, 15m


def test_a_batch_read_only_warns_of_a_bad_max_trigger_delay(caplog):
    """review27 R27-4: a batch read (export) said "maxTriggerDelay option ignored in batch queries" and then
    failed on maxTriggerDelay=banana. Spark's batch Kafka read only warns of it (its micro-batch stream is
    what reads the time); a stream still refuses it."""
    import logging

    with caplog.at_level(logging.WARNING, logger="kafkafs.spark"):
        o = parse_read_options({"path": "/x", "maxTriggerDelay": "banana"})
    assert [r.getMessage() for r in caplog.records] == ["maxTriggerDelay option ignored in batch queries"]
    assert o.max_trigger_delay_ms == 15 * 60_000
    with pytest.raises(InvalidInput, match="option maxTriggerDelay: 'banana': Time must be specified"):
        parse_read_options({"path": "/x", "maxTriggerDelay": "banana"}, streaming=True)


def test_a_batch_read_only_warns_of_max_offsets_per_trigger(caplog):
    """review25 R25-6: maxOffsetsPerTrigger=-3 failed a batch read ("must be positive"); Spark's Kafka
    source warns that a batch read ignores it. A stream still refuses it."""
    import logging

    with caplog.at_level(logging.WARNING, logger="kafkafs.spark"):
        parse_read_options({"path": "/x", "maxOffsetsPerTrigger": "-3"})
    assert [r.getMessage() for r in caplog.records] == ["maxOffsetsPerTrigger option ignored in batch queries"]
    with pytest.raises(InvalidInput, match="maxOffsetsPerTrigger must be positive"):
        parse_read_options({"path": "/x", "maxOffsetsPerTrigger": "-3"}, streaming=True)
