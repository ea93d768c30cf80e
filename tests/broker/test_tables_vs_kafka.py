"""A topic as a table, judged by a real broker (issue 22, SPEC §9):

- ``table.jsonl`` of a compacted topic, computed by kafkafs before the broker's own LogCleaner ran,
  equals what that cleaner keeps (minus tombstones), and equals ``table.jsonl`` after it ran;
- ``kafkafs groups`` of the broker's log directory, read after the broker stopped, equals what
  ``kafka-consumer-groups --describe`` printed while it ran (committed offsets, log end offsets, lag,
  members and their assignments, state), for a classic group and a group of the new consumer
  protocol (KIP-848);
- a producer killed in the middle of a transaction leaves it open, and ``kafkafs transactions
  --hanging`` reports it once its timeout has passed (exit 1), not before (exit 0); one whose records
  carry hour-old CreateTimes is not hanging while its coordinator's timeout runs, as
  ``kafka-transactions find-hanging`` says (review10 R10-1).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import orjson
import pytest

from kafkafs.format.checkpoint import parse_offset_checkpoint

from .harness import kafkafs

COMPACTED = {
    "cleanup.policy": "compact",
    "internal.segment.bytes": 16384,
    "segment.ms": 1000,
    "delete.retention.ms": 86_400_000,
    "min.cleanable.dirty.ratio": 0.01,
    "min.compaction.lag.ms": 86_400_000,  # nothing cleanable until the test lowers it
}


def _offsets(jsonl: bytes) -> list[int]:
    return [orjson.loads(line)["offset"] for line in jsonl.splitlines()]


def _cleaned_to(broker, topic: str) -> int:
    path = broker.log_dir / "cleaner-offset-checkpoint"
    try:
        return parse_offset_checkpoint(path.read_bytes()).get((topic, 0), -1)
    except (OSError, ValueError):
        return -1


def test_table_equals_what_the_brokers_cleaner_keeps(make_broker, kafka, mounted, tmp_path):
    broker = make_broker({"log.cleaner.backoff.ms": 300})
    broker.create_topic("kv", configs=COMPACTED)
    producer = broker.producer(linger_ms=2, acks="all")
    for i in range(3000):  # 300 keys, tombstones, many segments
        key = b"k%d" % (i * 7 % 300)
        producer.send("kv", key=key, value=None if i % 11 == 0 else b"value %d" % i, partition=0)
    producer.flush()
    txn = broker.producer(transactional_id="kv-txn", enable_idempotence=True, acks="all", linger_ms=2)
    txn.init_transactions()
    for t in range(6):  # committed and aborted transactions over the same keys
        txn.begin_transaction()
        for j in range(20):
            txn.send("kv", key=b"k%d" % ((t * 20 + j) % 300), value=b"txn %d %d" % (t, j), partition=0)
        txn.flush()
        if t % 2:
            txn.abort_transaction()
        else:
            txn.commit_transaction()
    for i in range(400):
        producer.send("kv", key=b"fresh-%d" % i, value=b"v", partition=0)
    producer.flush()
    # past segment.ms the next append rolls: the active segment holds one record of a key of its own
    # (the cleaner never cleans the active segment, and a newer record there would not count for it)
    time.sleep(1.5)
    producer.send("kv", key=b"last", value=b"v", partition=0)
    producer.flush()
    before = tmp_path / "before"
    shutil.copytree(broker.log_dir, before, ignore=shutil.ignore_patterns(".lock"))
    m = mounted(before, "--cache-dir", str(tmp_path / "cache-before"))
    table_before = _offsets((m / "kv-0" / "table.jsonl").read_bytes())
    assert len(table_before) > 300

    active = max(int(p.stem) for p in broker.partition_dir("kv-0").glob("*.log"))
    kafka.tool("kafka-configs", "--bootstrap-server", broker.bootstrap, "--alter", "--entity-type", "topics",
               "--entity-name", "kv", "--add-config", "min.compaction.lag.ms=0", check=True)
    deadline = time.monotonic() + 120
    while _cleaned_to(broker, "kv") < active:
        assert time.monotonic() < deadline, "the broker's cleaner did not clean kv-0 in time"
        time.sleep(0.5)
    kept = [r.offset for r in broker.consume_all("kv", 0) if r.value is not None]
    assert kept == table_before
    after = mounted(broker.log_dir, "--cache-dir", str(tmp_path / "cache-after"))
    assert _offsets((after / "kv-0" / "table.jsonl").read_bytes()) == table_before


# ---------------------------------------------------------------------------------------------- groups


def _describe(kafka, broker, group: str) -> dict[tuple[str, int], dict[str, str]]:
    """``kafka-consumer-groups --describe --group G``'s rows: (topic, partition) -> column -> cell."""
    out = kafka.tool("kafka-consumer-groups", "--bootstrap-server", broker.bootstrap, "--describe", "--group", group,
                     check=True).stdout
    rows = {}
    header = None
    for line in out.splitlines():
        cells = line.split()
        if not cells:
            continue
        if cells[0] == "GROUP":
            header = cells
            continue
        if header is not None and cells[0] == group and len(cells) == len(header):
            row = dict(zip(header, cells, strict=True))
            rows[(row["TOPIC"], int(row["PARTITION"]))] = row
    return rows


