"""A broker recovers what kafkafs did not (review12 R12-1; SPEC §2, §9).

``.kafka_cleanshutdown`` tells a broker that no log of the directory needs recovery (LogManager loads them
all without looking past their recovery points). On a directory a crash left (no marker, one partition
ending in the bytes of a torn write) ``kafkafs produce`` into ANOTHER partition wrote the marker: Kafka
4.4 then skipped the recovery, appended after the torn bytes, and its consumers stopped before them
for good. A writer now leaves the marker only where it is true of every log; ``kafkafs recover`` (which
recovers every partition) still leaves it, and the broker then loads with no recovery.
"""

from __future__ import annotations

import pytest

from .harness import Broker, file_digests, kafkafs

MARKER = ".kafka_cleanshutdown"
TORN = b"garbagegarbage"


def _crash(broker: Broker) -> bytes:
    """The broker's directory as a crash mid-write leaves it: no marker, a torn tail on mk-1."""
    (broker.log_dir / MARKER).unlink()
    segment = broker.partition_dir("mk-1") / "00000000000000000000.log"
    with open(segment, "ab") as f:
        f.write(TORN)
    return segment.read_bytes()


def _append_and_read_back(broker: Broker, first: int) -> list[bytes]:
    producer = broker.producer(linger_ms=0, acks="all")
    for i in range(first, first + 5):
        producer.send("mk", value=b"after %d" % i, partition=1).get(timeout=30)
    return [r.value for r in broker.consume_all("mk", 1, timeout=20)]


@pytest.mark.slow
def test_the_broker_recovers_a_partition_kafkafs_did_not(broker: Broker) -> None:
    broker.create_topic("mk", partitions=2)
    producer = broker.producer(linger_ms=0, acks="all")
    for i in range(10):
        producer.send("mk", value=b"before %d" % i, partition=i % 2).get(timeout=30)
    assert broker.stop() == 0
    assert (broker.log_dir / MARKER).exists()

    torn = _crash(broker)
    done = kafkafs("produce", broker.log_dir, "mk-0", input=b"hi\n")
    assert done.returncode == 0, done.stderr
    marked = (broker.log_dir / MARKER).exists()
    assert (broker.partition_dir("mk-1") / "00000000000000000000.log").read_bytes() == torn

    broker.start()
    assert broker.recovery_lines("mk-1"), broker.log_report(broker.loader_lines("mk-1"), "mk-1 was not recovered")
    broker.assert_log_line(r"Recovering \d+ logs from \S+ since no clean shutdown file was found")
    values = _append_and_read_back(broker, 0)  # stuck before the torn bytes when the broker skipped recovery
    assert values == [b"before %d" % i for i in range(1, 10, 2)] + [b"after %d" % i for i in range(5)]
    assert broker.stop() == 0
    assert not marked  # kafkafs recovered mk-0 only

    # kafkafs recover recovers every partition: its marker is true, and the broker loads with no recovery
    _crash(broker)
    done = kafkafs("recover", broker.log_dir)
    assert done.returncode == 1, done.stdout + done.stderr  # it cut the torn tail
    assert "clean shutdown marked" in done.stdout.splitlines()[-1], done.stdout
    broker.start()
    broker.assert_log_line(r"Skipping recovery of \d+ logs from \S+ since clean shutdown file was found")
    broker.assert_no_recovery("mk-1")
    broker.assert_no_log_lines(r"ERROR|Corrupt")
    values = _append_and_read_back(broker, 5)
    assert values[-10:] == [b"after %d" % i for i in range(10)]


def _entries(path) -> dict[str, str]:
    """An offset checkpoint's entries (``topic partition`` -> offset), after its version and count lines."""
    return dict(line.rsplit(" ", 1) for line in path.read_text().splitlines()[2:])


