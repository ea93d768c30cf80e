"""Issue 21 on a real broker of the newest release: a KIP-848 consumer group (the console consumer with
``group.protocol=consumer``), a classic group, a share group (the console share consumer), transactions
v2 (the producer performance tool with a transactional id), all by Kafka's own Java clients. Every
record of every internal topic then decodes in kafkafs's JSON view (no ``$base64`` left) and ``dump``
with the matching decoder flag prints what the real ``kafka-dump-log`` prints, line for line; and a
log directory whose magic 0/1 messages kafkafs compacted into v2 batches loads in the broker, which
serves every record kept."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.broker.harness import kafkafs

pytestmark = pytest.mark.broker

DECODERS = {
    "__consumer_offsets": "--offsets-decoder",
    "__transaction_state": "--transaction-log-decoder",
    "__share_group_state": "--share-group-state-decoder",
    "__cluster_metadata": "--cluster-metadata-decoder",
}


def _run(kafka, main, *args, input=None):
    done = kafka.run_class(main, *args, input=input, timeout=180)
    assert done.returncode == 0, f"{main}: {done.stderr[-2000:]}"
    return done


def _together(*calls):
    """Runs the calls (each a function of no argument) at once, four at most, on threads, and returns their
    results in order (the first exception is raised): Kafka's tools are JVMs that mostly wait on their
    start and on the broker, so independent ones run side by side."""
    with ThreadPoolExecutor(min(len(calls), 4)) as pool:
        futures = [pool.submit(call) for call in calls]
        return [f.result() for f in futures]


def _clients(kafka, broker) -> None:
    bs = broker.bootstrap
    broker.create_topic("orders", partitions=2)

    def share_version() -> None:
        # share groups need the share.version feature (finalized by default in newer releases)
        features = _run(kafka, "org.apache.kafka.tools.FeatureCommand", "--bootstrap-server", bs, "describe").stdout
        level = re.search(r"Feature: share\.version\s.*FinalizedVersionLevel: (\d+)", features)
        if level is None or int(level.group(1)) < 1:
            _run(kafka, "org.apache.kafka.tools.FeatureCommand", "--bootstrap-server", bs, "upgrade", "--feature",
                 "share.version=1")

    def share_consumer() -> None:
        _run(kafka, "org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", bs, "--alter", "--entity-type",
             "groups", "--entity-name", "sg", "--add-config", "share.auto.offset.reset=earliest")
        _run(kafka, "org.apache.kafka.tools.consumer.ConsoleShareConsumer", "--bootstrap-server", bs, "--topic",
             "orders", "--group", "sg", "--max-messages", "30", "--timeout-ms", "60000")

    def consumer(group: str, *extra: str):
        return lambda: _run(kafka, "org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", bs,
                            "--topic", "orders", "--group", group, "--from-beginning", "--max-messages", "40",
                            "--timeout-ms", "60000", *extra)

    # the producers (and the feature), then the three groups' consumers once the 230 records are in
    _together(
        share_version,
        lambda: _run(kafka, "org.apache.kafka.tools.ProducerPerformance", "--topic", "orders", "--num-records",
                     "200", "--record-size", "40", "--throughput", "-1", "--producer-props",
                     f"bootstrap.servers={bs}", "--transactional-id", "tx-one", "--transaction-duration-ms", "50"),
        lambda: _run(kafka, "org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", bs, "--topic", "orders",
                     "--property", "parse.key=true", "--property", "key.separator=:",
                     input="".join(f"k{i}:v{i}\n" for i in range(30)).encode()),
    )
    _together(
        consumer("classic-g"),
        consumer("g848", "--consumer-property", "group.protocol=consumer"),
        share_consumer,
    )


def _dumps_equal(kafka, segments, flag: str, extra: tuple[str, ...]) -> None:
    ours = kafkafs("dump", "--files", ",".join(map(str, segments)), flag, *extra)
    theirs = kafka.dump_log(*segments, flag, *extra)
    assert theirs.returncode == 0, theirs.stderr
    assert ours.stdout.splitlines() == theirs.stdout.splitlines(), (flag, extra)


def _consume(logdir, topic: str) -> str:
    proc = kafkafs("consume", logdir, topic, "--no-interleave")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_every_internal_record_decodes_as_kafka_dump_log_prints_it(kafka, broker):
    if kafka.major < 4:
        pytest.skip("share groups, KIP-848 groups and transactions v2 are Kafka 4's")
    _clients(kafka, broker)
    broker.stop()  # a still log directory: the metadata log grows while the broker runs
    logdir = broker.log_dir
    # each topic whole: one consume, and all its segments in one kafka-dump-log per flag (a JVM start
    # per partition cost a second each: __share_group_state has 50 partitions); those of the four
    # topics run side by side
    segments = {}
    for topic in DECODERS:
        partitions = sorted(p.name for p in logdir.iterdir() if p.name.startswith(topic + "-"))
        assert partitions, topic
        segments[topic] = [s for name in partitions for s in sorted((logdir / name).glob("*.log"))]
    topics = [*DECODERS, "orders"]
    consumed = dict(zip(topics, _together(*((lambda t=topic: _consume(logdir, t)) for topic in topics)), strict=True))
    _together(*(
        (lambda t=topic, e=extra: _dumps_equal(kafka, segments[t], DECODERS[t], e))
        for topic in DECODERS for extra in ((), ("--skip-record-metadata",))))
    seen_types: dict[str, set] = {}
    for topic in DECODERS:
        lines = [json.loads(line) for line in consumed[topic].splitlines()]
        assert "$base64" not in consumed[topic], [x for x in lines if "$base64" in json.dumps(x)][:3]
        for x in lines:
            if "control" not in x and isinstance(x["key"], dict):
                seen_types.setdefault(topic, set()).add(x["key"]["type"])
    # what the clients wrote: commits and classic group metadata, KIP-848 records (3-8), share group
    # records (10-15), share-partition state (0, 1), and transactions v2 values (clientTransactionVersion)
    assert {1, 2, 3, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15} <= seen_types["__consumer_offsets"]
    assert seen_types["__share_group_state"] >= {0}
    assert '"clientTransactionVersion":2' in consumed["__transaction_state"]
    assert '"key":{"version":0,"type":1},"value":{"version":0,"coordinatorEpoch":' in consumed["orders"]


def test_legacy_messages_compacted_into_v2_load_in_the_broker(kafka, broker):
    from kafkafs.format.compression import Codec
    from tests.format.test_legacy import broker_like, message

    broker.create_topic("legacy", partitions=1, configs={"cleanup.policy": "compact"})
    broker.stop()
    part = broker.partition_dir("legacy-0")
    for f in part.glob("0000*"):
        f.unlink()
    ts = 1_790_000_000_000
    (part / "00000000000000000000.log").write_bytes(
        message(0, 1, 0, ts, b"a", b"1") + message(1, 1, 0, ts + 1, b"b", b"1")
        + broker_like(1, Codec.GZIP, [(ts + 2, b"a", b"2"), (ts + 3, b"c", b"1"), (ts + 4, b"d", None)], base_offset=2)
        + message(5, 0, 0, 0, b"b", b"2"))
    (part / "00000000000000000006.log").write_bytes(message(6, 1, 0, ts + 6, b"z", b"z"))
    assert kafkafs("recover", broker.log_dir).returncode in (0, 1)
    done = kafkafs("clean", broker.log_dir)
    assert done.returncode == 0, done.stderr
    first = (part / "00000000000000000000.log").read_bytes()
    assert first[16] == 2  # the cleaned segment holds v2 batches (Kafka 4: KAFKA-13093)
    broker.start()
    broker.assert_no_recovery("legacy-0")
    records = broker.consume_all("legacy")
    assert [(r.offset, r.key, r.value, r.timestamp) for r in records] == [
        (2, b"a", b"2", ts + 2), (3, b"c", b"1", ts + 3), (4, b"d", None, ts + 4), (5, b"b", b"2", -1),
        (6, b"z", b"z", ts + 6)]
