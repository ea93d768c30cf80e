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
import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import InvalidInput

log = logging.getLogger("kafkafs.spark")

__all__ = ["ReadOptions", "OffsetSpec", "parse_read_options", "parse_paths", "EARLIEST", "LATEST", "READ_OPTIONS",
           "READ_OPTION_NAMES", "check_assigned"]

EARLIEST = -2
LATEST = -1
DEFAULT_MAX_BYTES_PER_PARTITION = 64 * 1024 * 1024
DEFAULT_BATCH_ROWS = 32768
#: What a pattern leaves out unless ``kafka.exclude.internal.topics=false``, as Kafka's consumer does
#: (``exclude.internal.topics``, default true: Kafka's internal topics); the KRaft metadata log, not a
#: topic to a client, with them. By name (``subscribe``, ``assign``) they are always read.
PATTERN_EXCLUDED_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state",
                                     "__cluster_metadata"})
#: Folders read only when ``subscribe`` names them or a pattern takes them (not when every topic is
#: read, nor by ``assign``): the KRaft metadata log is not a topic.
NOT_A_TOPIC = frozenset({"__cluster_metadata"})

#: Every option a kafkalog read takes (``kafka.*`` client settings besides: accepted, unused), as
#: the README names them; option names are case-insensitive.
READ_OPTION_NAMES = (
    "subscribe", "topics", "subscribePattern", "topicPattern", "assign",
    "startingOffsets", "endingOffsets", "startingTimestamp", "endingTimestamp",
    "startingOffsetsByTimestamp", "endingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy",
    "failOnDataLoss", "minPartitions", "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay",
    "includeHeaders", "kafka.isolation.level", "isolationLevel", "kafka.exclude.internal.topics",
    "maxBytesPerPartition", "onCorrupt", "batchRows",
    # Spark's, taken and checked, but what they set is not kafkalog's: said at each read (a warning)
    "maxRecordsPerPartition",
    # Spark's, about its connection to a broker: accepted, nothing to do without one
    "fetchOffset.numRetries", "fetchOffset.retryIntervalMs", "kafkaConsumer.pollTimeoutMs", "groupIdPrefix",
)
READ_OPTIONS = frozenset(n.lower() for n in READ_OPTION_NAMES)
#: Spark's default ``maxTriggerDelay``.
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000

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
    assign: frozenset[tuple[str, int]] | None = None
    include_headers: bool = False
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    on_corrupt: str = "fail"
    isolation_level: str = "read_uncommitted"
    max_bytes_per_partition: int = DEFAULT_MAX_BYTES_PER_PARTITION
    max_offsets_per_trigger: int | None = None
    #: minOffsetsPerTrigger: a stream's micro-batch waits for this many new offsets in all, at most
    #: ``max_trigger_delay_ms`` after the last one (Spark's Kafka source)
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    batch_rows: int = DEFAULT_BATCH_ROWS
    staging_dir: str | None = None
    topic: str | None = None  # for writes: the topic of rows without a topic column
    compression: str = "none"  # for writes
    exclude_internal_topics: bool = True  # kafka.exclude.internal.topics: a pattern leaves them out

    def accepts_topic(self, topic: str) -> bool:
        if topic in NOT_A_TOPIC and self.topics is None and self.topic_pattern is None:
            return False
        if self.topics is not None and topic not in self.topics:
            return False
        if self.assign is not None and all(t != topic for t, _p in self.assign):
            return False
        if self.topic_pattern is None:
            return True
        if self.exclude_internal_topics and topic in PATTERN_EXCLUDED_TOPICS:
            return False
        return re.fullmatch(self.topic_pattern, topic) is not None

    def accepts_partition(self, topic: str, partition: int) -> bool:
        return self.accepts_topic(topic) and (self.assign is None or (topic, partition) in self.assign)


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
    return tuple(dict.fromkeys(out))  # in order, each once


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


def _offset_spec(name: str, text: str | None, default: int) -> OffsetSpec:
    if text is None:
        return OffsetSpec(default)
    t = text.strip()
    if t.lower() in ("earliest", "latest"):
        return OffsetSpec(EARLIEST if t.lower() == "earliest" else LATEST)
    return OffsetSpec(default, _offset_json(name, t))


