"""Consumer groups replayed from ``__consumer_offsets`` (SPEC §3 groups/<group>.json), on records
written here and on the fixtures a real broker wrote."""

from __future__ import annotations

import orjson

from kafkafs.format.batch import encode_batch, encode_control_batch
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir

from .groupslogs import (
    classic_group,
    commit_key,
    commit_value,
    group_key,
    group_value,
    read_groups,
    share_state_key,
    share_state_value,
)

SPEC_KEYS = ["group", "protocolType", "protocol", "state", "generation", "leader", "members", "offsets"]
MEMBER_KEYS = ["memberId", "groupInstanceId", "clientId", "clientHost", "assignment"]
OFFSET_KEYS = ["topic", "partition", "offset", "leaderEpoch", "metadata", "commitTimestamp", "logEndOffset", "lag"]


def _logdir(tmp_path):
    (tmp_path / "logs").mkdir(exist_ok=True)
    return LogDir(tmp_path / "logs", Settings(), writable=True)


def test_a_classic_group_with_commits_and_lag(tmp_path):
    with _logdir(tmp_path) as logdir:
        orders = logdir.create_partition("orders", 0)
        orders.append_records([(1, None, b"x", ())] * 10)
        offsets = logdir.create_partition("__consumer_offsets", 7)
        offsets.append_records([
            (1, *classic_group("g", 1, [("m1", "c1", {"orders": [0]})]), ()),
            (1, commit_key("g", "orders", 0), commit_value(4, metadata="md", leader_epoch=2), ()),
            (1, commit_key("g", "orders", 0), commit_value(6), ()),
            (1, commit_key("g", "gone", 3), commit_value(1), ()),
            (1, *classic_group("g", 2, [("m2", "c2", {"orders": [0]}), ("m3", "c3", {})]), ()),
        ])
    with LogDir(tmp_path / "logs") as logdir:
        groups = read_groups(logdir)
    assert list(groups) == ["g"]
    g = groups["g"]
    assert list(g) == SPEC_KEYS
    assert (g["protocolType"], g["protocol"], g["state"], g["generation"], g["leader"]) == \
        ("consumer", "range", "Stable", 2, "m2")
    assert [list(m) for m in g["members"]] == [MEMBER_KEYS] * 2
    assert g["members"][0]["assignment"] == [{"topic": "orders", "partitions": [0]}]
    assert g["members"][1]["assignment"] == []
    assert [list(o) for o in g["offsets"]] == [OFFSET_KEYS] * 2
    assert g["offsets"] == [
        {"topic": "gone", "partition": 3, "offset": 1, "leaderEpoch": -1, "metadata": "",
         "commitTimestamp": 1_700_000_000_000, "logEndOffset": None, "lag": None},
        {"topic": "orders", "partition": 0, "offset": 6, "leaderEpoch": -1, "metadata": "",
         "commitTimestamp": 1_700_000_000_000, "logEndOffset": 10, "lag": 4},
    ]


def test_tombstones_delete_commits_and_groups(tmp_path):
    with _logdir(tmp_path) as logdir:
        offsets = logdir.create_partition("__consumer_offsets", 0)
        offsets.append_records([
            (1, *classic_group("a", 1, []), ()),
            (1, commit_key("a", "t", 0), commit_value(1), ()),
            (1, commit_key("b", "t", 0), commit_value(1), ()),
            (1, commit_key("a", "t", 0), None, ()),
            (1, group_key(2, group="a"), None, ()),
            (1, commit_key("b", "t", 1), commit_value(5), ()),
            (1, commit_key("b", "t", 0), None, ()),
        ])
    with LogDir(tmp_path / "logs") as logdir:
        groups = read_groups(logdir)
    assert list(groups) == ["b"]  # a: metadata and commits all deleted
    b = groups["b"]
    assert (b["protocolType"], b["state"], b["generation"], b["members"]) == (None, "Empty", 0, [])
    assert [(o["topic"], o["partition"], o["offset"]) for o in b["offsets"]] == [("t", 1, 5)]


