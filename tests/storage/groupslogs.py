"""Records of ``__consumer_offsets`` and ``__transaction_state`` for the tests, written here: offset
commits by hand from Kafka's documented layout (OffsetCommitKey v1, OffsetCommitValue v3), the rest
by Kafka's message definitions (format/decoders/messages)."""

from __future__ import annotations

import base64
import struct
import time

from kafkafs.format.decoders.schema import message


def _string(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def commit_key(group: str, topic: str, partition: int) -> bytes:
    """OffsetCommitKey: type 1, group, topic, partition."""
    return struct.pack(">h", 1) + _string(group) + _string(topic) + struct.pack(">i", partition)


def commit_value(offset: int, timestamp: int = 1_700_000_000_000, metadata: str = "", leader_epoch: int = -1) -> bytes:
    """OffsetCommitValue v3: offset, leaderEpoch, metadata, commitTimestamp."""
    return struct.pack(">hqi", 3, offset, leader_epoch) + _string(metadata) + struct.pack(">q", timestamp)


_NAMES = {2: "GroupMetadata", 3: "ConsumerGroupMetadata", 4: "ConsumerGroupPartitionMetadata",
          5: "ConsumerGroupMemberMetadata", 6: "ConsumerGroupTargetAssignmentMetadata",
          7: "ConsumerGroupTargetAssignmentMember", 8: "ConsumerGroupCurrentMemberAssignment",
          10: "ShareGroupMemberMetadata", 11: "ShareGroupMetadata", 12: "ShareGroupTargetAssignmentMetadata",
          13: "ShareGroupTargetAssignmentMember", 14: "ShareGroupCurrentMemberAssignment",
          15: "ShareGroupStatePartitionMetadata", 17: "StreamsGroupMetadata", 19: "StreamsGroupMemberMetadata",
          20: "StreamsGroupTargetAssignmentMetadata", 21: "StreamsGroupTargetAssignmentMember",
          22: "StreamsGroupCurrentMemberAssignment", 23: "StreamsGroupTopology"}


def group_key(kind: int, **data) -> bytes:
    return struct.pack(">h", kind) + message(_NAMES[kind] + "Key").write(data, 0)


def group_value(kind: int, version: int, **data) -> bytes:
    return struct.pack(">h", version) + message(_NAMES[kind] + "Value").write(data, version)


_SHARE_STATE = {0: "ShareSnapshot", 1: "ShareUpdate"}


def share_state_key(kind: int, group: str, topic_id: str, partition: int) -> bytes:
    """A ``__share_group_state`` key: 0 ShareSnapshot, 1 ShareUpdate."""
    return struct.pack(">h", kind) + message(_SHARE_STATE[kind] + "Key").write(
        {"groupId": group, "topicId": topic_id, "partition": partition}, 0)


def share_state_value(kind: int, **data) -> bytes:
    return struct.pack(">h", 0) + message(_SHARE_STATE[kind] + "Value").write(data, 0)


def assignment(parts: dict[str, list[int]]) -> str:
    """A consumer protocol assignment (v0), base64 as GroupMetadataValue's writer takes bytes."""
    body = message("ConsumerProtocolAssignment").write(
        {"assignedPartitions": [{"topic": t, "partitions": p} for t, p in parts.items()], "userData": None}, 0)
    return base64.b64encode(struct.pack(">h", 0) + body).decode()


def classic_group(group: str, generation: int, members: list[tuple[str, str, dict[str, list[int]]]],
                  protocol: str = "range") -> tuple[bytes, bytes]:
    """A GroupMetadata record (v3): members as (member id, client id, assignment)."""
    return group_key(2, group=group), group_value(2, 3, protocolType="consumer", generation=generation,
                                                 protocol=protocol, leader=members[0][0] if members else None,
                                                 currentStateTimestamp=1, members=[
        {"memberId": m, "groupInstanceId": None, "clientId": c, "clientHost": "/10.0.0.1", "rebalanceTimeout": 300000,
         "sessionTimeout": 45000, "subscription": "", "assignment": assignment(a)} for m, c, a in members])


_STATES = {"Empty": 0, "Ongoing": 1, "PrepareCommit": 2, "PrepareAbort": 3, "CompleteCommit": 4, "CompleteAbort": 5,
           "Dead": 6, "PrepareEpochFence": 7}


def txn_key(tid: str) -> bytes:
    return struct.pack(">h", 0) + _string(tid)


def txn_value(pid: int, epoch: int, state: str, partitions: dict[str, list[int]], timeout: int = 60_000,
              start: int | None = None) -> bytes:
    """TransactionLogValue v0; ``start``: the transaction's start on the coordinator's clock (now when None)."""
    start = time.time_ns() // 1_000_000 if start is None else start
    body = message("TransactionLogValue").write({
        "producerId": pid, "producerEpoch": epoch, "transactionTimeoutMs": timeout,
        "transactionStatus": _STATES[state],
        "transactionPartitions": [{"topic": t, "partitionIds": p} for t, p in partitions.items()],
        "transactionLastUpdateTimestampMs": start, "transactionStartTimestampMs": start}, 0)
    return struct.pack(">h", 0) + body


def read_groups(logdir, group: str | None = None) -> dict:
    """The groups of ``logdir`` known exactly (or only ``group``), as ``kafkafs groups --json`` has them."""
    from kafkafs.storage.groups import group_views, replay_logdir

    return group_views(logdir, replay_logdir(logdir), group)


def read_transaction_ids(logdir) -> dict:
    """The transactional ids of ``logdir`` known exactly -> their ``transactions/<id>.json`` objects."""
    from kafkafs.storage.txnstate import replay_transactions

    return replay_transactions(logdir).exact()
