"""Appending a DataFrame to a log directory: stage in the tasks, publish in the driver.

Spark may run a write task twice (a retry, a speculative copy) and may fail a job half way, so a task
never touches the log: it encodes its rows into v2 record batches (base offset 0, as a producer sends
them) in a staging file per topic-partition under ``LOGDIR/.kafkafs-staging/<job>/<task-attempt>/``
(or the ``stagingDir`` option) and reports the files in its commit message. Spark hands the driver
exactly one message per task, from the attempt that succeeded, so the files of failed or duplicate
attempts are never published.

``commit`` then (:mod:`kafkafs.spark.publish`) takes the log directory's lock (a writable
:class:`~kafkafs.storage.logdir.LogDir`), checks every staged batch first (CRC, ``max.message.bytes``
of its topic), and only then appends through the engine, which assigns offsets and keeps the indexes. If an append fails part way, every
partition is truncated back to where it was, so a job appends all of its rows or none; a driver killed
in the middle leaves its intent, which ``kafkafs recover`` takes out (:mod:`kafkafs.storage.publish_intent`). ``abort`` and
the end of ``commit`` delete the staging folder: a broker refuses to load a log directory with a
folder whose name is not ``<topic>-<partition>``, so nothing may be left behind.

Columns are those of Spark's Kafka sink: ``value`` (required, binary or string), ``key``, ``topic``
(or the ``topic`` option, which wins, as in Spark), ``partition``, ``headers``
(``array<struct<key: string, value: binary>>``) and ``timestamp`` (default: the time of the append).
A row without a partition goes where Kafka's default partitioner puts it among the topic's partitions
(as the log directory's KRaft metadata log names them, else its partition folders:
:mod:`kafkafs.spark.partitioner`); a topic that does not exist yet is created with the ``partitions``
option's number of partitions (default 1).

Batches are staged in the codec a broker stores them in (Kafka's ``LogValidator`` recompresses a
produce request to the topic's ``compression.type`` unless that is ``producer``): the topic's, from the
settings (option ``config``, options named like Kafka's settings, the ``ConfigRecord``s of the metadata
log); the writer's ``compression`` option only when the topic says ``producer``, as a producer's
``compression.type``. A timestamp before 1970 is refused, as Spark's Kafka sink refuses it (a Kafka
producer takes no negative timestamp), with the words of ``append``'s refusal.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..errors import InvalidInput
from ..format.appendlines import timestamp_out_of_range
from ..format.batch import batch_groups, encode_batch
from ..format.compression import Codec, codec_by_name
from ..storage.config import DEFAULTS, Settings
from ..storage.kraft import RecordedConfigs, recorded_topic_configs
from ..storage.names import STAGING_DIR_NAME, parse_partition_dir_name, refuse_internal_topic
from ..storage.safefiles import make_dir, open_file
from .partitioner import RowPartitioner

__all__ = [
    "StagedFile",
    "Stager",
    "start_job",
    "discard_job",
    "staging_root",
    "check_write_schema",
    "settings_from",
    "new_topic_partitions",
    "recorded_for_write",
]

ACTIVE = "ACTIVE"
BATCH_BYTES = 256 * 1024  # records per staged batch: well under the default max.message.bytes (1 MiB)
BATCH_RECORDS = 8192


@dataclasses.dataclass(frozen=True, slots=True)
class StagedFile:
    """One topic-partition's staging file of a task attempt, as its commit message names it."""

    topic: str
    partition: int
    path: str
    records: int
    batches: int
    size: int


def staging_root(logdir: str, staging_dir: str | None) -> Path:
    return Path(staging_dir) if staging_dir else Path(logdir) / STAGING_DIR_NAME


def settings_from(options: Mapping[str, Any]) -> Settings:
    """Topic settings for appends: the settings file (option ``config``, else kafkafs's default path)
    and any option named like a Kafka setting (``segment.bytes``, ``compression.type``, ...)."""
    opts = {str(k).lower(): v for k, v in options.items()}
    overrides = {k: v for k, v in opts.items() if k in DEFAULTS}
    return Settings.load(opts.get("config"), overrides)


def recorded_for_write(logdir: str) -> RecordedConfigs:
    """What the log directory's KRaft metadata log records (topic settings, partitions), read once in
    the driver and handed to the tasks (``topics`` None: no metadata log)."""
    return recorded_topic_configs(logdir, partitions=True)


def new_topic_partitions(options: Mapping[str, Any]) -> int:
    """The ``partitions`` option: how many partitions a topic created by a write gets (default 1)."""
    raw = {str(k).lower(): v for k, v in options.items()}.get("partitions")
    if raw is None:
        return 1
    try:
        n = int(raw)
    except ValueError:
        raise InvalidInput(f"option partitions: {raw!r} is not a whole number") from None
    if n <= 0:
        raise InvalidInput("option partitions must be positive")
    return n


# ---------------------------------------------------------------------------------------------- schema

_STRINGY = (pa.types.is_binary, pa.types.is_string, pa.types.is_large_binary, pa.types.is_large_string)