def test_transactional_commits_count_once_committed(tmp_path):
    def txn(pid, offset):
        return encode_batch([(1, commit_key("g", "t", 0), commit_value(offset), ())], transactional=True,
                            producer_id=pid, producer_epoch=0, base_sequence=0)

    with _logdir(tmp_path) as logdir:
        offsets = logdir.create_partition("__consumer_offsets", 0)
        offsets.append_records([(1, commit_key("g", "t", 0), commit_value(1), ())])
        offsets.append_batches(txn(5, 10))
        offsets.append_batches(encode_control_batch("COMMIT", producer_id=5, producer_epoch=0, timestamp=1))
        offsets.append_batches(txn(6, 20))
        offsets.append_batches(encode_control_batch("ABORT", producer_id=6, producer_epoch=0, timestamp=1))
        offsets.append_batches(txn(7, 30))  # still open: not committed
    with LogDir(tmp_path / "logs") as logdir:
        assert read_groups(logdir)["g"]["offsets"][0]["offset"] == 10


def test_a_transactional_commit_lands_only_over_an_older_record(tmp_path):
    """review14 R14-1: at a COMMIT marker Kafka's coordinator applies a pending transactional offset only
    when its record is later in ``__consumer_offsets`` than the committed offset's record (an offset
    tombstone in between drops it; an ABORT drops it; a partition's marker ends that partition's pending
    commits only). kafkafs applied it over a newer plain commit (showed 40, kafka-consumer-groups 45)."""
    def txn(group, pid, offset):
        return encode_batch([(1, commit_key(group, "t", 0), commit_value(offset), ())], transactional=True,
                            producer_id=pid, producer_epoch=0, base_sequence=0)

    def plain(group, offset):
        return [(1, commit_key(group, "t", 0), None if offset is None else commit_value(offset), ())]

    def end(kind, pid):
        return encode_control_batch(kind, producer_id=pid, producer_epoch=0, timestamp=1)

    with _logdir(tmp_path) as logdir:
        offsets = logdir.create_partition("__consumer_offsets", 0)
        steps = [
            plain("before", 5), txn("before", 1, 40), end("COMMIT", 1),    # the txn's record is newer: 40
            txn("after", 2, 40), plain("after", 45), end("COMMIT", 2),     # the plain one is newer: 45
            plain("aborted", 30), txn("aborted", 3, 40), end("ABORT", 3),  # 30
            plain("deleted", 30), txn("deleted", 4, 40), plain("deleted", None), end("COMMIT", 4),  # none
            txn("two", 5, 10), txn("two", 6, 20), end("COMMIT", 6), end("COMMIT", 5),  # 5's is older: 20
            txn("again", 7, 10), plain("again", 11), txn("again", 7, 12), end("COMMIT", 7),  # its last: 12
        ]
        for step in steps:
            if isinstance(step, list):
                offsets.append_records(step)
            else:
                offsets.append_batches(step)
        logdir.create_partition("__consumer_offsets", 1).append_batches(txn("elsewhere", 8, 50))  # open here
        elsewhere = logdir.create_partition("__consumer_offsets", 2)
        elsewhere.append_batches(txn("other", 8, 60))
        elsewhere.append_batches(end("COMMIT", 8))  # ends pid 8's transaction in partition 2 only
    with LogDir(tmp_path / "logs") as logdir:
        groups = read_groups(logdir)
    assert {g: [o["offset"] for o in v["offsets"]] for g, v in groups.items()} == {
        "before": [40], "after": [45], "aborted": [30], "deleted": [], "two": [20], "again": [12],
        "elsewhere": [], "other": [60]}



def test_a_group_made_by_commits_that_never_landed_is_there_empty(tmp_path):
    """review13 R13-2: Kafka's replay makes a group ("simple", an empty classic group) for any offset
    commit's record, in a transaction or not, so kafka-consumer-groups lists a group whose only commits
    were aborted or are still open (Empty, no offsets) until a tombstone of its metadata; kafkafs showed
    no such group."""
    def txn(group, pid):
        return encode_batch([(1, commit_key(group, "t", 0), commit_value(3), ())], transactional=True,
                            producer_id=pid, producer_epoch=0, base_sequence=0)

    with _logdir(tmp_path) as logdir:
        offsets = logdir.create_partition("__consumer_offsets", 0)
        offsets.append_batches(txn("aborted", 6))
        offsets.append_batches(encode_control_batch("ABORT", producer_id=6, producer_epoch=0, timestamp=1))
        offsets.append_batches(txn("open", 7))
        offsets.append_batches(txn("expired", 8))
        offsets.append_batches(encode_control_batch("ABORT", producer_id=8, producer_epoch=0, timestamp=1))
        offsets.append_records([(1, group_key(2, group="expired"), None, ())])  # the broker's cleanup
    with LogDir(tmp_path / "logs") as logdir:
        groups = read_groups(logdir)
    assert list(groups) == ["aborted", "open"]
    for g in groups.values():
        assert (g["protocolType"], g["protocol"], g["state"], g["generation"], g["members"], g["offsets"]) == \
            (None, None, "Empty", 0, [], [])

