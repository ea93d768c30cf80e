"""The ``kafkalog`` data source: thin pyspark classes over :mod:`plan`, :mod:`scan`, :mod:`write`
and :mod:`stream`, which hold the logic and need no Spark to test.

Filter push-down needs ``spark.sql.python.filterPushdown.enabled=true`` (:func:`kafkafs.spark.register`
sets it where that is safe, see :func:`pushdown_is_scan_scoped`; on Spark 4.1 to 4.3 the source prunes
by filters only when registered with ``pushdown=True``, whatever the setting). Spark refuses to plan a reader that
implements ``pushFilters`` while the setting is off, so when the caller's frame shows push-down is off
the source hands out a reader without it; reads then work either way, only without pruning by filters.
"""

from __future__ import annotations

import logging
import os
import sys
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from ..errors import InvalidInput
from ..storage.dirlock import check_not_locked
from .errors import spark_errors
from .options import parse_read_options
from .plan import ScanSpec, Split, plan_ranges, plan_read
from .predicates import Predicates, from_filters
from .publish import commit_staged
from .scan import freeze_worker_heap, read_split
from .schema import spark_schema
from .sink import clear_staging, commit_micro_batch, sink_dir
from .stream import (
    TriggerDelay,
    cap_offsets,
    from_json,
    initial_offsets,
    log_ends,
    micro_batch_ranges,
    to_json,
)
from .write import (
    StagedFile,
    Stager,
    check_write_schema,
    discard_job,
    new_topic_partitions,
    recorded_for_write,
    settings_from,
    staging_root,
    start_job,
    task_tag,
)

try:  # Spark 4.2+: admission control and Trigger.AvailableNow for Python streaming sources
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # Spark 4.1
    ReadAllAvailable = ReadMaxRows = None  # type: ignore[assignment,misc]  # a PySpark without them
    SupportsTriggerAvailableNow = object  # type: ignore[assignment,misc]  # a PySpark without it

__all__ = ["KafkaLogDataSource", "KafkaLogDataSourceWithPushdown", "KafkaLogInputPartition"]

log = logging.getLogger("kafkafs.spark")


def pushdown_is_scan_scoped() -> bool:
    """True when this Spark keeps the read planned by filter push-down with the scan it was planned for.

    Spark 4.1 to 4.3 store it on the relation (``PythonDataSourceV2.setReadInfo``), so a later query
    on the same DataFrame with no pushable filter reuses the earlier query's pruned read and returns too
    few rows. The fix came with limit push-down (SPARK-58551), whose ``DataSourceReader.pushLimit``
    marks a fixed pyspark.
    """
    return hasattr(DataSourceReader, "pushLimit")


def _pushdown_disabled_by_caller() -> bool:
    """True when the Spark planner calling ``reader()`` has push-down turned off (see the module doc)."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(4):
        if frame is None:
            return False
        if frame.f_locals.get("enable_pushdown") is False:
            return True
        frame = frame.f_back
    return False


class KafkaLogInputPartition(InputPartition):
    """One :class:`~kafkafs.spark.plan.Split`: the pieces one task reads."""

    def __init__(self, split: Split) -> None:
        super().__init__(split)

    @property
    def split(self) -> Split:
        return self.value


def _input_partitions(splits: list[Split], spec: ScanSpec) -> list[KafkaLogInputPartition]:
    if not splits:
        return [KafkaLogInputPartition(Split((), spec))]
    return [KafkaLogInputPartition(s) for s in splits]


class KafkaLogDataSource(DataSource):
    """``spark.read.format("kafkalog").load(LOGDIR)``, ``df.write.format("kafkalog")``, ``readStream``."""

    #: Prune by pushed-down filters on a Spark that keeps the pushed-down read on the relation (4.1 to
    #: 4.3, see :func:`pushdown_is_scan_scoped`); :func:`kafkafs.spark.register` with ``pushdown=True``
    #: registers :class:`KafkaLogDataSourceWithPushdown`, which sets it.
    filter_pushdown = False

    @classmethod
    def name(cls) -> str:
        return "kafkalog"

    @spark_errors
    def schema(self) -> StructType:
        """Spark's Kafka schema: 7 columns, and ``headers`` with ``includeHeaders=true``."""
        return spark_schema(parse_read_options(self.options, writing=True).include_headers)

    @spark_errors
    def reader(self, schema: StructType) -> DataSourceReader:
        options = parse_read_options(self.options)
        expected = spark_schema(options.include_headers)
        if schema.simpleString() != expected.simpleString():
            raise InvalidInput("Kafka source has a fixed schema and cannot be set with a custom one "
                               f"({expected.simpleString()}, not {schema.simpleString()})")
        if _pushdown_disabled_by_caller() or not (self.filter_pushdown or pushdown_is_scan_scoped()):
            # without pushFilters Spark keeps every filter and this reader plans the whole read, so
            # a read plan that Spark reuses for a later query on the same DataFrame is still right
            return KafkaLogReader(options)
        return KafkaLogPushdownReader(options)

    @spark_errors
    def writer(self, schema: StructType, overwrite: bool) -> KafkaLogWriter:
        if overwrite:
            raise InvalidInput("kafkalog only appends: use mode('append')")
        return KafkaLogWriter(dict(self.options), schema)

    @spark_errors
    def streamWriter(self, schema: StructType, overwrite: bool) -> KafkaLogStreamWriter:
        return KafkaLogStreamWriter(dict(self.options), schema)

    @spark_errors
    def streamReader(self, schema: StructType) -> KafkaLogStreamReader:
        return KafkaLogStreamReader(dict(self.options))