def check_write_schema(names_types: list[tuple[str, str]], topic_option: str | None) -> None:
    """Refuse, before any task runs, a DataFrame the Kafka sink would refuse (Spark simple type names)."""
    types = {n.lower(): t for n, t in names_types}
    if "value" not in types:
        raise InvalidInput("the DataFrame has no value column (kafkalog writes need value; key, topic, "
                           "partition, headers and timestamp are optional)")
    for name in ("key", "value"):
        if name in types and types[name] not in ("binary", "string"):
            raise InvalidInput(f"column {name} must be binary or string, not {types[name]}")
    if "topic" not in types and not topic_option:
        raise InvalidInput("no topic: give the DataFrame a topic column or set the topic option")
    if topic_option:
        refuse_internal_topic(topic_option)
    if "topic" in types and types["topic"] != "string":
        raise InvalidInput(f"column topic must be string, not {types['topic']}")
    if "partition" in types and types["partition"] not in ("int", "bigint", "smallint", "tinyint"):
        raise InvalidInput(f"column partition must be int, not {types['partition']}")
    if "timestamp" in types and types["timestamp"] not in ("timestamp", "timestamp_ntz"):
        raise InvalidInput(f"column timestamp must be timestamp, not {types['timestamp']}")
    if "headers" in types:
        t = types["headers"].replace(" ", "")
        if t not in ("array<struct<key:string,value:binary>>", "array<struct<key:string,value:string>>"):
            raise InvalidInput(f"column headers must be array<struct<key: string, value: binary>>, not {types['headers']}")


# ---------------------------------------------------------------------------------------------- tasks


def _as_bytes_list(column: pa.ChunkedArray | pa.Array) -> list[bytes | None]:
    t = column.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        column = column.cast(pa.large_binary() if pa.types.is_large_string(t) else pa.binary())
    return column.to_pylist()


def _headers_list(column: pa.Array) -> list[tuple[tuple[str, bytes | None], ...]]:
    out: list[tuple[tuple[str, bytes | None], ...]] = []
    for row in column.to_pylist():
        if not row:
            out.append(())
            continue
        items = []
        for h in row:
            if h is None or h.get("key") is None:
                raise InvalidInput("a header without a key cannot be written")
            v = h.get("value")
            items.append((h["key"], v.encode("utf-8") if isinstance(v, str) else v))
        out.append(tuple(items))
    return out


