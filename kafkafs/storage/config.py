"""Settings with Kafka's topic-level names and defaults, from TOML with per-topic overrides (SPEC §7).

A settings file looks like::

    "segment.bytes" = 1048576            # a default for every topic
    [topics."orders"]
    "cleanup.policy" = "compact"         # only for topic orders

Unknown names and values of the wrong type are errors (:class:`~kafkafs.errors.ConfigError`), so a typo
never silently does nothing.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import ConfigError, KafkafsError

__all__ = [
    "LogConfig", "Settings", "DEFAULTS", "BROKER_DEFAULTS", "broker_setting", "DEFAULT_CONFIG_PATH",
    "INTERNAL_TOPICS", "parse_setting", "SettingsUnreadable", "recorded_refusal",
]

log = logging.getLogger(__name__)

DEFAULT_CONFIG_PATH = Path("/etc/kafkafs/kafkafs.toml")
LONG_MAX = 2**63 - 1

#: Kafka's topic-level names, their defaults and types (as in Kafka's TopicConfig / LogConfig).
DEFAULTS: dict[str, Any] = {
    "segment.bytes": 1024 * 1024 * 1024,
    # Kafka 4's LogConfig: when set (an INT, no default), the segment size in place of segment.bytes
    # (segmentSize()), which Kafka 4 keeps at 1 MiB or more; tests and small setups use it
    "internal.segment.bytes": None,
    "segment.ms": 7 * 24 * 3600 * 1000,
    "segment.jitter.ms": 0,
    "segment.index.bytes": 10 * 1024 * 1024,
    "index.interval.bytes": 4096,
    "flush.messages": LONG_MAX,
    "flush.ms": LONG_MAX,
    "retention.ms": 7 * 24 * 3600 * 1000,
    "retention.bytes": -1,
    "cleanup.policy": "delete",
    "delete.retention.ms": 24 * 3600 * 1000,
    "min.cleanable.dirty.ratio": 0.5,
    "min.compaction.lag.ms": 0,
    "max.compaction.lag.ms": LONG_MAX,
    "max.message.bytes": 1024 * 1024 + 12,
    "message.timestamp.type": "CreateTime",
    # how far a CreateTime record's timestamp may lie before / after the time of its append (Kafka 4's
    # defaults: no bound before, one hour after, KIP-1030); see storage/append_rules.py
    "message.timestamp.before.max.ms": LONG_MAX,
    "message.timestamp.after.max.ms": 3600 * 1000,
    "file.delete.delay.ms": 60_000,
    "compression.type": "producer",
    "preallocate": False,
}

#: Settings of the log directory's cleaner (Kafka's broker names and defaults): top-level only, not per topic.
BROKER_DEFAULTS: dict[str, Any] = {
    "log.cleaner.enable": True,
    "log.cleaner.dedupe.buffer.size": 128 * 1024 * 1024,
    "log.cleaner.io.buffer.size": 512 * 1024,
    "log.cleaner.io.buffer.load.factor": 0.9,
    "log.cleaner.backoff.ms": 15_000,
    "log.retention.check.interval.ms": 300_000,
    "log.initial.task.delay.ms": 30_000,
    "producer.id.expiration.ms": 86_400_000,
    # the transaction coordinator's longest transaction timeout: how long a transaction may stay open
    # before `kafkafs transactions` calls it hanging, when LOGDIR holds no coordinator record of it
    "transaction.max.timeout.ms": 900_000,
}

#: Kafka's internal topics are created by the broker with topic-level settings of their own, which a
#: broker-wide default never changes: the group coordinator's ``__consumer_offsets`` and the transaction
#: coordinator's ``__transaction_state`` are compacted, in segments of ``offsets.topic.segment.bytes`` /
#: ``transaction.state.log.segment.bytes`` (100 MiB by default; Kafka's GroupCoordinatorConfig and
#: TransactionLogConfig), and ``__cluster_metadata`` (KRaft's metadata log, KafkaMetadataLog) disables
#: retention by time and size (-1), with ``metadata.log.segment.bytes`` (1 GiB),
#: ``metadata.log.segment.ms`` (7 days) and the Raft client's 8 MiB batch limit. Tiered storage's
#: ``__remote_log_metadata`` (TopicBasedRemoteLogMetadataManager) keeps its records forever
#: (``remote.log.metadata.topic.retention.ms``, -1 by default). Kafka 4's share coordinator creates
#: ``__share_group_state`` not compacted and kept forever (``retention.ms`` -1: it prunes the topic
#: itself with DeleteRecords), producer compression, in segments of
#: ``share.coordinator.state.topic.segment.bytes`` (100 MiB; ShareCoordinatorService's topic configs).
INTERNAL_TOPICS: dict[str, dict[str, Any]] = {
    "__consumer_offsets": {
        "cleanup.policy": "compact",
        "segment.bytes": 100 * 1024 * 1024,
        "compression.type": "producer",
    },
    "__transaction_state": {
        "cleanup.policy": "compact",
        "segment.bytes": 100 * 1024 * 1024,
        "compression.type": "uncompressed",
    },
    "__cluster_metadata": {
        "cleanup.policy": "delete",
        "retention.ms": -1,
        "retention.bytes": -1,
        "segment.bytes": 1024 * 1024 * 1024,
        "segment.ms": 7 * 24 * 3600 * 1000,
        "max.message.bytes": 8 * 1024 * 1024,
        "file.delete.delay.ms": 60_000,
    },
    "__remote_log_metadata": {
        "cleanup.policy": "delete",
        "retention.ms": -1,
        "retention.bytes": -1,
    },
    "__share_group_state": {
        "cleanup.policy": "delete",
        "retention.ms": -1,
        "segment.bytes": 100 * 1024 * 1024,
        "compression.type": "producer",
    },
}

_CHOICES = {
    "message.timestamp.type": {"CreateTime", "LogAppendTime"},
    "compression.type": {"producer", "uncompressed", "none", "gzip", "snappy", "lz4", "zstd"},
}
_MINIMUM = {
    "segment.bytes": 14,
    "internal.segment.bytes": 14,
    "segment.ms": 1,
    "segment.index.bytes": 8,
    "index.interval.bytes": 0,
    "flush.messages": 1,
    "flush.ms": 0,
    "max.message.bytes": 0,
    "retention.ms": -1,
    "retention.bytes": -1,
    "delete.retention.ms": 0,
    "file.delete.delay.ms": 0,
    "message.timestamp.before.max.ms": 0,
    "message.timestamp.after.max.ms": 0,
    "log.cleaner.dedupe.buffer.size": 1024,
    "log.cleaner.io.buffer.size": 4096,
    "log.cleaner.backoff.ms": 0,
    "log.retention.check.interval.ms": 1,
    "log.initial.task.delay.ms": 0,
    "producer.id.expiration.ms": 1,
    "transaction.max.timeout.ms": 1,
}
INT_MAX = 2**31 - 1
#: Kafka declares these INT (a file position or a size in an index entry must fit a Java int).
_MAXIMUM = {
    "segment.bytes": INT_MAX,
    "internal.segment.bytes": INT_MAX,
    "segment.index.bytes": INT_MAX,
    "index.interval.bytes": INT_MAX,
    "max.message.bytes": INT_MAX,
}


def _field(name: str) -> str:
    return name.replace(".", "_")


_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def parse_setting(name: str, value: Any) -> Any:
    """Check one setting and convert it to its type (strings from ``--set`` included)."""
    if name not in DEFAULTS and name not in BROKER_DEFAULTS:
        raise ConfigError(f"unknown setting {name!r}")
    default = DEFAULTS[name] if name in DEFAULTS else BROKER_DEFAULTS[name]
    if name == "cleanup.policy" and isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = ",".join(value)  # Kafka's own type for it is a list
    if default is None:  # an INT without a default (internal.segment.bytes)
        default = 0
    try:
        if isinstance(default, bool):
            if isinstance(value, str):
                if value.lower() not in ("true", "false"):
                    raise ValueError
                value = value.lower() == "true"
            elif not isinstance(value, bool):
                raise ValueError
        elif isinstance(default, int):
            if isinstance(value, bool) or isinstance(value, float):
                raise ValueError
            value = int(value)
        elif isinstance(default, float):
            if isinstance(value, bool):
                raise ValueError
            value = float(value)
        else:
            if not isinstance(value, str):
                raise ValueError
    except (ValueError, TypeError):  # TypeError: a TOML array, table or date where a number is due
        raise ConfigError(f"{name}: {value!r} is not {_TYPE_NAMES[type(default)]}") from None
    if name == "cleanup.policy":
        # an empty list is Kafka 4's "no cleanup" (TopicConfig: infinite retention, no compaction): ""
        parts = {p.strip() for p in value.split(",") if p.strip()}
        if not parts <= {"delete", "compact"}:
            raise ConfigError(f"cleanup.policy: {value!r} is not delete, compact, compact,delete or empty (no cleanup)")
        value = ",".join(sorted(parts))
    if name in _CHOICES and value not in _CHOICES[name]:
        raise ConfigError(f"{name}: {value!r} is not one of {', '.join(sorted(_CHOICES[name]))}")
    if name in _MINIMUM and value < _MINIMUM[name]:
        raise ConfigError(f"{name}: {value} is below the minimum {_MINIMUM[name]}")
    if name in _MAXIMUM and value > _MAXIMUM[name]:
        raise ConfigError(f"{name}: {value} is above the maximum {_MAXIMUM[name]}")
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value <= LONG_MAX:
        raise ConfigError(f"{name}: {value} does not fit a long")
    if name == "log.cleaner.io.buffer.load.factor" and not 0 < value <= 1:
        raise ConfigError("log.cleaner.io.buffer.load.factor must be above 0 and at most 1")
    if name == "min.cleanable.dirty.ratio" and not 0 <= value <= 1:
        raise ConfigError("min.cleanable.dirty.ratio must be between 0 and 1")
    return value


@dataclasses.dataclass(frozen=True, slots=True)
class LogConfig:
    """The settings of one topic, as attributes named like Kafka's with ``_`` for ``.``."""

    segment_bytes: int = DEFAULTS["segment.bytes"]
    internal_segment_bytes: int | None = DEFAULTS["internal.segment.bytes"]
    segment_ms: int = DEFAULTS["segment.ms"]
    segment_jitter_ms: int = DEFAULTS["segment.jitter.ms"]
    segment_index_bytes: int = DEFAULTS["segment.index.bytes"]
    index_interval_bytes: int = DEFAULTS["index.interval.bytes"]
    flush_messages: int = DEFAULTS["flush.messages"]
    flush_ms: int = DEFAULTS["flush.ms"]
    retention_ms: int = DEFAULTS["retention.ms"]
    retention_bytes: int = DEFAULTS["retention.bytes"]
    cleanup_policy: str = DEFAULTS["cleanup.policy"]
    delete_retention_ms: int = DEFAULTS["delete.retention.ms"]
    min_cleanable_dirty_ratio: float = DEFAULTS["min.cleanable.dirty.ratio"]
    min_compaction_lag_ms: int = DEFAULTS["min.compaction.lag.ms"]
    max_compaction_lag_ms: int = DEFAULTS["max.compaction.lag.ms"]
    max_message_bytes: int = DEFAULTS["max.message.bytes"]
    message_timestamp_type: str = DEFAULTS["message.timestamp.type"]
    message_timestamp_before_max_ms: int = DEFAULTS["message.timestamp.before.max.ms"]
    message_timestamp_after_max_ms: int = DEFAULTS["message.timestamp.after.max.ms"]
    file_delete_delay_ms: int = DEFAULTS["file.delete.delay.ms"]
    compression_type: str = DEFAULTS["compression.type"]
    preallocate: bool = DEFAULTS["preallocate"]

    @classmethod
    def from_mapping(cls, settings: Mapping[str, Any]) -> LogConfig:
        return cls(**{_field(k): parse_setting(k, v) for k, v in settings.items()})

    def get(self, name: str) -> Any:
        """A setting by its Kafka name."""
        if name not in DEFAULTS:
            raise ConfigError(f"unknown setting {name!r}")
        return getattr(self, _field(name))

    def as_dict(self) -> dict[str, Any]:
        """Every setting by its Kafka name (``internal.segment.bytes`` only when set, as Kafka lists it)."""
        out = {name: getattr(self, _field(name)) for name in DEFAULTS}
        if out["internal.segment.bytes"] is None:
            del out["internal.segment.bytes"]
        return out

    @property
    def segment_size(self) -> int:
        """The size a segment rolls at: ``internal.segment.bytes`` when set, else ``segment.bytes``
        (Kafka's ``LogConfig.segmentSize()``)."""
        internal = self.internal_segment_bytes
        return self.segment_bytes if internal is None else internal

    @property
    def max_batch_bytes(self) -> int:
        """The largest batch an append takes: ``max.message.bytes``, or the segment size when that is
        smaller (Kafka's UnifiedLog.append refuses a batch larger than a segment: RecordBatchTooLarge,
        RECORD_LIST_TOO_LARGE). Writers cut one write's records into batches within it."""
        return min(self.max_message_bytes, self.segment_size)

    @property
    def batch_limit(self) -> str:
        """The setting that makes :attr:`max_batch_bytes`, as ``name=value``, for messages."""
        if self.segment_size < self.max_message_bytes:
            name = "segment.bytes" if self.internal_segment_bytes is None else "internal.segment.bytes"
            return f"{name}={self.segment_size} (no batch may be larger than a segment)"
        return f"max.message.bytes={self.max_message_bytes}"

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        """Retention deletes by age and size (an empty policy, Kafka 4's "no cleanup": neither this nor
        :attr:`compact`; only segments below the log start offset go, as Kafka's do)."""
        return "delete" in self.cleanup_policy.split(",")

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """TOML reads an unquoted ``segment.bytes = 1`` as nested tables; Kafka's names are dotted."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


class Settings:
    """Defaults for every topic plus per-topic overrides; ``for_topic`` gives a topic's LogConfig.

    Threads: safe to share; :meth:`replace_recorded` may run in one thread while others ask."""

    def __init__(self, defaults: Mapping[str, Any] | None = None, topics: Mapping[str, Mapping[str, Any]] | None = None):
        self.defaults: dict[str, Any] = {k: parse_setting(k, v) for k, v in (defaults or {}).items()}
        self.topics: dict[str, dict[str, Any]] = {}
        for topic, overrides in (topics or {}).items():
            if not isinstance(overrides, Mapping):
                raise ConfigError(f"[topics.{topic!r}] must be a table")
            self.topics[topic] = {k: parse_setting(k, v) for k, v in overrides.items()}
            broker = sorted(set(overrides) & set(BROKER_DEFAULTS))
            if broker:
                raise ConfigError(f"{broker[0]} is a setting of the log directory, not of topic {topic!r}")
        self._cache: dict[str, LogConfig] = {}
        self._recorded_loader: Callable[[], Mapping[str, Mapping[str, str]]] | None = None
        self._recorded: dict[str, dict[str, Any]] | None = None
        self._recorded_raw: dict[str, Mapping[str, str]] = {}  # what _recorded was made of, by topic
        self._recorded_damage: str | None = None
        self._recorded_torn: str | None = None
        self._recorded_topics: frozenset[str] | None = None
        self._recorded_ids: dict[str, str] | None = None  # topic name -> its id, as the metadata log has it
        self._recorded_broker: dict[str, Any] = {}
        self._recorded_broker_raw: Mapping[str, str] = {}
        self._generation = 0  # counts the replacements of what a broker recorded (replace_recorded)
        self._lock = threading.Lock()

    def with_recorded(self, loader: Callable[[], Mapping[str, Mapping[str, str]]]) -> Settings:
        """These settings over the topic settings a broker recorded (KRaft ``ConfigRecord``s, see
        :mod:`kafkafs.storage.kraft`): ``loader`` runs on first need. Recorded values sit below every
        default and topic table here (``--config``, ``--set``); names kafkafs does not know and values
        it would refuse are left out."""
        other = Settings.__new__(Settings)
        other.defaults = self.defaults
        other.topics = self.topics
        other._cache = {}
        other._recorded_loader = loader
        other._recorded = None
        other._recorded_raw = {}
        other._recorded_damage = None
        other._recorded_torn = None
        other._recorded_topics = None
        other._recorded_ids = None
        other._recorded_broker = {}
        other._recorded_broker_raw = {}
        other._generation = 0
        other._lock = threading.Lock()
        return other

    def replace_recorded(self, tables: Mapping[str, Mapping[str, str]]) -> None:
        """What a broker recorded is now ``tables`` (as the loader of :meth:`with_recorded` returns them:
        the metadata log read again after it changed): :meth:`for_topic` answers by them from now on (a
        setting deleted there goes back to what the layers below say). A topic whose table did not
        change keeps what was made of it (its warnings are not said again)."""
        with self._lock:
            old, raw = self._recorded_raw, dict(tables)
            parsed = self._recorded or {}
            self._recorded = {name: parsed[name] if name in parsed and old.get(name) == table else _known(name, table)
                              for name, table in raw.items()}
            self._recorded_raw = raw
            self._recorded_damage = getattr(tables, "damage", None)
            self._recorded_torn, self._recorded_topics, self._recorded_ids = _torn_of(tables)
            broker = getattr(tables, "broker", {})
            if broker != self._recorded_broker_raw:
                self._recorded_broker = _known("(the cluster's dynamic broker defaults)", broker)
            self._recorded_broker_raw = broker
            self._generation += 1
            self._cache = {}

    def recorded(self, topic: str) -> dict[str, Any]:
        """The settings a broker recorded for ``topic`` that kafkafs applies (checked and converted)."""
        with self._lock:
            return self._load_recorded().get(topic, {})

    def recorded_damage(self) -> str | None:
        """Why the settings a broker recorded could not all be read (damage in ``__cluster_metadata``:
        any topic's may then differ from what :meth:`for_topic` says), or None. A writer that deletes
        by the settings refuses then (SPEC §8)."""
        with self._lock:
            self._load_recorded()
            return self._recorded_damage

    def recorded_torn(self) -> tuple[str | None, frozenset[str] | None]:
        """A note when the metadata log ends in a torn tail (the settings are those of the whole batches
        before it, as a broker replays them after truncating it), and the topics those batches name
        (None: no metadata log). A topic they do not name may have been created in the torn batch: a
        writer that deletes by its settings refuses then (review17 R17-4)."""
        with self._lock:
            self._load_recorded()
            return self._recorded_torn, self._recorded_topics

    def recorded_topic_ids(self) -> dict[str, str] | None:
        """Topic name -> topic id of the topics the metadata log names (None: no metadata log)."""
        with self._lock:
            self._load_recorded()
            return self._recorded_ids

    def _load_recorded(self) -> dict[str, dict[str, Any]]:
        """(Under the lock.)"""
        if self._recorded is None:
            self._recorded = {}
            if self._recorded_loader is not None:
                tables = self._recorded_loader()
                self._recorded_damage = getattr(tables, "damage", None)
                self._recorded_torn, self._recorded_topics, self._recorded_ids = _torn_of(tables)
                self._recorded_broker_raw = getattr(tables, "broker", {})
                self._recorded_broker = _known("(the cluster's dynamic broker defaults)", self._recorded_broker_raw)
                self._recorded_raw = dict(tables)
                for name, table in tables.items():
                    self._recorded[name] = _known(name, table)
        return self._recorded

    @classmethod
    def load(cls, path: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> Settings:
        """Settings from a TOML file (``None``: the default path when it exists), then ``overrides``."""
        data: dict[str, Any] = {}
        if path is None:
            path = DEFAULT_CONFIG_PATH if DEFAULT_CONFIG_PATH.exists() else None
        if path is not None:
            import tomllib  # only when there is a file: start-up time

            try:
                with open(path, "rb") as f:
                    data = tomllib.load(f)
            except FileNotFoundError:
                raise ConfigError(f"{path}: no such settings file") from None
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError(f"{path}: {exc}") from None
            except UnicodeDecodeError as exc:  # TOML is UTF-8; tomllib decodes the bytes itself
                raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}), as TOML must be") from None
            except OSError as exc:
                raise ConfigError(f"{path}: {exc.strerror}") from None
        topics = data.pop("topics", {})
        if not isinstance(topics, Mapping):
            raise ConfigError("topics must be a table of tables")
        defaults = _flatten(data)
        defaults.update(overrides or {})
        return cls(defaults, {name: _flatten(table) if isinstance(table, Mapping) else table
                              for name, table in topics.items()})

    def layers(self, topic: str) -> list[Mapping[str, Any]]:
        """The settings that apply to ``topic``, lowest first; a later layer wins.

        1. Kafka's defaults (:data:`DEFAULTS`, implied);
        2. the settings a KRaft broker recorded for the topic (its ``ConfigRecord``s, see
           :meth:`with_recorded`), over the cluster's dynamic broker defaults of them
           (``log.retention.ms``, ...: :func:`~.kraft.broker_topic_defaults`), below what the operator
           says here (SPEC §8);
        3. the defaults for every topic: the settings file's top level, then ``--set``;
        4. the broker's own topic-level settings for its internal topics (:data:`INTERNAL_TOPICS`,
           refined by what the broker recorded for them): topic-level in Kafka, so a default for every
           topic does not change them, and ``clean`` never deletes ``__consumer_offsets`` by age or size;
        5. the settings file's ``[topics."<name>"]`` table: an operator who names the topic decides.
        """
        recorded = self.recorded(topic)
        with self._lock:
            broker = self._recorded_broker
        internal = INTERNAL_TOPICS.get(topic)
        if internal is not None:
            internal = {**internal, **recorded}
        return [broker, recorded, self.defaults, internal or {}, self.topics.get(topic, {})]

    def for_topic(self, topic: str) -> LogConfig:
        config = self._cache.get(topic)
        if config is None:
            generation = self._generation
            merged: dict[str, Any] = {}
            for layer in self.layers(topic):
                merged.update(layer)
            for name in BROKER_DEFAULTS:  # the log directory's, not a topic's
                merged.pop(name, None)
            config = LogConfig.from_mapping(merged)
            with self._lock:  # not kept when what a broker recorded was replaced meanwhile (replace_recorded)
                if generation == self._generation:
                    self._cache[topic] = config
        return config


class SettingsUnreadable(KafkafsError):
    """The topic settings a broker recorded cannot all be read: nothing is deleted, compacted or
    appended by them (:func:`recorded_refusal`)."""


def recorded_refusal(settings: Settings, topics: Iterable[str], what: str) -> str | None:
    """Why a writer (of ``topics``) refuses to go by ``settings``, or None (SPEC §8; review6 F16,
    review17 R17-4): damage in the settings a broker recorded (any topic's may be in what was not read),
    or a torn tail of the metadata log when a topic of ``topics`` is not named by the whole batches
    before it (created, with its settings, in the torn batch, perhaps). ``what``: what is then not done
    ("no topic is cleaned by them")."""
    damage = settings.recorded_damage()
    if damage is not None:
        return (f"the topic settings a broker recorded in __cluster_metadata cannot all be read ({damage}); "
                f"any topic's settings may be in what was not read, so {what}")
    torn, known = settings.recorded_torn()
    if torn is None or known is None:
        return None
    unknown = sorted({t for t in topics if t not in known and t != "__cluster_metadata"})
    if not unknown:
        return None
    return (f"{torn}; but topic {', '.join(unknown[:5])}{' ...' if len(unknown) > 5 else ''} is not in those "
            f"batches: its settings may be in the torn batch, so {what} (`kafkafs recover` cuts the torn tail "
            "as a broker's start does)")


def _torn_of(tables: Mapping[str, Mapping[str, str]]
             ) -> tuple[str | None, frozenset[str] | None, dict[str, str] | None]:
    topics = getattr(tables, "topics", None)
    if topics is None:
        return getattr(tables, "torn", None), None, None
    return getattr(tables, "torn", None), frozenset(topics), {name: entry[0] for name, entry in topics.items()}


def broker_setting(settings: Settings | None, name: str) -> Any:
    """A log-directory-wide setting (:data:`BROKER_DEFAULTS`), from ``settings`` or its default."""
    if settings is not None and name in settings.defaults:
        return settings.defaults[name]
    return BROKER_DEFAULTS[name]


def _known(topic: str, table: Mapping[str, str]) -> dict[str, Any]:
    out = {}
    for name, value in table.items():
        if name not in DEFAULTS:
            continue  # a broker-side setting with no meaning here (min.insync.replicas, ...)
        try:
            out[name] = parse_setting(name, value)
        except ConfigError as exc:
            log.warning("topic %s: recorded setting not applied: %s", topic, exc)
    return out


def parse_set_options(items: list[str]) -> dict[str, Any]:
    """``--set KEY=VALUE`` strings as a mapping (values are checked later, by name)."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        out[name.strip()] = parse_setting(name.strip(), value.strip())
    return out