def test_a_consumer_group_of_the_new_protocol(tmp_path):
    topic_id = "AAAAAAAAAAAAAAAAAAAAAQ"
    with _logdir(tmp_path) as logdir:
        logdir.create_partition("orders", 0).append_records([(1, None, b"x", ())] * 3)
        offsets = logdir.create_partition("__consumer_offsets", 1)
        member = {"instanceId": None, "rackId": None, "clientId": "cli", "clientHost": "/h", "subscribedTopicNames": ["orders"],
                  "subscribedTopicRegex": None, "rebalanceTimeoutMs": 1, "serverAssignor": "uniform"}
        rows = [
            (group_key(3, groupId="kg"), group_value(3, 0, epoch=5)),
            (group_key(4, groupId="kg"), group_value(4, 0, topics=[
                {"topicId": topic_id, "topicName": "orders", "numPartitions": 1, "partitionMetadata": []}])),
            (group_key(5, groupId="kg", memberId="m"), group_value(5, 0, **member)),
            (group_key(6, groupId="kg"), group_value(6, 0, assignmentEpoch=5)),
            (group_key(8, groupId="kg", memberId="m"), group_value(8, 0, memberEpoch=5, previousMemberEpoch=4, state=0,
                                                                    assignedPartitions=[{"topicId": topic_id, "partitions": [0]}],
                                                                    partitionsPendingRevocation=[])),
            (commit_key("kg", "orders", 0), commit_value(1)),
        ]
        offsets.append_records([(1, k, v, ()) for k, v in rows])
    with LogDir(tmp_path / "logs") as logdir:
        kg = read_groups(logdir)["kg"]
    assert (kg["protocolType"], kg["protocol"], kg["state"], kg["generation"], kg["leader"]) == \
        ("consumer", "uniform", "Stable", 5, None)
    assert kg["members"] == [{"memberId": "m", "groupInstanceId": None, "clientId": "cli", "clientHost": "/h",
                              "assignment": [{"topic": "orders", "partitions": [0]}]}]
    assert kg["offsets"][0]["lag"] == 2


def test_a_member_owns_its_partitions_pending_revocation(tmp_path):
    """review14 R14-13: a KIP-848 member stuck in a rebalance (state 1, UNREVOKED_PARTITIONS) still owns
    the partitions it must hand back; Kafka 4.4's describe shows them in its current assignment
    (sleepy r9:0,1,2,3 with 2,3 pending revocation; the member waiting for them: none yet)."""
    topic_id = "AAAAAAAAAAAAAAAAAAAAAQ"
    other = "AAAAAAAAAAAAAAAAAAAAAg"
    with _logdir(tmp_path) as logdir:
        logdir.create_partition("r9", 0).append_records([(1, None, b"x", ())] * 3)
        member = {"instanceId": None, "rackId": None, "clientId": "sleepy", "clientHost": "/h",
                  "subscribedTopicNames": ["r9"], "subscribedTopicRegex": None, "rebalanceTimeoutMs": 1,
                  "serverAssignor": None}
        rows = [
            (group_key(3, groupId="rg"), group_value(3, 0, epoch=3)),
            (group_key(4, groupId="rg"), group_value(4, 0, topics=[
                {"topicId": topic_id, "topicName": "r9", "numPartitions": 4, "partitionMetadata": []},
                {"topicId": other, "topicName": "r8", "numPartitions": 4, "partitionMetadata": []}])),
            (group_key(5, groupId="rg", memberId="a"), group_value(5, 0, **member)),
            (group_key(5, groupId="rg", memberId="b"), group_value(5, 0, **{**member, "clientId": "bee"})),
            (group_key(6, groupId="rg"), group_value(6, 0, assignmentEpoch=3)),
            (group_key(8, groupId="rg", memberId="a"), group_value(8, 0, memberEpoch=2, previousMemberEpoch=1, state=1,
                                                                    assignedPartitions=[{"topicId": topic_id, "partitions": [1, 0]}],
                                                                    partitionsPendingRevocation=[
                                                                        {"topicId": topic_id, "partitions": [3, 2]},
                                                                        {"topicId": other, "partitions": [0]}])),
            (group_key(8, groupId="rg", memberId="b"), group_value(8, 0, memberEpoch=3, previousMemberEpoch=0, state=2,
                                                                    assignedPartitions=[],
                                                                    partitionsPendingRevocation=[])),
        ]
        logdir.create_partition("__consumer_offsets", 1).append_records([(1, k, v, ()) for k, v in rows])
    with LogDir(tmp_path / "logs") as logdir:
        rg = read_groups(logdir)["rg"]
    assert rg["state"] == "Reconciling"
    assert [(m["clientId"], m["assignment"]) for m in rg["members"]] == [
        ("sleepy", [{"topic": "r8", "partitions": [0]}, {"topic": "r9", "partitions": [0, 1, 2, 3]}]),
        ("bee", [])]


