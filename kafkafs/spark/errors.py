"""The one exception the ``kafkalog`` source raises to Spark, shaped as far as PySpark lets a data source.

Spark's own Kafka source fails a bad read with ``java.lang.IllegalArgumentException: <message>``, raised
while the query is planned. A Python data source cannot raise a Java exception: whatever it raises in
the driver's planner arrives as ``AnalysisException [PYTHON_DATA_SOURCE_ERROR]`` carrying the Python
traceback (simplified: PySpark's own frames left out), and in a task as a failed stage carrying it. So
the source

- checks what it can while Spark plans (options, log directories, the write's lock), not in tasks;
- raises one class, :class:`IllegalArgumentException`, whatever kafkafs error or OS error it met, with
  that error's one line as its message (an OS error names its file: "cannot read ...: permission
  denied");
- raises it from the entry point Spark called (:func:`spark_errors`), so that the traceback Spark
  shows is that one frame, followed by ``kafkafs.spark.errors.IllegalArgumentException: <message>``.

Setting ``spark.sql.execution.pyspark.udf.hideTraceback.enabled=true`` leaves the message alone (for every
Python UDF and data source of the session).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

from ..errors import KafkafsError, one_line

__all__ = ["IllegalArgumentException", "spark_errors"]

F = TypeVar("F", bound=Callable[..., Any])


class IllegalArgumentException(KafkafsError):  # noqa: N818 - named as Spark's Kafka source's exception
    """Every error the kafkalog source raises to Spark (see the module docstring)."""


def spark_errors(method: F) -> F:
    """A data source entry point whose kafkafs and OS errors reach Spark as one
    :class:`IllegalArgumentException`, raised here afresh (one frame in Spark's traceback, also when
    entry points call each other). A generator method is wrapped too: its items are passed through,
    its errors converted."""
    import inspect

    if inspect.isgeneratorfunction(method):

        @functools.wraps(method)
        def generate(*args: Any, **kwargs: Any) -> Any:
            try:
                yield from method(*args, **kwargs)
            except (KafkafsError, OSError) as exc:
                raise IllegalArgumentException(one_line(exc)) from None

        return cast(F, generate)  # functools.wraps: the method's own name and signature

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except (KafkafsError, OSError) as exc:
            raise IllegalArgumentException(one_line(exc)) from None

    return cast(F, call)
