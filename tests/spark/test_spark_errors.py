"""Errors from the kafkalog source as Spark's Kafka source raises them, as far as PySpark lets a data
source shape them: found while Spark plans (before any task runs), one exception class
(``kafkafs.spark.errors.IllegalArgumentException``), its message one line after a traceback of one
frame; and a write that finds another writer's ``.lock`` fails while it plans, naming the process."""

from __future__ import annotations

import re

import pytest

from kafkafs.spark.errors import IllegalArgumentException, spark_errors
from kafkafs.storage.logdir import LogDir
from tests.storage.helpers import lock_held

from .helpers import flip_byte

pytestmark = pytest.mark.spark

LINE = re.compile(r"^kafkafs\.spark\.errors\.IllegalArgumentException: (.*)$", re.M)


def _failure(action) -> tuple[Exception, str]:
    """The exception ``action`` raised, and the kafkalog message in it (exactly one)."""
    with pytest.raises(Exception) as raised:
        action()
    text = str(raised.value)
    found = LINE.findall(text)
    assert len(found) == 1, text
    return raised.value, found[0].removesuffix(" SQLSTATE: 38000").strip()


def _planning_error(exc: Exception) -> None:
    """Raised by Spark's planner (an AnalysisException), with one frame of traceback, not by a task."""
    from pyspark.errors import AnalysisException

    assert isinstance(exc, AnalysisException), type(exc)
    assert exc.getCondition() == "PYTHON_DATA_SOURCE_ERROR"
    text = str(exc)
    assert text.count('  File "') == 1, text  # the entry point Spark called, nothing below it
    assert "Job aborted" not in text and "Task" not in text


def test_read_errors_come_from_planning_in_one_class(spark, generated, tmp_path):
    cases = [
        (lambda: spark.read.format("kafkalog").load(str(tmp_path / "missing")).count(),
         f"{tmp_path / 'missing'}: no such log directory"),
        (lambda: spark.read.format("kafkalog").option("startingOffsets", "latest").load(str(generated)).count(),
         "starting offset can't be latest for batch queries on Kafka"),
        (lambda: spark.read.format("kafkalog").option("subscribe", "orders").option("assign", '{"orders": [0]}')
         .load(str(generated)).count(),
         "Only one of the following options can be specified for Kafka source: subscribe, subscribepattern, "
         "assign. See the docs for more details."),
        (lambda: spark.read.format("kafkalog").option("minPartitions", "x").load(str(generated)).count(),
         "option minPartitions: 'x' is not a whole number"),
        # review25 R25-1: a JSON naming a topic not read (it read every row of orders)
        (lambda: spark.read.format("kafkalog").option("subscribe", "orders")
         .option("startingOffsets", '{"order": {"0": 5, "1": 5}}').load(str(generated)).count(),
         "option startingOffsets: Partitions specified for Kafka start offsets don't match what are assigned. "
         "Maybe topic partitions are created or deleted while the query is running. Use -1 for latest, -2 for "
         "earliest. Specified: Set(order-0, order-1) Assigned: Set(orders-0, orders-1)"),
        # review25 R25-4: subscribe to a topic that is not there (it read 0 rows)
        (lambda: spark.read.format("kafkalog").option("subscribe", "nosuch").load(str(generated)).count(),
         f"UnknownTopicOrPartitionException: This server does not host this topic-partition: no topic nosuch in "
         f"{generated}"),
    ]
    for action, message in cases:
        exc, said = _failure(action)
        assert said == message
        _planning_error(exc)


@pytest.fixture
def held(generated, writable_copy, tmp_path):
    """A copy of the generated log directory whose lock another process (a --rw mount's stand-in) holds."""
    copy = writable_copy(generated)
    with lock_held(copy, tmp_path) as pid:
        yield copy, pid


def test_a_write_finds_the_lock_while_it_plans(spark, held):
    copy, pid = held
    frame = spark.createDataFrame([("k", "v")], "key string, value string")

    def write():
        frame.write.format("kafkalog").mode("append").option("topic", "orders").save(str(copy))

    exc, said = _failure(write)
    _planning_error(exc)
    assert said.startswith(f"{copy} is locked by another writer: process {pid} (")
    assert f"holds {copy}/.lock; stop that writer" in said
    # nothing ran: no task staged anything, nothing was appended
    assert not (copy / ".kafkafs-staging").exists()
    with LogDir(copy) as ld:
        assert ld.log("orders-0").log_end_offset == 1000


def test_a_stream_write_finds_the_lock_when_it_starts(spark, held, tmp_path):
    copy, pid = held
    query = (spark.readStream.format("rate").option("rowsPerSecond", 1).load()
             .selectExpr("CAST(value AS STRING) AS value")
             .writeStream.format("kafkalog").option("topic", "orders")
             .option("checkpointLocation", str(tmp_path / "cp")).start(str(copy)))
    try:
        with pytest.raises(Exception) as raised:
            query.awaitTermination(60)
        assert f"process {pid} (" in str(raised.value)
    finally:
        query.stop()


def test_a_write_to_a_missing_directory_fails_while_it_plans(spark, tmp_path):
    frame = spark.createDataFrame([("v",)], "value string")
    exc, said = _failure(lambda: frame.write.format("kafkalog").mode("append").option("topic", "t")
                         .save(str(tmp_path / "nope")))
    _planning_error(exc)
    assert said == f"{tmp_path / 'nope'}: no such log directory (a write appends to an existing one)"


def test_a_write_to_a_kafka_internal_topic_fails_in_one_line(spark, tmp_path):
    # a broker refuses client writes to its internal topics; kafkalog appended to them
    frame = spark.createDataFrame([("v",)], "value string")
    exc, said = _failure(lambda: frame.write.format("kafkalog").mode("append").option("topic", "__consumer_offsets")
                         .save(str(tmp_path)))
    _planning_error(exc)  # the topic option: while Spark plans
    assert said.startswith("__consumer_offsets is a Kafka internal topic")
    rows = spark.createDataFrame([("v", "__cluster_metadata")], "value string, topic string")
    _exc, said = _failure(lambda: rows.write.format("kafkalog").mode("append").save(str(tmp_path)))
    assert said.startswith("__cluster_metadata is a Kafka internal topic")  # a topic column: in the task
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("__")]


def test_task_errors_are_the_same_class(spark, generated, writable_copy):
    copy = writable_copy(generated)
    seg = flip_byte(copy / "audit-0" / f"{0:020d}.log", 300)
    _exc, said = _failure(lambda: spark.read.format("kafkalog").option("subscribe", "audit").load(str(copy)).count())
    assert said.startswith(f"{seg}: position ")


def test_spark_errors_converts_kafkafs_and_os_errors():
    from kafkafs.errors import InvalidInput, tag_os_error

    @spark_errors
    def bad_option():
        raise InvalidInput("option x: nope")

    @spark_errors
    def denied():
        raise tag_os_error(PermissionError(13, "Permission denied", "/data/.lock"), "take {path}")

    @spark_errors
    def rows():
        yield 1
        raise InvalidInput("later")

    with pytest.raises(IllegalArgumentException, match="^option x: nope$"):
        bad_option()
    with pytest.raises(IllegalArgumentException, match="^cannot take /data/.lock: permission denied$"):
        denied()
    it = rows()
    assert next(it) == 1
    with pytest.raises(IllegalArgumentException, match="^later$"):
        next(it)
