"""The row shape of the ``kafkalog`` source: exactly the schema of Spark's own Kafka source.

Seven columns by default; ``includeHeaders=true`` adds ``headers`` (``null`` for a record without
headers, never an empty array), as in Spark. Every field is nullable, as in Spark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = ["SCHEMA_DDL", "ARROW_SCHEMA", "ARROW_SCHEMA_NO_HEADERS", "arrow_schema", "HEADERS_ARROW_TYPE", "TIMESTAMP_ARROW_TYPE", "spark_schema"]

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

ARROW_SCHEMA_NO_HEADERS = ARROW_SCHEMA.remove(ARROW_SCHEMA.get_field_index("headers"))


def arrow_schema(include_headers: bool) -> pa.Schema:
    return ARROW_SCHEMA if include_headers else ARROW_SCHEMA_NO_HEADERS


def spark_schema(include_headers: bool = True) -> StructType:
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
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)
