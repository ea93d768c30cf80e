"""The names of a log directory's files and folders, parsed and formatted in one place.

A segment's files are ``<20-digit base offset><extension>[<suffix>]``: the extensions of
:data:`SEGMENT_EXTENSIONS`, the suffixes of :data:`TEMPORARY_SUFFIXES` marking files in the middle of a
deletion or a compaction (SPEC §1). A partition folder is ``<topic>-<partition>``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..errors import InternalTopicRefused, InvalidName

__all__ = [
    "LOG",
    "INDEX",
    "TIME_INDEX",
    "TXN_INDEX",
    "SEGMENT_EXTENSIONS",
    "INDEX_EXTENSIONS",
    "DELETED",
    "CLEANED",
    "SWAP",
    "TEMPORARY_SUFFIXES",
    "TOPIC_RE",
    "segment_file_name",
    "parse_segment_file_name",
    "log_file_base_offset",
    "committed_swaps",
    "SNAPSHOT",
    "snapshot_offset",
    "parse_partition_dir_name",
    "STAGING_DIR_NAME",
    "broker_refuses_folder",
    "INTERNAL_TOPIC_WRITERS",
    "refuse_internal_topic",
    "is_internal_topic",
]

LOG = ".log"
INDEX = ".index"
TIME_INDEX = ".timeindex"
TXN_INDEX = ".txnindex"
#: Producer-state snapshots: ``<20-digit offset>.snapshot``, no temporary suffix.
SNAPSHOT = ".snapshot"
#: The files a segment may have; the ``.log`` first.
SEGMENT_EXTENSIONS = (LOG, INDEX, TIME_INDEX, TXN_INDEX)
INDEX_EXTENSIONS = (INDEX, TIME_INDEX, TXN_INDEX)

DELETED = ".deleted"
CLEANED = ".cleaned"
SWAP = ".swap"
TEMPORARY_SUFFIXES = (DELETED, CLEANED, SWAP)

TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_DIR_RE = re.compile(r"^(?P<topic>.+)-(?P<partition>0|[1-9][0-9]{0,9})$")
_OFFSET_DIGITS = 20
_LONG_MAX = 2**63 - 1


def segment_file_name(base_offset: int, extension: str, suffix: str = "") -> str:
    """``00000000000000000042.log`` and friends: the base offset in 20 digits."""
    return f"{base_offset:020d}{extension}{suffix}"


#: What may follow a segment file's base offset: each extension, alone or with one temporary suffix ->
#: (extension, suffix); one dict lookup a name (a partition's open parses every file of its folder twice).
_SEGMENT_TAILS = {ext + suffix: (ext, suffix) for ext in SEGMENT_EXTENSIONS for suffix in ("", *TEMPORARY_SUFFIXES)}


def parse_segment_file_name(name: str) -> tuple[int, str, str] | None:
    """``00000000000000000042.log.swap`` -> ``(42, ".log", ".swap")``; None for any other file."""
    tail = _SEGMENT_TAILS.get(name[_OFFSET_DIGITS:])
    if tail is None or not name[:_OFFSET_DIGITS].isdigit():  # (a name of 20 characters or fewer: no tail)
        return None
    base = int(name[:_OFFSET_DIGITS])
    if base > _LONG_MAX:  # Kafka's offsets are longs
        return None
    return base, tail[0], tail[1]


def log_file_base_offset(name: str) -> int | None:
    """The base offset of a plain ``.log`` segment file (no temporary suffix), else None."""
    parts = parse_segment_file_name(name)
    if parts is None or parts[1] != LOG or parts[2]:
        return None
    return parts[0]


def committed_swaps(names: Iterable[str]) -> list[int]:
    """The base offsets of the ``.log.swap`` files among ``names`` that a broker's recovery completes, in
    order: those below the base offset of every ``.cleaned`` file (any extension). A compaction or a split
    renames its new segments ``.cleaned`` -> ``.swap`` (highest base first, each ``.log`` before its
    indexes) before it renames anything it replaces, so a ``.swap`` at or above a ``.cleaned`` one is part
    of a swap not yet committed: Kafka's ``LogLoader`` deletes it and keeps the old segments."""
    swaps: list[int] = []
    min_cleaned: int | None = None
    for name in names:
        parts = parse_segment_file_name(name)
        if parts is None:
            continue
        base, extension, suffix = parts
        if suffix == CLEANED:
            min_cleaned = base if min_cleaned is None else min(min_cleaned, base)
        elif suffix == SWAP and extension == LOG:
            swaps.append(base)
    return sorted(base for base in swaps if min_cleaned is None or base < min_cleaned)


def snapshot_offset(name: str) -> int | None:
    """The offset of a producer-state snapshot file name, else None."""
    if len(name) != _OFFSET_DIGITS + len(SNAPSHOT) or not name.endswith(SNAPSHOT) or not name[:_OFFSET_DIGITS].isdigit():
        return None
    return int(name[:_OFFSET_DIGITS])


