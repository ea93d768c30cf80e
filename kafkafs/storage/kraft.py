"""Topic settings that a KRaft broker recorded (SPEC §8): the ``ConfigRecord``s of ``__cluster_metadata``.

The metadata log of a KRaft log directory (``__cluster_metadata-0``) holds, among the rest, a
``ConfigRecord`` (resource type 2, topic) for every setting a topic was created or altered with, a
``null`` value for one that was deleted, and a ``RemoveTopicRecord`` when the topic goes. A snapshot
(``<end offset>-<epoch>.checkpoint``, record batches like a segment) holds the state up to its end
offset; the newest one is read first, then the log from there on. The records of a metadata
transaction (KIP-868: BeginTransactionRecord .. EndTransactionRecord) count once it ends, never when
an AbortTransactionRecord ends it or the log ends inside it.

:func:`recorded_topic_configs` returns the latest value of each (topic, name) as the strings Kafka
stored; :class:`~kafkafs.storage.config.Settings` turns the names it knows into a topic's settings,
below ``--config`` and ``--set``. :class:`RecordedConfigsReader` reads them once and then follows the
log's changes from where it stopped (a read-only mount beside a running broker: a topic created with
its own settings, ``kafka-configs --alter``). Damage ends the reading (what came before counts) and is kept in the
result (:attr:`RecordedConfigs.damage`): the records past it, or in it, may set or delete any topic's
settings, so a writer that deletes by them (``clean``) refuses to (SPEC §8; review6 F16).

The cluster's dynamic broker settings (``ConfigRecord``s of resource type 4, set by ``kafka-configs
--entity-type brokers``: resource name ``""`` for the cluster-wide default, the node id for one
broker) that are defaults of topic settings (Kafka's ``ServerTopicConfigSynonyms``: ``log.retention.ms``
for ``retention.ms``, ...) are kept in :attr:`RecordedConfigs.broker`, by the topic setting's name: the
cluster default, the value for this directory's ``node.id`` (``meta.properties``) over it; of synonyms,
the first set wins (``ms`` over ``minutes`` over ``hours``), as a broker resolves them. They sit below
every topic's own records (review7 R3).
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import KafkafsError
from ..format.batch import decode_batch, scan_batches
from .log import Log
from .safefiles import read_regular_file

if TYPE_CHECKING:
    from ..format.decoders.fields import MessageObject

__all__ = ["METADATA_PARTITION", "RecordedConfigs", "RecordedConfigsReader", "recorded_topic_configs",
           "recorded_topic_names"]

log = logging.getLogger(__name__)

METADATA_PARTITION = "__cluster_metadata-0"
_TOPIC_RESOURCE = 2
_BROKER_RESOURCE = 4
#: topic setting -> the broker settings that default it, first wins, with the factor to milliseconds
#: (Kafka's ServerTopicConfigSynonyms; a negative time stays -1)
_SYNONYMS: dict[str, list[tuple[str, int]]] = {
    "segment.bytes": [("log.segment.bytes", 1)],
    "segment.ms": [("log.roll.ms", 1), ("log.roll.hours", 3_600_000)],
    "segment.jitter.ms": [("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", 3_600_000)],
    "segment.index.bytes": [("log.index.size.max.bytes", 1)],
    "index.interval.bytes": [("log.index.interval.bytes", 1)],
    "flush.messages": [("log.flush.interval.messages", 1)],
    "flush.ms": [("log.flush.interval.ms", 1)],
    "retention.ms": [("log.retention.ms", 1), ("log.retention.minutes", 60_000), ("log.retention.hours", 3_600_000)],
    "retention.bytes": [("log.retention.bytes", 1)],
    "cleanup.policy": [("log.cleanup.policy", 0)],
    "delete.retention.ms": [("log.cleaner.delete.retention.ms", 1)],
    "min.cleanable.dirty.ratio": [("log.cleaner.min.cleanable.ratio", 0)],
    "min.compaction.lag.ms": [("log.cleaner.min.compaction.lag.ms", 1)],
    "max.compaction.lag.ms": [("log.cleaner.max.compaction.lag.ms", 1)],
    "max.message.bytes": [("message.max.bytes", 1)],
    "message.timestamp.type": [("log.message.timestamp.type", 0)],
    "file.delete.delay.ms": [("log.segment.delete.delay.ms", 1)],
    "compression.type": [("compression.type", 0)],
    "preallocate": [("log.preallocate", 0)],
}
# apiKeys of the records that matter here: TopicRecord 2, ConfigRecord 4, RemoveTopicRecord 9, and the
# metadata transactions (KIP-868): BeginTransactionRecord 23, EndTransactionRecord 24, AbortTransactionRecord 25
# (PartitionRecord 3 and PartitionChangeRecord 5 too when the partitions are asked for)
_WANTED = {2, 4, 9, 23, 24, 25}
#: the most bytes a torn tail of the metadata log can hold: one batch (KRaft's batches are at most 8 MiB)
_MAX_TORN = 8 << 20
_PARTITION_RECORDS = {3, 5}


class _State:
    def __init__(self, partitions: bool = False) -> None:
        self.wanted = _WANTED | _PARTITION_RECORDS if partitions else _WANTED
        self.configs: dict[str, dict[str, str]] = {}
        self.brokers: dict[str, dict[str, str]] = {}  # resource name ("" the cluster default) -> settings
        self.names: dict[str, str] = {}  # topic id -> name
        # topic id -> partition id -> its replicas (broker ids), when asked for
        self.partitions: dict[str, dict[int, tuple[int, ...]]] = {}
        self.leader_epochs: dict[str, dict[int, int]] = {}  # topic id -> partition id -> leader epoch
        # the records of a metadata transaction not ended yet: applied at its end, dropped at an abort,
        # never applied if the log ends inside it (as Kafka's MetadataBatchLoader publishes them)
        self.pending: list[MessageObject] | None = None
        self.replayed = 0  # records that took effect: what the result says may have changed with them

    def apply(self, value: bytes | None) -> None:
        # the frame is uvarint frame version (1), uvarint apiKey, uvarint version: every key wanted is < 128
        if value is None or len(value) < 3 or value[1] not in self.wanted:
            return
        from ..format.decoders import metadata_record  # only for a KRaft metadata log: start-up time

        try:
            record = metadata_record(value)
        except KafkafsError:
            return
        kind = record["type"]
        if kind == "BEGIN_TRANSACTION_RECORD":
            self.pending = []
        elif kind == "ABORT_TRANSACTION_RECORD":
            self.pending = None
        elif kind == "END_TRANSACTION_RECORD":
            pending, self.pending = self.pending or [], None
            for r in pending:
                self._replay(r)
        elif self.pending is not None:
            self.pending.append(record)
        else:
            self._replay(record)

    def _replay(self, record: MessageObject) -> None:
        self.replayed += 1
        data = record["data"]
        kind = record["type"]
        if kind == "TOPIC_RECORD":
            self.names[data["topicId"]] = data["name"]
        elif kind == "PARTITION_RECORD":
            self.partitions.setdefault(data["topicId"], {})[data["partitionId"]] = tuple(data.get("replicas") or ())
            self.leader_epochs.setdefault(data["topicId"], {})[data["partitionId"]] = int(data.get("leaderEpoch") or 0)
        elif kind == "PARTITION_CHANGE_RECORD":  # replicas: null (left out) when they did not change
            known = self.partitions.get(data["topicId"], {})
            if data.get("replicas") is not None and data["partitionId"] in known:
                known[data["partitionId"]] = tuple(data["replicas"])
            epochs = self.leader_epochs.get(data["topicId"], {})  # leader -2 (left out): no new epoch
            if data.get("leader", -2) != -2 and data["partitionId"] in epochs:
                epochs[data["partitionId"]] += 1
        elif kind == "REMOVE_TOPIC_RECORD":
            self.partitions.pop(data["topicId"], None)
            self.leader_epochs.pop(data["topicId"], None)
            name = self.names.pop(data["topicId"], None)
            if name is not None:
                self.configs.pop(name, None)
        elif kind == "CONFIG_RECORD" and data["resourceType"] in (_TOPIC_RESOURCE, _BROKER_RESOURCE):
            tables = self.configs if data["resourceType"] == _TOPIC_RESOURCE else self.brokers
            topic = tables.setdefault(data["resourceName"], {})
            if data["value"] is None:
                topic.pop(data["name"], None)
            else:
                topic[data["name"]] = data["value"]


class RecordedConfigs(dict[str, dict[str, str]]):
    """Topic name -> {setting name: value string}; ``damage``: why some of the metadata log could not
    be read (None: all of it was), in which case any topic's settings may differ from these;
    ``broker``: the cluster's dynamic defaults of topic settings, by topic setting name (see the
    module's docstring)."""

    damage: str | None = None
    broker: dict[str, str] = {}  # noqa: RUF012 - replaced whole, never changed in place
    #: topic name -> (its topic id, its partition ids: filled when asked for) of the topics the metadata
    #: holds; None when there is no metadata log
    topics: dict[str, tuple[str, frozenset[int]]] | None = None
    #: topic id -> partition id -> the broker ids of its replicas (filled when the partitions are asked for)
    replicas: dict[str, dict[int, tuple[int, ...]]] = {}  # noqa: RUF012 - replaced whole, never changed in place
    #: topic id -> partition id -> its leader epoch (PartitionRecord's, +1 a PartitionChangeRecord naming a leader)
    leader_epochs: dict[str, dict[int, int]] = {}  # noqa: RUF012 - replaced whole, never changed in place
    #: ``node.id`` of the directory's ``meta.properties`` (None: none there)
    node_id: str | None = None
    #: a note when the metadata log ends in a torn tail (a batch not wholly written, as an unclean stop
    #: leaves it): the settings are those of the whole batches before it, what a broker's controller
    #: replays after its start truncates the tail; a topic they do not name may have been created in it
    torn: str | None = None