def _state(kafka, broker, group: str) -> dict[str, str]:
    out = kafka.tool("kafka-consumer-groups", "--bootstrap-server", broker.bootstrap, "--describe", "--group", group,
                     "--state", check=True).stdout
    lines = [line.split() for line in out.splitlines() if line.split()]
    header = next(cells for cells in lines if cells[0] == "GROUP")
    row = next(cells for cells in lines if cells[0] == group)
    # COORDINATOR (ID) spans two cells ("host:port", "(1)")
    values = row[:1] + [" ".join(row[1:3])] + row[3:]
    return dict(zip(["GROUP", "COORDINATOR", *header[3:]], values, strict=False))


def _wait_committed(kafka, broker, group: str, want: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        rows = _describe(kafka, broker, group)
        done = sum(int(r["CURRENT-OFFSET"]) for r in rows.values() if r["CURRENT-OFFSET"] != "-")
        if done >= want and all(r["CONSUMER-ID"] != "-" for r in rows.values()):
            return
        assert time.monotonic() < deadline, f"group {group}: {rows}"
        time.sleep(0.5)


def _console_consumer(kafka, broker, group: str, topic: str) -> subprocess.Popen:
    """A consumer of the new protocol (KIP-848): Kafka's console consumer, left running."""
    cmd = kafka.java_command(kafka.tool_class("kafka-console-consumer"), "--bootstrap-server", broker.bootstrap,
                             "--topic", topic, "--group", group, "--from-beginning",
                             "--consumer-property", "group.protocol=consumer",
                             "--consumer-property", "auto.commit.interval.ms=300",
                             "--consumer-property", "client.id=kip848-client")
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


_CLASSIC_CONSUMER = """
import sys, time
from kafka import KafkaConsumer
c = KafkaConsumer("orders", bootstrap_servers=sys.argv[1], group_id="classic", client_id="classic-client",
                  enable_auto_commit=False, auto_offset_reset="earliest")
seen = 0
while seen < 60:
    seen += sum(len(r) for r in c.poll(timeout_ms=500, max_records=20).values())
    c.commit()
print(seen, flush=True)
time.sleep(600)
"""


def test_groups_equal_kafka_consumer_groups_describe(make_broker, kafka):
    broker = make_broker()
    broker.create_topic("orders", partitions=3)
    producer = broker.producer(linger_ms=2)
    for i in range(90):
        producer.send("orders", key=b"k%d" % i, value=b"v%d" % i, partition=i % 3)
    producer.flush()
    # both consumers are killed before the broker stops: no LeaveGroup, their members stay in the log
    classic = subprocess.Popen([sys.executable, "-c", _CLASSIC_CONSUMER, broker.bootstrap], stdout=subprocess.PIPE)
    newer = _console_consumer(kafka, broker, "kip848", "orders")
    try:
        seen = int(classic.stdout.readline())
        _wait_committed(kafka, broker, "classic", seen)
        _wait_committed(kafka, broker, "kip848", 90)
        described = {g: (_describe(kafka, broker, g), _state(kafka, broker, g)) for g in ("classic", "kip848")}
    finally:
        for proc in (classic, newer):
            proc.kill()
            proc.wait(10)
    broker.stop()
    ours = json.loads(kafkafs("groups", broker.log_dir, "--json").stdout)
    by_group = {g["group"]: g for g in ours}
    for group, (rows, state) in described.items():
        mine = by_group[group]
        assert mine["state"] == state["STATE"], (group, mine["state"], state)
        assert len(mine["members"]) == int(state["#MEMBERS"])
        assert (mine["protocol"] or "") == (state["ASSIGNMENT-STRATEGY"] if state["ASSIGNMENT-STRATEGY"] != "-" else "")
        owners = {(a["topic"], p): m for m in mine["members"] for a in m["assignment"] for p in a["partitions"]}
        offsets = {(o["topic"], o["partition"]): o for o in mine["offsets"]}
        assert set(rows) == set(offsets) | set(owners), group
        for tp, row in rows.items():
            o, m = offsets.get(tp, {}), owners.get(tp, {})
            assert str(o.get("offset", "-")) == row["CURRENT-OFFSET"], (group, tp)
            assert str(o.get("logEndOffset", "-")) == row["LOG-END-OFFSET"], (group, tp)
            assert str(o.get("lag", "-")) == row["LAG"], (group, tp)
            assert m.get("memberId", "-") == row["CONSUMER-ID"], (group, tp)
            assert m.get("clientHost", "-") == row["HOST"], (group, tp)
            assert m.get("clientId", "-") == row["CLIENT-ID"], (group, tp)



def _describe_all(kafka, broker) -> dict[str, dict[tuple[str, int], str]]:
    """``kafka-consumer-groups --describe --all-groups``: group -> (topic, partition) -> CURRENT-OFFSET."""
    out = kafka.tool("kafka-consumer-groups", "--bootstrap-server", broker.bootstrap, "--describe", "--all-groups",
                     check=True).stdout
    rows: dict[str, dict[tuple[str, int], str]] = {}
    header = None
    for line in out.splitlines():
        cells = line.split()
        if cells and cells[0] == "GROUP":
            header = cells
        elif header is not None and len(cells) == len(header):
            row = dict(zip(header, cells, strict=True))
            rows.setdefault(row["GROUP"], {})[(row["TOPIC"], int(row["PARTITION"]))] = row["CURRENT-OFFSET"]
    return rows


@pytest.mark.slow  # a broker run and a mount (20 s): the storage test covers the rule in the default suite
def test_transactional_and_plain_offset_commits_land_as_kafka_orders_them(make_broker, kafka, mounted, tmp_path):
    """review14 R14-1: a transaction's offset commit lands at its COMMIT marker only when its record is
    later in ``__consumer_offsets`` than the committed offset's (a plain commit written after it stays),
    an ABORT or an offset deletion in between drops it; ``groups/<g>.json`` and ``kafkafs groups`` show
    what ``kafka-consumer-groups --describe`` shows."""
    from kafka import TopicPartition
    from kafka.structs import OffsetAndMetadata

    broker = make_broker()
    broker.create_topic("t", partitions=1)
    broker.create_topic("out", partitions=1)
    producer = broker.producer(acks="all")
    for i in range(60):
        producer.send("t", value=b"v%d" % i)
    producer.flush()
    tp = TopicPartition("t", 0)
    txns = []
    for n in range(2):
        txn = broker.producer(transactional_id=f"order-{n}", enable_idempotence=True, acks="all")
        txn.init_transactions()
        txns.append(txn)
    first, second = txns

    def plain(group, offset):
        broker.consumer(group_id=group, enable_auto_commit=False).commit({tp: OffsetAndMetadata(offset, "plain", -1)})

    def begin(txn, group, offset):
        txn.begin_transaction()
        txn.send("out", value=group.encode())
        txn.send_offsets_to_transaction({tp: OffsetAndMetadata(offset, "txn", -1)}, group)
        txn.flush()

    begin(first, "txn-then-plain", 40)
    plain("txn-then-plain", 45)
    first.commit_transaction()  # 45: the plain commit's record is the later one
    plain("plain-then-txn", 45)
    begin(first, "plain-then-txn", 40)
    first.commit_transaction()  # 40
    plain("aborted", 30)
    begin(first, "aborted", 40)
    first.abort_transaction()  # 30
    plain("deleted", 30)
    begin(first, "deleted", 40)
    kafka.tool("kafka-consumer-groups", "--bootstrap-server", broker.bootstrap, "--delete-offsets",
               "--group", "deleted", "--topic", "t:0", check=True)
    first.commit_transaction()  # no offset: the deletion dropped the pending one too
    begin(first, "two", 10)
    begin(second, "two", 20)
    second.commit_transaction()
    first.commit_transaction()  # 20: the first transaction's record is the older one
    described = _describe_all(kafka, broker)
    groups = ["txn-then-plain", "plain-then-txn", "aborted", "deleted", "two"]
    assert {g: described.get(g, {}) for g in groups} == {
        "txn-then-plain": {("t", 0): "45"}, "plain-then-txn": {("t", 0): "40"}, "aborted": {("t", 0): "30"},
        "deleted": {}, "two": {("t", 0): "20"}}, described  # Kafka's own answer, as the test expects it
    broker.stop()
    cli = {g["group"]: g for g in json.loads(kafkafs("groups", broker.log_dir, "--json").stdout)}
    m = mounted(broker.log_dir, "--cache-dir", str(tmp_path / "cache"))
    for group in groups:
        mine = json.loads((m / "groups" / f"{group}.json").read_bytes())
        assert mine == cli[group], group
        assert {(o["topic"], o["partition"]): str(o["offset"]) for o in mine["offsets"]} == described.get(group, {}), \
            (group, mine["offsets"])


# ---------------------------------------------------------------------------------------------- hanging

_KILLED_PRODUCER = """
import sys, time
from kafka import KafkaProducer
p = KafkaProducer(bootstrap_servers=sys.argv[1], transactional_id=sys.argv[3], enable_idempotence=True, acks="all",
                  transaction_timeout_ms=int(sys.argv[2]))
p.init_transactions()
p.begin_transaction()
stamp = int(time.time() * 1000) - int(sys.argv[4])  # the records' CreateTimes, that many ms old
for i in range(5):
    p.send("tx", key=b"k%d" % i, value=b"open %d" % i, partition=0, timestamp_ms=stamp + i)
p.flush()
print("sent", flush=True)
time.sleep(600)
"""


def _killed_mid_transaction(broker, transactional_id: str, timeout_ms: int, age_ms: int) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_PRODUCER, broker.bootstrap, str(timeout_ms), transactional_id,
                             str(age_ms)], stdout=subprocess.PIPE, env=dict(os.environ))
    try:
        assert proc.stdout.readline().strip() == b"sent"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)


