"""Options of the ``kafkalog`` source, parsed and checked in one place (no pyspark needed).

Names follow Spark's Kafka source where it has one (``startingOffsets``, ``endingOffsets``,
``startingTimestamp``, ``startingOffsetsByTimestamp``, ``maxOffsetsPerTrigger``, ...); option names
are case-insensitive, as Spark's are. Offsets in JSON use Kafka's shape ``{"topic": {"0": 23}}`` with
-2 for earliest and -1 for latest.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import re
from collections.abc import Mapping
from typing import Any

from ..errors import InvalidInput

__all__ = ["ReadOptions", "OffsetSpec", "parse_read_options", "parse_paths", "EARLIEST", "LATEST"]

EARLIEST = -2
LATEST = -1
DEFAULT_MAX_BYTES_PER_PARTITION = 64 * 1024 * 1024
DEFAULT_BATCH_ROWS = 32768

#: Per partition: an offset (or EARLIEST/LATEST), keyed by (topic, partition); ``default`` for the rest.
OffsetMap = dict[tuple[str, int], int]


@dataclasses.dataclass(frozen=True)
class OffsetSpec:
    """Where to start or end: ``default`` for every partition not listed in ``per_partition``."""

    default: int
    per_partition: Mapping[tuple[str, int], int] = dataclasses.field(default_factory=dict)

    def for_partition(self, topic: str, partition: int) -> int:
        return self.per_partition.get((topic, partition), self.default)


@dataclasses.dataclass(frozen=True)
class TimestampSpec:
    """A timestamp (epoch ms) for every partition, or per partition (unlisted ones: None)."""

    default: int | None
    per_partition: Mapping[tuple[str, int], int] = dataclasses.field(default_factory=dict)

    def for_partition(self, topic: str, partition: int) -> int | None:
        return self.per_partition.get((topic, partition), self.default)


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    paths: tuple[str, ...]
    topics: frozenset[str] | None = None
    topic_pattern: str | None = None
    starting: OffsetSpec = OffsetSpec(EARLIEST)
    ending: OffsetSpec = OffsetSpec(LATEST)
    starting_timestamp: TimestampSpec | None = None
    ending_timestamp: TimestampSpec | None = None
    starting_by_timestamp_strategy: str = "error"
    on_corrupt: str = "fail"
    isolation_level: str = "read_uncommitted"
    max_bytes_per_partition: int = DEFAULT_MAX_BYTES_PER_PARTITION
    max_offsets_per_trigger: int | None = None
    batch_rows: int = DEFAULT_BATCH_ROWS
    staging_dir: str | None = None
    topic: str | None = None  # for writes: the topic of rows without a topic column
    compression: str = "none"  # for writes

    def accepts_topic(self, topic: str) -> bool:
        if self.topics is not None and topic not in self.topics:
            return False
        return self.topic_pattern is None or re.fullmatch(self.topic_pattern, topic) is not None


def _lower(options: Mapping[str, Any]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in dict(options).items() if v is not None}


def parse_paths(opts: Mapping[str, str]) -> tuple[str, ...]:
    """``path`` and ``paths`` (Spark passes a list given to ``load`` as a JSON array), globs expanded."""
    raw: list[str] = []
    if "paths" in opts and opts["paths"].strip():
        text = opts["paths"].strip()
        if text.startswith("["):
            try:
                loaded = json.loads(text)
            except ValueError:
                raise InvalidInput(f"option paths: {text!r} is not a JSON array of strings") from None
            if not isinstance(loaded, list) or not all(isinstance(p, str) for p in loaded):
                raise InvalidInput("option paths must be a JSON array of strings")
            raw.extend(loaded)
        else:
            raw.extend(p.strip() for p in text.split(",") if p.strip())
    if "path" in opts and opts["path"].strip():
        raw.append(opts["path"].strip())
    out: list[str] = []
    for p in raw:
        if glob.has_magic(p):
            matched = sorted(glob.glob(p))
            if not matched:
                raise InvalidInput(f"{p}: no log directory matches")
            out.extend(matched)
        else:
            out.append(p)
    seen: set[str] = set()
    unique = [p for p in out if not (p in seen or seen.add(p))]
    return tuple(unique)


def _offset_json(name: str, text: str) -> dict[tuple[str, int], int]:
    try:
        data = json.loads(text)
    except ValueError:
        raise InvalidInput(f"option {name}: {text!r} is neither earliest, latest nor JSON") from None
    if not isinstance(data, dict):
        raise InvalidInput(f'option {name}: expected {{"topic": {{"0": 23}}}}, got {text!r}')
    out: dict[tuple[str, int], int] = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise InvalidInput(f'option {name}: expected {{"topic": {{"0": 23}}}}, got {text!r}')
        for part, value in parts.items():
            try:
                p = int(part)
            except ValueError:
                raise InvalidInput(f"option {name}: partition {part!r} of {topic!r} is not a number") from None
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidInput(f"option {name}: {topic}-{part}: {value!r} is not an integer")
            out[(str(topic), p)] = value
    return out


def _offset_spec(name: str, text: str | None, default: int, *, allow: tuple[str, ...]) -> OffsetSpec:
    if text is None:
        return OffsetSpec(default)
    t = text.strip()
    if t.lower() in allow:
        return OffsetSpec(EARLIEST if t.lower() == "earliest" else LATEST)
    if t.lower() in ("earliest", "latest"):
        raise InvalidInput(f"option {name}: {t} is not allowed here")
    return OffsetSpec(default, _offset_json(name, t))


def _timestamp_spec(name: str, text: str | None) -> TimestampSpec | None:
    if text is None:
        return None
    t = text.strip()
    if t.startswith("{"):
        return TimestampSpec(None, _offset_json(name, t))
    try:
        return TimestampSpec(int(t))
    except ValueError:
        raise InvalidInput(f"option {name}: {t!r} is not a timestamp in epoch milliseconds") from None


def _choice(opts: Mapping[str, str], names: tuple[str, ...], choices: tuple[str, ...], default: str) -> str:
    """The value of the first of ``names`` given (the first name is the one shown in messages)."""
    for n in names:
        if n.lower() in opts:
            raw = opts[n.lower()]
            value = raw.strip().lower()
            if value not in choices:
                raise InvalidInput(f"option {names[0]}: {raw!r} is not one of {', '.join(choices)}")
            return value
    return default


def _positive(opts: Mapping[str, str], name: str, default: int | None) -> int | None:
    if name.lower() not in opts:
        return default
    raw = opts[name.lower()]
    try:
        value = int(raw)
    except ValueError:
        raise InvalidInput(f"option {name}: {raw!r} is not a whole number") from None
    if value <= 0:
        raise InvalidInput(f"option {name} must be positive")
    return value


def parse_read_options(options: Mapping[str, Any], *, streaming: bool = False) -> ReadOptions:
    """Check every option; :class:`InvalidInput` with the option's name for a bad one."""
    opts = _lower(options)
    paths = parse_paths(opts)
    topics = None
    text = opts.get("topics", opts.get("subscribe"))
    if text is not None:
        topics = frozenset(t.strip() for t in text.split(",") if t.strip())
        if not topics:
            raise InvalidInput("option topics is empty")
    pattern = opts.get("topicpattern", opts.get("subscribepattern"))
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise InvalidInput(f"option topicPattern: {exc}") from None
    # as in Spark: startingTimestamp wins over startingOffsetsByTimestamp, which wins over startingOffsets
    start_ts = opts.get("startingtimestamp", opts.get("startingoffsetsbytimestamp"))
    end_ts = opts.get("endingtimestamp", opts.get("endingoffsetsbytimestamp"))
    default_start = LATEST if streaming else EARLIEST
    return ReadOptions(
        paths=paths,
        topics=topics,
        topic_pattern=pattern,
        starting=_offset_spec("startingOffsets", opts.get("startingoffsets"), default_start,
                              allow=("earliest", "latest")),
        ending=_offset_spec("endingOffsets", opts.get("endingoffsets"), LATEST, allow=("latest",)),
        starting_timestamp=_timestamp_spec("startingTimestamp", start_ts),
        ending_timestamp=_timestamp_spec("endingTimestamp", end_ts),
        starting_by_timestamp_strategy=_choice(
            opts, ("startingOffsetsByTimestampStrategy",), ("error", "latest"), "error"
        ),
        on_corrupt=_choice(opts, ("onCorrupt",), ("fail", "skip"), "fail"),
        isolation_level=_choice(
            opts, ("isolationLevel", "kafka.isolation.level"), ("read_uncommitted", "read_committed"),
            "read_uncommitted",
        ),
        max_bytes_per_partition=_positive(opts, "maxBytesPerPartition", DEFAULT_MAX_BYTES_PER_PARTITION),  # type: ignore[arg-type]
        max_offsets_per_trigger=_positive(opts, "maxOffsetsPerTrigger", None),
        batch_rows=_positive(opts, "batchRows", DEFAULT_BATCH_ROWS),  # type: ignore[arg-type]
        staging_dir=opts.get("stagingdir"),
        topic=opts.get("topic"),
        compression=_choice(opts, ("compression", "kafka.compression.type"),
                            ("none", "gzip", "snappy", "lz4", "zstd"), "none"),
    )