def _node_id(logdir: Path) -> str | None:
    """``node.id`` (or ``broker.id``) of ``meta.properties``, None when there is none."""
    try:
        text = read_regular_file(logdir / "meta.properties", follow=True).decode(errors="replace")
    except (OSError, KafkafsError):  # gone, unreadable, a FIFO (never blocks)
        return None
    found = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.lstrip().startswith("#"):
            found[key.strip()] = value.strip()
    return found.get("node.id") or found.get("broker.id")


def broker_topic_defaults(brokers: dict[str, dict[str, str]], node_id: str | None) -> dict[str, str]:
    """The topic settings the cluster's dynamic broker settings default (``brokers``: resource name ->
    {name: value}; ``""`` the cluster default), by topic setting name."""
    merged = {**brokers.get("", {}), **(brokers.get(node_id, {}) if node_id else {})}
    out = {}
    for topic_name, synonyms in _SYNONYMS.items():
        for name, factor in synonyms:
            value = merged.get(name)
            if value is None:
                continue
            if factor > 1:
                try:
                    number = int(value)
                except ValueError:
                    break  # not a number: left out, as a value kafkafs would refuse
                value = str(number * factor if number >= 0 else -1)
            out[topic_name] = value
            break
    return out


def _latest_snapshot(directory: Path) -> tuple[int, Path] | None:
    best = None
    try:
        names = os.listdir(directory)
    except OSError:
        return None
    for name in names:
        stem, _, suffix = name.partition(".")
        offset, dash, epoch = stem.partition("-")
        if suffix == "checkpoint" and dash and offset.isdigit() and epoch.isdigit():
            if best is None or int(offset) > best[0]:
                best = (int(offset), directory / name)
    return best


