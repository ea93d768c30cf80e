"""Topic settings a broker stored, applied as the broker applies them (SPEC §2, §8, §9).

``internal.segment.bytes`` (Kafka 4's LogConfig: when set, the segment size in place of
``segment.bytes``, which Kafka 4 keeps at 1 MiB or more): the broker rolls a topic's segments by it;
kafkafs, given the same batches in the same order, rolls at the same offsets."""

from __future__ import annotations

import logging

import pytest

from .harness import kafkafs


def test_internal_segment_bytes_rolls_where_the_broker_rolls(broker, tmp_path, caplog):
    broker.create_topic("small", configs={"internal.segment.bytes": 3000})
    producer = broker.producer(linger_ms=0)
    for i in range(100):  # one batch each
        producer.send("small", key=b"k%d" % i, value=b"v" * (40 + i % 50)).get(timeout=30)
    broker.stop()
    theirs = sorted(int(p.name[:20]) for p in broker.partition_dir("small-0").glob("*.log"))
    assert len(theirs) > 3  # the broker rolled at 3,000 bytes, not at segment.bytes

    from kafkafs.format.batch import scan_batches
    from kafkafs.storage.logdir import LogDir

    batches = []
    for base in theirs:
        data = (broker.partition_dir("small-0") / f"{base:020d}.log").read_bytes()
        batches += [data[h.position:h.end] for h in scan_batches(data)]
    assert len(batches) == 100
    with LogDir(broker.log_dir, writable=True) as logdir:  # the topic's settings: its ConfigRecords
        assert logdir.settings.for_topic("small").segment_size == 3000
        log = logdir.create_partition("small", 1)
        for data in batches:
            log.append_batches(data)
        ours = [s.base_offset for s in log.segments]
        config = log.config
    assert ours == theirs
    # the same batches in ONE append (what one `produce` or one write to `append` cuts into batches): the
    # broker rolls between a producer's batches, so kafkafs does too (review19 R19-6: it wrote them all
    # into one segment, past the segment size)
    from kafkafs.storage.log import Log

    (tmp_path / "small-0").mkdir()
    together = Log.open(tmp_path / "small-0", config, writable=True)
    try:
        together.append_batches(b"".join(batches), client=True)
        assert [s.base_offset for s in together.segments] == theirs
        assert all(s.size <= 3000 for s in together.segments)
    finally:
        together.close()
    # partition 1 is not in the broker's metadata: said (review7 R11); kafkafs's warnings only (kafka-python's
    # client warns of its own event loop's slow tasks on a loaded machine)
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("kafkafs")]
    assert warned == [
        f"small-1: the metadata log {broker.log_dir / '__cluster_metadata-0'} has no partition 1 of topic small: a "
        "Kafka broker of this directory will not serve it (it sets the folder aside as a stray at its start)"]
    shown = kafkafs("consume", broker.log_dir, "small-1")
    assert shown.returncode == 0 and len(shown.stdout.splitlines()) == 100, shown.stderr


@pytest.mark.slow  # three broker runs (17 s): default suite under 15 min
def test_a_preallocated_active_segment_is_what_the_broker_leaves(make_broker, tmp_path):
    """review7 R7: with log.preallocate=true the broker creates its active .log at the segment size,
    zero-filled, and trims it only at a roll or a clean stop. A copy of the running broker's directory
    and the directory it leaves when killed: verify notes the zeros (exit 0; it said damage, exit 1),
    recover trims them (exit 0), and the broker then loads the partition with no recovery and serves
    every record."""
    import shutil

    broker = make_broker({"log.preallocate": "true", "log.flush.interval.messages": "1"})
    broker.create_topic("pre", configs={"segment.bytes": 1048576})
    producer = broker.producer()
    for i in range(50):
        producer.send("pre", key=b"k%d" % i, value=b"pre%d" % i, partition=0)
    producer.flush()
    segment = broker.partition_dir("pre-0") / "00000000000000000000.log"
    assert segment.stat().st_size == 1048576  # preallocated
    live = tmp_path / "live"
    shutil.copytree(broker.log_dir, live)
    broker.kill()
    for logdir in (live, broker.log_dir):
        verified = kafkafs("verify", logdir)
        assert verified.returncode == 0, verified.stdout
        assert "zero bytes after the last batch, as a broker that preallocates" in verified.stdout
        done = kafkafs("recover", logdir)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "preallocated zero bytes" in done.stdout
        assert (logdir / "pre-0" / segment.name).stat().st_size < 4096
    broker.start()
    broker.assert_no_recovery("pre-0")
    assert [r.value for r in broker.consume_all("pre")] == [b"pre%d" % i for i in range(50)]


