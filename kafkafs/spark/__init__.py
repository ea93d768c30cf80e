"""kafkafs.spark: the ``kafkalog`` Spark data source (PySpark 4.1+ Python Data Source API).

    from kafkafs.spark import register
    register(spark)
    df = spark.read.format("kafkalog").load("/var/lib/kafka/data")

Planning (:mod:`kafkafs.spark.plan`) and scanning (:mod:`kafkafs.spark.scan`) need no SparkSession;
this package imports pyspark only when the data source class is asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .source import KafkaLogDataSource

__all__ = ["KafkaLogDataSource", "register"]


def register(spark: SparkSession, *, pushdown: bool | None = None) -> None:
    """Register ``kafkalog`` with ``spark``; with ``pushdown`` turn on Python filter push-down, which the
    source uses to prune partitions and segments by ``topic``, ``partition``, ``offset`` and ``timestamp``.

    ``pushdown=None`` (the default) turns it on only where Spark keeps push-down results per scan. Up to
    Spark 4.3 a DataFrame's pushed-down read is remembered by the relation, and a later query on the same
    DataFrame without filters reads with it (the rows of the earlier filter). There the source prunes by
    filters only after ``register(spark, pushdown=True)`` (for jobs that query each filtered DataFrame
    once); turning ``spark.sql.python.filterPushdown.enabled`` on by hand is not enough, so a session
    that enables it for other sources still reads kafkalog correctly. Options (``topics``,
    ``startingOffsets``, ``startingTimestamp``, ...) prune safely on every version.
    """
    from .source import KafkaLogDataSource, KafkaLogDataSourceWithPushdown, pushdown_is_scan_scoped

    if pushdown is None:
        pushdown = pushdown_is_scan_scoped()
    if pushdown:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(KafkaLogDataSourceWithPushdown if pushdown else KafkaLogDataSource)


def __getattr__(name: str) -> Any:
    if name == "KafkaLogDataSource":
        from .source import KafkaLogDataSource

        return KafkaLogDataSource
    raise AttributeError(name)