def _check_batch_offsets(starting: OffsetSpec | None, ending: OffsetSpec | None) -> None:
    """Spark's checks of a batch read's offsets (None: given by timestamp instead), with its messages."""
    if starting is not None:
        _check_batch_bound(
            starting, LATEST, "starting offset can't be latest", "startingOffsets for {} can't be latest"
        )
    if ending is not None:
        _check_batch_bound(
            ending, EARLIEST, "ending offset can't be earliest", "ending offset for {} can't be earliest"
        )
    if starting is None or ending is None:
        return
    for key, start in sorted(starting.per_partition.items()):
        end = ending.per_partition.get(key)
        if end is not None and start >= 0 and end >= 0 and start > end:
            raise InvalidInput(
                f"The specified start offset {start} is greater than the end offset {end} for topic {key[0]} "
                f"partition {key[1]}."
            )


def _check_batch_bound(spec: OffsetSpec, forbidden: int, whole: str, one: str) -> None:
    """Spark's refusal of ``forbidden`` (latest to start, earliest to end) in a batch read: ``whole`` when
    it is the default for all partitions, ``one`` (``{}``: the partition) when one partition asks for it."""
    if spec.default == forbidden and not spec.per_partition:
        raise InvalidInput(f"{whole} for batch queries on Kafka")
    for (t, p), off in sorted(spec.per_partition.items()):
        if off == forbidden:
            raise InvalidInput(f"{one.format(f'{t}-{p}')} for batch queries on Kafka")


def _timestamp_spec(name: str, text: str | None) -> TimestampSpec | None:
    """A time bound (epoch ms), for every partition or per partition. As in Spark's Kafka source (which
    looks times up with the Admin's ListOffsets, ``OffsetSpec.forTimestamp``), -2 is the earliest offset
    and -1 the latest; another negative time finds no offset (see :func:`.plan.offset_for_timestamp`)."""
    if text is None:
        return None
    t = text.strip()
    if t.startswith("{"):
        return TimestampSpec(None, _offset_json(name, t))
    try:
        return TimestampSpec(int(t))
    except ValueError:
        raise InvalidInput(f"option {name}: Expected a single long value, got {t}") from None


def _spark_set(keys: Iterable[tuple[str, int]]) -> str:
    return "Set(" + ", ".join(f"{t}-{p}" for t, p in sorted(keys)) + ")"


def check_assigned(options: ReadOptions, found: Iterable[tuple[str, int]]) -> None:
    """Spark's check, at planning, that an offsets or by-timestamp JSON names exactly the partitions read
    (``assign``'s, else every partition of the topics read, ``found``): a topic or partition it names that
    is not read, or one read that it leaves out, fails with Spark's message (review25 R25-1). Spark gives
    its "start offsets" text for ``endingOffsets`` too; the option's name leads the message."""
    assigned = options.assign if options.assign is not None else frozenset(found)
    checks: list[tuple[str, Iterable[tuple[str, int]], str]] = []
    for position, by_time, offsets in (("start", options.starting_timestamp, options.starting),
                                       ("end", options.ending_timestamp, options.ending)):
        if by_time is not None:
            if by_time.default is None:  # by-timestamp JSON (a single time covers every partition)
                checks.append((f"{position}ingOffsetsByTimestamp", by_time.per_partition,
                    f"Partitions specified for Kafka timestamp based {position} offsets don't match what are "
                    "assigned. Maybe topic partitions are created or deleted while the query is running, or you "
                    "didn't specify all the partitions."))
        elif offsets.per_partition:
            checks.append((f"{position}ingOffsets", offsets.per_partition,
                           "Partitions specified for Kafka start offsets don't match what are assigned. Maybe topic "
                           "partitions are created or deleted while the query is running. Use -1 for latest, -2 for "
                           "earliest."))
    # with no subscribe/subscribePattern/assign (kafkalog's own; Spark requires one) every topic is read,
    # as if subscribed by name, and the same rule holds: Spark has no default for a partition left out
    every_topic = options.topics is None and options.topic_pattern is None and options.assign is None
    hint = (" (no subscribe, subscribePattern or assign: every topic of the log directories is read; name the "
            "topics with subscribe)") if every_topic else ""
    for name, named, text in checks:
        specified = frozenset(named)
        if specified != assigned:
            raise InvalidInput(f"option {name}: {text} Specified: "
                               f"{_spark_set(specified)} Assigned: {_spark_set(assigned)}{hint}")


