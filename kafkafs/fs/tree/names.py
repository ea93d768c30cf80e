"""The names of the mounted tree (SPEC §3) and how the dynamic ones parse.

Offsets are canonical decimal numbers (``7.json``, not ``007.json``), so one record has one name.
Timestamps are epoch milliseconds or ISO-8601 UTC, as :func:`kafkafs.format.timestamps.parse_timestamp`
reads them, and never negative (Kafka's ``offsetsForTimes`` refuses a negative time). A name that does not parse is simply not there (the caller answers ENOENT).
"""

from __future__ import annotations

import re

from ...errors import InvalidInput
from ...format.timestamps import parse_target_time

__all__ = [
    "RECORDS",
    "BY_OFFSET",
    "BY_TIME",
    "SEGMENTS",
    "PARTITION_JSON",
    "APPEND",
    "parse_offset_file",
    "parse_offset_range",
    "parse_time_file",
    "parse_time_range",
    "is_segment_file",
    "is_partition_file",
    "partition_file_key",
    "is_other_file",
    "is_logdir_file",
    "PARTITION_STATE_FILES",
]

RECORDS = "records.jsonl"
BY_OFFSET = "by-offset"
BY_TIME = "by-time"
SEGMENTS = "segments"
PARTITION_JSON = "partition.json"
APPEND = "append"

_NUMBER = r"(0|[1-9][0-9]{0,18})"
_OFFSET_FILE = re.compile(rf"^{_NUMBER}\.json$")
_OFFSET_RANGE = re.compile(rf"^{_NUMBER}-{_NUMBER}\.jsonl$")
_SEGMENT_FILE = re.compile(r"^([0-9]{20})\.(log|index|timeindex|txnindex)$")
_EXTENSION_CODES = {"log": 0, "index": 1, "timeindex": 2, "txnindex": 3}
_LONG_MAX = 2**63 - 1


def _offset(text: str) -> int | None:
    value = int(text)
    return value if value <= _LONG_MAX else None


def parse_offset_file(name: str) -> int | None:
    """``42.json`` -> 42."""
    m = _OFFSET_FILE.match(name)
    return None if m is None else _offset(m.group(1))


def parse_offset_range(name: str) -> tuple[int, int] | None:
    """``10-19.jsonl`` -> (10, 19); None unless first <= last."""
    m = _OFFSET_RANGE.match(name)
    if m is None:
        return None
    first, last = _offset(m.group(1)), _offset(m.group(2))
    if first is None or last is None or first > last:
        return None
    return first, last


def _timestamp(text: str) -> int | None:
    if not text or text != text.strip():
        return None
    try:
        value = parse_target_time(text)  # a start, or a range's end (before it): a bound; never negative
    except (InvalidInput, ValueError, OverflowError):
        return None
    return value if value <= _LONG_MAX else None


def parse_time_file(name: str) -> int | None:
    """``1763700000000.json`` or ``2026-11-21T10:00:00Z.json`` -> epoch milliseconds."""
    if not name.endswith(".json") or ".." in name:
        return None
    return _timestamp(name[: -len(".json")])


def parse_time_range(name: str) -> tuple[int, int] | None:
    """``<ts1>..<ts2>.jsonl`` -> (ts1, ts2); None unless ts1 <= ts2 (equal bounds give an empty file)."""
    if not name.endswith(".jsonl"):
        return None
    first, sep, last = name[: -len(".jsonl")].partition("..")
    if not sep:
        return None
    ts1, ts2 = _timestamp(first), _timestamp(last)
    if ts1 is None or ts2 is None or ts1 > ts2:
        return None
    return ts1, ts2


def is_segment_file(name: str) -> bool:
    """A file that ``segments/`` shows: a segment's ``.log`` and its indexes (SPEC: "the raw segment
    files"). Not producer ``.snapshot`` files or checkpoints, which are not segment files; not files
    marked ``.deleted``, ``.cleaned`` or ``.swap`` either: they are on their way out of the log or not
    yet in it, vanish at any moment, and would count records twice in ``cat segments/*.log``."""
    m = _SEGMENT_FILE.match(name)
    return m is not None and int(m.group(1)) <= _LONG_MAX  # Kafka's offsets are longs


#: State files a partition folder holds besides its segments, with fixed ``readdir`` ids.
PARTITION_STATE_FILES = {"leader-epoch-checkpoint": 1, "partition.metadata": 2, "quorum-state": 3}
_TRANSIENT = (".tmp", ".deleted", ".cleaned", ".swap")
_SNAPSHOT = re.compile(r"^([0-9]{20})\.snapshot$")
_OTHER_IDS = 1 << 62  # other files: after every offset-named one


def is_partition_file(name: str) -> bool:
    """A file that ``segments/`` shows (SPEC §3: every file of the partition folder): segment files,
    producer ``.snapshot`` files, ``leader-epoch-checkpoint``, ``partition.metadata`` and any other
    regular file, except the transient ones (``.tmp`` files being written, ``.deleted``, ``.cleaned``
    and ``.swap`` files, which vanish at any moment and would count records twice)."""
    return bool(name) and not name.endswith(_TRANSIENT) and name not in (".", "..")


def partition_file_key(name: str, others: list[str] | None = None) -> int:
    """A stable sort key and ``readdir`` id for a file of ``segments/``: the state files first, then
    offset-named files by offset (segment files, then their snapshot), then any other file by its
    place in ``others`` (the sorted names of such files now in the folder)."""
    fixed = PARTITION_STATE_FILES.get(name)
    if fixed is not None:
        return fixed
    m = _SEGMENT_FILE.match(name)
    if m is not None:
        return 16 + int(m.group(1)) * 8 + _EXTENSION_CODES[m.group(2)]
    m = _SNAPSHOT.match(name)
    if m is not None:
        return 16 + int(m.group(1)) * 8 + 4
    return _OTHER_IDS + (others.index(name) if others and name in others else 0)


def is_other_file(name: str) -> bool:
    """Shown in ``segments/`` but neither a state file nor named by an offset."""
    return name not in PARTITION_STATE_FILES and not _SEGMENT_FILE.match(name) and not _SNAPSHOT.match(name)


def is_logdir_file(name: str) -> bool:
    """A file of the log directory itself that the mount's top shows (SPEC §3): ``meta.properties``,
    the ``*-checkpoint`` files, KRaft's ``bootstrap.checkpoint`` and the clean-shutdown marker."""
    return name in ("meta.properties", "bootstrap.checkpoint", ".kafka_cleanshutdown") or (
        name.endswith("-checkpoint") and "/" not in name
    )


