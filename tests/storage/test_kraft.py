"""Topic settings a KRaft broker recorded (ConfigRecords in __cluster_metadata) are the topic's settings,
below --config and --set (SPEC §8)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kafkafs.format.batch import encode_batch
from kafkafs.format.decoders.internal import metadata_frame
from kafkafs.storage.cleaner import LogCleaner
from kafkafs.storage.config import Settings
from kafkafs.storage.kraft import RecordedConfigsReader, recorded_topic_configs
from kafkafs.storage.logdir import LogDir

from .test_replay import batch_positions, spoil


def test_kafka_logs_c_consumer_offsets_settings(fixtures_dir):
    with LogDir(fixtures_dir / "kafka-logs-c") as logdir:
        config = logdir.log("__consumer_offsets-6").config
        assert config.segment_bytes == 104857600 and config.compact
        assert logdir.log("__consumer_offsets-6").describe()["config"]["segment.bytes"] == 104857600
        # a topic the broker recorded nothing for keeps the defaults
        assert logdir.log("TestTopicPatient-0").config.segment_bytes == 1024 ** 3


def test_config_file_and_set_win(fixtures_dir, tmp_path):
    toml = tmp_path / "k.toml"
    toml.write_text('[topics."__consumer_offsets"]\n"segment.bytes" = 2000000\n')
    with LogDir(fixtures_dir / "kafka-logs-c", Settings.load(toml)) as logdir:
        config = logdir.log("__consumer_offsets-6").config
        assert config.segment_bytes == 2000000 and config.compact  # the file wins; the rest stays recorded
    # an internal topic keeps what the broker recorded over a default for every topic (--set)
    with LogDir(fixtures_dir / "kafka-logs-c", Settings.load(None, {"segment.bytes": 3000000})) as logdir:
        assert logdir.log("__consumer_offsets-6").config.segment_bytes == 104857600
        assert logdir.log("TestTopicPatient-0").config.segment_bytes == 3000000


def _uuid(n: int) -> str:
    import base64

    return base64.urlsafe_b64encode(bytes([n]) * 16).rstrip(b"=").decode()


def _config(topic, name, value):
    return metadata_frame("CONFIG_RECORD", 0, {"resourceType": 2, "resourceName": topic, "name": name, "value": value})


@pytest.mark.allow_warnings("the generated log records a setting below its minimum")
def test_generated_metadata_log_with_a_snapshot(tmp_path):
    meta = tmp_path / "__cluster_metadata-0"
    meta.mkdir()
    snapshot = [
        metadata_frame("TOPIC_RECORD", 0, {"name": "a", "topicId": _uuid(1)}),
        _config("a", "retention.ms", "1000"),
        _config("a", "min.insync.replicas", "2"),  # no meaning here: ignored
        metadata_frame("TOPIC_RECORD", 0, {"name": "gone", "topicId": _uuid(2)}),
        _config("gone", "retention.ms", "5"),
        metadata_frame(  # a broker's setting (resource type 4): not a topic's
            "CONFIG_RECORD", 0, {"resourceType": 4, "resourceName": "1", "name": "log.retention.ms", "value": "7"}),
    ]
    (meta / f"{3:020d}-{1:010d}.checkpoint").write_bytes(encode_batch([(1, None, v, ()) for v in snapshot]))
    later = [
        _config("a", "retention.ms", None),  # deleted
        _config("a", "cleanup.policy", "compact"),
        _config("a", "segment.bytes", "1"),  # below kafkafs's minimum: not applied, with a warning
        metadata_frame("REMOVE_TOPIC_RECORD", 0, {"topicId": _uuid(2)}),
        _config("b", "max.message.bytes", "5000"),
    ]
    # the log starts at the snapshot's end offset, as Kafka's does after it deletes older segments
    (meta / f"{3:020d}.log").write_bytes(encode_batch([(2, None, v, ()) for v in later], base_offset=3))
    assert recorded_topic_configs(tmp_path) == {
        "a": {"min.insync.replicas": "2", "cleanup.policy": "compact", "segment.bytes": "1"},
        "b": {"max.message.bytes": "5000"},
    }
    for name in ("a-0", "b-0", "c-0"):
        (tmp_path / name).mkdir()
    with LogDir(tmp_path) as logdir:
        a = logdir.log("a-0").config
        assert a.compact and a.retention_ms == 7 * 24 * 3600 * 1000 and a.segment_bytes == 1024 ** 3
        assert logdir.log("b-0").config.max_message_bytes == 5000
        assert logdir.log("c-0").config.max_message_bytes == 1024 * 1024 + 12
    # --set (a default for every topic) is above what a broker recorded for an ordinary topic
    with LogDir(tmp_path, Settings.load(None, {"max.message.bytes": 7000})) as logdir:
        assert logdir.log("b-0").config.max_message_bytes == 7000
        assert logdir.log("a-0").config.compact


def test_no_metadata_log(tmp_path, fixtures_dir):
    assert recorded_topic_configs(tmp_path) == {}
    copy = tmp_path / "a"
    shutil.copytree(fixtures_dir / "kafka-logs-a", copy)
    with LogDir(copy) as logdir:
        assert logdir.log("demo-0").config.segment_bytes == 1024 ** 3


def test_metadata_transactions_apply_when_they_end(tmp_path):
    """KIP-868: the records between a BeginTransactionRecord and an AbortTransactionRecord never take
    effect, nor those of a transaction the log ends inside (Kafka's MetadataBatchLoader publishes an
    empty delta for an aborted one and nothing while one is in progress); an ended one applies whole."""
    meta = tmp_path / "__cluster_metadata-0"
    meta.mkdir()
    records = [
        metadata_frame("TOPIC_RECORD", 0, {"name": "a", "topicId": _uuid(1)}),
        metadata_frame("BEGIN_TRANSACTION_RECORD", 0, {"name": "t1"}),
        _config("a", "retention.ms", "1000"),
        metadata_frame("ABORT_TRANSACTION_RECORD", 0, {"reason": "controller failover"}),
        _config("a", "max.message.bytes", "5000"),
        metadata_frame("BEGIN_TRANSACTION_RECORD", 0, {"name": "t2"}),
        _config("a", "cleanup.policy", "compact"),
        metadata_frame("END_TRANSACTION_RECORD", 0, {}),
        metadata_frame("BEGIN_TRANSACTION_RECORD", 0, {"name": "t3"}),
        _config("a", "segment.bytes", "2000000"),  # the log ends before this transaction does
    ]
    (meta / f"{0:020d}.log").write_bytes(encode_batch([(1, None, v, ()) for v in records]))
    assert recorded_topic_configs(tmp_path) == {"a": {"max.message.bytes": "5000", "cleanup.policy": "compact"}}


def _damaged_settings_copy(fixtures_dir, tmp_path) -> Path:
    """Fixture c (a KRaft broker's directory) whose metadata log records, last, that TestTopicPatient
    keeps its records forever (retention.ms -1), with a damaged batch before that record."""
    copy = tmp_path / "c"
    shutil.copytree(fixtures_dir / "kafka-logs-c", copy)
    log = copy / "__cluster_metadata-0" / "00000000000000000000.log"
    with LogDir(copy) as logdir:
        end = logdir.log("__cluster_metadata-0").log_end_offset
    log.chmod(0o644)
    with open(log, "ab") as f:
        f.write(encode_batch([(1, None, _config("TestTopicPatient", "retention.ms", "-1"), ())], base_offset=end))
    return copy


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.allow_warnings("read up to damage")
def test_clean_refuses_to_delete_by_settings_it_could_not_read(fixtures_dir, tmp_path):
    """review6 F16: with __cluster_metadata damaged, clean (and its dry run) refuses every topic, one
    line, exit 1, and changes nothing; it deleted TestTopicPatient's records by Kafka's defaults."""
    from tests.cli.test_cli import run

    copy = _damaged_settings_copy(fixtures_dir, tmp_path)
    assert recorded_topic_configs(copy)["TestTopicPatient"] == {"retention.ms": "-1"}
    assert run("clean", str(copy), "--dry-run").stdout == b"nothing to clean\n"  # kept forever, as recorded
    spoil(copy / "__cluster_metadata-0" / "00000000000000000000.log", 10)
    recorded = recorded_topic_configs(copy)
    assert "TestTopicPatient" not in recorded and recorded.damage and "CRC mismatch" in recorded.damage
    before = _tree(copy)
    for dry in (["--dry-run"], []):
        proc = run("clean", str(copy), *dry, check_rc=1)
        assert proc.stdout == b""
        refusal = [line for line in proc.stderr.decode().splitlines() if "error" in line]
        assert len(refusal) == 1 and refusal[0].startswith(f"kafkafs: error: {copy}: refused: the topic settings")
        assert "CRC mismatch" in refusal[0]
        assert {k: v for k, v in _tree(copy).items() if k != ".lock"} == {k: v for k, v in before.items() if k != ".lock"}
    # a --rw mount's cleaner cleans nothing either, and says so once
    with LogDir(copy, writable=True) as logdir:
        cleaner = LogCleaner(logdir, clock=lambda: 2**60)
        assert not cleaner.run_once() and not cleaner.run_once()
        assert cleaner.segments_deleted == 0 and cleaner.refusal_said
    assert (copy / "TestTopicPatient-0" / "00000000000000000000.log").exists()


def _broker_config(resource, name, value):
    return metadata_frame("CONFIG_RECORD", 0, {"resourceType": 4, "resourceName": resource, "name": name, "value": value})


def test_the_clusters_dynamic_broker_defaults_are_below_the_topics_settings(tmp_path):
    """review7 R3: `kafka-configs --entity-type brokers --entity-default --add-config log.retention.ms=-1`
    (a ConfigRecord of resource type 4, name "") keeps every topic's records forever on the broker;
    clean deleted them by retention.ms's default. The value for this directory's node.id is above the
    cluster default, a topic's own record above both, --set above all; minutes and hours count as Kafka
    counts them."""
    meta = tmp_path / "__cluster_metadata-0"
    meta.mkdir()
    (tmp_path / "meta.properties").write_text("#\nnode.id=1\nversion=1\ncluster.id=x\n")
    records = [
        _broker_config("", "log.retention.ms", "-1"),
        _broker_config("", "log.retention.bytes", "-1"),
        _broker_config("", "log.segment.bytes", "3000000"),
        _broker_config("", "log.roll.hours", "2"),
        _broker_config("", "min.insync.replicas", "2"),  # not a topic setting's default
        _broker_config("1", "log.segment.bytes", "2000000"),  # this broker's
        _broker_config("2", "log.segment.bytes", "5000000"),  # another broker's: not ours
        _broker_config("", "log.cleaner.delete.retention.ms", "5"),
        _broker_config("", "log.cleaner.delete.retention.ms", None),  # deleted again
        metadata_frame("TOPIC_RECORD", 0, {"name": "a", "topicId": _uuid(1)}),
        _config("a", "retention.ms", "1000"),
    ]
    (meta / f"{0:020d}.log").write_bytes(encode_batch([(1, None, v, ()) for v in records]))
    recorded = recorded_topic_configs(tmp_path)
    assert recorded == {"a": {"retention.ms": "1000"}}
    assert recorded.broker == {"segment.bytes": "2000000", "segment.ms": "7200000", "retention.ms": "-1",
                               "retention.bytes": "-1"}
    for name in ("a-0", "b-0"):
        (tmp_path / name).mkdir()
    with LogDir(tmp_path) as logdir:
        b = logdir.log("b-0").config
        assert (b.retention_ms, b.retention_bytes, b.segment_bytes, b.segment_ms) == (-1, -1, 2000000, 7200000)
        assert b.delete_retention_ms == 24 * 3600 * 1000
        assert logdir.log("a-0").config.retention_ms == 1000
    with LogDir(tmp_path, Settings.load(None, {"retention.ms": 5000})) as logdir:
        assert logdir.log("b-0").config.retention_ms == 5000


def test_an_empty_cleanup_policy_cleans_nothing(tmp_path):
    """review9 R9-1: Kafka 4's empty cleanup.policy (an empty list: "infinite retention - no cleanup
    policies will be applied", TopicConfig) that a broker recorded leaves the topic alone, as the broker
    does; the setting was dropped with a warning and clean deleted the topic by the default delete and
    7 days. A topic with no record (ctl) keeps the defaults."""
    from kafkafs.storage.cleaner import clean_logdir

    from .test_cleaner import _fill

    settings = Settings({"segment.bytes": 300})
    with LogDir(tmp_path, settings, writable=True) as logdir:
        for topic in ("inf", "ctl"):
            _fill(logdir.create_partition(topic, 0), 30)  # timestamps of 1970: far past any retention.ms
    meta = tmp_path / "__cluster_metadata-0"
    meta.mkdir()
    records = [
        metadata_frame("TOPIC_RECORD", 0, {"name": "inf", "topicId": _uuid(1)}),
        _config("inf", "cleanup.policy", ""),
        metadata_frame("TOPIC_RECORD", 0, {"name": "ctl", "topicId": _uuid(2)}),
    ]
    (meta / f"{0:020d}.log").write_bytes(encode_batch([(1, None, v, ()) for v in records]))
    for n, topic in enumerate(("inf", "ctl"), 1):  # the metadata's ids, else both are strays (review19 R19-5)
        (tmp_path / f"{topic}-0" / "partition.metadata").write_text(f"version: 0\ntopic_id: {_uuid(n)}\n")
    with LogDir(tmp_path, settings, writable=True) as logdir:
        inf = logdir.log("inf-0")
        assert (inf.config.cleanup_policy, inf.config.delete, inf.config.compact) == ("", False, False)
        assert len(inf.segments) > 2
        for dry_run in (True, False):
            lines = clean_logdir(logdir, dry_run=dry_run, now_ms=10**13)
            assert lines and all(line.startswith("ctl-0") for line in lines), lines
        assert (inf.log_start_offset, len(list(inf.records()))) == (0, 30)
        assert logdir.log("ctl-0").log_start_offset > 0


def _append(meta: Path, base_offset: int, *records: bytes, segment: int = 0) -> int:
    """Append one batch of ``records`` at ``base_offset`` to the metadata log's segment ``segment``, as
    a broker does; the offset after it."""
    with open(meta / f"{segment:020d}.log", "ab") as f:
        f.write(encode_batch([(1, None, v, ()) for v in records], base_offset=base_offset))
    return base_offset + len(records)


def test_a_read_only_log_directory_follows_the_recorded_settings(tmp_path, monkeypatch):
    """review13 R13-4: a read-only LogDir (a mount) kept the settings of its first reading of
    __cluster_metadata: a topic created later with its own settings, or `kafka-configs --alter` on a
    running broker, showed only after a remount. follow_recorded reads what the log gained, from where
    the last reading stopped; a deleted setting (a null value) goes back to the default; a metadata
    transaction counts once it ends; records lost before they were read (a snapshot, then the older
    segments deleted) or rewritten (a truncation) have the log read again from the newest snapshot."""
    meta = tmp_path / "__cluster_metadata-0"
    meta.mkdir()
    for name in ("a-0", "b-0", "c-0"):
        (tmp_path / name).mkdir()
    end = _append(meta, 0, metadata_frame("TOPIC_RECORD", 0, {"name": "a", "topicId": _uuid(1)}),
                  _config("a", "retention.ms", "1000"))
    week = 7 * 24 * 3600 * 1000
    full_reads = []
    read_all = RecordedConfigsReader._read_all
    monkeypatch.setattr(RecordedConfigsReader, "_read_all", lambda self: full_reads.append(1) or read_all(self))
    with LogDir(tmp_path) as logdir:
        a = logdir.log("a-0")
        assert a.config.retention_ms == 1000 and a.describe()["config"]["retention.ms"] == 1000
        assert logdir.follow_recorded() == []  # nothing new
        # kafka-configs --alter (a deleted setting, an added one), and a topic created with its own
        end = _append(meta, end, _config("a", "retention.ms", None), _config("a", "cleanup.policy", "compact"),
                      metadata_frame("TOPIC_RECORD", 0, {"name": "b", "topicId": _uuid(2)}),
                      _config("b", "max.message.bytes", "5000"))
        assert logdir.follow_recorded() == ["a-0"]
        assert (a.config.retention_ms, a.config.compact) == (week, True)
        assert a.describe()["config"]["retention.ms"] == week
        b = logdir.log("b-0")  # opened after the change
        assert b.config.max_message_bytes == 5000
        assert logdir.follow_recorded() == []
        # a metadata transaction: nothing until it ends, which a later update reads
        end = _append(meta, end, metadata_frame("BEGIN_TRANSACTION_RECORD", 0, {"name": "t"}),
                      _config("b", "max.message.bytes", "6000"))
        assert logdir.follow_recorded() == [] and b.config.max_message_bytes == 5000
        end = _append(meta, end, metadata_frame("END_TRANSACTION_RECORD", 0, {}))
        assert logdir.follow_recorded() == ["b-0"] and b.config.max_message_bytes == 6000
        # the broker rolls, takes a snapshot where this reading stands and deletes the older segment
        snapshot = [
            metadata_frame("TOPIC_RECORD", 0, {"name": "a", "topicId": _uuid(1)}),
            metadata_frame("TOPIC_RECORD", 0, {"name": "b", "topicId": _uuid(2)}),
            _config("b", "max.message.bytes", "7000"),
        ]
        (meta / f"{end:020d}-{1:010d}.checkpoint").write_bytes(encode_batch([(1, None, v, ()) for v in snapshot[:2]]))
        (meta / f"{0:020d}.log").unlink()
        rolled = end
        end = _append(meta, end, _config("b", "segment.ms", "5000"), segment=rolled)
        assert logdir.follow_recorded() == ["b-0"] and b.config.segment_ms == 5000
        assert len(full_reads) == 1  # the first reading; each update read on from where it stopped
        # a snapshot past what was read, the older segments deleted: read again from the snapshot
        (meta / f"{end + 5:020d}-{1:010d}.checkpoint").write_bytes(encode_batch([(1, None, v, ()) for v in snapshot]))
        (meta / f"{rolled:020d}.log").unlink()
        end = _append(meta, end + 5, _config("c", "segment.bytes", "2000000"), segment=end + 5)
        assert sorted(logdir.follow_recorded()) == ["a-0", "b-0"]
        assert (a.config.compact, b.config.max_message_bytes, b.config.segment_ms) == (False, 7000, 604800000)
        assert logdir.log("c-0").config.segment_bytes == 2000000
        # the last batch read rewritten (a follower truncated and took its leader's): read again
        log_file = meta / f"{end - 1:020d}.log"
        log_file.write_bytes(encode_batch([(1, None, _config("c", "segment.bytes", "3000000"), ())], base_offset=end - 1))
        assert logdir.follow_recorded() == ["c-0"] and logdir.log("c-0").config.segment_bytes == 3000000
        assert len(full_reads) == 3


def test_a_metadata_log_made_after_the_open_is_followed(tmp_path):
    (tmp_path / "a-0").mkdir()
    with LogDir(tmp_path) as logdir:
        a = logdir.log("a-0")
        assert a.config.retention_ms == 7 * 24 * 3600 * 1000 and logdir.follow_recorded() == []
        meta = tmp_path / "__cluster_metadata-0"
        meta.mkdir()
        _append(meta, 0, metadata_frame("TOPIC_RECORD", 0, {"name": "a", "topicId": _uuid(1)}),
                _config("a", "retention.ms", "1000"))
        assert logdir.follow_recorded() == ["a-0"] and a.config.retention_ms == 1000


def _settings_then_more(fixtures_dir, tmp_path) -> tuple[Path, int]:
    """:func:`_damaged_settings_copy` with one more whole batch after the one that keeps TestTopicPatient
    forever; the position of that batch."""
    copy = _damaged_settings_copy(fixtures_dir, tmp_path)
    log = copy / "__cluster_metadata-0" / "00000000000000000000.log"
    at = batch_positions(log)[-1]
    with LogDir(copy) as logdir:
        end = logdir.log("__cluster_metadata-0").log_end_offset
    with open(log, "ab") as f:
        f.write(encode_batch([(1, None, _config("other", "retention.ms", "5"), ())], base_offset=end))
    return copy, at


def _clean_refused(copy: Path, *words: str) -> None:
    from tests.cli.test_cli import run

    before = _tree(copy)
    for dry in (["--dry-run"], []):
        proc = run("clean", str(copy), *dry, check_rc=1)
        assert proc.stdout == b""
        refusal = [line for line in proc.stderr.decode().splitlines() if "error" in line]
        assert len(refusal) == 1 and refusal[0].startswith(f"kafkafs: error: {copy}: refused: "), refusal
        assert all(word in refusal[0] for word in words), refusal[0]
        assert {k: v for k, v in _tree(copy).items() if k != ".lock"} == {k: v for k, v in before.items() if k != ".lock"}


@pytest.mark.allow_warnings("read up to damage", "serving it read-only")
def test_a_flipped_size_bit_in_the_middle_of_the_metadata_log_is_damage(fixtures_dir, tmp_path):
    """review17 R17-4: a flipped bit in the size field of the batch holding a topic's ConfigRecord made
    the batch look longer than the rest of the file: read as a torn tail, the settings after it were
    silently Kafka's defaults and clean deleted the topic's records (exit 0). Whole batches follow it:
    damage, so clean (and its dry run, and a --rw mount's cleaner) refuse, exit 1, nothing changed."""
    copy, at = _settings_then_more(fixtures_dir, tmp_path)
    assert recorded_topic_configs(copy)["TestTopicPatient"] == {"retention.ms": "-1"}
    log = copy / "__cluster_metadata-0" / "00000000000000000000.log"
    data = bytearray(log.read_bytes())
    data[at + 10] ^= 0x40  # the size field's third byte: 16384 bytes longer than written
    log.write_bytes(bytes(data))
    _clean_refused(copy, str(log), f"position {at}", "not a torn tail")
    recorded = recorded_topic_configs(copy)
    assert "TestTopicPatient" not in recorded and recorded.damage and "not a torn tail" in recorded.damage
    with LogDir(copy, writable=True) as logdir:
        cleaner = LogCleaner(logdir, clock=lambda: 2**60)
        assert not cleaner.run_once() and cleaner.segments_deleted == 0 and cleaner.refusal_said
    # produce (max.message.bytes, segment.bytes, ... of the topic) and Spark's commit refuse as well
    from tests.cli.test_cli import run

    before = _tree(copy)
    proc = run("produce", str(copy), "TestTopicPatient-0", stdin=b"x\n", check_rc=1)
    assert [line for line in proc.stderr.decode().splitlines() if "error" in line] == [
        line for line in proc.stderr.decode().splitlines() if line.startswith(f"kafkafs: error: {copy}: refused: ")]
    assert "no record is appended" in proc.stderr.decode()
    assert {k: v for k, v in _tree(copy).items() if k != ".lock"} == {k: v for k, v in before.items() if k != ".lock"}
    from kafkafs.spark.publish import check_staged
    from kafkafs.spark.write import StagedFile
    from kafkafs.storage.config import SettingsUnreadable

    with LogDir(copy, writable=True) as logdir:  # a --rw mount serves the partition read-only
        assert not logdir.log("TestTopicPatient-0", read_only_fallback=True).writable
        assert "not a torn tail" in logdir.refused["TestTopicPatient-0"]
    with LogDir(copy) as logdir, pytest.raises(SettingsUnreadable, match="not a torn tail"):
        check_staged(logdir, [StagedFile("TestTopicPatient", 0, str(tmp_path / "none"), 1, 1, 10)])


def test_a_torn_tail_of_the_metadata_log_is_what_a_broker_replays(fixtures_dir, tmp_path):
    """review17 R17-4, decided: a torn tail (the start of a batch not wholly written, nothing whole after
    it: what an unclean stop leaves, and what a broker's start truncates) is no damage: the settings are
    those of the whole batches before it (as the controller replays them), said in a note. But a topic
    those batches do not name (its TopicRecord may be in the torn batch) has no settings to go by: clean
    refuses, exit 1, nothing changed (before: deleted by Kafka's defaults, exit 0)."""
    from tests.cli.test_cli import run

    # torn where TestTopicPatient's TopicRecord is: its folder's settings cannot be established
    copy, _ = _settings_then_more(fixtures_dir, tmp_path / "a")
    log = copy / "__cluster_metadata-0" / "00000000000000000000.log"
    topic_batch = next(p for p in batch_positions(log) if b"TestTopicPatient" in log.read_bytes()[p : p + 400])
    with open(log, "r+b") as f:
        f.truncate(topic_batch + 30)
    _clean_refused(copy, "not wholly written", "TestTopicPatient", "not in those batches")
    recorded = recorded_topic_configs(copy)
    assert recorded.damage is None and recorded.torn and "TestTopicPatient" not in (recorded.topics or {})
    # torn after TestTopicPatient's setting: kept forever, as the whole batches say, with a note
    copy, _ = _settings_then_more(fixtures_dir, tmp_path / "b")
    log = copy / "__cluster_metadata-0" / "00000000000000000000.log"
    with open(log, "r+b") as f:
        f.truncate(log.stat().st_size - 5)  # the last batch (other's setting) torn
    proc = run("clean", str(copy), "--dry-run")
    assert proc.stdout == b"nothing to clean\n"
    assert f"kafkafs: note: {log} ends in " in proc.stderr.decode()
    recorded = recorded_topic_configs(copy)
    assert recorded.damage is None and recorded.torn and "not wholly written" in recorded.torn
    assert recorded["TestTopicPatient"] == {"retention.ms": "-1"}


@pytest.mark.allow_warnings("a --rw mount serves a stray read-only, said")
def test_a_whole_metadata_log_that_does_not_name_a_folders_topic_leaves_it_a_stray(fixtures_dir, tmp_path):
    """review19 R19-5: a whole metadata log (ending at a batch boundary before TestTopicPatient's
    TopicRecord), or one naming the topic with another id than the folder's partition.metadata: a broker
    sets the folder aside as a stray, so clean (and its dry run) deletes nothing there, says it, exit 1
    (before: deleted by Kafka's defaults, exit 0). Without a metadata log, defaults as before."""
    from tests.cli.test_cli import run

    def copy_of(name: str) -> Path:
        copy = tmp_path / name
        shutil.copytree(fixtures_dir / "kafka-logs-c", copy)
        for p in [copy, *copy.rglob("*")]:
            p.chmod(p.stat().st_mode | 0o200)
        return copy

    exact = copy_of("exact")
    log = exact / "__cluster_metadata-0" / "00000000000000000000.log"
    topic_batch = next(p for p in batch_positions(log) if b"TestTopicPatient" in log.read_bytes()[p : p + 400])
    with open(log, "r+b") as f:
        f.truncate(topic_batch)
    other_id = copy_of("id")
    (other_id / "TestTopicPatient-0" / "partition.metadata").write_text("version: 0\ntopic_id: C3_HiNPgSQ6oxG9ZZ6ED5A\n")
    for copy, why in ((exact, "topic TestTopicPatient is not in the cluster's metadata"),
                      (other_id, "its topic id C3_HiNPgSQ6oxG9ZZ6ED5A (partition.metadata) is not the id")):
        before = _tree(copy / "TestTopicPatient-0")
        for dry in (["--dry-run"], []):
            proc = run("clean", str(copy), *dry, check_rc=1)
            lines = proc.stdout.decode().splitlines()
            assert not any("delete" in line and "refused" not in line for line in lines), lines
            mine = [line for line in lines if line.startswith("TestTopicPatient-0: refused: ")]
            assert len(mine) == 1 and why in mine[0] and "a stray as Kafka sees it" in mine[0], lines
            assert _tree(copy / "TestTopicPatient-0") == before
        # the same rule for every writer (fix50): produce refuses with one line, exit 1, nothing made or changed
        everything = _tree(copy)
        proc = run("produce", str(copy), "TestTopicPatient-0", stdin=b"x\n", check_rc=1)
        err = proc.stderr.decode().splitlines()
        assert len(err) == 1 and err[0].startswith("kafkafs: error: TestTopicPatient-0: refused: ") and why in err[0], err
        assert "a stray as Kafka sees it; no record is appended by guessed settings" in err[0], err
        assert _tree(copy) == everything
        # a --rw --clean mount's cleaner deletes nothing there (said once) and cleans what the metadata names;
        # a --rw mount serves the folder read-only (its append refused)
        with LogDir(copy, writable=True) as logdir, pytest.MonkeyPatch.context() as patch:
            said: list[str] = []
            patch.setattr("kafkafs.storage.cleaner.log.warning",
                          lambda *args, said=said: said.append(args[0] % args[1:]))
            cleaner = LogCleaner(logdir, clock=lambda: 2**60)
            cleaner.run_once()
            cleaner.run_once()
            mine = [line for line in said if line.startswith("cleaner: TestTopicPatient-0: refused: ")]
            assert len(mine) == 1 and why in mine[0] and "nothing deleted or compacted there" in mine[0], said
            assert not cleaner.refusal_said and cleaner.passes == 2
            assert not logdir.log("TestTopicPatient-0", read_only_fallback=True).writable
            assert "a stray as Kafka sees it" in logdir.refused["TestTopicPatient-0"]
            assert logdir.log("__consumer_offsets-7", read_only_fallback=True).writable
        assert _tree(copy / "TestTopicPatient-0") == before
    # a new partition of a topic the metadata does not name: refused too (a broker has no such topic)
    proc = run("produce", str(exact), "brandnew-0", stdin=b"x\n", check_rc=1)
    assert b"topic brandnew is not in the cluster's metadata" in proc.stderr and not (exact / "brandnew-0").exists()
    # no metadata log at all (ZooKeeper-era, an archive): Kafka's defaults, as before
    plain = copy_of("plain")
    shutil.rmtree(plain / "__cluster_metadata-0")
    proc = run("clean", str(plain), check_rc=0)
    assert b"TestTopicPatient-0: deleted 00000000000000000000.log" in proc.stdout


@pytest.mark.parametrize("how", ["file", "set"])
def test_share_group_state_is_kept_whatever_the_defaults_for_every_topic(tmp_path, how):
    """R20-3 (review20): Kafka 4's share coordinator creates ``__share_group_state`` with topic-level
    ``retention.ms`` -1 (it prunes the topic itself); a default for every topic (the settings file's top
    level, ``--set``) made ``clean`` delete its segments, and a 4.4 broker restarted there had lost every
    share group's state (failed before, seen: retention.ms 60000). A ``[topics."__share_group_state"]``
    table still decides."""
    toml = tmp_path / "k.toml"
    toml.write_text('"retention.ms" = 60000\n"segment.bytes" = 2000000\n' if how == "file" else "")
    overrides = {"retention.ms": 60000, "segment.bytes": 2000000} if how == "set" else None
    with LogDir(tmp_path, Settings.load(toml, overrides), writable=True) as logdir:
        state = logdir.create_partition("__share_group_state", 3).config
        assert state.retention_ms == -1 and not state.compact and state.segment_bytes == 100 * 1024 * 1024
        assert logdir.create_partition("orders", 0).config.retention_ms == 60000
    toml.write_text('[topics."__share_group_state"]\n"retention.ms" = 5000\n')
    assert Settings.load(toml).for_topic("__share_group_state").retention_ms == 5000