def _assign(text: str) -> frozenset[tuple[str, int]]:
    """``assign``: ``{"topic": [0, 1]}``, as Spark's Kafka source takes it."""
    t = text.strip()
    if not t.startswith("{"):
        raise InvalidInput(f"No topicpartitions to assign as specified value for option 'assign' is '{text}'")
    try:
        data = json.loads(t)
    except ValueError:
        data = None
    if not isinstance(data, dict) or not all(
        isinstance(ps, list) and all(isinstance(p, int) and not isinstance(p, bool) for p in ps) for ps in data.values()
    ):
        raise InvalidInput(f'option assign: expected {{"topicA": [0, 1], "topicB": [2, 4]}}, got {text}')
    return frozenset((str(topic), p) for topic, ps in data.items() for p in ps)


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise InvalidInput(f"option {name}: {raw!r} is not true or false")
    return value == "true"


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


def _long(opts: Mapping[str, str], name: str) -> int | None:
    """A whole number, as Spark's ``toLong`` takes it (None: not given)."""
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        return int(raw.strip())
    except ValueError:
        raise InvalidInput(f"option {name}: {raw!r} is not a whole number") from None


#: Spark's time suffixes (``JavaUtils.timeStringAs``), in ms; a plain number is ms.
_TIME_UNITS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def _time_ms(opts: Mapping[str, str], name: str, default: int) -> int:
    """A duration such as ``15m``, ``30s`` or ``500`` (ms), as Spark's ``timeStringAsMs`` reads it."""
    raw = opts.get(name.lower())
    if raw is None:
        return default
    found = re.fullmatch(r"(-?[0-9]+)([a-z]+)?", raw.strip().lower())
    if found is None or (found.group(2) is not None and found.group(2) not in _TIME_UNITS):
        raise InvalidInput(f"option {name}: {raw!r}: Time must be specified as seconds (s), milliseconds (ms), "
                           "microseconds (us), minutes (m or min), hour (h), or day (d). E.g. 50s, 100ms, or 250us.")
    return int(int(found.group(1)) * _TIME_UNITS[found.group(2) or "ms"])


#: Spark's strategy options (our ``topics`` and ``topicPattern`` are other names for the first two).
_STRATEGIES = (("subscribe", "topics"), ("subscribePattern", "topicPattern"), ("assign",))


def _strategy(opts: Mapping[str, str]) -> tuple[frozenset[str] | None, str | None, frozenset[tuple[str, int]] | None]:
    given = [names for names in _STRATEGIES if any(n.lower() in opts for n in names)]
    if len(given) > 1:
        raise InvalidInput(
            "Only one of the following options can be specified for Kafka source: subscribe, subscribepattern, "
            "assign. See the docs for more details."
        )
    topics = pattern = assign = None
    text = opts.get("subscribe", opts.get("topics"))
    if text is not None:
        topics = frozenset(t.strip() for t in text.split(",") if t.strip())
        if not topics:
            raise InvalidInput(f"No topics to subscribe to as specified value for option 'subscribe' is '{text}'")
    raw = opts.get("subscribepattern", opts.get("topicpattern"))
    if raw is not None:
        pattern = raw.strip()
        if not pattern:
            raise InvalidInput(f"Pattern to subscribe is empty as specified value for option 'subscribePattern' is '{raw}'")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise InvalidInput(f"option subscribePattern: {exc}") from None
    if "assign" in opts:
        assign = _assign(opts["assign"])
    return topics, pattern, assign


