"""Batch reads through a local Spark session."""

from __future__ import annotations

import json

import pytest

from kafkafs.spark.predicates import IntBounds, Predicates
from kafkafs.spark.source import pushdown_is_scan_scoped

from .conftest import BASE_TS, df_rows, engine_rows
from .helpers import flip_byte, plan

pytestmark = pytest.mark.spark


def kafka_schema(include_headers: bool):
    """Spark's Kafka source schema with headers, written out independently of kafkafs."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    return StructType(fields + [StructField("headers", ArrayType(header))] * include_headers)


def test_dataframe_equals_the_engine_row_for_row(spark, generated):
    assert spark.read.format("kafkalog").load(str(generated)).schema == kafka_schema(False)
    df = spark.read.format("kafkalog").option("includeHeaders", True).option("maxBytesPerPartition", 6000).option("includeHeaders", True).load(str(generated))
    assert df.schema == kafka_schema(True)
    assert df.rdd.getNumPartitions() == len(plan(generated, maxBytesPerPartition=6000).splits) > 4
    assert df_rows(df) == engine_rows(generated)


def test_offset_and_time_options(spark, generated):
    df = (
        spark.read.format("kafkalog").option("includeHeaders", True)
        .option("topics", "orders")
        .option("startingOffsets", json.dumps({"orders": {"0": 333, "1": -2}}))
        .option("endingOffsets", json.dumps({"orders": {"0": 444, "1": 17}}))
        .load(str(generated))
    )
    expect = [r for r in engine_rows(generated) if r[0] == "orders" and (333 <= r[2] < 444 if r[1] == 0 else r[2] < 17)]
    assert df_rows(df) == expect
    ts = BASE_TS + 2345
    df = spark.read.format("kafkalog").option("includeHeaders", True).option("topics", "events").option("startingTimestamp", ts).load(str(generated))
    events = [r for r in engine_rows(generated) if r[0] == "events"]
    first = next(r[2] for r in events if r[3] >= ts)
    assert df_rows(df) == [r for r in events if r[2] >= first]


def test_pushed_filters_prune_and_return_exact_rows(pushdown, generated):
    spark = pushdown
    lo, hi = BASE_TS + 2500, BASE_TS + 4000

    def load():
        return spark.read.format("kafkalog").option("includeHeaders", True).option("maxBytesPerPartition", 3000).load(str(generated))

    full = load().rdd.getNumPartitions()
    df = load().filter(f"topic = 'orders' AND partition = 1 AND offset >= 100 AND "
                       f"timestamp >= timestamp_millis({lo}) AND timestamp < timestamp_millis({hi})")
    expect = [r for r in engine_rows(generated) if r[:2] == ("orders", 1) and r[2] >= 100 and lo <= r[3] < hi]
    assert df_rows(df) == expect
    preds = Predicates(
        topics=frozenset({"orders"}),
        partition=IntBounds(1, 1, frozenset({1})),
        offset=IntBounds(lo=100),
        timestamp=IntBounds(lo * 1000, hi * 1000 - 1),
    )
    planned = plan(generated, preds, maxBytesPerPartition=3000)
    assert planned.segments_pruned > 0
    assert load().filter(f"topic = 'orders' AND partition = 1 AND offset >= 100 AND timestamp >= timestamp_millis({lo}) "
                         f"AND timestamp < timestamp_millis({hi})").rdd.getNumPartitions() == len(planned.splits) < full
    # filters the source cannot apply exactly are left to Spark
    df = load().filter("offset % 100 = 7 AND key IS NULL AND offset IN (7, 107, 207, 1007)")
    expect = [r for r in engine_rows(generated) if r[2] % 100 == 7 and r[5] is None and r[2] in (7, 107, 207, 1007)]
    assert df_rows(df) == expect


def test_reused_dataframe_stays_correct_with_default_registration(spark, generated):
    if pushdown_is_scan_scoped():
        assert spark.conf.get("spark.sql.python.filterPushdown.enabled") == "true"
    else:
        assert spark.conf.get("spark.sql.python.filterPushdown.enabled") == "false"
    df = spark.read.format("kafkalog").option("includeHeaders", True).load(str(generated))
    total = df.count()
    assert df.filter("topic = 'audit' AND offset < 10").count() == 10
    assert df.count() == total == len(engine_rows(generated))


def test_reused_dataframe_stays_correct_with_pushdown_enabled_by_hand(spark, generated):
    """A session that turns Python filter push-down on for other sources: on a Spark that keeps the
    pushed-down read on the relation, kafkalog claims no filter unless registered with pushdown=True."""
    key = "spark.sql.python.filterPushdown.enabled"
    before = spark.conf.get(key)
    spark.conf.set(key, "true")
    try:
        df = spark.read.format("kafkalog").option("includeHeaders", True).load(str(generated))
        assert df.filter("topic = 'audit' AND offset < 10").count() == 10
        assert df.count() == len(engine_rows(generated))
    finally:
        spark.conf.set(key, before)


def test_the_spark_bug_that_keeps_pushdown_off_by_default(pushdown, generated):
    """Why push-down needs register(spark, pushdown=True) on Spark 4.1 to 4.3: a later query on the
    same DataFrame without pushable filters reads with the earlier query's pruned plan. When this test
    fails, the installed Spark no longer has the bug: check pushdown_is_scan_scoped() on it."""
    df = pushdown.read.format("kafkalog").option("includeHeaders", True).load(str(generated))
    assert df.filter("topic = 'audit' AND offset < 10").count() == 10
    total = len(engine_rows(generated))
    if pushdown_is_scan_scoped():
        assert df.count() == total
    else:
        assert df.count() == 10 != total
    assert pushdown.read.format("kafkalog").option("includeHeaders", True).load(str(generated)).count() == total


def test_broker_directories(spark, fixtures_dir):
    for name in ("kafka-logs-a", "kafka-logs-b"):
        path = fixtures_dir / name
        rows = df_rows(spark.read.format("kafkalog").option("includeHeaders", True).load(str(path)))
        assert rows == engine_rows(path), name
        assert rows
    both = spark.read.format("kafkalog").option("includeHeaders", True).load([str(fixtures_dir / "kafka-logs-a"), str(fixtures_dir / "kafka-logs-b")])
    assert both.count() == len(engine_rows(fixtures_dir / "kafka-logs-a")) + len(engine_rows(fixtures_dir / "kafka-logs-b"))
    wanjohi = spark.read.format("kafkalog").option("includeHeaders", True).option("path", str(fixtures_dir / "kafka-logs-*")).option("topics", "wanjohi")
    headers = [r.headers for r in wanjohi.load().orderBy("offset").collect()]
    assert any(h and h[0].key == "__TypeId__" for h in headers)


def test_corrupt_input(spark, generated, writable_copy):
    copy = writable_copy(generated)
    seg = flip_byte(copy / "orders-1" / f"{120:020d}.log", 2000)
    with pytest.raises(Exception) as info:
        spark.read.format("kafkalog").option("includeHeaders", True).load(str(copy)).count()
    message = str(info.value)
    assert str(seg) in message and "position" in message and "onCorrupt=skip" in message
    skipped = spark.read.format("kafkalog").option("includeHeaders", True).option("onCorrupt", "skip").load(str(copy))
    full = engine_rows(generated)
    got = df_rows(skipped)
    assert 0 < len(full) - len(got) <= 10
    assert all(r in full for r in got)


def test_a_data_batch_damaged_to_say_control_fails_the_read(spark, generated, writable_copy):
    """R23-12: one bit (attributes bit 5, "control") flipped in a data batch: its CRC fails, and the read
    left the batch out with no word (onCorrupt=fail): the header was trusted before the CRC."""
    from kafkafs.storage.logdir import LogDir

    with LogDir(generated) as ld:
        views = [(seg.base_offset, v.position) for seg, v in ld.log("orders-1").batches()]
    base, pos = views[len(views) // 2]
    seg = copy_seg = writable_copy(generated) / "orders-1" / f"{base:020d}.log"
    data = bytearray(seg.read_bytes())
    data[pos + 22] ^= 0x20
    copy_seg.write_bytes(bytes(data))
    with pytest.raises(Exception) as info:
        spark.read.format("kafkalog").option("topics", "orders").load(str(seg.parent.parent)).count()
    message = str(info.value)
    assert str(seg) in message and f"position {pos}: CRC mismatch" in message and "onCorrupt=skip" in message


def test_bad_option_or_schema_is_one_clear_error(spark, generated):
    with pytest.raises(Exception, match="option onCorrupt"):
        spark.read.format("kafkalog").option("includeHeaders", True).option("onCorrupt", "maybe").load(str(generated)).count()
    with pytest.raises(Exception, match="fixed schema"):
        spark.read.format("kafkalog").schema("value string").load(str(generated)).count()
