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
below ``--config`` and ``--set``. Damage ends the reading (what came before counts) and is kept in the
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
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import KafkafsError
from ..format.batch import decode_batch, scan_batches
from .log import Log

if TYPE_CHECKING:
    from ..format.decoders.fields import MessageObject

__all__ = ["METADATA_PARTITION", "RecordedConfigs", "recorded_topic_configs", "recorded_topic_names"]

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
_PARTITION_RECORDS = {3, 5}


class _State:
    def __init__(self, partitions: bool = False) -> None:
        self.wanted = _WANTED | _PARTITION_RECORDS if partitions else _WANTED
        self.configs: dict[str, dict[str, str]] = {}
        self.brokers: dict[str, dict[str, str]] = {}  # resource name ("" the cluster default) -> settings
        self.names: dict[str, str] = {}  # topic id -> name
        # topic id -> partition id -> its replicas (broker ids), when asked for
        self.partitions: dict[str, dict[int, tuple[int, ...]]] = {}
        # the records of a metadata transaction not ended yet: applied at its end, dropped at an abort,
        # never applied if the log ends inside it (as Kafka's MetadataBatchLoader publishes them)
        self.pending: list[MessageObject] | None = None

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
        data = record["data"]
        kind = record["type"]
        if kind == "TOPIC_RECORD":
            self.names[data["topicId"]] = data["name"]
        elif kind == "PARTITION_RECORD":
            self.partitions.setdefault(data["topicId"], {})[data["partitionId"]] = tuple(data.get("replicas") or ())
        elif kind == "PARTITION_CHANGE_RECORD":  # replicas: null (left out) when they did not change
            known = self.partitions.get(data["topicId"], {})
            if data.get("replicas") is not None and data["partitionId"] in known:
                known[data["partitionId"]] = tuple(data["replicas"])
        elif kind == "REMOVE_TOPIC_RECORD":
            self.partitions.pop(data["topicId"], None)
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
    #: ``node.id`` of the directory's ``meta.properties`` (None: none there)
    node_id: str | None = None


def _node_id(logdir: Path) -> str | None:
    """``node.id`` (or ``broker.id``) of ``meta.properties``, None when there is none."""
    try:
        text = (logdir / "meta.properties").read_text(errors="replace")
    except OSError:
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
    directory = Path(logdir) / METADATA_PARTITION
    out = RecordedConfigs()
    if not directory.is_dir():
        return out
    state = _State(partitions)
    start = None
    snapshot = _latest_snapshot(directory)
    if snapshot is not None:
        start, path = snapshot
        try:
            buf = path.read_bytes()
            for header in scan_batches(buf):
                batch = decode_batch(buf, header)
                if not batch.header.is_control:
                    for value in batch.values:
                        state.apply(value)
        except (OSError, KafkafsError) as exc:
            log.warning("%s: snapshot read up to damage: %s", path, exc)
            out.damage = f"{path}: {exc}"
    try:
        log_ = Log.open(directory)
    except (OSError, KafkafsError) as exc:
        log.warning("%s: not read: %s", directory, exc)
        out.damage = out.damage or f"{directory}: {exc}"
        return _result(out, state, logdir)
    try:
        if start is None or start <= log_.log_end_offset:
            for batch in log_.read(start):
                if not batch.header.is_control:
                    for value in batch.values:
                        state.apply(value)
    except KafkafsError as exc:
        log.warning("%s: read up to damage: %s", directory, exc)
        out.damage = out.damage or str(exc)
    finally:
        log_.close()
    return _result(out, state, logdir)


def recorded_topic_names(logdir: str | os.PathLike[str]) -> dict[str, str]:
    """Topic id -> name of every topic the metadata log of ``logdir`` holds (its ``TopicRecord``s, less
    the removed topics); empty when there is none. A log directory of a cluster of several brokers (or
    log directories) often lacks the partitions a group consumes, never the metadata log's names."""
    return {topic_id: name for name, (topic_id, _) in (recorded_topic_configs(logdir).topics or {}).items()}


def _result(out: RecordedConfigs, state: _State, logdir: str | os.PathLike[str]) -> RecordedConfigs:
    out.update(state.configs)
    out.node_id = _node_id(Path(logdir))
    out.broker = broker_topic_defaults(state.brokers, out.node_id)
    out.topics = {name: (topic_id, frozenset(state.partitions.get(topic_id, ()))) for topic_id, name in state.names.items()}
    out.replicas = {topic_id: state.partitions.get(topic_id, {}) for topic_id in state.names}
    return out
