"""What a broker makes of a partition folder's topic id (``partition.metadata``), said by verify and
recover (review12 R12-7, R12-8; SPEC §4, §9).

- A file a broker's reader refuses (``topic_id: notanid``) stops a broker's start: damage (exit 1);
  recover rewrites it with the id the metadata log (or the topic's other partitions) gives the topic,
  or removes it where nothing names it.
- A folder a KRaft broker of the directory sets aside as a stray (no topic id, an id or partition its
  metadata log does not hold, a partition assigned to other brokers) is named, exit 1: the broker
  serves none of its records. tests/broker/test_settings_vs_kafka.py has the broker's own verdict.
"""

from __future__ import annotations

import logging
import shutil

from kafkafs.storage.logdir import LogDir
from kafkafs.storage.partition_metadata import read_topic_id

from .test_cli import run

FOREIGN = "AAAAAAAAAAAAAAAAAAAAAQ"
KEPT = {"__consumer_offsets-6", "__consumer_offsets-7", "__consumer_offsets-8"}


def _copy(fixtures_dir, tmp_path):
    """kafka-logs-c (a KRaft broker's directory: its metadata log names every folder) with 3 of its 50
    empty ``__consumer_offsets`` partitions (the rest would only slow each command)."""
    logs = tmp_path / "logs"
    shutil.copytree(fixtures_dir / "kafka-logs-c", logs,
                    ignore=lambda d, names: [n for n in names if n.startswith("__consumer_offsets-") and n not in KEPT])
    return logs


def _lines(out: bytes, word: str) -> list[str]:
    return [line.strip() for line in out.decode().splitlines() if word in line]


def test_a_topic_id_kafkas_reader_refuses_is_damage_and_recover_rewrites_it(fixtures_dir, tmp_path):
    logs = _copy(fixtures_dir, tmp_path)
    recorded = read_topic_id(logs / "TestTopicPatient-0")
    sibling = read_topic_id(logs / "__consumer_offsets-7")
    assert recorded and sibling
    (logs / "TestTopicPatient-0/partition.metadata").write_text("version: 0\ntopic_id: notanid\n")
    (logs / "__consumer_offsets-7/partition.metadata").write_text("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA")
    out = run("verify", str(logs), check_rc=1).stdout  # was 0: a broker does not start with either
    said = _lines(out, "partition.metadata:")
    assert len(said) == 2 and "'notanid' is not a UUID" in said[0] and "zero UUID" in said[1], out
    assert all("a Kafka broker does not start with it" in line for line in said)

    done = run("recover", str(logs), check_rc=1)  # was 0, the file left as it was
    out = done.stdout.decode()
    assert f"TestTopicPatient-0/partition.metadata: topic id 'notanid' is not a UUID (22 characters of base64url); " \
           f"rewritten with topic id {recorded} (the metadata log's TopicRecord)" in out, out
    assert "1 damaged partition.metadata file(s)" not in out and "2 damaged partition.metadata file(s)" in out
    assert (logs / "TestTopicPatient-0/partition.metadata").read_text() == f"version: 0\ntopic_id: {recorded}"
    assert read_topic_id(logs / "__consumer_offsets-7") == sibling
    run("verify", str(logs), check_rc=0)
    run("recover", str(logs), check_rc=0)

    # no metadata log: the topic's other partitions name the id; nothing names it: the file goes
    shutil.rmtree(logs / "__cluster_metadata-0")
    (logs / "__consumer_offsets-7/partition.metadata").write_text("topic_id: x\n")
    (logs / "TestTopicPatient-0/partition.metadata").write_text("version: 0\ntopic_id: notanid\n")
    out = run("recover", str(logs), check_rc=1).stdout.decode()
    assert "(the topic's other partitions)" in out and read_topic_id(logs / "__consumer_offsets-7") == sibling, out
    assert "TestTopicPatient-0/partition.metadata: topic id 'notanid' is not a UUID (22 characters of base64url); " \
           "removed: nothing in the log directory names topic TestTopicPatient's id" in out, out
    assert not (logs / "TestTopicPatient-0/partition.metadata").exists()
    out = run("verify", str(logs), check_rc=0).stdout  # without a metadata log a missing file is no stray
    assert b"stray" not in out