class KafkaLogDataSourceWithPushdown(KafkaLogDataSource):
    """``kafkalog`` with filter push-down asked for explicitly (``register(spark, pushdown=True)``)."""

    filter_pushdown = True


# ---------------------------------------------------------------------------------------------- batch read


class KafkaLogReader(DataSourceReader):
    def __init__(self, options: Any) -> None:
        self.options = options
        self.predicates = Predicates()

    @spark_errors
    def partitions(self) -> Sequence[InputPartition]:
        plan = plan_read(self.options, self.predicates)
        log.info("kafkalog: %d splits, %d of %d segments pruned", len(plan.splits), plan.segments_pruned,
                 plan.segments_total)
        return _input_partitions(plan.splits, ScanSpec.of(self.options, self.predicates))

    @spark_errors
    def read(self, partition: InputPartition) -> Iterator[Any]:
        freeze_worker_heap()
        yield from read_split(partition.value)


class KafkaLogPushdownReader(KafkaLogReader):
    @spark_errors
    def pushFilters(self, filters: list[Any]) -> list[Any]:
        self.predicates, rest = from_filters(filters)
        return rest


# ---------------------------------------------------------------------------------------------- write


class KafkaLogCommitMessage(WriterCommitMessage):
    def __init__(self, files: list[StagedFile]) -> None:
        self.files = files


class _Staging:
    """What the batch and the streaming writer share: their options, checked in the driver before any
    task runs, and a task's staging of its rows (:class:`~kafkafs.spark.write.Stager`)."""

    def _setup(self, options: dict[str, Any], schema: StructType, where: str) -> Any:
        read_opts = parse_read_options(options, writing=True)
        if len(read_opts.paths) != 1:
            raise InvalidInput(f"write to exactly one log directory: {where}")
        self.logdir = read_opts.paths[0]
        self.topic = read_opts.topic
        self.compression = read_opts.compression
        self.new_topic_partitions = new_topic_partitions(options)
        self.options = options
        check_write_schema([(f.name, f.dataType.simpleString()) for f in schema.fields], self.topic)
        settings_from(options)  # a bad setting fails here, before any task runs
        if not os.path.isdir(self.logdir):
            raise InvalidInput(f"{self.logdir}: no such log directory (a write appends to an existing one)")
        # the topics' settings and partitions a KRaft broker recorded: the tasks stage by them
        self.recorded = recorded_for_write(self.logdir)
        # another writer's lock (a broker, a kafkafs mount --rw) fails the write now, before a task runs,
        # naming the process that holds it; commit takes the lock itself
        check_not_locked(self.logdir)
        return read_opts

    @spark_errors
    def _stage(self, staging: str, job_id: str, iterator: Iterator[Any]) -> KafkaLogCommitMessage:
        stager = Stager(
            Path(staging),
            job_id,
            task_tag(),
            topic=self.topic,
            compression=self.compression,
            logdir=self.logdir,
            new_topic_partitions=self.new_topic_partitions,
            settings=settings_from(self.options),
            recorded=self.recorded,
        )
        try:
            for batch in iterator:
                stager.add(batch)
            return KafkaLogCommitMessage(stager.finish())
        except BaseException:
            stager.discard()
            raise


class KafkaLogWriter(_Staging, DataSourceArrowWriter):
    @spark_errors
    def __init__(self, options: dict[str, Any], schema: StructType) -> None:
        read_opts = self._setup(options, schema, "save(LOGDIR)")
        self.staging = str(staging_root(self.logdir, read_opts.staging_dir))
        self.job_id = f"job-{uuid.uuid4().hex}"
        start_job(Path(self.staging), self.job_id)

    def write(self, iterator: Iterator[Any]) -> KafkaLogCommitMessage:
        return self._stage(self.staging, self.job_id, iterator)

    @spark_errors
    def commit(self, messages: list[Any]) -> None:
        files = [f for m in messages if m is not None for f in m.files]
        try:
            appended = commit_staged(
                self.logdir, files, settings_from(self.options), new_topic_partitions=self.new_topic_partitions,
                job=self.job_id,
            )
            for (topic, partition), (first, last) in sorted(appended.items()):
                log.info("kafkalog: appended %s-%d offsets %d..%d", topic, partition, first, last)
        finally:
            discard_job(Path(self.staging), self.job_id)

    def abort(self, messages: list[Any]) -> None:
        discard_job(Path(self.staging), self.job_id)


