"""A partition folder's ``partition.metadata``: the topic id, as Kafka's ``PartitionMetadataFile`` keeps it.

Content: ``version: 0\\ntopic_id: <id>`` (no final line end), the id a 128-bit UUID in Kafka's text form,
unpadded base64url (22 characters). Kafka's reader (``PartitionMetadataReadBuffer``) wants two lines
of two whitespace-separated fields, a version >= 0 and a non-zero id; a broker then checks the id
against the topic's id in its metadata, so every partition of a topic must carry the same one. A new
partition therefore takes the id of a partition of the same topic already in the log directory, and a
new topic gets a random id as Kafka's ``Uuid.randomUuid`` makes them (never the reserved zero or one
ids, never one whose text starts with ``-``).
"""

from __future__ import annotations

import base64
import os
import re
from pathlib import Path

from ..errors import CorruptRecordError, UnsafeFileError
from .leader_epochs import read_regular_file
from .safefiles import write_atomically

__all__ = [
    "PARTITION_METADATA_FILE",
    "parse_partition_metadata",
    "render_partition_metadata",
    "new_topic_id",
    "ensure_partition_metadata",
    "read_topic_id",
]

PARTITION_METADATA_FILE = "partition.metadata"
_RESERVED = {bytes(16), bytes(15) + b"\1"}
_WS = re.compile(r"[ \t\x0b\x0c]+")


def _id_text(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def parse_partition_metadata(data: bytes) -> tuple[int, str]:
    """``(version, topic id text)``; ``CorruptRecordError`` where Kafka's reader raises."""
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise CorruptRecordError(f"partition.metadata is not UTF-8: {exc.reason}") from None
    if len(lines) < 2:
        raise CorruptRecordError("partition.metadata has fewer than two lines")
    version_fields, id_fields = _WS.split(lines[0]), _WS.split(lines[1])
    if (
        len(version_fields) != 2
        or not re.fullmatch(r"[+-]?\d+", version_fields[1])
        or int(version_fields[1]) < 0
    ):
        raise CorruptRecordError(f"Malformed line in partition.metadata: {lines[0]}")
    if len(id_fields) != 2:
        raise CorruptRecordError(f"Malformed line in partition.metadata: {lines[1]}")
    try:
        raw = base64.urlsafe_b64decode(id_fields[1] + "=" * (-len(id_fields[1]) % 4))
    except ValueError:
        raw = b""
    if len(raw) != 16 or raw == bytes(16):
        raise CorruptRecordError(f"Invalid topic ID in partition.metadata: {id_fields[1]}")
    return int(version_fields[1]), id_fields[1]


def render_partition_metadata(topic_id: str) -> bytes:
    return f"version: 0\ntopic_id: {topic_id}".encode()


def new_topic_id() -> str:
    """A random topic id as Kafka's ``Uuid.randomUuid`` returns it."""
    import uuid  # only to make one: start-up time

    while True:
        raw = uuid.uuid4().bytes
        text = _id_text(raw)
        if raw not in _RESERVED and not text.startswith("-"):
            return text


def read_topic_id(directory: Path) -> str | None:
    """The topic id of a partition folder, None when it has no readable ``partition.metadata``."""
    path = Path(directory) / PARTITION_METADATA_FILE
    try:
        return parse_partition_metadata(read_regular_file(path))[1]
    except (OSError, CorruptRecordError, UnsafeFileError):
        return None


def ensure_partition_metadata(directory: Path, topic: str, recorded: str | None = None) -> str:
    """Write ``partition.metadata`` into a new partition folder unless it has one; return the topic id
    (``recorded``: the one a KRaft broker's metadata gives the topic; else the one a sibling partition
    of ``topic`` carries, else a new one)."""
    directory = Path(directory)
    existing = read_topic_id(directory)
    if existing is not None:
        return existing
    topic_id = recorded
    prefix = topic + "-"
    for entry in [] if topic_id else sorted(os.scandir(directory.parent), key=lambda e: e.name):
        tail = entry.name[len(prefix) :]
        if entry.name.startswith(prefix) and tail.isdigit() and entry.path != str(directory):
            topic_id = read_topic_id(Path(entry.path))
            if topic_id is not None:
                break
    topic_id = topic_id or new_topic_id()
    write_atomically(directory / PARTITION_METADATA_FILE, render_partition_metadata(topic_id))
    return topic_id