def parse_read_options(options: Mapping[str, Any], *, streaming: bool = False, writing: bool = False) -> ReadOptions:
    """Check every option as Spark's Kafka source does (its messages where it has them);
    :class:`InvalidInput` naming the option for a bad one."""
    opts = _lower(options)
    paths = parse_paths(opts)
    topics, pattern, assign = _strategy(opts)
    # as in Spark: startingTimestamp wins over startingOffsetsByTimestamp, which wins over startingOffsets
    start_ts = opts.get("startingtimestamp", opts.get("startingoffsetsbytimestamp"))
    end_ts = opts.get("endingtimestamp", opts.get("endingoffsetsbytimestamp"))
    starting = _offset_spec("startingOffsets", opts.get("startingoffsets"), LATEST if streaming else EARLIEST)
    ending = _offset_spec("endingOffsets", opts.get("endingoffsets"), LATEST)
    if streaming:
        if "endingoffsets" in opts:
            raise InvalidInput("ending offset not valid in streaming queries")
        if end_ts is not None:
            raise InvalidInput("ending timestamp not valid in streaming queries")
    elif not writing:
        _check_batch_offsets(starting if start_ts is None else None, ending if end_ts is None else None)
        for name in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):  # Spark's warnings
            if name.lower() in opts:
                log.warning("%s option ignored in batch queries", name)
    # a batch read only warns of it, as Spark's (which reads it there only for the check below)
    max_offsets = _positive(opts, "maxOffsetsPerTrigger", None) if streaming else _long(opts, "maxOffsetsPerTrigger")
    min_offsets = _long(opts, "minOffsetsPerTrigger")
    if min_offsets is not None and max_offsets is not None and min_offsets > max_offsets:
        raise InvalidInput(f"The value of minOffsetPerTrigger({min_offsets}) is higher than the "
                           f"maxOffsetsPerTrigger({max_offsets}).")
    max_records = _long(opts, "maxRecordsPerPartition")
    if max_records is not None and max_records <= 0:
        raise InvalidInput("maxRecordsPerPartition must be positive")
    if max_records is not None and not writing:
        log.warning("option maxRecordsPerPartition is not supported by kafkalog and is ignored: a task reads whole "
                    "batches, cut by bytes (maxBytesPerPartition; minPartitions for more tasks)")
    min_partitions = None
    if "minpartitions" in opts:
        try:
            min_partitions = int(opts["minpartitions"])
        except ValueError:
            raise InvalidInput(f"option minPartitions: {opts['minpartitions']!r} is not a whole number") from None
        if min_partitions <= 0:
            raise InvalidInput("minPartitions must be positive")
    return ReadOptions(
        paths=paths,
        topics=topics,
        topic_pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        starting_timestamp=_timestamp_spec(
            "startingTimestamp" if "startingtimestamp" in opts else "startingOffsetsByTimestamp", start_ts),
        ending_timestamp=_timestamp_spec(
            "endingTimestamp" if "endingtimestamp" in opts else "endingOffsetsByTimestamp", end_ts),
        starting_by_timestamp_strategy=_choice(
            opts, ("startingOffsetsByTimestampStrategy",), ("error", "latest"), "error"
        ),
        include_headers=_bool(opts, "includeHeaders", False),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        min_partitions=min_partitions,
        on_corrupt=_choice(opts, ("onCorrupt",), ("fail", "skip"), "fail"),
        isolation_level=_choice(
            opts, ("isolationLevel", "kafka.isolation.level"), ("read_uncommitted", "read_committed"),
            "read_uncommitted",
        ),
        max_bytes_per_partition=_positive(opts, "maxBytesPerPartition", DEFAULT_MAX_BYTES_PER_PARTITION),  # type: ignore[arg-type]  # a default is given: never None
        max_offsets_per_trigger=max_offsets,
        min_offsets_per_trigger=min_offsets,
        # read by a stream only, as Spark's (its micro-batch stream reads it; a batch read warns, above)
        max_trigger_delay_ms=(_time_ms(opts, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY_MS) if streaming
                              else DEFAULT_MAX_TRIGGER_DELAY_MS),
        batch_rows=_positive(opts, "batchRows", DEFAULT_BATCH_ROWS),  # type: ignore[arg-type]  # a default is given: never None
        staging_dir=opts.get("stagingdir"),
        topic=opts.get("topic"),
        compression=_choice(opts, ("compression", "kafka.compression.type"),
                            ("none", "gzip", "snappy", "lz4", "zstd"), "none"),
        exclude_internal_topics=_bool(opts, "kafka.exclude.internal.topics", True),
    )
