"""Kafka's message definitions as shipped in ``messages/``: which resources of which Kafka jars they
are (:data:`SOURCES`, used by ``scripts/update_kafka_messages.py`` and the test that holds them equal
to the jars), and reading one (:func:`load_spec`).

The files are Kafka's own, byte for byte (Apache License 2.0; ``messages/LICENSE`` and ``NOTICE`` are
the release's): JSON with ``//`` comment lines, as Kafka's message generator reads them. A definition
is found by its message name (``ZkMigrationStateRecord`` lives in ``ZkMigrationRecord.json``).
``messages/SOURCES.tsv`` names the Kafka release and where each file came from.
Stateless apart from caches; thread-safe.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import NotRequired, TypedDict

__all__ = ["SOURCES", "MESSAGES_DIR", "kafka_version", "select_resources", "load_spec", "names_from",
           "strip_comments", "FieldSpec", "MessageSpec", "StructSpec"]


class FieldSpec(TypedDict):
    """One field of a definition, as Kafka's message generator reads it (the keys kafkafs reads)."""

    name: str
    type: str  # int8..float64, bool, uuid, string, bytes, records, a struct's name, "[]" + any of those
    versions: NotRequired[str]
    nullableVersions: NotRequired[str]
    taggedVersions: NotRequired[str]
    tag: NotRequired[int]
    default: NotRequired[str | int | bool | None]
    fields: NotRequired[list[FieldSpec]]


class StructSpec(TypedDict):
    """A ``commonStructs`` entry: a struct type that fields name by its ``name``."""

    name: str
    fields: list[FieldSpec]


class MessageSpec(TypedDict):
    """A message definition (one ``messages/*.json`` file)."""

    name: str
    type: str  # "metadata", "coordinator-key", "coordinator-value", "data", ...
    validVersions: str
    flexibleVersions: NotRequired[str]
    apiKey: NotRequired[int]
    fields: list[FieldSpec]
    commonStructs: NotRequired[list[StructSpec]]

#: (artifact of org.apache.kafka, folder inside its jar, the message files taken or None for every
#: ``.json`` in the folder): every internal topic's records and the control records.
SOURCES: tuple[tuple[str, str, tuple[str, ...] | None], ...] = (
    ("kafka-group-coordinator", "common/message/", None),  # __consumer_offsets
    ("kafka-share-coordinator", "common/message/", None),  # __share_group_state
    ("kafka-transaction-coordinator", "common/message/", None),  # __transaction_state
    ("kafka-metadata", "common/metadata/", None),  # __cluster_metadata
    ("kafka-storage", "message/", (  # __remote_log_metadata
        "RemoteLogSegmentMetadataRecord", "RemoteLogSegmentMetadataUpdateRecord",
        "RemotePartitionDeleteMetadataRecord", "RemoteLogSegmentMetadataSnapshotRecord")),
    ("kafka-clients", "common/message/", (  # control records, the consumer protocol
        "ControlRecordTypeSchema", "EndTxnMarker", "LeaderChangeMessage", "SnapshotHeaderRecord",
        "SnapshotFooterRecord", "KRaftVersionRecord", "VotersRecord", "ConsumerProtocolSubscription",
        "ConsumerProtocolAssignment")),
)

#: The folder of the shipped definitions (a path for the update script; readers use importlib.resources).
MESSAGES_DIR = Path(__file__).resolve().parent / "messages"

_PACKAGE = __name__.rsplit(".", 1)[0]
_COMMENT = re.compile(r"^\s*//.*$", re.M)


def select_resources(names: list[str], folder: str, wanted: tuple[str, ...] | None) -> list[str]:
    """The paths of a jar (``names``) that :data:`SOURCES` takes from ``folder``."""
    out = []
    for path in names:
        if not path.startswith(folder) or not path.endswith(".json") or "/" in path[len(folder):]:
            continue
        if wanted is None or path[len(folder):-5] in wanted:
            out.append(path)
    return sorted(out)


def _messages() -> Traversable:
    return resources.files(_PACKAGE).joinpath("messages")


def strip_comments(text: str) -> str:
    """Kafka's definition text without its ``//`` comment lines (the only comments Kafka writes)."""
    return _COMMENT.sub("", text)


@cache
def kafka_version() -> str:
    """The Kafka release the shipped definitions come from (``SOURCES.tsv``'s first line)."""
    first = _messages().joinpath("SOURCES.tsv").read_text("utf-8").splitlines()[0]
    return first.split()[3].rstrip(":")  # "# Apache Kafka 4.4.0: ..."


@cache
def _by_name() -> dict[str, str]:
    """Message name -> file name, for every definition shipped."""
    out: dict[str, str] = {}
    for entry in _messages().iterdir():
        if entry.name.endswith(".json"):
            spec: MessageSpec = json.loads(strip_comments(entry.read_text("utf-8")))
            out[spec["name"]] = entry.name
    return out


@cache
def load_spec(name: str) -> MessageSpec:
    """The definition of message ``name``; KeyError when none is shipped. The shipped files are
    Kafka's (a test holds them equal to the jars), so their JSON is taken as :class:`MessageSpec`."""
    try:
        text = _messages().joinpath(f"{name}.json").read_text("utf-8")
        spec: MessageSpec = json.loads(strip_comments(text))
        if spec.get("name") == name:
            return spec
    except FileNotFoundError:
        pass
    file = _by_name().get(name)
    if file is None:
        raise KeyError(name)
    spec = json.loads(strip_comments(_messages().joinpath(file).read_text("utf-8")))
    return spec


@cache
def names_from(artifact: str) -> tuple[str, ...]:
    """The message names shipped from ``artifact``'s jar (e.g. ``"kafka-metadata"``), sorted."""
    files = set()
    for line in _messages().joinpath("SOURCES.tsv").read_text("utf-8").splitlines()[1:]:
        file, source, _path = line.split("\t")
        if source == artifact:
            files.add(file)
    return tuple(sorted(name for name, file in _by_name().items() if file in files))