def test_a_streams_group(tmp_path):
    """review14 R14-6: a KIP-1071 streams group (the records a Kafka 4.4 broker wrote for a Kafka Streams
    app with group.protocol=streams) is shown as kafka-streams-groups --describe shows it: sapp Stable,
    group epoch 2, assignor sticky, 1 member with ACTIVE 0:[0,1]; not an Empty group made of its commits."""
    member = {"instanceId": None, "rackId": None, "clientId": "sapp-1-StreamThread-1-consumer", "clientHost": "/127.0.0.1",
              "rebalanceTimeoutMs": 300000, "topologyEpoch": 0, "processId": "497589e3", "userEndpoint": None,
              "clientTags": []}
    no_tasks = {"standbyTasks": [], "warmupTasks": [], "activeTasksPendingRevocation": [],
                "standbyTasksPendingRevocation": [], "warmupTasksPendingRevocation": []}
    rows = [
        (group_key(19, groupId="sapp", memberId="iz0m"), group_value(19, 0, **member)),
        (group_key(23, groupId="sapp"), group_value(23, 0, epoch=0, subtopologies=[
            {"subtopologyId": "0", "sourceTopics": ["sin"], "sourceTopicRegex": [], "stateChangelogTopics": [],
             "repartitionSinkTopics": [], "repartitionSourceTopics": [], "copartitionGroups": []}])),
        (group_key(17, groupId="sapp"), group_value(17, 0, epoch=2, metadataHash=1, validatedTopologyEpoch=0,
                                                    lastAssignmentConfigs=[{"key": "num.standby.replicas", "value": "0"}])),
        (group_key(22, groupId="sapp", memberId="iz0m"), group_value(22, 0, memberEpoch=1, previousMemberEpoch=0, state=1,
                                                                      activeTasks=[], **no_tasks)),
        (group_key(21, groupId="sapp", memberId="iz0m"), group_value(21, 0, activeTasks=[
            {"subtopologyId": "0", "partitions": [0, 1]}], standbyTasks=[], warmupTasks=[])),
        (group_key(20, groupId="sapp"), group_value(20, 0, assignmentEpoch=2, assignmentTimestamp=1)),
    ]
    stable = (group_key(22, groupId="sapp", memberId="iz0m"), group_value(
        22, 0, memberEpoch=2, previousMemberEpoch=1, state=1,
        activeTasks=[{"subtopologyId": "0", "partitions": [1, 0], "assignmentEpochs": [2, 2]}], **no_tasks))
    with _logdir(tmp_path) as logdir:
        logdir.create_partition("sin", 0).append_records([(1, None, b"x", ())] * 3)
        offsets = logdir.create_partition("__consumer_offsets", 0)
        offsets.append_records([(1, k, v, ()) for k, v in rows])
    with LogDir(tmp_path / "logs") as logdir:
        sapp = read_groups(logdir)["sapp"]
    assert (sapp["protocolType"], sapp["protocol"], sapp["state"], sapp["generation"]) == \
        ("streams", "sticky", "Reconciling", 2)  # the member is not at the target epoch yet
    with _logdir(tmp_path) as logdir:
        logdir.log("__consumer_offsets-0").append_records([(1, *stable, ()), (1, commit_key("sapp", "sin", 0), commit_value(2), ())])
    with LogDir(tmp_path / "logs") as logdir:
        sapp = read_groups(logdir)["sapp"]
    assert list(sapp) == SPEC_KEYS
    assert (sapp["protocolType"], sapp["protocol"], sapp["state"], sapp["generation"], sapp["leader"]) == \
        ("streams", "sticky", "Stable", 2, None)
    assert sapp["members"] == [{"memberId": "iz0m", "groupInstanceId": None, "clientId": "sapp-1-StreamThread-1-consumer",
                                "clientHost": "/127.0.0.1", "assignment": [{"subtopology": "0", "partitions": [0, 1]}],
                                "standbyTasks": [], "warmupTasks": []}]
    assert [(o["topic"], o["partition"], o["offset"], o["lag"]) for o in sapp["offsets"]] == [("sin", 0, 2, 1)]
    with _logdir(tmp_path) as logdir:  # the member leaves (its records tombstoned): Empty, the epoch moves on
        logdir.log("__consumer_offsets-0").append_records([
            (1, group_key(22, groupId="sapp", memberId="iz0m"), None, ()),
            (1, group_key(21, groupId="sapp", memberId="iz0m"), None, ()),
            (1, group_key(19, groupId="sapp", memberId="iz0m"), None, ()),
            (1, group_key(17, groupId="sapp"), group_value(17, 0, epoch=3, metadataHash=1, validatedTopologyEpoch=0,
                                                          lastAssignmentConfigs=[]), ())])
    with LogDir(tmp_path / "logs") as logdir:
        sapp = read_groups(logdir)["sapp"]
    assert (sapp["protocolType"], sapp["state"], sapp["generation"], sapp["members"]) == ("streams", "Empty", 3, [])
    with _logdir(tmp_path) as logdir:  # kafka-streams-groups --delete: the group's tombstones and its offsets'
        logdir.log("__consumer_offsets-0").append_records([
            (1, commit_key("sapp", "sin", 0), None, ()), (1, group_key(20, groupId="sapp"), None, ()),
            (1, group_key(17, groupId="sapp"), None, ()), (1, group_key(23, groupId="sapp"), None, ())])
    with LogDir(tmp_path / "logs") as logdir:
        assert read_groups(logdir) == {}