def recorded_topic_configs(logdir: str | os.PathLike[str], *, partitions: bool = False) -> RecordedConfigs:
    """Topic name -> {setting name: value string}, as the metadata log of ``logdir`` last recorded them;
    empty when there is no metadata log. Damage ends the reading with a warning (what came before
    counts) and is said in the result's ``damage``. ``topics``: each topic's id, and with
    ``partitions`` its partition ids and ``replicas`` their replicas (``PartitionRecord``s and the
    ``PartitionChangeRecord``s that move them, read only then: a large cluster has many)."""
    return RecordedConfigsReader(logdir, partitions=partitions).read()


class RecordedConfigsReader:
    """The recorded topic settings of ``logdir`` (:func:`recorded_topic_configs`): :meth:`read` reads
    them once; :meth:`update` reads what the metadata log gained since, from where the last reading
    stopped (the newest snapshot and the whole log again only when the log lost records not read yet,
    or the records read were truncated or rewritten), and keeps the log open for the next update until
    :meth:`close`.

    Threads: safe to share; a read, an update and the close serialise on one lock."""

    def __init__(self, logdir: str | os.PathLike[str], *, partitions: bool = False) -> None:
        self.logdir = Path(logdir)
        self.directory = self.logdir / METADATA_PARTITION
        self._partitions = partitions
        self._lock = threading.Lock()
        self._state = _State(partitions)
        self._result: RecordedConfigs | None = None
        self._log: Log | None = None
        self._keep = False  # keep the log open between readings (updates were asked for)
        self._next: int | None = None  # the offset of the log read next (None: nothing read)
        self._last: tuple[int, int] | None = None  # (base offset, CRC) of the last batch read from the log
        self._snapshot_damage: str | None = None
        self._log_damage: str | None = None
        self._torn: str | None = None  # a torn tail after the last whole batch read (a note, not damage)
        self._closed = False

    def read(self) -> RecordedConfigs:
        """The settings, read in full the first time; later, what the last reading found."""
        with self._lock:
            if self._result is None:
                self._read_all()
            assert self._result is not None
            return self._result

    def update(self) -> RecordedConfigs | None:
        """Read what changed since the last reading: the new result when anything it says may have
        changed (a record that takes effect, damage met or passed, the metadata log made or removed),
        None when nothing did. Cheap when nothing changed: a listing of the metadata log's folder
        (:meth:`~kafkafs.storage.local_log.LocalLog.refresh`) and a look at the last batch read."""
        with self._lock:
            if self._closed:
                return None
            self._keep = True
            if self._result is None:
                self._read_all()
                return self._result
            return self._read_more()

    def close(self) -> None:
        """Close the metadata log if it is kept open; later updates find nothing."""
        with self._lock:
            self._closed = True
            self._close_log()

    # -- under the lock

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def _open_log(self) -> Log | None:
        """The metadata log, opened (read-only) or refreshed; None with the damage noted when it cannot be."""
        if self._log is not None:
            try:
                self._log.refresh()
                return self._log
            except (OSError, KafkafsError) as exc:
                log.debug("%s: reopened after: %s", self.directory, exc)
                self._close_log()
        try:
            self._log = Log.open(self.directory)
        except (OSError, KafkafsError) as exc:
            self._damaged(f"{self.directory}: {exc}", "not read", exc)
            return None
        return self._log

    def _damaged(self, damage: str, what: str, exc: Exception) -> None:
        if damage != self._log_damage:  # said once, not at every update that meets it again
            log.warning("%s: %s: %s", self.directory, what, exc)
        self._log_damage = damage

    def _read_all(self) -> None:
        """Read the newest snapshot, then the log from its end offset on; again (twice at most) when the
        log's start passed that end offset meanwhile (a newer snapshot, the older segments deleted)."""
        for attempt in range(3):  # the last time, the log is read from its start whatever the gap (as before)
            self._read_snapshot_and_log(past_a_gap=attempt == 2)
            if not self._gap():
                break
        if not self._keep:
            self._close_log()
        self._result = self._make_result()

    def _gap(self) -> bool:
        """Whether the log starts past the offset read next (records lost before they were read)."""
        return self._log is not None and self._next is not None and self._log.log_start_offset > self._next

    def _read_snapshot_and_log(self, *, past_a_gap: bool) -> None:
        self._close_log()
        self._state = _State(self._partitions)
        self._next = self._last = None
        self._snapshot_damage = self._log_damage = self._torn = None
        if not self.directory.is_dir():
            return
        snapshot = _latest_snapshot(self.directory)
        if snapshot is not None:
            self._next, path = snapshot
            try:
                buf = read_regular_file(path)  # never through a link, never blocking on a FIFO
                for header in scan_batches(buf):
                    batch = decode_batch(buf, header)
                    if not batch.header.is_control:
                        for value in batch.values:
                            self._state.apply(value)
            except (OSError, KafkafsError) as exc:
                log.warning("%s: snapshot read up to damage: %s", path, exc)
                self._snapshot_damage = f"{path}: {exc}"
        log_ = self._open_log()
        if log_ is not None and (past_a_gap or not self._gap()):
            self._read_log(log_)

    def _read_log(self, log_: Log) -> None:
        """Read the log from :attr:`_next` on (its start when None) to its end as last refreshed."""
        start = self._next
        if start is not None and start > log_.log_end_offset:
            return  # a snapshot past the log's end: nothing of the log to read yet
        try:
            for batch in log_.read(start):
                if not batch.header.is_control:
                    for value in batch.values:
                        self._state.apply(value)
                self._next = batch.header.next_offset
                self._last = (batch.header.base_offset, batch.header.crc)
            self._log_damage = None
        except KafkafsError as exc:
            self._damaged(str(exc), "read up to damage", exc)
            return
        self._check_tail(log_)

    def _check_tail(self, log_: Log) -> None:
        """Judge the bytes of the last segment after the last whole batch read (none: nothing to say).
        A torn tail (see :func:`tail_after`) is what an unclean stop leaves and a broker's start
        truncates: the whole batches before it are what the controller replays, so it is a note
        (:attr:`RecordedConfigs.torn`); anything else there is damage (review17 R17-4)."""
        try:
            found = tail_after(log_, self._last[0] if self._last is not None else None)
        except (OSError, KafkafsError) as exc:
            self._damaged(f"{self.directory}: {exc}", "tail not read", exc)
            return
        self._torn = None
        if found is None:
            return
        path, position, count, torn = found
        if torn:
            self._torn = (f"{path} ends in {count} bytes of a batch not wholly written (position {position}), "
                          "as an unclean stop leaves them; a broker's start truncates them, so the settings "
                          "are those of the whole batches before them")
        else:
            damage = (f"{path}: position {position}: {count} bytes after the last whole batch that are not a "
                      "torn tail (a whole batch follows: a damaged batch in the middle of the log)")
            self._damaged(damage, "read up to damage", KafkafsError(damage))

    def _read_more(self) -> RecordedConfigs | None:
        assert self._result is not None
        if not self.directory.is_dir():
            if self._result.topics is None:
                return None  # still no metadata log
            self._read_all()  # it went: nothing is recorded any more
            return self._result
        if self._result.topics is None:  # made since the last look
            self._read_all()
            return self._result
        before, damage, torn = self._state.replayed, self._log_damage, self._torn
        log_ = self._open_log()
        if log_ is not None:
            if self._rewritten(log_):
                log.info("%s: records not read yet are gone, or those read were rewritten: reading it again",
                         self.directory)
                self._read_all()
                return self._result
            if self._next is None or self._next < log_.log_end_offset:
                self._read_log(log_)
        if self._state.replayed == before and self._log_damage == damage and self._torn == torn:
            return None
        self._result = self._make_result()
        return self._result

    def _rewritten(self, log_: Log) -> bool:
        """Whether the log lost records not read yet (its start passed :attr:`_next`), or the last batch
        read is no longer there as it was (a truncation, a log made anew)."""
        if self._gap():
            return True
        if self._last is None or self._last[0] < log_.log_start_offset:
            return False  # (a batch below the log start went by the log's cleaning, not by a truncation)
        try:
            view = log_.locate(self._last[0])
        except (OSError, KafkafsError):
            return True
        return view is None or (view.header.base_offset, view.header.crc) != self._last

    def _make_result(self) -> RecordedConfigs:
        out = RecordedConfigs()
        if not self.directory.is_dir():
            return out
        out.damage = self._snapshot_damage or self._log_damage
        out.torn = None if out.damage else self._torn
        return _result(out, self._state, self.logdir)