def test_a_producer_killed_mid_transaction_is_reported_hanging(make_broker, kafka, tmp_path):
    timeout_ms = 4000
    # the coordinator never aborts it while the broker runs (its timed-out check every 10 s by default):
    # the transaction stays open on disk however long the start and the stop take
    broker = make_broker({"transaction.abort.timed.out.transaction.cleanup.interval.ms": 3_600_000})
    broker.create_topic("tx")
    producer = broker.producer(linger_ms=2)
    producer.send("tx", key=b"before", value=b"committed", partition=0)
    producer.flush()
    _killed_mid_transaction(broker, "past", 600_000, 3_600_000)  # review10 R10-1: hour-old CreateTimes
    _killed_mid_transaction(broker, "doomed", timeout_ms, 0)
    started = time.time()
    found = kafka.tool("kafka-transactions", "--bootstrap-server", broker.bootstrap, "find-hanging", "--topic", "tx")
    assert found.stdout.splitlines()[1:] == [], found.stdout  # Kafka: none (its header row only)
    broker.stop()  # before the coordinator's timeout aborts it: the transaction stays open on disk
    early = kafkafs("transactions", broker.log_dir, "--hanging")
    if time.time() - started < timeout_ms / 1000 - 1:
        assert early.returncode == 0, early.stdout + early.stderr  # as find-hanging said
    time.sleep(max(0.0, started + timeout_ms / 1000 + 1 - time.time()))
    late = kafkafs("transactions", broker.log_dir, "--hanging", "--json")
    assert late.returncode == 1, late.stderr
    report = json.loads(late.stdout)
    ids = report["transactionalIds"]
    assert set(ids) == {"doomed"}  # --hanging: only the hanging one's id
    doomed = ids["doomed"]
    assert doomed["state"] == "Ongoing" and doomed["timeout"] == timeout_ms
    assert {"topic": "tx", "partitions": [0]} in doomed["partitions"]
    open_ = report["partitions"]["tx-0"]["open"]
    assert [t["producerId"] for t in open_] == [doomed["producerId"]] and open_[0]["hanging"]
    text = kafkafs("transactions", broker.log_dir, "--hanging")
    assert text.returncode == 1 and "doomed" in text.stdout and "tx-0" in text.stdout and "past" not in text.stdout
    every = json.loads(kafkafs("transactions", broker.log_dir, "--json").stdout)
    past = every["transactionalIds"]["past"]
    (mine,) = [t for t in every["partitions"]["tx-0"]["open"] if t["producerId"] == past["producerId"]]
    assert mine["hanging"] is False and mine["firstOffset"] == 1 and every["partitions"]["tx-0"]["lastStableOffset"] == 1
    assert 3_600_000 <= mine["ageMs"] < 3_600_000 + 600_000  # from its first record's timestamp
    # no coordinator record: transaction.max.timeout.ms from the first record's timestamp decides
    copy = tmp_path / "no-coordinator"
    shutil.copytree(broker.log_dir, copy, ignore=shutil.ignore_patterns("__transaction_state-*"))
    alone = json.loads(kafkafs("transactions", copy, "--json").stdout)["partitions"]["tx-0"]["open"]
    assert {t["producerId"]: t["hanging"] for t in alone} == {past["producerId"]: True, doomed["producerId"]: False}
    patient = kafkafs("transactions", copy, "--hanging", "--set", "transaction.max.timeout.ms=7200000")
    assert patient.returncode == 0 and patient.stdout == "no hanging transactions\n", patient.stdout + patient.stderr

