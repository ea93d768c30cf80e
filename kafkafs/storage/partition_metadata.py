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

from ..errors import CorruptRecordError, UnsafeFileError, describe_os_error, doing
from .leader_epochs import read_regular_file
from .safefiles import fsync_directory, write_atomically

__all__ = [
    "PARTITION_METADATA_FILE",
    "parse_partition_metadata",
    "render_partition_metadata",
    "new_topic_id",
    "ensure_partition_metadata",
    "read_topic_id",
    "sibling_topic_id",
    "partition_metadata_problem",
    "repair_partition_metadata",
]

PARTITION_METADATA_FILE = "partition.metadata"
_RESERVED = {bytes(16), bytes(15) + b"\1"}
_LINE_END = re.compile(r"\r\n|\r|\n")
_SEPARATOR = re.compile(r":[ \t\n\x0b\x0c\r]+")  # Java's \s: ASCII white space only
_INT = re.compile(r"[+-]?\d+")  # Character.digit takes any Unicode decimal digit, as int() does
_ID_TEXT = re.compile(r"[A-Za-z0-9_-]{22}(==)?")  # Base64.getUrlDecoder: 16 bytes, padding optional and whole


def _id_text(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _java_lines(text: str) -> list[str]:
    """The lines ``BufferedReader.readLine`` returns: ends at ``\\n``, ``\\r`` or ``\\r\\n``; no last empty line."""
    lines = _LINE_END.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _fields(line: str) -> list[str]:
    """``line`` split as Java's ``Pattern.compile(":\\\\s+").split(line)`` splits it (empty trailing fields dropped)."""
    fields = _SEPARATOR.split(line)
    if len(fields) > 1:
        while fields and fields[-1] == "":
            fields.pop()
    return fields


def parse_partition_metadata(data: bytes) -> tuple[int, str]:
    """``(version, topic id text)`` (the id as Kafka's ``Uuid.toString`` writes it); ``CorruptRecordError`` exactly where a Kafka 4 (and 3.9) broker's
    reader (``PartitionMetadataFile.read``) fails, which stops the broker's start (review12 R12-7).

    The reader takes two lines, each split at ``:`` plus white space into exactly two fields (the
    names before them are not checked); the first field's value is a version (Java's ``parseInt``)
    >= 0, the second's a topic id for ``Uuid.fromString``: 22 characters of base64url (24 with
    ``==``) of a non-zero id."""
    try:
        lines = _java_lines(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise CorruptRecordError(f"not UTF-8: {exc.reason}") from None
    if len(lines) < 2:
        raise CorruptRecordError(f"{len(lines)} line(s), not the version and topic_id lines")
    version_fields, id_fields = _fields(lines[0]), _fields(lines[1])
    if len(version_fields) != 2:
        raise CorruptRecordError(f"malformed line {lines[0]!r}")
    version = _java_int(version_fields[1])
    if version is None:
        raise CorruptRecordError(f"malformed line {lines[0]!r} (the version is not a number)")
    if version < 0:
        raise CorruptRecordError(f"unrecognized version {version}")
    if len(id_fields) != 2:
        raise CorruptRecordError(f"malformed line {lines[1]!r}")
    text = id_fields[1]
    if not _ID_TEXT.fullmatch(text):
        raise CorruptRecordError(f"topic id {text!r} is not a UUID (22 characters of base64url)")
    raw = base64.urlsafe_b64decode(text[:22] + "==")  # the last character's low 4 bits are not the id's
    if raw == bytes(16):
        raise CorruptRecordError(f"topic id {text} is the zero UUID, which Kafka refuses")
    return version, _id_text(raw)


def _java_int(text: str) -> int | None:
    """Java's ``Integer.parseInt(text)``, None where it throws."""
    if not _INT.fullmatch(text):
        return None
    value = int(text)
    return value if -(2**31) <= value < 2**31 else None


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


def sibling_topic_id(directory: Path, topic: str) -> str | None:
    """The topic id another partition folder of ``topic`` beside ``directory`` carries (the first by
    name that has a readable one), None when none does."""
    directory = Path(directory)
    prefix = topic + "-"
    for entry in sorted(os.scandir(directory.parent), key=lambda e: e.name):
        tail = entry.name[len(prefix) :]
        if entry.name.startswith(prefix) and tail.isdigit() and entry.path != str(directory):
            topic_id = read_topic_id(Path(entry.path))
            if topic_id is not None:
                return topic_id
    return None


def ensure_partition_metadata(directory: Path, topic: str, recorded: str | None = None) -> str:
    """Write ``partition.metadata`` into a new partition folder unless it has one; return the topic id
    (``recorded``: the one a KRaft broker's metadata gives the topic; else the one a sibling partition
    of ``topic`` carries, else a new one)."""
    directory = Path(directory)
    existing = read_topic_id(directory)
    if existing is not None:
        return existing
    topic_id = recorded or sibling_topic_id(directory, topic) or new_topic_id()
    write_atomically(directory / PARTITION_METADATA_FILE, render_partition_metadata(topic_id))
    return topic_id


def partition_metadata_problem(directory: Path) -> str | None:
    """Why a broker's reader refuses the ``partition.metadata`` of ``directory`` (a broker does not start
    with it: "Error starting LogManager"), None when it reads, is missing or is not a regular file (a
    link: the folder's other check says it, and it is never read)."""
    try:
        parse_partition_metadata(read_regular_file(Path(directory) / PARTITION_METADATA_FILE))
    except (FileNotFoundError, UnsafeFileError):
        return None
    except CorruptRecordError as exc:
        return exc.reason
    except OSError as exc:
        return describe_os_error(exc)
    return None


def repair_partition_metadata(directory: Path, topic: str, recorded: str | None) -> str | None:
    """Rewrite a ``partition.metadata`` a broker's reader refuses (review12 R12-7) with the topic's id:
    ``recorded`` (what a KRaft broker's metadata log gives ``topic``), else a sibling partition's. When
    nothing names it the file is removed: a broker then does what it does for a folder without one (a
    KRaft broker sets the folder aside as a stray, a ZooKeeper-mode one writes the id its controller
    sends), where with the damaged file it does not start. Returns what was done, None when the file
    reads (or is missing, or is a link: never followed)."""
    directory = Path(directory)
    why = partition_metadata_problem(directory)
    if why is None:
        return None
    path = directory / PARTITION_METADATA_FILE
    topic_id = recorded or sibling_topic_id(directory, topic)
    if topic_id is not None:
        write_atomically(path, render_partition_metadata(topic_id))
        source = "the metadata log's TopicRecord" if recorded else "the topic's other partitions"
        return f"{PARTITION_METADATA_FILE}: {why}; rewritten with topic id {topic_id} ({source})"
    with doing("remove {path}", path=path):
        os.unlink(path)
    fsync_directory(directory)
    return (f"{PARTITION_METADATA_FILE}: {why}; removed: nothing in the log directory names topic {topic}'s id "
            "(a broker treats the folder as one without the file: a KRaft broker sets it aside as a stray, "
            "a ZooKeeper-mode broker writes the id its controller sends)")