def tail_after(log_: Log, last_base: int | None) -> tuple[str, int, int, bool] | None:
    """The bytes of the last segment of ``log_`` after its last whole batch (``last_base``: the base
    offset of the last batch read, None when none was), as ``(path, position, count, torn)``; None when
    there are none. ``torn``: they are what an unclean stop leaves, no whole batch lost: zeros, or the
    start of one batch (fewer bytes than its size field says, or than a size field) with no whole
    batch (a v2 header whose CRC holds) anywhere after it. A batch whose size field a flipped bit made
    too large looks torn from its start, but the whole batches after it show it is damage."""
    segment = log_.segments.last()
    if segment is None or segment.size == 0:
        return None
    end = 0
    if last_base is not None and last_base >= segment.base_offset:
        view = log_.locate(last_base)
        if view is None or view.segment is not segment:
            return None  # changed meanwhile: judged at the next reading
        end = view.base + view.header.end
    size = segment.size
    if end >= size:
        return None
    path = str(segment.log_path)
    if size - end > _MAX_TORN:  # more than one batch of a metadata log can be: not one torn batch
        return path, end, size - end, False
    rest = segment.read_at(end, size - end)
    if not rest.strip(b"\0"):
        return path, end, len(rest), True
    torn = len(rest) < 12 or 12 + int.from_bytes(rest[8:12], "big", signed=True) > len(rest)
    return path, end, len(rest), torn and not _whole_batch_in(rest, 1)