def test_a_streams_group_without_its_topology_is_not_ready(tmp_path):
    member = {"instanceId": None, "rackId": None, "clientId": "c", "clientHost": "/h", "rebalanceTimeoutMs": 1,
              "topologyEpoch": 0, "processId": "p", "userEndpoint": None, "clientTags": []}
    with _logdir(tmp_path) as logdir:
        logdir.create_partition("__consumer_offsets", 0).append_records([(1, k, v, ()) for k, v in [
            (group_key(19, groupId="s", memberId="m"), group_value(19, 0, **member)),
            (group_key(17, groupId="s"), group_value(17, 0, epoch=1, metadataHash=0, validatedTopologyEpoch=-1,
                                                     lastAssignmentConfigs=[]))]])
    with LogDir(tmp_path / "logs") as logdir:
        s = read_groups(logdir)["s"]
    assert (s["protocolType"], s["state"], s["generation"], [m["assignment"] for m in s["members"]]) == \
        ("streams", "NotReady", 1, [[]])


def test_the_fixtures_groups(fixtures_dir):
    with LogDir(fixtures_dir / "kafka-logs-a") as logdir:
        assert read_groups(logdir) == {}  # my-group's metadata and commits were all deleted (tombstones)
    with LogDir(fixtures_dir / "kafka-logs-c") as logdir:
        groups = read_groups(logdir)
    g = groups["DEVSmileCDR"]
    assert list(groups) == ["DEVSmileCDR"] and list(g) == SPEC_KEYS
    assert (g["protocolType"], g["protocol"], g["state"], g["generation"]) == ("consumer", "range", "Stable", 6)
    assert len(g["members"]) == 17
    assert [(o["topic"], o["partition"], o["offset"], o["logEndOffset"], o["lag"]) for o in g["offsets"]] == [
        ("Retry.TestTopicPatient", 0, 0, 0, 0), ("TestTopicPatient", 0, 3, 3, 0),
        ("batch2.work.notification.SHR_PROD.persistence", 0, 0, None, None),
        ("subscription.matching.SHR_PROD.persistence", 0, 0, None, None),
    ]