def test_a_partition_kafkafs_creates_takes_the_topic_id_the_broker_recorded(broker, tmp_path):
    """review7 R11: a partition folder kafkafs creates for a topic the broker's metadata names (every
    folder of it gone, or the first one kafkafs writes) got a random topic id; the broker then set it
    aside as a stray ("the topicId ... does not exist in the metadata image") and served none of its
    records. Now it carries the recorded id and the broker serves what kafkafs appended.

    review12 R12-7, R12-8: verify names the folders the broker then sets aside as strays (plain-2, which
    the metadata lacks; plain-0, a copy from another cluster: a topic id not the topic's), exit 1, and
    calls a topic id file the broker's reader refuses damage (the broker does not start with it);
    recover rewrites that one with the recorded id. Before, verify said OK (exit 0) of all three."""
    import shutil

    broker.create_topic("plain", partitions=2)
    broker.stop()
    recorded = (broker.partition_dir("plain-0") / "partition.metadata").read_text()
    shutil.rmtree(broker.partition_dir("plain-0"))
    shutil.rmtree(broker.partition_dir("plain-1"))
    done = kafkafs("produce", broker.log_dir, "plain-1", input=b"written by kafkafs\n")
    assert done.returncode == 0 and "WARNING" not in done.stderr, done.stderr
    assert (broker.partition_dir("plain-1") / "partition.metadata").read_text() == recorded
    done = kafkafs("produce", broker.log_dir, "plain-2", input=b"nowhere\n")  # a partition the metadata lacks
    assert done.returncode == 0 and "has no partition 2 of topic plain" in done.stderr, done.stderr

    shutil.copytree(broker.partition_dir("plain-1"), broker.partition_dir("plain-0"))
    (broker.partition_dir("plain-0") / "partition.metadata").write_text("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ")
    (broker.partition_dir("plain-1") / "partition.metadata").write_text("version: 0\ntopic_id: notanid")
    done = kafkafs("verify", broker.log_dir)
    assert done.returncode == 1, done.stdout + done.stderr
    named, folder = set(), None
    for line in done.stdout.splitlines():
        folder = folder if line.startswith(" ") else line.split(":")[0]
        if line.startswith("  stray: "):
            named.add(folder)
    assert named == {"plain-0", "plain-2"}, done.stdout
    assert "plain-1: " in done.stdout and "'notanid' is not a UUID" in done.stdout, done.stdout
    done = kafkafs("recover", broker.log_dir)
    assert done.returncode == 1 and "plain-1/partition.metadata: topic id 'notanid'" in done.stdout, done.stdout
    assert (broker.partition_dir("plain-1") / "partition.metadata").read_text() == recorded

    broker.start()  # it would not start with plain-1's file as it was
    assert [r.value for r in broker.consume_all("plain", 1)] == [b"written by kafkafs"]
    broker.assert_no_log_lines(r"^(?=.*stray).*plain-1")
    set_aside = {p.name.rsplit(".", 1)[0] for p in broker.log_dir.iterdir() if p.name.endswith("-stray")}
    assert set_aside == named, broker.log_report(broker.log_lines("stray"), "the broker's stray")



def _shown_within(path, settings: dict, since: float, seconds: float = 2.5) -> float:
    """Seconds from ``since`` until ``path`` (a partition.json) shows ``settings`` in its config; fails
    after ``seconds``."""
    import json
    import time

    while True:
        config = json.loads(path.read_text())["config"]
        if all(config[k] == v for k, v in settings.items()):
            return time.monotonic() - since
        assert time.monotonic() < since + seconds, (path.parent.name, {k: config[k] for k in settings})
        time.sleep(0.05)


def test_a_read_only_mount_follows_the_settings_the_broker_records(broker, kafka, mounted):
    """review13 R13-4: a read-only mount of a running broker's directory kept the topic settings of
    its first reading of __cluster_metadata until a remount. AlterConfigs on the running broker, a topic
    created afterwards with its own settings and `kafka-configs --alter --delete-config` (a null
    ConfigRecord: back to Kafka's default) show in partition.json within a couple of seconds."""
    import time

    from kafka.admin import ConfigResource, ConfigResourceType

    broker.create_topic("first", configs={"retention.ms": 3600000})
    m = mounted(broker.log_dir)
    first, second = m / "first-0" / "partition.json", m / "second-0" / "partition.json"
    assert _shown_within(first, {"retention.ms": 3600000, "cleanup.policy": "delete"}, time.monotonic()) < 0.5
    admin = broker.admin()
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "first",
                                        configs={"cleanup.policy": "compact", "max.message.bytes": "5000"})])
    delays = [_shown_within(first, {"cleanup.policy": "compact", "max.message.bytes": 5000}, time.monotonic())]
    broker.create_topic("second", configs={"max.message.bytes": 7000, "segment.ms": 123456})
    delays.append(_shown_within(second, {"max.message.bytes": 7000, "segment.ms": 123456}, time.monotonic()))
    kafka.tool("kafka-configs", "--bootstrap-server", broker.bootstrap, "--alter", "--entity-type", "topics",
               "--entity-name", "first", "--delete-config", "retention.ms", check=True)
    week = 7 * 24 * 3600 * 1000
    delays.append(_shown_within(first, {"retention.ms": week, "cleanup.policy": "compact"}, time.monotonic()))
    print(f"settings shown after {', '.join(f'{d:.3f}' for d in delays)} s")
