"""Appends through Spark: round trip, kafka-python, failed jobs, export."""

from __future__ import annotations

import time

import pyarrow.parquet as pq
import pytest

from kafkafs.errors import InvalidInput
from kafkafs.spark.export import export
from kafkafs.storage.logdir import LogDir

from .conftest import df_rows, engine_rows
from .helpers import flip_byte, kafka_python_decode

pytestmark = pytest.mark.spark


def _frame(spark, n: int):
    return spark.range(n).selectExpr(
        "CASE WHEN id % 3 = 0 THEN NULL ELSE CAST(id AS STRING) END AS key",
        "CAST(concat('value-', id) AS BINARY) AS value",
        "IF(id % 2 = 0, 'even', 'odd') AS topic",
        "CAST(id % 3 AS INT) AS partition",
        "IF(id % 4 = 0, array(named_struct('key', 'h', 'value', CAST('x' AS BINARY))), NULL) AS headers",
        "timestamp_millis(1763700000000 + id) AS timestamp",
    )


def test_write_round_trips_and_kafka_python_decodes(spark, tmp_path):
    out = tmp_path / "logs"
    out.mkdir()
    _frame(spark, 3000).repartition(3).write.format("kafkalog").mode("append").option("segment.bytes", 8192).save(str(out))
    assert not (out / ".kafkafs-staging").exists()
    back = df_rows(spark.read.format("kafkalog").option("includeHeaders", True).load(str(out)))
    assert back == engine_rows(out)
    assert len(back) == 3000
    assert {(r[0], r[1]) for r in back} == {(t, p) for t in ("even", "odd") for p in range(3)}
    values = sorted(r[6] for r in back)
    assert values == sorted(f"value-{i}".encode() for i in range(3000))
    for topic, partition, _offset, ts, _tt, key, value, headers in back:
        i = int(value[6:])
        assert (topic, partition, ts) == ("even" if i % 2 == 0 else "odd", i % 3, 1763700000000 + i)
        assert key == (None if i % 3 == 0 else str(i).encode())
        assert headers == ([("h", b"x")] if i % 4 == 0 else None)
    decoded = kafka_python_decode(out)
    assert sorted((d[0], d[1], d[2], d[3], d[4], d[5]) for d in decoded) == [r[:4] + r[5:7] for r in back]
    with LogDir(out) as ld:
        assert len(ld.log("even-0").segments) > 1
    # appending again continues the offsets; the topic option wins over the column; strings are fine;
    # without a partition column a key goes where Kafka's default partitioner puts it (kafka-python's)
    spark.createDataFrame([("k", "v")], "key string, value string").write.format("kafkalog").mode("append").option(
        "topic", "even"
    ).save(str(out))
    from kafka.partitioner.default import murmur2

    p = (murmur2(b"k") & 0x7FFFFFFF) % 3
    rows = [r for r in engine_rows(out) if r[:2] == ("even", p)]
    assert rows[-1][2] == len(rows) - 1 and rows[-1][5:7] == (b"k", b"v")


def test_failed_job_appends_nothing(spark, tmp_path):
    from pyspark.sql.functions import udf

    out = tmp_path / "logs"
    out.mkdir()
    spark.createDataFrame([("a",)], "value string").write.format("kafkalog").mode("append").option("topic", "t").save(str(out))

    @udf(returnType="string", useArrow=False)
    def explode_on_last(v):
        if v == "value-1999":
            raise ValueError("boom")
        return v

    df = spark.range(2000).selectExpr("concat('value-', id) AS value").repartition(4).select(explode_on_last("value").alias("value"))
    with pytest.raises(Exception, match="boom"):
        df.write.format("kafkalog").mode("append").option("topic", "t").save(str(out))
    assert [r[6] for r in engine_rows(out)] == [b"a"]
    deadline = time.monotonic() + 20  # tasks Spark cancels may still be stopping; they clean up too
    while (out / ".kafkafs-staging").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not (out / ".kafkafs-staging").exists()


def test_write_refusals(spark, tmp_path):
    with pytest.raises(Exception, match="no topic"):
        spark.createDataFrame([("a",)], "value string").write.format("kafkalog").mode("append").save(str(tmp_path))
    with pytest.raises(Exception, match="only appends"):
        spark.createDataFrame([("a",)], "value string").write.format("kafkalog").mode("overwrite").option("topic", "t").save(
            str(tmp_path)
        )


def test_export_parquet_and_csv(spark, generated, tmp_path, capsys):
    assert export([str(generated)], str(tmp_path / "pq"), topics=["orders", "audit"]) == 0
    table = pq.read_table(tmp_path / "pq")
    expect = [r for r in engine_rows(generated) if r[0] in ("orders", "audit")]
    assert table.num_rows == len(expect)
    assert sorted(table.column("value").to_pylist()) == sorted(r[6] for r in expect)
    err = capsys.readouterr().err
    assert f"export: {len(expect)} records" in err
    assert "\r" not in err, "progress is one line per change when stderr is not a terminal"
    assert export([str(generated)], str(tmp_path / "csv"), fmt="csv", topics=["audit"], progress=False) == 0
    lines = b"".join(p.read_bytes() for p in sorted((tmp_path / "csv").glob("part-*"))).decode().splitlines()
    assert lines[0].startswith("key,value,topic,partition,offset")
    assert len(lines) == 31
    with pytest.raises(InvalidInput, match="already exists"):
        export([str(generated)], str(tmp_path / "pq"))
    with pytest.raises(InvalidInput, match="unknown format"):
        export([str(generated)], str(tmp_path / "x"), fmt="avro")
    with pytest.raises(InvalidInput, match="no topic nosuch in"):  # not an empty export that looks fine
        export([str(generated)], str(tmp_path / "none"), topics=["audit", "nosuch"])
    assert not (tmp_path / "none").exists()
    assert spark.sparkContext._jsc is not None, "an existing session is left running"


def test_export_of_damaged_data_is_one_line(spark, generated, writable_copy, tmp_path):
    from kafkafs.errors import KafkafsError

    copy = writable_copy(generated)
    seg = flip_byte(copy / "audit-0" / f"{0:020d}.log", 300)
    with pytest.raises(KafkafsError) as info:
        export([str(copy)], str(tmp_path / "out"), topics=["audit"], progress=False)
    message = str(info.value)
    assert "\n" not in message and str(seg) in message and "position" in message
