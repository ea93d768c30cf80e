"""Publishing a write's staged files (in the driver): check every staged batch, then append them all
under the log directory's lock, or none (:mod:`kafkafs.spark.write` says how the tasks stage them). An
error truncates every partition back; a driver killed in the middle leaves its intent, which
``recover`` acts on (:mod:`kafkafs.storage.publish_intent`).

Functions only; they run in the driver, one commit at a time (the log directory's lock).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

from ..errors import CorruptRecordError, InvalidInput, RecordTooLargeError
from ..format.batch import LOG_OVERHEAD, batch_header_at, read_batch_header, validate_batch
from ..storage.config import Settings, SettingsUnreadable, recorded_refusal
from ..storage.kraft import METADATA_PARTITION, recorded_topic_configs
from ..storage.log import Log
from ..storage.logdir import LogDir
from ..storage.publish_intent import clear_intent, unfinished_writes, write_intent
from .partitioner import topic_partition_count, topic_partition_folders
from .write import StagedFile

__all__ = ["commit_staged", "append_staged", "check_staged", "staged_batches", "create_topics", "intent_of"]

log = logging.getLogger("kafkafs.spark")


def staged_batches(path: str) -> Iterator[bytes]:
    """The batches of a staging file, one ``bytes`` each; CorruptRecordError for a damaged file."""
    with open(path, "rb") as f:
        position = 0
        while True:
            prefix = f.read(LOG_OVERHEAD)
            if not prefix:
                return
            if len(prefix) < LOG_OVERHEAD:
                raise CorruptRecordError("staged batch cut short", position, path)
            length = int.from_bytes(prefix[8:12], "big", signed=True)
            rest = f.read(max(length, 0))
            if length < 0 or len(rest) < length:
                raise CorruptRecordError("staged batch cut short", position, path)
            yield prefix + rest
            position += LOG_OVERHEAD + length


def _check(files: list[StagedFile], settings: Settings) -> None:
    for sf in files:
        config = settings.for_topic(sf.topic)
        limit = config.max_batch_bytes
        for data in staged_batches(sf.path):
            header = read_batch_header(data, 0)
            if header is None:
                raise CorruptRecordError("staged batch cut short", None, sf.path)
            validate_batch(data, header)
            if header.size > limit:
                raise RecordTooLargeError(
                    f"{sf.topic}-{sf.partition}: a batch of {header.size} bytes is larger than {config.batch_limit}; "
                    "a single record that large cannot be appended"
                )


def _check_partitions(logdir: str, files: list[StagedFile]) -> None:
    """A row may name a partition of an existing topic only if the topic has it (as a producer must).

    A topic the log directory's KRaft metadata log names has the partitions it names (Kafka's count,
    which rows without a partition are hashed over: :mod:`.partitioner`); a row for one of them that
    this directory does not hold (another broker's) is refused, all of them named in one message: its
    folder would be a stray, which a broker of the directory sets aside at its start. Without a
    metadata log, the topic has its partition folders' count (its highest + 1)."""
    staged = sorted({(sf.topic, sf.partition) for sf in files if sf.records})
    if not staged:
        return
    named = recorded_topic_configs(logdir, partitions=True).topics or {}
    missing: dict[str, list[int]] = {}
    for topic, partition in staged:
        entry = named.get(topic)
        if entry and entry[1]:
            parts = entry[1]
            if partition not in parts:
                raise InvalidInput(f"partition {partition} of topic {topic!r}: the topic has {len(parts)} partitions "
                                   f"(the metadata log {METADATA_PARTITION} of {logdir})")
            if not os.path.isdir(os.path.join(logdir, f"{topic}-{partition}")):
                missing.setdefault(topic, []).append(partition)
            continue
        n = topic_partition_count(logdir, topic)
        if n and partition >= n:
            raise InvalidInput(f"partition {partition} of topic {topic!r}: the topic has {n} partitions in {logdir}")
    if missing:
        said = []
        for topic, lacking in sorted(missing.items()):
            held = topic_partition_folders(logdir, topic)
            said.append(f"topic {topic!r} partition(s) {', '.join(map(str, lacking))} (of {len(named[topic][1])}, as "
                        f"{METADATA_PARTITION} names them; this directory holds "
                        f"{', '.join(map(str, held)) if held else 'none of them'})")
        raise InvalidInput(
            f"rows go to partitions {logdir} does not hold: {'; '.join(said)}. Rows without a partition go where "
            "Kafka's partitioner puts them (murmur2 of the key over all the topic's partitions), and a folder made "
            "for another broker's partition is a stray a broker of this directory sets aside; nothing is appended "
            "(write those rows to the log directory of the broker that holds them, or give them a partition held here)"
        )


def create_topics(ld: LogDir, topics: set[str], partitions: int) -> None:
    """Create each topic that has no partition folder yet with ``partitions`` partitions."""
    for topic in sorted(topics):
        if topic_partition_count(str(ld.path), topic) == 0:
            for p in range(partitions):
                ld.create_partition(topic, p)


def intent_of(ld: LogDir, files: list[StagedFile]) -> dict[str, dict]:
    """Per partition: the log end offset the staged batches start at and the ``[size, crc, span]`` of
    each, in order (what :mod:`kafkafs.storage.publish_intent` and the streaming sink record)."""
    out: dict[str, dict] = {}
    for sf in files:
        if not sf.records:
            continue
        name = f"{sf.topic}-{sf.partition}"
        entry = out.get(name)
        if entry is None:
            log_ = ld.create_partition(sf.topic, sf.partition)
            entry = out[name] = {"start": log_.log_end_offset, "batches": []}
        for data in staged_batches(sf.path):
            h = batch_header_at(data, 0)
            entry["batches"].append([h.size, h.crc, h.last_offset_delta + 1])
    return out


def commit_staged(
    logdir: str, files: list[StagedFile], settings: Settings, *, new_topic_partitions: int = 1,
    job: str | None = None,
) -> dict[tuple[str, int], tuple[int, int]]:
    """Append every staged file, in the given order, under the log directory's lock; all or nothing.

    With ``job`` (a batch write's id), what is about to be appended is recorded first
    (:mod:`kafkafs.storage.publish_intent`), so that ``recover`` can take it out if the driver dies
    before the end. Returns ``{(topic, partition): (first offset, last offset)}`` of what was appended.
    """
    with LogDir(logdir, settings, writable=True) as ld:
        if job is None:
            return append_staged(ld, files, new_topic_partitions=new_topic_partitions)
        check_staged(ld, files)
        left = [u.job for u in unfinished_writes(logdir) if u.job != job]
        if left:  # appends after its part would make that part impossible to take out
            raise InvalidInput(f"{logdir}: an earlier Spark write ({', '.join(left)}) stopped while appending and left "
                               "part of its rows; run `kafkafs recover` first (it takes them out), then write again")
        create_topics(ld, {sf.topic for sf in files if sf.records}, new_topic_partitions)
        write_intent(logdir, job, intent_of(ld, files))
        try:
            appended = append_staged(ld, files, new_topic_partitions=new_topic_partitions, check=False)
        except BaseException:
            clear_intent(logdir, job)  # append_staged truncated every partition back
            raise
        clear_intent(logdir, job)
        return appended


def check_staged(ld: LogDir, files: list[StagedFile]) -> None:
    """Refuse, before anything is appended, a damaged or too large batch or a partition the topic lacks,
    or settings a broker recorded that cannot be read (review17 R17-4)."""
    refusal = recorded_refusal(ld.settings, {sf.topic for sf in files}, "no record is appended by guessed settings")
    if refusal is not None:
        raise SettingsUnreadable(f"{ld.path}: refused: {refusal}")
    _check(files, ld.settings)
    _check_partitions(str(ld.path), files)


def append_staged(
    ld: LogDir, files: list[StagedFile], *, new_topic_partitions: int = 1, check: bool = True
) -> dict[tuple[str, int], tuple[int, int]]:
    """:func:`commit_staged` in a log directory already open for writing (its lock held)."""
    groups: dict[tuple[str, int], list[StagedFile]] = {}
    for sf in files:
        groups.setdefault((sf.topic, sf.partition), []).append(sf)
    if check:
        check_staged(ld, files)
    create_topics(ld, {sf.topic for sf in files if sf.records}, new_topic_partitions)
    appended: dict[tuple[str, int], tuple[int, int]] = {}
    before: dict[tuple[str, int], tuple[Log, int]] = {}
    try:
        for (topic, partition), group in groups.items():
            if not any(sf.records for sf in group):
                continue
            log_ = ld.create_partition(topic, partition)  # opens it when it exists
            start = log_.log_end_offset
            before[(topic, partition)] = (log_, start)
            for sf in group:
                for data in staged_batches(sf.path):
                    log_.append_batches(data, flush=False, client=True)
            appended[(topic, partition)] = (start, log_.log_end_offset - 1)
        for log_, _start in before.values():
            log_.flush()
    except BaseException:
        for (topic, partition), (log_, start) in before.items():
            try:
                log_.truncate_to(start)
                log_.flush()
            except Exception as exc:  # keep the first error; say what could not be undone
                log.error("%s-%d: could not truncate back to %d: %s", topic, partition, start, exc)
        raise
    return appended
