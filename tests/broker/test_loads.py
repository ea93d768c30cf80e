"""The broker loads what kafkafs writes (SPEC §1, §9).

A broker creates the topics and takes a few records, then stops. kafkafs appends to its partitions
offline: ``produce`` with several codecs and segment rolls, a higher leader epoch, idempotent batches
through the engine, a ``--rw`` mount's ``append`` file; then ``kafkafs clean`` runs retention and
compaction with the settings the broker stored for the topics. The broker starts again and:

- loads every partition with no recovery and no index rebuild (none of LogLoader's recovery lines,
  ``unclean log dirs = []``);
- serves over the wire exactly the records kafkafs shows;
- after its own clean stop leaves the checkpoints and producer snapshots as kafkafs had left them (the
  broker's own rules), and every partition's topic id unchanged.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from .harness import Broker, kafkafs
from .livecheck import data_lines, expected_line
from .workloads import produce_mix

# topic -> (partitions, settings the broker stores; kafkafs reads them from __cluster_metadata)
TOPICS: dict[str, tuple[int, dict[str, str | int]]] = {
    "kw": (2, {"compression.type": "producer"}),
    "kc": (1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": 0}),
    "kr": (1, {"retention.bytes": 1000}),
}
SEGMENT = "segment.bytes=16384"  # kafkafs's rolls (Kafka 4 keeps 1 MiB as its own topic minimum)


def _lines(n: int, start: int = 0, keyed: bool = True, plain: bool = True) -> bytes:
    out = []
    for i in range(start, start + n):
        if i % 3 == 0 and plain:
            out.append(f"plain line {i}")
        else:
            record = {"key": f"k{i % 17}" if keyed else None, "value": {"n": i, "text": f"é✓ {i} " * 12},
                      "headers": [{"key": "h", "value": str(i)}] if i % 4 == 0 else []}
            out.append(json.dumps(record))
    return ("\n".join(out) + "\n").encode()


def _idempotent_batches(pid: int, epoch: int, first_seq: int, count: int, per_batch: int) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    out = bytearray()
    seq = first_seq
    for start in range(0, count, per_batch):
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=4, is_transactional=False, producer_id=pid,
                                            producer_epoch=epoch, base_sequence=seq, batch_size=1 << 20)
        for i in range(min(per_batch, count - start)):
            builder.append(i, timestamp=int(time.time() * 1000), key=b"idem-%d" % (start + i),
                           value=b"idempotent %d" % (start + i), headers=[])
        out += builder.build()
        seq += min(per_batch, count - start)
    return bytes(out)


def _snapshots(broker: Broker) -> dict[str, list[str]]:
    return {t + "-" + str(p): sorted(x.name for x in broker.partition_dir(f"{t}-{p}").glob("*.snapshot"))
            for t, (n, _) in TOPICS.items() for p in range(n)}


def _checkpoint(path: Path) -> dict[str, str]:
    """A checkpoint file's entries for our topics: 'topic partition' -> offset."""
    lines = path.read_text().splitlines()[2:]
    return {" ".join(ln.split()[:2]): ln.split()[2] for ln in lines if ln.split()[0] in TOPICS}


