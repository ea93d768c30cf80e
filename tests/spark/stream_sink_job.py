"""A streaming query the sink's crash test runs in a subprocess: kafkalog in, kafkalog out.

    python stream_sink_job.py INPUT_LOGDIR OUTPUT_LOGDIR CHECKPOINT

Reads topic ``in`` from the start, 200 offsets a micro-batch, and appends key and value to topic ``out``
(2 partitions) with Trigger.AvailableNow, so it ends once everything present at the start is written.
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

from kafkafs.spark import register


def main() -> None:
    source, target, checkpoint = sys.argv[1:4]
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("kafkafs-sink-crash")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.python.authenticate.socketTimeout", "120s")  # a loaded host (review25 R25-7)
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")  # a short JVM
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    query = (
        spark.readStream.format("kafkalog")
        .option("topics", "in")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 200)
        .load(source)
        .selectExpr("key", "value")
        .writeStream.format("kafkalog")
        .option("topic", "out")
        .option("partitions", 2)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start(target)
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