def test_a_share_group(tmp_path):
    """review7 R2: a share group (KIP-932, records 10-15, as a Kafka 4.4 broker writes them for
    kafka-console-share-consumer) has a view as kafka-share-groups --describe shows it: Stable with its
    member and assignment, Empty once the member left; no offsets (they live in __share_group_state)."""
    topic_id = "IIsb7ElQQVeR6TIibE2MrA"
    member = {"rackId": None, "clientId": "console-share-consumer", "clientHost": "/127.0.0.1",
              "subscribedTopicNames": ["plain"]}
    rows = [
        (group_key(10, groupId="s", memberId="m"), group_value(10, 0, **member)),
        (group_key(11, groupId="s"), group_value(11, 0, epoch=3, metadataHash=1)),
        (group_key(15, groupId="s"), group_value(15, 0, initializingTopics=[], deletingTopics=[], initializedTopics=[
            {"topicId": topic_id, "topicName": "plain", "partitions": [0]}])),
        (group_key(13, groupId="s", memberId="m"), group_value(13, 0, topicPartitions=[
            {"topicId": topic_id, "partitions": [0]}])),
        (group_key(12, groupId="s"), group_value(12, 0, assignmentEpoch=3, assignmentTimestamp=1)),
        (group_key(14, groupId="s", memberId="m"), group_value(14, 0, memberEpoch=3, previousMemberEpoch=2, state=0,
                                                                assignedPartitions=[{"topicId": topic_id, "partitions": [0]}])),
    ]
    with _logdir(tmp_path) as logdir:
        logdir.create_partition("plain", 0).append_records([(1, None, b"x", ())] * 3)
        offsets = logdir.create_partition("__consumer_offsets", 0)
        offsets.append_records([(1, k, v, ()) for k, v in rows])
    with LogDir(tmp_path / "logs") as logdir:
        s = read_groups(logdir)["s"]
    assert list(s) == SPEC_KEYS
    assert (s["protocolType"], s["protocol"], s["state"], s["generation"], s["leader"]) == ("share", "simple", "Stable", 3, None)
    assert s["members"] == [{"memberId": "m", "groupInstanceId": None, "clientId": "console-share-consumer",
                             "clientHost": "/127.0.0.1", "assignment": [{"topic": "plain", "partitions": [0]}]}]
    assert s["offsets"] == []  # no __share_group_state
    with _logdir(tmp_path) as logdir:  # the member leaves: its records are tombstoned, the epoch moves on
        logdir.log("__consumer_offsets-0").append_records([
            (1, group_key(14, groupId="s", memberId="m"), None, ()), (1, group_key(13, groupId="s", memberId="m"), None, ()),
            (1, group_key(10, groupId="s", memberId="m"), None, ()), (1, group_key(11, groupId="s"), group_value(11, 0, epoch=4, metadataHash=0), ())])
    with LogDir(tmp_path / "logs") as logdir:
        s = read_groups(logdir)["s"]
    assert (s["state"], s["generation"], s["members"]) == ("Empty", 4, [])


