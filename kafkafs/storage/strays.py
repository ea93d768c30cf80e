"""The partition folders a KRaft broker of a log directory sets aside as strays (review12 R12-8).

At its start a KRaft broker (Kafka 4's ``BrokerMetadataPublisher.initializeManagers`` with
``LogManager.isStrayReplica``; 3.7+'s ``isStrayKraftReplica``) loads every partition folder and sets
aside, as a stray, each log

- with no topic id (no ``partition.metadata``: "The topicId does not exist in ..., treat it as a stray
  log"),
- whose topic id and partition number name no partition of its metadata image ("the topicId ... does
  not exist in the metadata image"), or
- whose partition's replicas leave out the broker's ``node.id`` ("the current replica assignment ...
  does not contain the local brokerId").

It renames such a folder ``<name>.<uuid>-stray`` and serves none of its records. The judgement here is
by the metadata log of the log directory itself (``__cluster_metadata-0``: its latest snapshot, then
the log), which is what a broker of the directory starts from; a log directory without one (a
ZooKeeper-mode broker's, or a KRaft broker's other ``log.dirs``) cannot be judged, and neither can one
whose metadata log does not read whole: nothing is said then. A ``partition.metadata`` a broker's
reader refuses is not judged here either: the broker does not start at all with it, and verify says
that apart; :func:`repair_partition_metadata_files` (``kafkafs recover``) rewrites it with the id the
metadata log gives the topic (review12 R12-7).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ..errors import CorruptRecordError, InvalidName, UnsafeFileError
from .kraft import METADATA_PARTITION, RecordedConfigs, recorded_topic_configs, recorded_topic_names
from .leader_epochs import read_regular_file
from .names import parse_partition_dir_name
from .partition_metadata import (
    PARTITION_METADATA_FILE,
    parse_partition_metadata,
    partition_metadata_problem,
    repair_partition_metadata,
)

__all__ = ["NEW_PARTITION_REFUSED", "assigned_elsewhere", "repair_partition_metadata_files", "stray_consequence", "stray_partitions",
           "unnamed_partitions", "unnamed_refusal"]


def stray_consequence(name: str) -> str:
    """What follows the reason a folder is a stray."""
    return (f"a Kafka broker of this directory sets the folder aside as a stray at its start (renames it "
            f"{name}.<uuid>-stray) and serves none of its records")


def assigned_elsewhere(recorded: RecordedConfigs, topic: str, topic_id: str, partition: int) -> str | None:
    """Why a KRaft broker of the log directory ``recorded`` was read from sets partition ``partition`` of
    ``topic`` (id ``topic_id``) aside: its replicas, as the metadata log last assigned them, leave out
    the directory's ``node.id`` (``meta.properties``); None when they hold it, or when that cannot be
    told (no replicas recorded, no numeric ``node.id``)."""
    replicas = recorded.replicas.get(topic_id, {}).get(partition)
    node = recorded.node_id
    if not replicas or node is None or not node.isdigit() or int(node) in replicas:
        return None
    return (f"the metadata log ({METADATA_PARTITION}) assigns partition {partition} of topic {topic} to broker(s) "
            f"{', '.join(map(str, replicas))}, not to node {node} of this directory")


def stray_partitions(path: str | os.PathLike[str], names: Iterable[str]) -> dict[str, str]:
    """Partition folder name -> why a KRaft broker of the log directory at ``path`` sets it aside as a
    stray (see the module's docstring), for the folders ``names`` of it; empty when the directory has
    no metadata log, or one that does not read whole."""
    path = Path(path)
    if not (path / METADATA_PARTITION).is_dir():
        return {}
    recorded = recorded_topic_configs(path, partitions=True)
    if recorded.damage is not None or recorded.topics is None:
        return {}
    ids = {topic_id: name for name, (topic_id, _) in recorded.topics.items()}
    metadata = f"the metadata log ({METADATA_PARTITION})"
    found = {}
    for name in names:
        if name == METADATA_PARTITION:
            continue
        try:
            topic, partition = parse_partition_dir_name(name)
            topic_id = parse_partition_metadata(read_regular_file(path / name / PARTITION_METADATA_FILE))[1]
        except FileNotFoundError:
            found[name] = f"no {PARTITION_METADATA_FILE} (no topic id)"
            continue
        except (OSError, CorruptRecordError, UnsafeFileError):
            continue  # not judged: an unreadable or damaged file is said apart, a link is never read
        except InvalidName:  # not a partition folder's name: said apart
            continue
        replicas = recorded.replicas.get(topic_id, {}).get(partition)
        if topic_id not in ids:
            other = recorded.topics.get(topic)
            found[name] = (f"its topic id {topic_id} ({PARTITION_METADATA_FILE}) is no topic's in {metadata}"
                           + (f", which gives topic {topic} the id {other[0]}" if other else f", which has no topic {topic}"))
        elif not replicas:
            found[name] = f"{metadata} has no partition {partition} of topic {ids[topic_id]} (id {topic_id})"
        else:
            elsewhere = assigned_elsewhere(recorded, ids[topic_id], topic_id, partition)
            if elsewhere is not None:
                found[name] = elsewhere
    return found


def unnamed_partitions(path: str | os.PathLike[str], names: Iterable[str], ids: dict[str, str] | None) -> dict[str, str]:
    """Partition folder name -> why, for the folders ``names`` of the log directory at ``path`` whose
    topic the metadata log (``ids``: topic name -> id, as it names them; None: no metadata log, nothing
    judged) does not name, or names with another topic id than the folder's ``partition.metadata``: a
    KRaft broker sets such a folder aside as a stray, so a writer never goes by guessed (default)
    settings there (review19 R19-5): ``clean`` and a ``--rw --clean`` mount's cleaner delete and
    compact nothing there, ``produce`` and a ``--rw`` mount append nothing (:func:`unnamed_refusal`).
    A folder without a readable ``partition.metadata`` whose topic is named is not judged here.

    Not the same idea as :func:`stray_partitions`, which is Kafka's own verdict (by topic id, partition
    and replicas): a folder of a named topic that a broker sets aside (no ``partition.metadata``,
    reassigned away, a partition number the topic lacks) has its settings in the metadata log, so
    writers go by them (and ``verify``, ``recover`` and ``produce`` say it is a stray); a folder named
    for a topic the metadata lacks but carrying another topic's id is one a broker loads, yet its
    settings are not known by its name. In practice nearly every folder here is a stray too."""
    if ids is None:
        return {}
    path = Path(path)
    metadata = f"the cluster's metadata ({METADATA_PARTITION})"
    found = {}
    for name in names:
        if name == METADATA_PARTITION:
            continue
        try:
            topic = parse_partition_dir_name(name)[0]
        except InvalidName:  # not a partition folder's name: said apart
            continue
        if topic not in ids:
            found[name] = f"topic {topic} is not in {metadata}"
            continue
        try:
            topic_id = parse_partition_metadata(read_regular_file(path / name / PARTITION_METADATA_FILE))[1]
        except (OSError, CorruptRecordError, UnsafeFileError):
            continue  # not judged: no file, or one said apart
        if topic_id != ids[topic]:
            found[name] = (f"its topic id {topic_id} ({PARTITION_METADATA_FILE}) is not the id {ids[topic]} "
                           f"{metadata} gives topic {topic}")
    return found


#: What :func:`unnamed_refusal` says is not done for a partition of a topic the metadata does not name
#: (``produce`` and a ``--rw`` mount's mkdir of one).
NEW_PARTITION_REFUSED = "no record is appended by guessed settings, and a broker of this directory would serve none"


def unnamed_refusal(why: str, what: str) -> str:
    """The line every writer refuses an :func:`unnamed_partitions` folder with: ``why`` it is one, then
    ``what`` is not done there (the same words for ``clean``, the mount's cleaner and ``produce``)."""
    return f"{why}: a stray as Kafka sees it; {what}"


def repair_partition_metadata_files(path: str | os.PathLike[str], names: Iterable[str]) -> list[str]:
    """``NAME/partition.metadata: why; what was done`` for each of the partition folders ``names`` of the
    log directory at ``path`` (open for writing: its lock held) whose topic id file a broker's reader
    refuses, rewritten with the id the metadata log or the topic's other partitions give the topic, else
    removed (review12 R12-7; :func:`~kafkafs.storage.partition_metadata.repair_partition_metadata`)."""
    path = Path(path)
    done = []
    topic_ids: dict[str, str] | None = None  # the metadata log's, read only when a file needs it
    for name in names:
        if partition_metadata_problem(path / name) is None:
            continue
        if topic_ids is None:
            topic_ids = {topic: topic_id for topic_id, topic in recorded_topic_names(path).items()}
        topic = parse_partition_dir_name(name)[0]
        line = repair_partition_metadata(path / name, topic, topic_ids.get(topic))
        if line is not None:
            done.append(f"{name}/{line}")
    return done