class _Pending:
    __slots__ = ("rows", "bytes", "file", "path", "records", "batches", "size", "limit", "codec")

    def __init__(self, path: Path, limit: int, codec: Codec) -> None:
        self.limit = limit  # the topic's max_batch_bytes: a staged batch larger is cut into several
        self.codec = codec  # the codec a broker stores the topic's batches in
        self.rows: list[tuple] = []
        self.bytes = 0
        self.path = path
        # closed in Stager.finish/discard; owned as its folder when running as root (safefiles)
        self.file = os.fdopen(open_file(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "wb")
        self.records = 0
        self.batches = 0
        self.size = 0


def start_job(root: Path, job_id: str, *, exist_ok: bool = False) -> None:
    """Create a job's staging folder and its ``ACTIVE`` marker (in the driver, before any task runs).

    Tasks only ever create their own folder inside it, never the job folder: once ``commit`` or
    ``abort`` removed it, a task that Spark has not stopped yet cannot bring it back.
    """
    job = root / job_id
    make_dir(job, parents=True, exist_ok=exist_ok)  # owned as LOGDIR when running as root (safefiles)
    os.close(open_file(job / ACTIVE, os.O_WRONLY | os.O_CREAT))


def _job_active(job: Path) -> bool:
    return (job / ACTIVE).exists()


class Stager:
    """One task attempt's staging: rows in, staged batch files out."""

    def __init__(
        self,
        root: Path,
        job_id: str,
        task_tag: str,
        *,
        topic: str | None,
        compression: str = "none",
        logdir: str | None = None,
        new_topic_partitions: int = 1,
        settings: Settings | None = None,
        recorded: RecordedConfigs | None = None,
    ) -> None:
        self.root = root
        self.settings = settings or Settings()
        if recorded is not None:  # what the metadata log records, below the settings given (SPEC §8)
            self.settings = self.settings.with_recorded(lambda: recorded)
        self.job = root / job_id
        self.dir = self.job / task_tag
        try:
            make_dir(self.dir)
        except FileNotFoundError:
            raise InvalidInput(f"write job {job_id} is over (its staging folder {self.job} is gone)") from None
        self.topic = topic
        self.codec = codec_by_name(compression)  # a producer's compression.type: for `producer` topics
        named = {t: parts for t, (_id, parts) in (recorded.topics or {}).items()} if recorded is not None else None
        self.partitioner = RowPartitioner(logdir or str(root.parent), new_topic_partitions, named)
        self._pending: dict[tuple[str, int], _Pending] = {}
        if not _job_active(self.job):
            self.discard()
            raise InvalidInput(f"write job {job_id} is over (aborted or committed)")

    def add(self, batch: pa.RecordBatch) -> None:
        """Stage one Arrow batch of rows (columns as the Kafka sink's)."""
        n = batch.num_rows
        if not n:
            return
        names = {name.lower(): i for i, name in enumerate(batch.schema.names)}

        def col(name: str) -> pa.Array | None:
            i = names.get(name)
            return None if i is None else batch.column(i)

        values = _as_bytes_list(col("value"))
        key_col = col("key")
        keys = _as_bytes_list(key_col) if key_col is not None else [None] * n
        topic_col = col("topic")
        topics = [self.topic] * n if self.topic or topic_col is None else topic_col.to_pylist()
        part_col = col("partition")
        partitions = [None] * n if part_col is None else part_col.to_pylist()
        ts_col = col("timestamp")
        if ts_col is None:
            stamps: list[int | None] = [None] * n
        else:
            micros = ts_col.cast(pa.int64()).to_pylist()
            stamps = [None if us is None else us // 1000 for us in micros]  # Spark's toMillis: floor
            for ms in stamps:
                if ms is not None and ms < 0:
                    raise InvalidInput(f"a row's {timestamp_out_of_range(ms)}: a Kafka producer takes no timestamp "
                                       "before 1970 (Spark's Kafka sink refuses it too); nothing is appended")
        hdr_col = col("headers")
        headers = _headers_list(hdr_col) if hdr_col is not None else [()] * n
        for i in range(n):
            topic = topics[i]
            if topic is None:
                raise InvalidInput("a row has a null topic (set the topic option or fill the topic column)")
            k, v, h = keys[i], values[i], headers[i]
            partition = partitions[i]
            if partition is None:
                partition = self.partitioner.partition(topic, k)
            key = (topic, partition)
            pending = self._pending.get(key)
            if pending is None:
                if partition < 0:
                    raise InvalidInput(f"partition {partition} of topic {topic!r} is negative")
                parse_partition_dir_name(f"{topic}-{partition}")  # InvalidName for a bad topic or partition
                refuse_internal_topic(topic)
                config = self.settings.for_topic(topic)
                codec = self.codec if config.compression_type == "producer" else codec_by_name(config.compression_type)
                pending = self._pending[key] = _Pending(
                    self.dir / f"{topic}-{partition}.batches", config.max_batch_bytes, codec
                )
            pending.rows.append((stamps[i], k, v, h))
            pending.bytes += 16 + (len(k) if k else 0) + (len(v) if v else 0) + sum(
                len(hk) + (len(hv) if hv else 0) for hk, hv in h
            )
            if pending.bytes >= BATCH_BYTES or len(pending.rows) >= BATCH_RECORDS:
                self._encode(pending)

    def _encode(self, pending: _Pending) -> None:
        if not pending.rows:
            return
        now = time.time_ns() // 1_000_000
        rows = [(now if ts is None else ts, k, v, h) for ts, k, v, h in pending.rows]
        groups = batch_groups(rows, pending.limit)
        data = b"".join(encode_batch(group, compression=pending.codec) for group in groups)
        pending.file.write(data)
        pending.records += len(rows)
        pending.batches += len(groups)
        pending.size += len(data)
        pending.rows = []
        pending.bytes = 0

    def finish(self) -> list[StagedFile]:
        """Flush, fsync and close every staging file; their descriptions go in the commit message."""
        out = []
        for (topic, partition), pending in self._pending.items():
            self._encode(pending)
            pending.file.flush()
            os.fsync(pending.file.fileno())
            pending.file.close()
            out.append(StagedFile(topic, partition, str(pending.path), pending.records, pending.batches, pending.size))
        if not _job_active(self.job):
            self.discard()
            raise InvalidInput(f"write job {self.job.name} is over (aborted or committed)")
        return out

    def discard(self) -> None:
        """Remove this attempt's files; when the job is already over (a task Spark stopped late), also
        the job folder and the staging root if they are left empty."""
        for pending in self._pending.values():
            pending.file.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        if not _job_active(self.job):
            for folder in (self.job, self.root):
                try:
                    folder.rmdir()
                except OSError:
                    break


def task_tag() -> str:
    """``<partition>-<attempt>-<random>`` from Spark's TaskContext (random alone outside a task)."""
    suffix = uuid.uuid4().hex[:8]
    try:
        from pyspark import TaskContext

        tc = TaskContext.get()
    except ImportError:
        tc = None
    if tc is None:
        return f"task-{suffix}"
    return f"task-{tc.partitionId()}-{tc.attemptNumber()}-{suffix}"


def discard_job(root: Path, job_id: str) -> None:
    """End a job: its ``ACTIVE`` marker first (so late tasks clean up after themselves), then its
    staging folder, then the staging root when it is left empty."""
    try:
        (root / job_id / ACTIVE).unlink()
    except FileNotFoundError:
        pass
    shutil.rmtree(root / job_id, ignore_errors=True)
    try:
        root.rmdir()
    except OSError:
        pass