def test_a_share_groups_offsets_from_the_share_coordinators_state(tmp_path):
    """review14 R14-10: kafka-share-groups --describe --offsets (Kafka 4.4) shows each share-partition's
    start offset, leader epoch and lag (log end - start offset - delivery complete count) from
    __share_group_state; one whose start offset is -1 shows "-" (here: null). The records as a 4.4 broker
    wrote them for sg2 (START-OFFSET 50, LAG 70 on sin-0; sin-1 all "-")."""
    topic_id = "BaDU8OlpSEiFmNTsxpPgCg"
    rows = [
        (group_key(11, groupId="sg2"), group_value(11, 0, epoch=6, metadataHash=1)),
        (group_key(15, groupId="sg2"), group_value(15, 0, initializingTopics=[], deletingTopics=[], initializedTopics=[
            {"topicId": topic_id, "topicName": "sin", "partitions": [0, 1]}])),
    ]
    snapshot = {"snapshotEpoch": 0, "stateEpoch": 2, "leaderEpoch": 0, "startOffset": -1, "createTimestamp": 1,
                "writeTimestamp": 1, "stateBatches": []}

    def update(start: int, complete: int, first: int, last: int) -> bytes:
        return share_state_value(1, snapshotEpoch=0, leaderEpoch=0, startOffset=start, deliveryCompleteCount=complete,
                                 stateBatches=[{"firstOffset": first, "lastOffset": last, "deliveryState": 0,
                                                "deliveryCount": 1}])

    with _logdir(tmp_path) as logdir:
        logdir.create_partition("sin", 0).append_records([(1, None, b"x", ())] * 120)
        logdir.create_partition("sin", 1).append_records([(1, None, b"x", ())] * 80)
        logdir.create_partition("__consumer_offsets", 0).append_records([(1, k, v, ()) for k, v in rows])
        logdir.create_partition("__share_group_state", 0).append_records([
            (1, share_state_key(0, "sg2", topic_id, 1), share_state_value(0, **snapshot), ())])
        logdir.create_partition("__share_group_state", 1).append_records([
            (1, share_state_key(0, "sg2", topic_id, 0), share_state_value(0, **snapshot), ()),
            (1, share_state_key(1, "sg2", topic_id, 0), update(0, 50, 0, 49), ()),
            (1, share_state_key(1, "sg2", topic_id, 0), update(50, 0, 50, 119), ()),
            (1, share_state_key(1, "sg2", topic_id, 0), share_state_value(  # -1: unchanged
                1, snapshotEpoch=0, leaderEpoch=-1, startOffset=-1, stateBatches=[]), ()),
        ])
    with LogDir(tmp_path / "logs") as logdir:
        sg2 = read_groups(logdir)["sg2"]
    assert (sg2["protocolType"], sg2["state"], sg2["members"]) == ("share", "Empty", [])
    assert sg2["offsets"] == [
        {"topic": "sin", "partition": 0, "offset": 50, "leaderEpoch": 0, "metadata": None, "commitTimestamp": None,
         "logEndOffset": 120, "lag": 70},
        {"topic": "sin", "partition": 1, "offset": None, "leaderEpoch": None, "metadata": None, "commitTimestamp": None,
         "logEndOffset": 80, "lag": None},
    ]
    with _logdir(tmp_path) as logdir:  # kafka-share-groups --delete-offsets of sin-0: its state is tombstoned
        logdir.log("__share_group_state-1").append_records([(1, share_state_key(0, "sg2", topic_id, 0), None, ())])
    with LogDir(tmp_path / "logs") as logdir:
        assert [o["partition"] for o in read_groups(logdir)["sg2"]["offsets"]] == [1]


