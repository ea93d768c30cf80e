"""Row predicates on ``topic``, ``partition``, ``offset`` and ``timestamp``, free of pyspark.

:func:`from_filters` turns the filters Spark pushes down (``pyspark.sql.datasource`` filter objects,
recognised by class name so that this module imports no pyspark) into :class:`Predicates`, and hands
back every filter it cannot apply exactly. The planner uses the predicates to prune partitions and
segments and to start scans at indexed positions; the scanner applies the offset and timestamp ones
row by row, so a claimed filter is always applied exactly.

Timestamps are kept in microseconds since the epoch (Spark's unit); Kafka's are milliseconds.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Iterable
from typing import Any

__all__ = ["IntBounds", "Predicates", "NO_PREDICATES", "from_filters", "timestamp_to_micros"]

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_MICRO = _dt.timedelta(microseconds=1)


@dataclasses.dataclass(frozen=True, slots=True)
class IntBounds:
    """``lo <= x <= hi`` (None: unbounded), and ``x in values`` when ``values`` is not None."""

    lo: int | None = None
    hi: int | None = None
    values: frozenset[int] | None = None

    def intersect(self, other: IntBounds) -> IntBounds:
        lo = other.lo if self.lo is None else self.lo if other.lo is None else max(self.lo, other.lo)
        hi = other.hi if self.hi is None else self.hi if other.hi is None else min(self.hi, other.hi)
        if self.values is None:
            values = other.values
        elif other.values is None:
            values = self.values
        else:
            values = self.values & other.values
        return IntBounds(lo, hi, values)

    @property
    def empty(self) -> bool:
        """True when no value can pass."""
        if self.lo is not None and self.hi is not None and self.lo > self.hi:
            return True
        return self.values is not None and not any(self.contains(v) for v in self.values)

    def contains(self, x: int) -> bool:
        if self.lo is not None and x < self.lo:
            return False
        if self.hi is not None and x > self.hi:
            return False
        return self.values is None or x in self.values

    def tightened(self) -> IntBounds:
        """The same set, with ``lo``/``hi`` narrowed to the smallest and largest allowed value."""
        if self.values is None:
            return self
        allowed = [v for v in self.values if self.contains(v)]
        if not allowed:
            return IntBounds(1, 0, frozenset())
        return IntBounds(min(allowed), max(allowed), frozenset(allowed))


@dataclasses.dataclass(frozen=True, slots=True)
class Predicates:
    """The conjunction of the claimed filters."""

    topics: frozenset[str] | None = None
    partition: IntBounds = IntBounds()
    offset: IntBounds = IntBounds()
    timestamp: IntBounds = IntBounds()  # microseconds since the epoch

    def accepts_topic(self, topic: str) -> bool:
        return self.topics is None or topic in self.topics

    def accepts_partition(self, topic: str, partition: int) -> bool:
        return self.accepts_topic(topic) and self.partition.contains(partition)

    @property
    def never(self) -> bool:
        """True when the filters contradict each other (no row can pass)."""
        return (
            (self.topics is not None and not self.topics)
            or self.partition.empty
            or self.offset.empty
            or self.timestamp.empty
        )


#: No filters at all.
NO_PREDICATES = Predicates()


def timestamp_to_micros(value: Any) -> int | None:
    """A timezone-aware ``datetime`` as microseconds since the epoch; None for anything else."""
    if isinstance(value, _dt.datetime) and value.tzinfo is not None:
        return (value - _EPOCH) // _MICRO
    return None


def _int_value(column: str, value: Any) -> int | None:
    if column == "timestamp":
        return timestamp_to_micros(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


_INT_COLUMNS = ("partition", "offset", "timestamp")
_NOT_NULL_COLUMNS = frozenset(("topic", "partition", "offset", "timestamp", "timestampType"))


def _column(flt: Any) -> str | None:
    attribute = getattr(flt, "attribute", None)
    if isinstance(attribute, tuple) and len(attribute) == 1 and isinstance(attribute[0], str):
        return attribute[0]
    return None


def _bounds_of(kind: str, column: str, value: Any) -> IntBounds | None:
    """The bounds one comparison filter sets on an integer column, or None if it is not exact here."""
    if kind == "In":
        if not isinstance(value, tuple | list) or not value:
            return None
        converted = [_int_value(column, v) for v in value]
        if any(v is None for v in converted):
            return None
        return IntBounds(values=frozenset(converted))  # type: ignore[arg-type]  # no None left (checked above)
    v = _int_value(column, value)
    if v is None:
        return None
    if kind in ("EqualTo", "EqualNullSafe"):
        return IntBounds(v, v, frozenset((v,)))
    if kind == "GreaterThan":
        return IntBounds(lo=v + 1)
    if kind == "GreaterThanOrEqual":
        return IntBounds(lo=v)
    if kind == "LessThan":
        return IntBounds(hi=v - 1)
    if kind == "LessThanOrEqual":
        return IntBounds(hi=v)
    return None


def from_filters(filters: Iterable[Any]) -> tuple[Predicates, list[Any]]:
    """Split pushed-down filters into the predicates applied here and the filters left for Spark."""
    topics: frozenset[str] | None = None
    bounds = {c: IntBounds() for c in _INT_COLUMNS}
    rest: list[Any] = []
    for flt in filters:
        kind = type(flt).__name__
        column = _column(flt)
        if column is None:
            rest.append(flt)
            continue
        if kind == "IsNotNull" and column in _NOT_NULL_COLUMNS:
            continue  # never null here: nothing to do
        value = getattr(flt, "value", None)
        if column == "topic":
            if kind in ("EqualTo", "EqualNullSafe") and isinstance(value, str):
                allowed = frozenset((value,))
            elif kind == "In" and isinstance(value, tuple | list) and value and all(isinstance(v, str) for v in value):
                allowed = frozenset(value)
            else:
                rest.append(flt)
                continue
            topics = allowed if topics is None else topics & allowed
            continue
        if column in bounds:
            b = _bounds_of(kind, column, value)
            if b is None:
                rest.append(flt)
                continue
            bounds[column] = bounds[column].intersect(b)
            continue
        rest.append(flt)
    preds = Predicates(
        topics=topics,
        partition=bounds["partition"].tightened(),
        offset=bounds["offset"].tightened(),
        timestamp=bounds["timestamp"].tightened(),
    )
    return preds, rest