def test_kafkafs_writes_the_checkpoint_entries_a_broker_writes(broker: Broker) -> None:
    """The checkpoints a kafkafs writer leaves name the logs a broker's LogManager names: never the
    metadata log, which a broker's raft layer keeps apart (fix21's leftover: ``kafkafs recover`` added
    ``__cluster_metadata 0 N`` to recovery-point-offset-checkpoint; failed before, seen). The broker then
    loads with no recovery, and its own clean stop leaves the files as kafkafs left them."""
    broker.create_topic("cp", partitions=2)
    producer = broker.producer(linger_ms=0, acks="all")
    for i in range(6):
        producer.send("cp", value=b"kafka %d" % i, partition=i % 2).get(timeout=30)
    assert broker.stop() == 0
    files = ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint")
    kafkas = {name: _entries(broker.log_dir / name) for name in files}
    assert kafkas[files[0]]["cp 0"] == "3"

    done = kafkafs("recover", broker.log_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    done = kafkafs("produce", broker.log_dir, "cp-0", input=b"kafkafs 0\nkafkafs 1\n")
    assert done.returncode == 0, done.stderr
    ours = {name: _entries(broker.log_dir / name) for name in files}
    assert {name: set(entries) for name, entries in ours.items()} == {
        name: set(entries) for name, entries in kafkas.items()}, ours
    assert ours[files[0]]["cp 0"] == "5" and ours[files[0]]["cp 1"] == "3"

    broker.start()
    broker.assert_log_line(r"Skipping recovery of \d+ logs from \S+ since clean shutdown file was found")
    for p in (0, 1):
        broker.assert_no_recovery(f"cp-{p}")
    assert [r.value for r in broker.consume_all("cp", 0)][-2:] == [b"kafkafs 0", b"kafkafs 1"]
    assert broker.stop() == 0
    assert {name: _entries(broker.log_dir / name) for name in files} == ours


@pytest.mark.slow
def test_a_cleanly_stopped_brokers_epoch_survives_kafkafs_writers(broker: Broker) -> None:
    """R20-1 (review20): Kafka 4.4 writes its broker epoch into the marker and sends it to the controller
    when it registers again; kafkafs's writers rewrote it as -1, so the controller took the restart for
    an unclean one and elected every leader "using an unclean election" (failed before, seen: the
    marker was ``{"version":0,"brokerEpoch":-1}`` after ``recover``). Now recover, produce and clean
    put the marker back as they found it, and the broker restarts cleanly."""
    broker.create_topic("ep", partitions=2)
    producer = broker.producer(linger_ms=0, acks="all")
    for i in range(6):
        producer.send("ep", value=b"kafka %d" % i, partition=i % 2).get(timeout=30)
    assert broker.stop() == 0
    marker = (broker.log_dir / MARKER).read_bytes()
    assert b'"brokerEpoch":-1' not in marker, marker  # a KRaft broker's own epoch
    for command in (("recover", broker.log_dir), ("produce", broker.log_dir, "ep-0"), ("clean", broker.log_dir)):
        done = kafkafs(*command, input=b"kafkafs\n" if command[0] == "produce" else None)
        assert done.returncode == 0, done.stdout + done.stderr
        assert (broker.log_dir / MARKER).read_bytes() == marker, command[0]
    broker.start()
    broker.assert_log_line(r"Skipping recovery of \d+ logs from \S+ since clean shutdown file was found")
    for partition in ("ep-0", "ep-1"):  # (the metadata log is recovered at every start)
        broker.assert_no_recovery(partition)
    broker.assert_no_log_lines(r"unclean election|ERROR|Corrupt")
    assert [r.value for r in broker.consume_all("ep", 0, timeout=20)] == [b"kafka 0", b"kafka 2", b"kafka 4", b"kafkafs"]


@pytest.mark.slow
def test_recover_leaves_a_cleanly_stopped_brokers_directory_byte_for_byte(broker: Broker) -> None:
    """R20-2 (review20): on a directory a 4.4 broker stopped cleanly, twice on the same active segments
    (its index entries counted from each start, a time index entry at each close), with a consumer
    group's commits and producer snapshots, ``recover`` said "0 changed" but rewrote valid index files
    as a recovery builds them (and trimmed the metadata log's preallocated ones), deleted older producer
    snapshots, dropped leader-epoch entries at the log end and reordered the recovery-point checkpoint
    (failed before, seen). A broker's clean start rebuilds none of that; now recover checks and leaves
    every file as it was (its lock file aside, as any writer's)."""
    broker.create_topic("bb", partitions=2)
    producer = broker.producer(linger_ms=0, acks="all")
    consumer = broker.consumer("bb", group_id="bbg", enable_auto_commit=False)
    for run in range(2):
        for i in range(40):
            producer.send("bb", key=b"k%d" % (i % 5), value=b"run %d record %d " % (run, i) + b"x" * 200,
                          partition=i % 2).get(timeout=30)
        consumer.poll(timeout_ms=5000)
        consumer.commit()
        if run == 0:
            broker.restart()
            producer = broker.producer(linger_ms=0, acks="all")
            consumer = broker.consumer("bb", group_id="bbg", enable_auto_commit=False)
    assert broker.stop() == 0
    before = file_digests(broker.log_dir)
    done = kafkafs("recover", broker.log_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "recovered" in done.stdout and ", 0 changed;" in done.stdout, done.stdout
    after = file_digests(broker.log_dir)
    after.pop(".lock", None)
    changed = sorted(name for name in set(before) | set(after) if before.get(name) != after.get(name))
    assert changed == [], done.stdout
    broker.start()
    broker.assert_log_line(r"Skipping recovery of \d+ logs from \S+ since clean shutdown file was found")
    broker.assert_no_log_lines(r"unclean election|ERROR|Corrupt")
    assert len(broker.consume_all("bb", 0, timeout=20)) == 40