#: The files of a partition folder other than segments and snapshots, by name.
PARTITION_STATE_FILES = frozenset({"partition.metadata", "leader-epoch-checkpoint", "quorum-state"})


def is_partition_file_name(name: str) -> bool:
    """Whether ``name`` is a file of a partition folder as Kafka names them: a segment's file (with
    any temporary suffix), a producer-state snapshot or a state file (:data:`PARTITION_STATE_FILES`)."""
    return parse_segment_file_name(name) is not None or snapshot_offset(name) is not None or name in PARTITION_STATE_FILES


def parse_partition_dir_name(name: str) -> tuple[str, int]:
    """``orders-3`` -> ``("orders", 3)``; :class:`InvalidName` for anything that is not a partition."""
    if name.endswith(("-delete", "-future", "-stray")):
        raise InvalidName(f"{name!r} is a folder being deleted or moved, not a partition")
    m = _DIR_RE.match(name)
    if not m:
        raise InvalidName(f"{name!r} is not <topic>-<partition>")
    topic = m.group("topic")
    if not TOPIC_RE.match(topic) or topic in (".", ".."):
        raise InvalidName(f"{topic!r} is not a valid topic name (1 to 249 of a-z A-Z 0-9 . _ -)")
    partition = int(m.group("partition"))
    if partition > 2**31 - 1:
        raise InvalidName(f"partition {partition} is out of range")
    return topic, partition


#: Where Spark's kafkalog writer stages its tasks' batches (``LOGDIR/.kafkafs-staging/<job>/...``) until the
#: job commits; a crashed driver leaves it, and a broker refuses a log directory that holds it.
STAGING_DIR_NAME = ".kafkafs-staging"

#: Folders of a log directory a broker passes over at start: tiered storage's index cache.
_BROKER_SKIPS = frozenset({"remote-log-index-cache"})
#: A partition folder renamed for deletion, a future replica or a stray one: ``<topic>-<n>.<id>-delete``.
_RENAMED_DIR_RE = re.compile(r"\S+-\S+\.\S+-(?:delete|future|stray)", re.ASCII)
_JAVA_INT_RE = re.compile(r"[+-]?[0-9]+", re.ASCII)


def broker_refuses_folder(name: str) -> bool:
    """Whether a broker stops at start on a folder named ``name`` in its log directory: Kafka 4's
    LogManager reads every folder but tiered storage's index cache with
    ``UnifiedLog.parseTopicPartitionName`` ("Found directory ..., '<name>' is not in the form of
    topic-partition or topic-partition.uniqueId-delete"), which takes ``<topic>-<int>`` (any topic text),
    and the same with ``.<id>-delete``, ``-future`` or ``-stray`` after it."""
    if name in _BROKER_SKIPS:
        return False
    if name.endswith(("-delete", "-future", "-stray")):
        if not _RENAMED_DIR_RE.fullmatch(name):
            return True
        name = name[: name.rindex(".")]
    topic, dash, number = name.rpartition("-")
    if not dash or not topic or not _JAVA_INT_RE.fullmatch(number):
        return True
    return not -(2**31) <= int(number) < 2**31


#: Kafka's internal topics (:data:`kafkafs.format.decoders.INTERNAL_TOPICS`' names) and who alone writes
#: each: a broker refuses a client's produce to them (``INVALID_TOPIC_EXCEPTION``), and what a client
#: would write there (a raw record) is no record the broker can replay.
INTERNAL_TOPIC_WRITERS = {
    "__consumer_offsets": "the group coordinator",
    "__transaction_state": "the transaction coordinator",
    "__cluster_metadata": "the KRaft controllers (it is the cluster's metadata log)",
    "__share_group_state": "the share coordinator",
    "__remote_log_metadata": "the remote log metadata manager",
}


def is_internal_topic(topic: str) -> bool:
    """Whether ``topic`` is one of Kafka's internal topics, which take no user writes
    (:func:`refuse_internal_topic`; a ``--rw`` mount gives their partitions no ``append`` file)."""
    return topic in INTERNAL_TOPIC_WRITERS


def refuse_internal_topic(topic: str) -> None:
    """The one rule for every user append (``produce``, the mount's ``append`` files and ``mkdir``, Spark's
    kafkalog writer): :class:`InternalTopicRefused` when ``topic`` is one of Kafka's internal topics.
    kafkafs's own maintenance of those topics (recover, clean, compaction) does not call it."""
    if is_internal_topic(topic):
        writer = INTERNAL_TOPIC_WRITERS[topic]
        raise InternalTopicRefused(
            f"{topic} is a Kafka internal topic written only by {writer}: a broker refuses client writes "
            "to it, and so does kafkafs"
        )