def _whole_batch_in(buf: bytes, start: int) -> bool:
    """Whether a whole v2 batch (magic 2, its size inside ``buf``, its CRC-32C right) starts at any
    position of ``buf`` from ``start`` on."""
    from ..format.crc import crc32c

    size = len(buf)
    pos = buf.find(2, start + 16) - 16  # the magic byte sits 16 bytes into a batch
    while 0 <= pos <= size - 61:  # 61: a v2 batch header
        length = int.from_bytes(buf[pos + 8 : pos + 12], "big", signed=True)
        if (length >= 49 and pos + 12 + length <= size
                and crc32c(memoryview(buf)[pos + 21 : pos + 12 + length]) == int.from_bytes(buf[pos + 17 : pos + 21], "big")):
            return True
        pos = buf.find(2, pos + 17) - 16
    return False


def recorded_topic_names(logdir: str | os.PathLike[str]) -> dict[str, str]:
    """Topic id -> name of every topic the metadata log of ``logdir`` holds (its ``TopicRecord``s, less
    the removed topics); empty when there is none. A log directory of a cluster of several brokers (or
    log directories) often lacks the partitions a group consumes, never the metadata log's names."""
    return {topic_id: name for name, (topic_id, _) in (recorded_topic_configs(logdir).topics or {}).items()}


def _result(out: RecordedConfigs, state: _State, logdir: str | os.PathLike[str]) -> RecordedConfigs:
    out.update({name: dict(table) for name, table in state.configs.items()})  # the state changes on
    out.node_id = _node_id(Path(logdir))
    out.broker = broker_topic_defaults(state.brokers, out.node_id)
    out.topics = {name: (topic_id, frozenset(state.partitions.get(topic_id, ()))) for topic_id, name in state.names.items()}
    out.replicas = {topic_id: state.partitions.get(topic_id, {}) for topic_id in state.names}
    out.leader_epochs = {topic_id: dict(state.leader_epochs.get(topic_id, {})) for topic_id in state.names}
    return out
