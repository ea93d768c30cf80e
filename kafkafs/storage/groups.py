"""Consumer groups as the group coordinator would load them from ``__consumer_offsets``, offline: what
``kafka-consumer-groups --describe --offsets --members`` shows, without a broker (SPEC §3
``groups/<group>.json``, §4 ``kafkafs groups``).

Every ``__consumer_offsets`` partition of the log directory is replayed in offset order, as Kafka's
``GroupMetadataManager`` and ``OffsetMetadataManager`` replay it when a broker loads it:

- an offset commit (record types 0 and 1) sets the group's committed offset of a topic-partition, a
  tombstone deletes it. A commit in a transaction waits, the latest of its transaction for each
  topic-partition of a group, for the transaction's marker in the same partition: an ABORT drops it, a
  tombstone of that topic-partition's offset drops it, one still undecided is not committed, and a
  COMMIT applies it only when its record lies later in the partition than the record of the offset
  committed then (a plain commit written after it, or another transaction's later commit, stays: Kafka's
  ``OffsetMetadataManager.replayEndTransactionMarker`` compares the records' offsets, not their times).
  Each partition's replay is its own, as each is a coordinator's (a group's records all lie in the one its
  id hashes to). A commit of a group that does not exist makes it, as an
  empty classic group without a protocol (Kafka's "simple consumer group"), whether its transaction
  commits or not: it stays, ``Empty`` and maybe without offsets, until a tombstone of its metadata (the
  broker's offset expiry writes one) or a new group's records replace it;
- a classic group's metadata (type 2) replaces the group's protocol, generation, leader and members;
  its state is ``Empty`` without members, else ``Stable`` (what a broker loads); a tombstone removes it;
- a consumer group (KIP-848; types 3 to 8) is its epoch, its members' metadata and current
  assignments, and its target assignment epoch; its state is ``Empty`` without members, ``Assigning``
  while the group epoch is past the target assignment's, ``Reconciling`` while a member is not stable
  at that epoch, else ``Stable`` (Kafka's ``ConsumerGroup.maybeUpdateGroupState``); its protocol is the
  server assignor its members prefer (Kafka's default, ``uniform``, when none names one). Assignments name
  topics by id: the group's own partition metadata and offset commits (a commit's value names the
  topic id of its key's topic, Kafka 4.x), the partitions' ``partition.metadata`` files, and, for an id
  none of these names, the KRaft metadata log's topics (a log directory of a cluster of several brokers,
  or log directories, often lacks the partitions a group consumes); an id nobody names stays an id;
- a share group (KIP-932; types 10 to 15) is read as a consumer group is (its epoch, its members'
  metadata and current assignments, topics named by its state partition metadata); its protocol type is
  ``share``, its protocol the broker's share assignor (``simple``), its state ``Empty`` without members,
  else ``Stable`` (Kafka's ``ShareGroup``); its ``offsets`` are what ``kafka-share-groups --describe
  --offsets`` shows (review14 R14-10), from the share coordinator's ``__share_group_state`` (replayed
  too: a ShareSnapshot sets a share-partition's state, a ShareUpdate moves the start offset, leader epoch
  and delivery complete count it names, -1 keeping them, a tombstone removes it): per share-partition its
  start offset as ``offset`` and its ``leaderEpoch`` (both null while the start offset is -1, not
  initialized), ``metadata`` and ``commitTimestamp`` null, and lag = log end offset - start offset -
  delivery complete count (KIP-1226; null while either is -1);
- a streams group (KIP-1071, Kafka Streams with ``group.protocol=streams``; types 17 to 23) is shown as
  ``kafka-streams-groups --describe`` shows it: protocol type ``streams``, protocol the broker's streams
  assignor (``sticky``), generation its group epoch, its state Kafka's ``StreamsGroup`` rule (``Empty``
  without members, ``NotReady`` while its topology is not there or not validated at its epoch,
  ``Assigning``, ``Reconciling``, ``Stable`` as for a consumer group; a member is stable in state 1,
  streams counting its member states from 1), each member's ``assignment`` its active tasks as
  ``[{"subtopology", "partitions"}]`` (``ACTIVE: 0:[0,1]``), beside ``standbyTasks`` and ``warmupTasks``
  of the same shape (review14 R14-6: its commits alone made a made-up ``Empty`` group).

A group whose metadata and commits are all deleted has no entry.

Damage (:mod:`.replay`): the replay reads every batch it can, past damage. What a damaged batch held
is not known, and a group's records all lie in one partition (the one its id hashes to), any of them
in any batch of it: so every group with a record in a partition that met damage is *damaged* (its
view cannot be known exactly: :func:`group_view` raises the damage), and every other group is exact.
A group whose records all lay in the damaged bytes cannot be named; the damage itself is in
:attr:`GroupsReplay.damage`. The log end offset and the lag of
each committed partition are the mounted directory's (``logEndOffset`` and ``lag`` null where the log
directory lacks the partition).

Functions only; each call reads the partitions afresh.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import CorruptRecordError, KafkafsError
from ..format.decoders.internal import offsets_key, offsets_value, share_state_key, share_state_value
from ..format.records import control_type_of
from .kraft import recorded_topic_names
from .names import parse_partition_dir_name
from .replay import KnownDamage, replayable_batches

if TYPE_CHECKING:
    from .logdir import LogDir

__all__ = ["OFFSETS_TOPIC", "SHARE_STATE_TOPIC", "group_view", "group_views", "GroupsReplay", "replay_logdir"]

log = logging.getLogger("kafkafs.groups")

OFFSETS_TOPIC = "__consumer_offsets"
SHARE_STATE_TOPIC = "__share_group_state"
_CLASSIC = 2
_COMMITS = (0, 1)
_CONSUMER_TYPES = range(3, 9)
#: share group record type -> the consumer group record type it is read as (15: its topics, by id)
_SHARE_TYPES = {11: 3, 10: 5, 12: 6, 13: 7, 14: 8, 15: 15}
SHARE_ASSIGNOR = "simple"  # the broker's group.share.assignors default
_STREAMS_TYPES = range(17, 24)
STREAMS_ASSIGNOR = "sticky"  # the broker's group.streams.assignors default
_STREAMS_STABLE = 1  # org.apache.kafka.coordinator.group.streams.MemberState.STABLE
#: The assignor a consumer group uses when no member names one: the first of the broker's
#: ``group.consumer.assignors`` (Kafka's default list starts with it).
DEFAULT_ASSIGNOR = "uniform"


@dataclass
class _Classic:
    value: dict[str, Any]  # GroupMetadataValue's data


@dataclass
class _Consumer:
    epoch: int = 0
    assignment_epoch: int = -1
    members: dict[str, dict[str, Any]] = field(default_factory=dict)  # member id -> metadata
    current: dict[str, dict[str, Any]] = field(default_factory=dict)  # member id -> current assignment
    topics: dict[str, str] = field(default_factory=dict)  # topic id -> name (partition metadata)
    exists: bool = False
    share: bool = False  # a share group (KIP-932)


@dataclass
class _Streams:
    epoch: int = 0
    assignment_epoch: int = -1
    validated_epoch: int = -1  # the topology epoch the coordinator validated (StreamsGroupMetadata)
    topology_epoch: int | None = None  # None: no topology record
    members: dict[str, dict[str, Any]] = field(default_factory=dict)  # member id -> metadata
    current: dict[str, dict[str, Any]] = field(default_factory=dict)  # member id -> current assignment
    exists: bool = False


@dataclass
class GroupsReplay(KnownDamage):
    """The state of every group after a replay (see the module's docstring)."""

    classic: dict[str, _Classic] = field(default_factory=dict)
    consumer: dict[str, _Consumer] = field(default_factory=dict)
    streams: dict[str, _Streams] = field(default_factory=dict)
    #: share group -> (topic id, partition) -> its share-partition state (``__share_group_state``)
    share_state: dict[str, dict[tuple[str, int], dict[str, Any]]] = field(default_factory=dict)
    offsets: dict[str, dict[tuple[str, int], dict[str, Any]]] = field(default_factory=dict)
    #: partition folder -> the first damage its replay met
    damage: dict[str, CorruptRecordError] = field(default_factory=dict)
    #: groups made by an offset commit alone (Kafka's simple consumer groups; see the module's docstring)
    simple: set[str] = field(default_factory=set)
    #: group -> the partition folders its records were read in
    where: dict[str, set[str]] = field(default_factory=dict)
    #: (group, topic-partition) -> (partition folder, offset) of the record of the committed offset
    _at: dict[tuple[str, tuple[str, int]], tuple[str | None, int]] = field(default_factory=dict)
    #: (partition folder, producer id) -> its transaction's commits: (group, topic-partition) -> (the
    #: record's offset, its value)
    _pending: dict[tuple[str | None, int], dict[tuple[str, tuple[str, int]], tuple[int, dict[str, Any]]]] = \
        field(default_factory=dict)

    # ------------------------------------------------------------------------------------------ replay

    def apply(self, key: bytes | None, value: bytes | None, offset: int, producer_id: int = -1,
              transactional: bool = False, partition: str | None = None) -> None:
        """One record of a data batch (its key and value as stored, its offset), read in ``partition`` (its
        folder); each partition's records in offset order."""
        if key is None:
            return
        try:
            decoded = offsets_key(key)
        except CorruptRecordError:
            return  # a record type this version does not know: left out
        kind, data = decoded["type"], decoded["data"]
        group = data.get("group", data.get("groupId")) if isinstance(data, dict) else None
        if partition is not None and isinstance(group, str):
            self.where.setdefault(group, set()).add(partition)
        try:
            decoded_value = None if value is None else offsets_value(value, key)
        except CorruptRecordError as exc:
            log.debug("__consumer_offsets record of type %d does not decode: %s", kind, exc)
            return
        body = None if decoded_value is None else decoded_value["data"]
        if kind in _COMMITS:
            tp = (data["topic"], data["partition"])
            where = (data["group"], tp)
            if body is None:  # a tombstone: the offset goes, and so do the open transactions' commits of it
                self._commit(where, None, partition, offset)
                for (folder, _pid), commits in self._pending.items():
                    if folder == partition:
                        commits.pop(where, None)
            else:
                self._made_by_commit(data["group"])
                if transactional and producer_id >= 0:
                    self._pending.setdefault((partition, producer_id), {})[where] = (offset, body)
                else:
                    self._commit(where, body, partition, offset)
        elif kind == _CLASSIC:
            if body is None:
                self.classic.pop(data["group"], None)
                self.simple.discard(data["group"])
            else:
                self.classic[data["group"]] = _Classic(body)
        elif kind in _CONSUMER_TYPES:
            self._consumer(kind, data, body)
        elif kind in _SHARE_TYPES:
            self._consumer(_SHARE_TYPES[kind], data, body, share=True)
        elif kind in _STREAMS_TYPES:
            self._streams(kind, data, body)

    def apply_share_state(self, key: bytes | None, value: bytes | None, partition: str | None = None) -> None:
        """One record of ``__share_group_state`` (read in ``partition``), each partition's in offset order."""
        if key is None:
            return
        try:
            decoded = share_state_key(key)
            body = None if value is None else share_state_value(value, key)
        except CorruptRecordError as exc:
            log.debug("__share_group_state record does not decode: %s", exc)
            return
        kind, data = decoded["type"], decoded["data"]
        if not isinstance(data, dict) or not isinstance(data.get("groupId"), str):
            return
        group = data["groupId"]
        if partition is not None:
            self.where.setdefault(group, set()).add(partition)
        topic_id, part = data.get("topicId"), data.get("partition")
        if not isinstance(topic_id, str) or not isinstance(part, int):
            return
        where = (topic_id, part)
        states = self.share_state.setdefault(group, {})
        if body is None:
            states.pop(where, None)
        else:
            new = body["data"]
            if kind == 0 or where not in states:  # ShareSnapshot: the whole state
                states[where] = {k: new.get(k, -1) for k in ("startOffset", "leaderEpoch", "deliveryCompleteCount")}
            else:  # ShareUpdate: what it names (-1: unchanged)
                state = states[where]
                for k in ("startOffset", "leaderEpoch", "deliveryCompleteCount"):
                    if new.get(k, -1) != -1:
                        state[k] = new[k]
        if not states:
            del self.share_state[group]

    def marker(self, producer_id: int, commit: bool, partition: str | None = None) -> None:
        """A transaction marker in ``__consumer_offsets`` (read in ``partition``): the producer's pending
        commits there go, a COMMIT's landing where its record is later than the committed offset's."""
        commits = self._pending.pop((partition, producer_id), None)
        if not commits or not commit:
            return
        for where, (offset, body) in commits.items():
            at = self._at.get(where)
            if at is None or at[0] != partition or offset > at[1]:
                self._commit(where, body, partition, offset)

    def _made_by_commit(self, group: str) -> None:
        """A commit's value for ``group``: Kafka's replay makes the group if none exists (a simple one)."""
        consumer = self.consumer.get(group)
        streams = self.streams.get(group)
        if group not in self.classic and (consumer is None or not consumer.exists) \
                and (streams is None or not streams.exists):
            self.simple.add(group)

    def _commit(self, where: tuple[str, tuple[str, int]], body: dict[str, Any] | None, partition: str | None,
                offset: int) -> None:
        """``where``'s (group, topic-partition) committed offset is now ``body`` (None: none), from the
        record at ``offset`` of ``partition``."""
        group, tp = where
        if body is None:
            self._at.pop(where, None)
            offsets = self.offsets.get(group)
            if offsets is not None:
                offsets.pop(tp, None)
                if not offsets:
                    del self.offsets[group]
        else:
            self._at[where] = (partition, offset)
            self.offsets.setdefault(group, {})[tp] = body

    def _consumer(self, kind: int, data: dict[str, Any], body: dict[str, Any] | None, share: bool = False) -> None:
        group_id: str = data["groupId"]
        group = self.consumer.get(group_id)
        if group is None:
            if body is None:
                return
            group = self.consumer[group_id] = _Consumer(share=share)
        member: str = data.get("memberId") or ""
        if kind == 3:  # ConsumerGroupMetadata: the group epoch, or the group's end
            if body is None:
                del self.consumer[group_id]
                self.simple.discard(group_id)
                return
            group.epoch = body.get("epoch", 0)
            group.exists = True
        elif kind == 4:  # ConsumerGroupPartitionMetadata: the topics it knows by id
            group.topics = {t["topicId"]: t["topicName"] for t in (body or {}).get("topics") or ()
                            if "topicId" in t and "topicName" in t}
        elif kind == 5:  # ConsumerGroupMemberMetadata
            if body is None:
                group.members.pop(member, None)
            else:
                group.members[member] = body
        elif kind == 6:  # ConsumerGroupTargetAssignmentMetadata
            group.assignment_epoch = -1 if body is None else body.get("assignmentEpoch", -1)
        elif kind == 15:  # ShareGroupStatePartitionMetadata: the topics its state knows by id
            group.topics = {t["topicId"]: t["topicName"] for key in ("initializingTopics", "initializedTopics")
                            for t in (body or {}).get(key) or () if "topicId" in t and "topicName" in t}
        elif kind == 8:  # ConsumerGroupCurrentMemberAssignment
            if body is None:
                group.current.pop(member, None)
            else:
                group.current[member] = body
        if body is not None:
            group.exists = True

    def _streams(self, kind: int, data: dict[str, Any], body: dict[str, Any] | None) -> None:
        group_id: str = data["groupId"]
        group = self.streams.get(group_id)
        if group is None:
            if body is None:
                return
            group = self.streams[group_id] = _Streams()
        member: str = data.get("memberId") or ""
        if kind == 17:  # StreamsGroupMetadata: the group epoch, or the group's end
            if body is None:
                del self.streams[group_id]
                self.simple.discard(group_id)
                return
            group.epoch = body.get("epoch", 0)
            group.validated_epoch = body.get("validatedTopologyEpoch", -1)
        elif kind == 19:  # StreamsGroupMemberMetadata
            if body is None:
                group.members.pop(member, None)
            else:
                group.members[member] = body
        elif kind == 20:  # StreamsGroupTargetAssignmentMetadata
            group.assignment_epoch = -1 if body is None else body.get("assignmentEpoch", -1)
        elif kind == 22:  # StreamsGroupCurrentMemberAssignment
            if body is None:
                group.current.pop(member, None)
            else:
                group.current[member] = body
        elif kind == 23:  # StreamsGroupTopology
            group.topology_epoch = None if body is None else body.get("epoch", 0)
        if body is not None:
            group.exists = True

    # ------------------------------------------------------------------------------------------ views

    def groups(self) -> list[str]:
        """Every group with an entry, and every damaged group (whether it has one is not known)."""
        names = (set(self.offsets) | set(self.classic) | self.simple
                 | {g for g, c in self.consumer.items() if c.exists} | {g for g, c in self.streams.items() if c.exists})
        if self.damage:
            names |= {g for g in self.where if self.damage_of(g) is not None}
        return sorted(names)


def _consumer_state(group: _Consumer) -> str:
    if not group.members:
        return "Empty"
    if group.epoch > group.assignment_epoch:
        return "Assigning"
    for member_id in group.members:
        current = group.current.get(member_id) or {}
        if current.get("state", 0) != 0 or current.get("memberEpoch") != group.assignment_epoch:
            return "Reconciling"
    return "Stable"


def _streams_state(group: _Streams) -> str:
    """Kafka's ``StreamsGroup.maybeUpdateGroupState``, with "its topology configured and ready" read as
    "its topology record there and validated at that epoch" (what the coordinator wrote it had checked)."""
    if not group.members:
        return "Empty"
    if group.topology_epoch is None or group.validated_epoch < group.topology_epoch:
        return "NotReady"
    if group.epoch > group.assignment_epoch:
        return "Assigning"
    for member_id in group.members:
        current = group.current.get(member_id) or {}
        if current.get("state") != _STREAMS_STABLE or current.get("memberEpoch") != group.assignment_epoch:
            return "Reconciling"
    return "Stable"


def _tasks(tasks: Iterable[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """A streams member's tasks of one kind, as ``kafka-streams-groups --describe --members`` lists them."""
    out = [{"subtopology": t.get("subtopologyId"), "partitions": sorted(t.get("partitions") or ())}
           for t in tasks or ()]
    return sorted(out, key=lambda t: str(t["subtopology"]))


def _assignment(partitions: Iterable[dict[str, Any]] | None, name_of: Callable[[str], str], key: str
                ) -> list[dict[str, Any]]:
    out = []
    for tp in partitions or ():
        topic = tp.get(key)
        if key == "topicId" and topic is not None:
            topic = name_of(topic)
        out.append({"topic": topic, "partitions": sorted(tp.get("partitions") or ())})
    return sorted(out, key=lambda a: (a["topic"] is None, a["topic"] or ""))


def _owned(current: dict[str, Any]) -> list[dict[str, Any]]:
    """A KIP-848 member's current assignment as Kafka 4.4's describe shows it: the partitions assigned to
    it and those it still owns until it revokes them (``partitionsPendingRevocation``: a member stuck
    in a rebalance keeps consuming them), by topic id (review14 R14-13)."""
    owned: dict[Any, set[int]] = {}
    for key in ("assignedPartitions", "partitionsPendingRevocation"):
        for tp in current.get(key) or ():
            owned.setdefault(tp.get("topicId"), set()).update(tp.get("partitions") or ())
    return [{"topicId": topic_id, "partitions": sorted(parts)} for topic_id, parts in owned.items()]


_NO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"  # Kafka's Uuid.ZERO_UUID: a commit that names no topic id


def _namer(consumer: _Consumer, commits: dict[tuple[str, int], dict[str, Any]], topic_names: dict[str, str],
           more_names: Callable[[], dict[str, str]] | None) -> Callable[[str], str]:
    """The name of a topic id (see the module's docstring), the id itself when nothing names it."""
    names = {body["topicId"]: topic for (topic, _p), body in commits.items()
             if isinstance(body.get("topicId"), str) and body["topicId"] != _NO_TOPIC_ID}
    names.update(topic_names)
    names.update(consumer.topics)

    def name_of(topic_id: str) -> str:
        found = names.get(topic_id)
        if found is None and more_names is not None:
            found = more_names().get(topic_id)
        return topic_id if found is None else found

    return name_of


def group_view(replay: GroupsReplay, group: str, end_offsets: dict[tuple[str, int], int],
               topic_names: dict[str, str], more_names: Callable[[], dict[str, str]] | None = None,
               ) -> dict[str, Any] | None:
    """``groups/<group>.json`` (SPEC §3's keys, in order), or None when the group has no entry; a
    damaged group raises its damage (:class:`~kafkafs.errors.CorruptRecordError`). ``topic_names``:
    topic id -> name of the partitions' ``partition.metadata`` files; ``more_names``: called for an id
    nothing else names (the metadata log's topics: :func:`~.kraft.recorded_topic_names`)."""
    damage = replay.damage_of(group)
    if damage is not None:
        raise damage
    classic = replay.classic.get(group)
    consumer = replay.consumer.get(group)
    if consumer is not None and not consumer.exists:
        consumer = None
    streams = replay.streams.get(group)
    if streams is not None and not streams.exists:
        streams = None
    commits = replay.offsets.get(group, {})
    if classic is None and consumer is None and streams is None and not commits and group not in replay.simple:
        return None
    members: list[dict[str, Any]] = []
    if streams is not None and consumer is None:
        head = {"protocolType": "streams", "protocol": STREAMS_ASSIGNOR, "state": _streams_state(streams),
                "generation": streams.epoch, "leader": None}
        for member_id in sorted(streams.members):
            meta = streams.members[member_id]
            current = streams.current.get(member_id) or {}
            members.append({
                "memberId": member_id, "groupInstanceId": meta.get("instanceId"), "clientId": meta.get("clientId"),
                "clientHost": meta.get("clientHost"), "assignment": _tasks(current.get("activeTasks")),
                "standbyTasks": _tasks(current.get("standbyTasks")), "warmupTasks": _tasks(current.get("warmupTasks")),
            })
    elif consumer is not None:
        name_of = _namer(consumer, commits, topic_names, more_names)
        assignors = Counter(m.get("serverAssignor") for m in consumer.members.values() if m.get("serverAssignor"))
        if consumer.share:
            head = {"protocolType": "share", "protocol": SHARE_ASSIGNOR,
                    "state": "Stable" if consumer.members else "Empty", "generation": consumer.epoch, "leader": None}
        else:
            head = {"protocolType": "consumer",
                    "protocol": assignors.most_common(1)[0][0] if assignors else DEFAULT_ASSIGNOR,
                    "state": _consumer_state(consumer), "generation": consumer.epoch, "leader": None}
        for member_id in sorted(consumer.members):
            meta = consumer.members[member_id]
            current = consumer.current.get(member_id) or {}
            members.append({
                "memberId": member_id, "groupInstanceId": meta.get("instanceId"), "clientId": meta.get("clientId"),
                "clientHost": meta.get("clientHost"),
                "assignment": _assignment(_owned(current), name_of, "topicId"),
            })
    elif classic is not None:
        value = classic.value
        head = {"protocolType": value.get("protocolType") or None, "protocol": value.get("protocol"),
                "state": "Stable" if value.get("members") else "Empty", "generation": value.get("generation"),
                "leader": value.get("leader")}
        for m in value.get("members") or ():
            assignment = m.get("assignment")
            parts = assignment.get("assignedPartitions") if isinstance(assignment, dict) else None
            members.append({
                "memberId": m.get("memberId"), "groupInstanceId": m.get("groupInstanceId"),
                "clientId": m.get("clientId"), "clientHost": m.get("clientHost"),
                "assignment": _assignment(parts, str, "topic"),
            })
    else:  # only commits (or commits that never landed): a consumer that assigns its partitions itself
        head = {"protocolType": None, "protocol": None, "state": "Empty", "generation": 0, "leader": None}
    offsets = []
    if consumer is not None and consumer.share:
        return {"group": group, **head, "members": members,
                "offsets": _share_offsets(replay.share_state.get(group, {}), end_offsets, name_of)}
    for (topic, partition), body in sorted(commits.items()):
        end = end_offsets.get((topic, partition))
        offset = body.get("offset")
        offsets.append({
            "topic": topic, "partition": partition, "offset": offset, "leaderEpoch": body.get("leaderEpoch", -1),
            "metadata": body.get("metadata"), "commitTimestamp": body.get("commitTimestamp"),
            "logEndOffset": end, "lag": None if end is None or offset is None else end - offset,
        })
    return {"group": group, **head, "members": members, "offsets": offsets}


def _share_offsets(states: dict[tuple[str, int], dict[str, Any]], end_offsets: dict[tuple[str, int], int],
                   name_of: Callable[[str], str]) -> list[dict[str, Any]]:
    """A share group's ``offsets`` (see the module's docstring), by topic name and partition."""
    out = []
    for (topic_id, partition), state in states.items():
        topic = name_of(topic_id)
        start, dcc = state.get("startOffset", -1), state.get("deliveryCompleteCount", -1)
        end = end_offsets.get((topic, partition))
        known = start != -1
        out.append({
            "topic": topic, "partition": partition, "offset": start if known else None,
            "leaderEpoch": state.get("leaderEpoch") if known else None, "metadata": None, "commitTimestamp": None,
            "logEndOffset": end, "lag": None if end is None or not known or dcc == -1 else end - start - dcc,
        })
    return sorted(out, key=lambda o: (o["topic"], o["partition"]))


def replay_logdir(logdir: LogDir) -> GroupsReplay:
    """Replay every ``__consumer_offsets`` partition of ``logdir`` (a :class:`~.logdir.LogDir`), past damage."""
    replay = GroupsReplay()
    for name in logdir.topic_partition_names(OFFSETS_TOPIC):
        damage: list[CorruptRecordError] = []
        for h, batch in replayable_batches(logdir.log(name), damage):
            if h.magic == 2 and h.is_control:
                if h.producer_id >= 0 and len(batch):
                    kind = control_type_of(batch.keys[0])
                    if kind in ("COMMIT", "ABORT"):
                        replay.marker(h.producer_id, kind == "COMMIT", name)
                continue
            transactional = h.magic == 2 and h.is_transactional
            for offset, key, value in zip(batch.offsets, batch.keys, batch.values, strict=True):
                replay.apply(key, value, offset, h.producer_id if transactional else -1, transactional, name)
        if damage:
            replay.damage[name] = damage[0]
    for name in logdir.topic_partition_names(SHARE_STATE_TOPIC):
        damage = []
        for h, batch in replayable_batches(logdir.log(name), damage):
            if h.magic == 2 and h.is_control:
                continue
            for key, value in zip(batch.keys, batch.values, strict=True):
                replay.apply_share_state(key, value, name)
        if damage:
            replay.damage[name] = damage[0]
    return replay


def _ends_and_names(logdir: LogDir, unreadable: dict[str, OSError] | None = None,
                    ) -> tuple[dict[tuple[str, int], int], dict[str, str]]:
    ends: dict[tuple[str, int], int] = {}
    names: dict[str, str] = {}
    for name in logdir.partition_names():
        topic, partition = parse_partition_dir_name(name)
        try:
            log_ = logdir.log(name)
        except KafkafsError:
            continue
        except OSError as exc:  # its end unknown (null), the error the caller's to say
            if unreadable is None:
                raise
            unreadable[name] = exc
            continue
        ends[(topic, partition)] = log_.log_end_offset
        topic_id = log_.state_files.topic_id
        if topic_id:
            names[topic_id] = topic
    return ends, names


def group_views(logdir: LogDir, replay: GroupsReplay, group: str | None = None,
                unreadable: dict[str, OSError] | None = None) -> dict[str, dict[str, Any]]:
    """group -> its ``groups/<group>.json`` object, for every group of the replay of ``logdir`` (or only
    ``group``) that can be known exactly (damaged groups are left out: :meth:`GroupsReplay.damaged`).
    ``unreadable``: a partition that cannot be opened (an OSError) gets it there, by name, and its log
    end offset and lag are null; without it, the error is raised."""
    ends, names = _ends_and_names(logdir, unreadable)
    wanted = replay.groups() if group is None else [group]
    out = {}
    more_names = functools.cache(lambda: recorded_topic_names(logdir.path))
    for g in wanted:
        if replay.damage_of(g) is not None:
            continue
        view = group_view(replay, g, ends, names, more_names)
        if view is not None:
            out[g] = view
    return out