def test_the_broker_loads_what_kafkafs_wrote(make_broker, mounted, tmp_path):
    broker = make_broker({"log.cleaner.enable": "false"})  # the broker's cleaner stays out of the comparison
    for topic, (n, configs) in TOPICS.items():
        broker.create_topic(topic, partitions=n, configs=configs)
        produce_mix(broker, topic, 40 * n, partitions=n, codec="gzip", idempotent=True, keyed=topic == "kc")
    assert broker.stop() == 0
    logs = broker.log_dir
    topic_ids = {p.name: p.joinpath("partition.metadata").read_bytes() for p in logs.iterdir()
                 if p.is_dir() and p.name.split("-")[0] in TOPICS}

    # kafkafs writes, offline
    # kw-1 at leader epoch 1: the epoch the controller gave the partition at the broker's controlled
    # shutdown (a higher one than the controller's makes the restarted broker truncate the conflicting
    # leader-epoch-checkpoint entries, with a WARN of LeaderEpochFileCache)
    for name, codec, extra in (("kw-0", "lz4", ()), ("kw-1", "zstd", ("--leader-epoch", "1")),
                               ("kc-0", "snappy", ()), ("kr-0", "gzip", ())):
        done = kafkafs("produce", logs, name, "--set", SEGMENT, "--set", f"compression.type={codec}", *extra,
                       input=_lines(1500, keyed=name != "kr-0", plain=name != "kc-0"))
        assert done.returncode == 0, done.stderr
    from kafkafs.storage.config import Settings
    from kafkafs.storage.logdir import LogDir

    with LogDir(logs, Settings({"segment.bytes": 16384}), writable=True) as d:
        d.log("kw-1").append_batches(_idempotent_batches(4242, 0, 0, 300, 30))
    m = mounted(logs, "--rw", "--set", SEGMENT)
    with open(m / "kw-0" / "append", "a") as f:
        for i in range(5):
            f.write(_lines(50, start=10_000 + 50 * i).decode())
            f.flush()
    m.stop()
    done = kafkafs("clean", logs, "--set", SEGMENT)
    assert done.returncode == 0, done.stderr
    # (today a --rw mount also cleans in the background, issue 20's --clean opt-in will change that)
    assert "kc 0 " in (logs / "cleaner-offset-checkpoint").read_text(), done.stdout
    assert not (logs / "kr-0" / "00000000000000000000.log").exists(), done.stdout

    shown = {}
    for t, (n, _) in TOPICS.items():
        for p in range(n):
            done = kafkafs("consume", logs, f"{t}-{p}")
            assert done.returncode == 0, done.stderr
            shown[(t, p)] = data_lines(done.stdout)
    left = {
        "recovery-point-offset-checkpoint": _checkpoint(logs / "recovery-point-offset-checkpoint"),
        "log-start-offset-checkpoint": _checkpoint(logs / "log-start-offset-checkpoint"),
    }
    snapshots = _snapshots(broker)
    assert (logs / ".kafka_cleanshutdown").exists()
    segments = {name: sorted(p.name for p in (logs / name).glob("*.log")) for name in topic_ids}
    assert len(segments["kw-0"]) > 3 and len(segments["kr-0"]) >= 1

    # the broker starts on it: no recovery, no index rebuild, every record served
    broker.start()
    for name in topic_ids:
        broker.assert_no_recovery(name)
        assert broker.loader_lines(name), broker.log_report(broker.log_since_start().splitlines()[-20:],
                                                            f"no LogLoader line for {name}; the run's last")
    broker.assert_log_line(rf"Skipping recovery of {len(topic_ids)} logs from \S+ since clean shutdown file was found")
    broker.assert_no_log_lines("unclean log dirs")
    broker.assert_no_log_lines(r"ERROR|inconsistent topic ID|Corrupt")
    for (t, p), lines in shown.items():
        broker.wait_high_watermark(t, p, lines[-1]["offset"] + 1)
        wire = [expected_line(r) for r in broker.consume_all(t, p)]
        assert wire == lines, f"{t}-{p}"
    total = sum(len(v) for v in shown.values())
    print(f"records read back over the wire: {total}; segments: { {k: len(v) for k, v in segments.items()} }")

    # a clean stop: the broker leaves what kafkafs had left
    assert broker.stop() == 0
    for name, before in left.items():
        assert _checkpoint(logs / name) == before, name
    # the broker's own load drops the snapshots at or below the log start (truncateAndReload), so one at
    # the base of the first segment retention left goes, as it would after the broker's own retention
    first = {name: min(int(p.name[:20]) for p in broker.partition_dir(name).glob("*.log")) for name in snapshots}
    expected = {name: [s for s in names if int(s[:20]) > first[name]] for name, names in snapshots.items()}
    assert _snapshots(broker) == expected
    for name, data in topic_ids.items():
        assert (logs / name / "partition.metadata").read_bytes() == data, name


@pytest.mark.slow
def test_the_broker_loads_kafkafs_after_kills(make_broker):
    """More kill and restart points: kafkafs writes, the broker loads it (no recovery, every record
    served), takes records of its own and is killed (SIGKILL); ``kafkafs recover`` repairs what the
    kill left and kafkafs writes again; five rounds, each with the count of records exact."""
    broker = make_broker({"log.cleaner.enable": "false"})
    broker.create_topic("kk", partitions=1)
    broker.stop()
    written = 0
    for round_ in range(5):
        done = kafkafs("produce", broker.log_dir, "kk-0", "--set", SEGMENT, "--set", "compression.type=zstd",
                       input=_lines(3000, start=written))
        assert done.returncode == 0, done.stderr
        written += 3000
        broker.start()
        broker.assert_no_recovery("kk-0", f"round {round_}")
        broker.wait_high_watermark("kk", 0, written)
        assert len(broker.consume_all("kk", 0)) == written
        written += produce_mix(broker, "kk", 500, codec="lz4", start=written)
        broker.kill()
        done = kafkafs("recover", broker.log_dir)
        assert done.returncode in (0, 1), done.stderr
    broker.start()
    broker.wait_high_watermark("kk", 0, written)
    assert len(broker.consume_all("kk", 0)) == written
    print(f"kill rounds: 5, records at the end: {written}")
