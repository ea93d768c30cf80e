"""What the mount shows of the coordinators' topics (SPEC §3): ``groups/<group>.json`` from
``__consumer_offsets``, ``transactions/<id>.json`` from ``__transaction_state``, and each partition's
``transactions.json`` (:mod:`kafkafs.storage.groups`, :mod:`kafkafs.storage.txnstate`).

The replays are kept until one of their topic's partitions changes (log end, log start, segments,
compaction swaps); a group's lag is worked out afresh each time, against the log end offsets of now.
A partition's ``transactions.json`` is kept for :data:`HOLD_SECONDS` (its ages change every
millisecond: a ``stat`` and the ``open`` after it see the same bytes).

Damage (SPEC §3: local): the replays read past it (:mod:`kafkafs.storage.replay`). A group or
transactional id whose records lie in a partition that met damage cannot be known exactly: its file is
listed and fails with EIO; every other one is served exact. A partition's ``transactions.json`` fails
with EIO only when it has an open transaction whose hanging the damage hides. Which ids the damage
hides is logged once per replay (a replay is made again only when its topic changes); the damage
itself once, as every damage is (:func:`~.render.report_corrupt`).

Threads: safe to share; each cached value is replaced whole, under a lock.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import orjson

from ...errors import KafkafsError
from ...storage.config import broker_setting
from ...storage.groups import OFFSETS_TOPIC, SHARE_STATE_TOPIC, GroupsReplay, group_view, replay_logdir
from ...storage.kraft import METADATA_PARTITION, recorded_topic_names
from ...storage.names import parse_partition_dir_name
from ...storage.txnstate import (
    TRANSACTION_TOPIC,
    CoordinatorView,
    TransactionsReplay,
    partition_transactions,
    replay_transactions,
)

__all__ = ["Coordinators", "HOLD_SECONDS"]

log = logging.getLogger("kafkafs.fs")

#: How long a rendered ``transactions.json`` is served again.
HOLD_SECONDS = 1.0


def _json(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2) + b"\n"


class Coordinators:
    """The groups and transactions of the mounted log directory (``logdir``: its
    :class:`~kafkafs.storage.logdir.LogDir`)."""

    def __init__(self, logdir) -> None:
        self.logdir = logdir
        self._lock = threading.Lock()
        self._cached: dict[str, tuple[tuple, Any]] = {}  # what _kept keeps: the replay, the ids
        self._partitions: dict[str, tuple[float, tuple, bytes]] = {}

    def has(self, topic: str) -> bool:
        """Whether the log directory holds a partition of ``topic``."""
        return bool(self.logdir.topic_partition_names(topic))

    def _fingerprint(self, topics: tuple[str, ...]) -> tuple:
        out = []
        for name in [n for topic in topics for n in self.logdir.topic_partition_names(topic)]:
            log_ = self.logdir.log(name, read_only_fallback=True)
            log_.refresh()
            out.append((name, log_.log_start_offset, log_.log_end_offset, len(log_.segments), log_.generation))
        return tuple(out)

    # ------------------------------------------------------------------------------------------ groups

    def _kept(self, slot: str, topics: tuple[str, ...], make):
        """``make(logdir)``, or what it gave last while the partitions of ``topics`` have not changed."""
        fingerprint = self._fingerprint(topics)
        with self._lock:
            cached = self._cached.get(slot)
        if cached is not None and cached[0] == fingerprint:
            return cached[1]
        value = make(self.logdir)
        with self._lock:
            self._cached[slot] = (fingerprint, value)
        return value

    def _replay(self) -> GroupsReplay:
        return self._kept("groups", (OFFSETS_TOPIC, SHARE_STATE_TOPIC), _said(replay_logdir, "groups/", "group"))

    def groups(self) -> list[str]:
        """Every group with an entry, sorted."""
        return self._replay().groups()

    def group_json(self, group: str, replay: GroupsReplay | None = None) -> bytes | None:
        """``groups/<group>.json``, or None when the group has no entry."""
        replay = replay or self._replay()
        ends: dict[tuple[str, int], int] = {}
        names: dict[str, str] = {}
        for name in self.logdir.partition_names():
            topic, partition = parse_partition_dir_name(name)
            try:
                log_ = self.logdir.log(name, read_only_fallback=True)
            except KafkafsError:
                continue
            log_.refresh()
            ends[(topic, partition)] = log_.log_end_offset
            if log_.state_files.topic_id:
                names[log_.state_files.topic_id] = topic
        view = group_view(replay, group, ends, names, self._metadata_names)
        return None if view is None else _json(view)

    def _metadata_names(self) -> dict[str, str]:
        """Topic id -> name of the metadata log's topics, kept while ``__cluster_metadata`` stays the same."""
        return self._kept("topic-names", (METADATA_PARTITION.rsplit("-", 1)[0],),
                          lambda logdir: recorded_topic_names(logdir.path))

    # ------------------------------------------------------------------------------------------ transactions

    def _transactions(self) -> TransactionsReplay:
        return self._kept("ids", (TRANSACTION_TOPIC,), _said(replay_transactions, "transactions/", "transactional id"))

    def transaction_ids(self) -> list[str]:
        """Every transactional id with a record (or a damaged one), sorted."""
        return self._transactions().ids()

    def transaction_json(self, tid: str) -> bytes | None:
        """``transactions/<id>.json``, None when the id has none; a damaged id raises its damage."""
        record = self._transactions().record(tid)
        return None if record is None else _json(record)

    def partition_transactions(self, state) -> bytes:
        """``transactions.json`` of a partition (``state``: its :class:`~.partition.PartitionState`)."""
        state.refresh()
        shape = state.shape()
        now = time.monotonic()
        with self._lock:
            held = self._partitions.get(state.name)
        if held is not None and held[1] == shape and now - held[0] < HOLD_SECONDS:
            return held[2]
        coordinator = CoordinatorView.of(self._transactions(),
                                         broker_setting(self.logdir.settings, "transaction.max.timeout.ms"))
        data = _json(partition_transactions(state.log, time.time_ns() // 1_000_000, coordinator))
        with self._lock:
            self._partitions[state.name] = (now, shape, data)
        return data


def _said(replay, folder: str, what: str):
    """``replay`` (a storage replay function), whose damage is logged once when it is made, with the
    ids whose files fail with EIO for it."""

    def make(logdir):
        made = replay(logdir)
        hidden = made.damaged()
        for partition, damage in made.damage.items():
            names = sorted(i for i, d in hidden.items() if d is damage)
            shown = ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
            log.error("%s: %s; every %s whose records lie in this partition cannot be known exactly: %s; the damaged "
                      "bytes may hide %s%ss, which get no file", partition, damage, what,
                      f"{folder}: {shown} fail with EIO" if names else f"none of {folder} is among them",
                      "more " if names else "", what)
        return made

    return make
