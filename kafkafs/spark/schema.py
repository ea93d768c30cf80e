"""The row shape of the ``kafkalog`` source: exactly the schema of Spark's own Kafka source.

Headers are always included (SPEC §5), as Spark's ``includeHeaders=true`` gives them: ``null`` for a
record without headers, never an empty array. Every field is nullable, as in Spark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = ["SCHEMA_DDL", "ARROW_SCHEMA", "HEADERS_ARROW_TYPE", "TIMESTAMP_ARROW_TYPE", "spark_schema"]

SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "timestampType int, headers array<struct<key: string, value: binary>>"
)

HEADERS_ARROW_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
#: What Spark's Arrow conversion expects for a ``timestamp`` column (microseconds, UTC).
TIMESTAMP_ARROW_TYPE = pa.timestamp("us", tz="UTC")

#: The Arrow schema a ``read()`` must yield; Spark checks it with ``Schema.equals``.
ARROW_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", TIMESTAMP_ARROW_TYPE),
        ("timestampType", pa.int32()),
        ("headers", HEADERS_ARROW_TYPE),
    ]
)


def spark_schema() -> StructType:
    """The Spark ``StructType`` (built on demand so that planning code needs no pyspark)."""
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

    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    return StructType(
        [
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("timestamp", TimestampType()),
            StructField("timestampType", IntegerType()),
            StructField("headers", ArrayType(header)),
        ]
    )