class KafkaLogStreamWriter(_Staging, DataSourceStreamArrowWriter):
    """``writeStream.format("kafkalog")``: tasks stage as batch writes do; ``commit`` appends a
    micro-batch exactly once (see :mod:`kafkafs.spark.sink`)."""

    JOB = "stream"

    @spark_errors
    def __init__(self, options: dict[str, Any], schema: StructType) -> None:
        self._setup(options, schema, "start(LOGDIR) or option path")
        lowered = {str(k).lower(): v for k, v in options.items()}
        self.sink = str(sink_dir(lowered.get("checkpointlocation"), lowered.get("sinklog")))
        self.staging = str(Path(self.sink) / "staging")
        # Spark builds this writer again where it runs commit: nothing here may touch staged files

    def write(self, iterator: Iterator[Any]) -> KafkaLogCommitMessage:
        start_job(Path(self.staging), self.JOB, exist_ok=True)
        return self._stage(self.staging, self.JOB, iterator)

    def _clear_tasks(self) -> None:
        """Remove every task's staging: Spark runs micro-batches one after the other, so at a commit or
        an abort they are this batch's, its failed attempts' or a killed run's."""
        clear_staging(Path(self.staging) / self.JOB)

    @spark_errors
    def commit(self, messages: list[Any], batchId: int) -> None:  # noqa: N803 - Spark's name
        files = [f for m in messages if m is not None for f in m.files]
        try:
            appended = commit_micro_batch(
                self.logdir, Path(self.sink), batchId, files, settings_from(self.options),
                new_topic_partitions=self.new_topic_partitions,
            )
            for name, (first, last) in sorted((appended or {}).items()):
                log.info("kafkalog: micro-batch %d appended %s offsets %d..%d", batchId, name, first, last)
        finally:
            self._clear_tasks()

    def abort(self, messages: list[Any], batchId: int) -> None:  # noqa: N803
        self._clear_tasks()


# ---------------------------------------------------------------------------------------------- stream


class KafkaLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of new records, offsets per partition (see :mod:`kafkafs.spark.stream`)."""

    @spark_errors
    def __init__(self, options: dict[str, Any]) -> None:
        self.options = parse_read_options(options, streaming=True)
        self._last: dict | None = None  # Spark 4.1 calls latestOffset() without the start
        self._available_now: dict[tuple[str, int], int] | None = None
        least = self.options.min_offsets_per_trigger
        self._delay = None if least is None else TriggerDelay(least, self.options.max_trigger_delay_ms)

    @spark_errors
    def initialOffset(self) -> dict:
        offsets = to_json(initial_offsets(self.options))
        self._last = offsets
        return offsets

    def getDefaultReadLimit(self) -> Any:
        n = self.options.max_offsets_per_trigger
        if ReadMaxRows is None:
            return None
        return ReadMaxRows(n) if n else ReadAllAvailable()

    @spark_errors
    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = log_ends(self.options)[1]

    @spark_errors
    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        log_starts, ends = log_ends(self.options)
        if self._available_now is not None:
            ends = {k: min(v, self._available_now.get(k, v)) for k, v in ends.items() if k in self._available_now}
        begin = from_json(start if start is not None else self._last)
        begin = {k: begin.get(k, log_starts[k]) for k in ends}
        # minOffsetsPerTrigger: too few new offsets, and the last batch less than maxTriggerDelay ago: no
        # batch (Trigger.AvailableNow reads what there is: it would wait for nothing)
        if self._delay is not None and self._available_now is None and self._delay.holds(begin, ends):
            held = start if start is not None else self._last
            if held is not None:
                return held
        # an end below the start (a start past the log end, a truncated log) stays: planning it is data
        # loss, as in Spark (micro_batch_ranges)
        if limit is None:
            max_rows = self.options.max_offsets_per_trigger
        elif ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows
        else:
            max_rows = None
        result = to_json(cap_offsets(begin, ends, max_rows))
        if start is None:
            self._last = result
        return result

    @spark_errors
    def reportLatestOffset(self) -> dict | None:
        return to_json(log_ends(self.options)[1])

    @spark_errors
    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        ranges = micro_batch_ranges(self.options, from_json(start), from_json(end))
        plan = plan_ranges(self.options, ranges)
        return [KafkaLogInputPartition(s) for s in plan.splits]

    @spark_errors
    def read(self, partition: InputPartition) -> Iterator[Any]:
        freeze_worker_heap()
        yield from read_split(partition.value)

    def commit(self, end: dict) -> None:
        self._last = end
