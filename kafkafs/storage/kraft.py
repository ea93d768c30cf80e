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

__all__ = ["METADATA_PARTITION", "RecordedConfigs", "recorded_topic_configs"]

log = logging.getLogger(__name__)

METADATA_PARTITION = "__cluster_metadata-0"
_TOPIC_RESOURCE = 2
# apiKeys of the records that matter here: TopicRecord 2, ConfigRecord 4, RemoveTopicRecord 9, and the
# metadata transactions (KIP-868): BeginTransactionRecord 23, EndTransactionRecord 24, AbortTransactionRecord 25
_WANTED = {2, 4, 9, 23, 24, 25}


class _State:
    def __init__(self) -> None:
        self.configs: dict[str, dict[str, str]] = {}
        self.names: dict[str, str] = {}  # topic id -> name
        # the records of a metadata transaction not ended yet: applied at its end, dropped at an abort,
        # never applied if the log ends inside it (as Kafka's MetadataBatchLoader publishes them)
        self.pending: list[MessageObject] | None = None

    def apply(self, value: bytes | None) -> None:
        # the frame is uvarint frame version (1), uvarint apiKey, uvarint version: every key wanted is < 128
        if value is None or len(value) < 3 or value[1] not in _WANTED:
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
        elif kind == "REMOVE_TOPIC_RECORD":
            name = self.names.pop(data["topicId"], None)
            if name is not None:
                self.configs.pop(name, None)
        elif kind == "CONFIG_RECORD" and data["resourceType"] == _TOPIC_RESOURCE:
            topic = self.configs.setdefault(data["resourceName"], {})
            if data["value"] is None:
                topic.pop(data["name"], None)
            else:
                topic[data["name"]] = data["value"]


class RecordedConfigs(dict[str, dict[str, str]]):
    """Topic name -> {setting name: value string}; ``damage``: why some of the metadata log could not
    be read (None: all of it was), in which case any topic's settings may differ from these."""

    damage: str | None = None


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


def recorded_topic_configs(logdir: str | os.PathLike[str]) -> RecordedConfigs:
    """Topic name -> {setting name: value string}, as the metadata log of ``logdir`` last recorded them;
    empty when there is no metadata log. Damage ends the reading with a warning (what came before
    counts) and is said in the result's ``damage``."""
    directory = Path(logdir) / METADATA_PARTITION
    out = RecordedConfigs()
    if not directory.is_dir():
        return out
    state = _State()
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
        out.update(state.configs)
        return out
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
    out.update(state.configs)
    return out