def test_folders_a_kraft_broker_sets_aside_as_strays_are_named(fixtures_dir, tmp_path, caplog):
    logs = _copy(fixtures_dir, tmp_path)
    assert b"stray" not in run("verify", str(logs), check_rc=0).stdout  # a broker serves every folder
    (logs / "TestTopicPatient-0/partition.metadata").write_text(f"version: 0\ntopic_id: {FOREIGN}")  # another cluster's
    (logs / "Retry.TestTopicPatient-0/partition.metadata").unlink()
    # a topic the metadata log lacks: produce refuses it (fix50, review19 R19-5); the library still makes it, said
    refused = run("produce", str(logs), "newtopic-0", stdin=b"hello\n", check_rc=1)
    assert b"topic newtopic is not in the cluster's metadata" in refused.stderr and not (logs / "newtopic-0").exists()
    with LogDir(logs, writable=True) as logdir, caplog.at_level(logging.WARNING):
        logdir.create_partition("newtopic", 0).append_records([(None, None, b"hello", ())])
    assert "will not serve it" in caplog.text
    shutil.copytree(logs / "__consumer_offsets-7", logs / "__consumer_offsets-50")  # a partition it lacks

    out = run("verify", str(logs), check_rc=1).stdout  # was 0
    strays = {line.split(":")[0]: line for line in out.decode().splitlines() if "stray:" in line}
    named = {line.split(":")[0] for line in out.decode().splitlines() if not line.startswith(" ") and "problem" in line}
    assert named == {"TestTopicPatient-0", "Retry.TestTopicPatient-0", "newtopic-0", "__consumer_offsets-50"}, out
    stray_lines = _lines(out, "stray:")
    assert len(stray_lines) == 4 and all("serves none of its records" in line for line in stray_lines)
    assert any(f"its topic id {FOREIGN} (partition.metadata) is no topic's in the metadata log (__cluster_metadata-0), "
               "which gives topic TestTopicPatient the id B3_HiNPgSQ6oxG9ZZ6ED5A" in line for line in stray_lines)
    assert any("no partition.metadata (no topic id)" in line for line in stray_lines)
    assert any("has no partition 50 of topic __consumer_offsets" in line for line in stray_lines)
    assert any("which has no topic newtopic" in line for line in stray_lines)
    del strays

    out = run("recover", str(logs), check_rc=1).stdout.decode()  # named, left as they are
    assert "4 stray folder(s) a broker sets aside, left as they are" in out.splitlines()[-1], out
    assert (logs / "TestTopicPatient-0/partition.metadata").read_text().endswith(FOREIGN)
    assert not (logs / "Retry.TestTopicPatient-0/partition.metadata").exists()

    # this directory's broker is node 1; as node 2's every partition belongs to another broker
    meta = logs / "meta.properties"
    meta.write_text(meta.read_text().replace("node.id=1", "node.id=2"))
    out = run("verify", str(logs), check_rc=1).stdout.decode()
    assert "__consumer_offsets-7: " in out and "assigns partition 7 of topic __consumer_offsets to broker(s) 1, not to node 2" in out

    # a directory without a metadata log cannot judge: nothing said
    shutil.rmtree(logs / "__cluster_metadata-0")
    assert b"stray" not in run("verify", str(logs), check_rc=0).stdout


def test_produce_into_another_brokers_partition_warns(fixtures_dir, tmp_path):
    """A partition the metadata log assigns to other brokers only (this directory's node.id is none of
    its replicas): produce appends, and says in one line that a broker of this directory will not serve
    it, for a folder that exists (said nothing before: seen) as for one it creates."""
    logs = _copy(fixtures_dir, tmp_path)
    meta = logs / "meta.properties"
    meta.write_text(meta.read_text().replace("node.id=1", "node.id=2"))  # every partition is broker 1's
    shutil.rmtree(logs / "Retry.TestTopicPatient-0")
    for name in ("TestTopicPatient-0", "Retry.TestTopicPatient-0"):
        err = run("produce", str(logs), name, stdin=b"written here\n").stderr.decode()
        warned = [line for line in err.splitlines() if "WARNING" in line]
        assert len(warned) == 1, err
        assert warned[0].startswith(f"kafkafs: WARNING: {name}: the metadata log (__cluster_metadata-0) assigns "
                                    f"partition 0 of topic {name[:-2]} to broker(s) 1, not to node 2 of this "
                                    "directory: a Kafka broker of this directory "), err
        assert f"appended 1 record to {name}" in err
    meta.write_text(meta.read_text().replace("node.id=2", "node.id=1"))  # this broker's own: nothing said
    err = run("produce", str(logs), "TestTopicPatient-0", stdin=b"and here\n").stderr.decode()
    assert err.splitlines() == ["kafkafs: appended 1 record to TestTopicPatient-0 at offsets 4..4"], err


def test_produce_refuses_a_leader_epoch_above_the_metadata_logs(fixtures_dir, tmp_path):
    """review21 R21-6: ``produce --leader-epoch N`` above the partition's leader epoch the metadata log
    records (TestTopicPatient-0: 1; its log's own is 0) is a usage error, one line, exit 2, nothing
    written (before: appended at epoch 9, exit 0, and a broker then cut 9 out of its epoch cache, WARN).
    At or below the recorded one (not below the log's): as before; no metadata log: as before."""
    logs = _copy(fixtures_dir, tmp_path)
    for p in [logs, *logs.rglob("*")]:
        p.chmod(p.stat().st_mode | 0o200)
    files = {p: p.read_bytes() for p in logs.rglob("*") if p.is_file()}
    proc = run("produce", str(logs), "TestTopicPatient-0", "--leader-epoch", "9", stdin=b"x\n", check_rc=2)
    err = proc.stderr.decode().splitlines()
    assert len(err) == 1 and "--leader-epoch 9 is above the leader epoch 1 the metadata log" in err[0], err
    assert {p: p.read_bytes() for p in logs.rglob("*") if p.is_file()} == files
    run("produce", str(logs), "TestTopicPatient-0", "--leader-epoch", "1", stdin=b"x\n")
    assert (logs / "TestTopicPatient-0/leader-epoch-checkpoint").read_text().splitlines()[-1].startswith("1 ")
    shutil.rmtree(logs / "__cluster_metadata-0")  # nothing recorded to judge by: as before
    run("produce", str(logs), "TestTopicPatient-0", "--leader-epoch", "9", stdin=b"y\n")
    assert (logs / "TestTopicPatient-0/leader-epoch-checkpoint").read_text().splitlines()[-1].startswith("9 ")