def test_topic_ids_named_without_the_topics_partitions(tmp_path):
    """review10 R10-5: a KIP-848 group in a log directory that holds __consumer_offsets and the metadata log
    but not the consumed topics' partitions (another broker's or log directory's, as in any cluster of
    several): its members' assignments name topics by id, and Kafka names them. kafkafs names them from
    the metadata log's TopicRecords and from the group's own offset commits (value v4: the topic id of the
    key's topic), so each partition is one row, as kafka-consumer-groups --describe shows it."""
    import struct

    from kafkafs.format.decoders.internal import metadata_frame
    from kafkafs.format.decoders.schema import message
    from kafkafs.fs.views.coordinators import Coordinators

    orders, payments, unknown = "XdKO0dhYQLO0GLv2hZXK8Q", "wHEuViKDQPeQ00iUYDSi9w", "4cjkEIp1TgqQ1zkDktZsoQ"
    commit_v4 = struct.pack(">h", 4) + message("OffsetCommitValue").write(
        {"offset": 7, "leaderEpoch": 0, "metadata": "", "commitTimestamp": 1, "topicId": payments}, 4)
    member = {"instanceId": None, "rackId": None, "clientId": "cli", "clientHost": "/h",
              "subscribedTopicNames": ["orders", "payments"], "subscribedTopicRegex": None, "rebalanceTimeoutMs": 1,
              "serverAssignor": "uniform"}
    rows = [
        (group_key(3, groupId="kg"), group_value(3, 0, epoch=5)),
        (group_key(5, groupId="kg", memberId="m"), group_value(5, 0, **member)),
        (group_key(6, groupId="kg"), group_value(6, 0, assignmentEpoch=5)),
        (group_key(8, groupId="kg", memberId="m"), group_value(8, 0, memberEpoch=5, previousMemberEpoch=4, state=0,
                                                                assignedPartitions=[
                                                                    {"topicId": orders, "partitions": [1, 0]},
                                                                    {"topicId": payments, "partitions": [0]},
                                                                    {"topicId": unknown, "partitions": [0]}],
                                                                partitionsPendingRevocation=[])),
        (commit_key("kg", "orders", 0), commit_value(10)),  # v3: no topic id
        (commit_key("kg", "payments", 0), commit_v4),
    ]
    with _logdir(tmp_path) as logdir:
        logdir.create_partition("__consumer_offsets", 1).append_records([(1, k, v, ()) for k, v in rows])
        meta = logdir.create_partition("__cluster_metadata", 0)
        meta.append_records([(1, None, metadata_frame("TOPIC_RECORD", 0, {"name": name, "topicId": tid}), ())
                             for name, tid in (("orders", orders), ("gone", unknown))])
        meta.append_records([(1, None, metadata_frame("REMOVE_TOPIC_RECORD", 0, {"topicId": unknown}), ())])
    expected = [{"topic": unknown, "partitions": [0]},  # removed from the metadata, named by nothing: its id
                {"topic": "orders", "partitions": [0, 1]}, {"topic": "payments", "partitions": [0]}]
    with LogDir(tmp_path / "logs") as logdir:
        kg = read_groups(logdir)["kg"]
        assert kg["members"][0]["assignment"] == expected
        assert orjson.loads(Coordinators(logdir).group_json("kg"))["members"][0]["assignment"] == expected
    assert [(o["topic"], o["partition"], o["offset"], o["lag"]) for o in kg["offsets"]] == [
        ("orders", 0, 10, None), ("payments", 0, 7, None)]


def test_strings_that_are_not_utf8_read_as_java_reads_them(tmp_path):
    """review14 R14-3: a commit whose metadata (or whose group's name) is not UTF-8 is read as the
    coordinator reads it (Java's new String(bytes, UTF_8): each malformed sequence one U+FFFD), in
    groups and in the JSON view; it was skipped there (the group gone, the value left as $base64)."""
    import struct

    from kafkafs.format.decoders import decoder_for
    from kafkafs.format.jsonview import render_batch_jsonl
    from kafkafs.storage.log import Log

    def raw(s: bytes) -> bytes:
        return struct.pack(">h", len(s)) + s

    value = struct.pack(">hqi", 3, 5, -1) + raw(b"ab\xff\xed\xae\x55") + struct.pack(">q", 1_700_000_000_000)
    key = struct.pack(">h", 1) + raw(b"g\xe0\xa0") + raw(b"orders") + struct.pack(">i", 0)
    with _logdir(tmp_path) as logdir:
        logdir.create_partition("__consumer_offsets", 0).append_records([(1, key, value, ())])
    with LogDir(tmp_path / "logs") as logdir:
        groups = read_groups(logdir)
    # Java: ED AE 55 is one U+FFFD then "U" (Python's errors="replace" makes two); E0 A0 at the end is one
    assert list(groups) == ["g\ufffd"]
    assert groups["g\ufffd"]["offsets"][0]["metadata"] == "ab\ufffd\ufffdU"
    log = Log.open(tmp_path / "logs" / "__consumer_offsets-0")
    try:
        line = orjson.loads(render_batch_jsonl("__consumer_offsets", 0, next(iter(log.read())),
                                               decoder=decoder_for("__consumer_offsets", None)))
    finally:
        log.close()
    assert line["key"] == {"type": 1, "data": {"group": "g\ufffd", "topic": "orders", "partition": 0}}
    assert line["value"] == {"version": 3, "data": {"offset": 5, "leaderEpoch": -1, "metadata": "ab\ufffd\ufffdU",
                                                     "commitTimestamp": 1_700_000_000_000}}
