"""LogDir: partitions, the writer's lock, the clean-shutdown marker and the checkpoints."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kafkafs.errors import InvalidName, LogDirLocked, ReadOnlyError
from kafkafs.format.checkpoint import parse_offset_checkpoint
from kafkafs.format.jsonview import ProducerRecord
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import CLEAN_SHUTDOWN_FILE, LogDir

from .helpers import tree_fingerprint

ROOT = Path(__file__).resolve().parents[2]


def rec(value: bytes = b"v") -> ProducerRecord:
    return ProducerRecord(1000, None, value, ())


def test_partitions_are_discovered_by_kafkas_rules(tmp_path: Path) -> None:
    for name in ("orders-0", "orders-10", "a.b_c-d-3", "__consumer_offsets-49", "x-1-delete", "y-0-future",
                 "orders-01", "no_partition", "bad name-0"):
        (tmp_path / name).mkdir()
    for name in ("meta.properties", "recovery-point-offset-checkpoint", ".lock", "z-0"):
        (tmp_path / name).write_bytes(b"")
    with LogDir(tmp_path) as logdir:
        assert logdir.partition_names() == ["__consumer_offsets-49", "a.b_c-d-3", "orders-0", "orders-10"]
        assert logdir.topic_partition_names("orders") == ["orders-0", "orders-10"]  # by number, folders only
        assert logdir.topic_partition_names("a.b_c-d") == ["a.b_c-d-3"] and logdir.topic_partition_names("z") == []
        with pytest.raises(InvalidName):
            logdir.log("x-1-delete")
        with pytest.raises(InvalidName):
            logdir.log("nope-0")
    with pytest.raises(InvalidName):
        LogDir(tmp_path / "missing")


def test_one_writer_at_a_time(tmp_path: Path) -> None:
    writer = LogDir(tmp_path, writable=True)
    with pytest.raises(LogDirLocked):
        LogDir(tmp_path, writable=True)
    script = (
        "import sys; from kafkafs.storage.logdir import LogDir; from kafkafs.errors import LogDirLocked\n"
        "try:\n    LogDir(sys.argv[1], writable=True)\nexcept LogDirLocked:\n    sys.exit(3)\n"
    )
    other = subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=ROOT, capture_output=True)
    assert other.returncode == 3, other.stderr
    with LogDir(tmp_path) as reader:  # readers take no lock
        assert reader.partition_names() == []
    writer.close()
    with LogDir(tmp_path, writable=True):
        pass


def test_create_write_close_reopen(tmp_path: Path) -> None:
    settings = Settings({"segment.bytes": 1000}, {"big": {"segment.bytes": 100_000}})
    with LogDir(tmp_path, settings, writable=True) as logdir:
        orders = logdir.create_partition("orders", 0)
        big = logdir.create_partition("big", 2)
        assert logdir.create_partition("orders", 0) is orders
        with pytest.raises(InvalidName):
            logdir.create_partition("bad/name", 0)
        for _ in range(30):
            orders.append_records([rec(b"x" * 50)])
            big.append_records([rec(b"y" * 50)])
        assert len(orders.segments) > 1 and len(big.segments) == 1
        assert logdir.log("orders-0") is orders
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    recovery = parse_offset_checkpoint((tmp_path / "recovery-point-offset-checkpoint").read_bytes())
    assert recovery == {("orders", 0): 30, ("big", 2): 30}
    # a broker lists only partitions whose log start is above their first segment's base
    assert (tmp_path / "log-start-offset-checkpoint").read_bytes() == b"0\n0\n"
    with LogDir(tmp_path, settings) as reader:
        assert [lg.log_end_offset for lg in reader] == [30, 30]
        with pytest.raises(ReadOnlyError):
            reader.create_partition("new", 0)


@pytest.mark.allow_warnings("recovery cuts the torn tail it is given")
def test_clean_shutdown_marker_and_recovery_after_a_crash(tmp_path: Path) -> None:
    with LogDir(tmp_path, writable=True) as logdir:
        logdir.create_partition("t", 0).append_records([rec()] * 5)
    # a writer that dies: the marker went when it opened the directory, the checkpoints are stale
    script = (
        "import os, sys\n"
        "from kafkafs.storage.logdir import LogDir\n"
        "from kafkafs.format.jsonview import ProducerRecord\n"
        "d = LogDir(sys.argv[1], writable=True)\n"
        "d.log('t-0').append_records([ProducerRecord(1, None, b'new', ())] * 3, flush=True)\n"
        "open(d.path / 't-0' / '00000000000000000000.log', 'ab').write(b'torn')\n"
        "os._exit(0)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=ROOT, capture_output=True)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    with LogDir(tmp_path) as reader:  # a reader sees the damage but does not repair it
        assert not reader.clean_shutdown
        assert reader.log("t-0").log_end_offset == 8
    with LogDir(tmp_path, writable=True) as logdir:
        assert not logdir.clean_shutdown
        log = logdir.log("t-0")
        assert log.last_recovery.truncated_bytes == 4  # type: ignore[union-attr]
        assert [r.value for r in log.records()][-3:] == [b"new"] * 3
        assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    with LogDir(tmp_path, writable=True) as logdir:
        assert logdir.clean_shutdown
        assert logdir.log("t-0").last_recovery.recovered_segments == []  # type: ignore[union-attr]


def test_checkpoints_keep_partitions_not_opened_and_drop_deleted_ones(tmp_path: Path) -> None:
    with LogDir(tmp_path, writable=True) as logdir:
        for name in ("a", "b", "c"):
            logdir.create_partition(name, 0).append_records([rec()] * 2)
    os.rename(tmp_path / "c-0", tmp_path / "c-0.abc-delete")
    with LogDir(tmp_path, writable=True) as logdir:
        logdir.log("a-0").append_records([rec()])
    recovery = parse_offset_checkpoint((tmp_path / "recovery-point-offset-checkpoint").read_bytes())
    assert recovery == {("a", 0): 3, ("b", 0): 2}
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()


def test_readers_never_modify_a_directory(tmp_path: Path) -> None:
    with LogDir(tmp_path, Settings({"segment.bytes": 500}), writable=True) as logdir:
        log = logdir.create_partition("t", 0)
        for i in range(40):
            log.append_records([rec(b"%d" % i * 20)])
        log.flush()
        logdir.write_checkpoints()
        before_close = tree_fingerprint(tmp_path)
        with LogDir(tmp_path) as reader:  # while the writer is live: preallocated indexes, no marker
            live = reader.log("t-0")
            assert [r.offset for r in live.records()] == list(range(40))
            live.describe()
            live.offset_for_timestamp(0)
            live.refresh()
        assert tree_fingerprint(tmp_path) == before_close
    before = tree_fingerprint(tmp_path)
    with LogDir(tmp_path) as reader:
        for lg in reader:
            list(lg.records())
            lg.describe()
        reader.flush()
    assert tree_fingerprint(tmp_path) == before


@pytest.mark.allow_warnings("recovery cuts the torn tail it is given")
def test_clean_shutdown_marker_is_kafka_3_7s_and_any_version_is_read(tmp_path: Path, fixtures_dir: Path) -> None:
    from kafkafs.storage.logdir import clean_shutdown_content, parse_clean_shutdown

    with LogDir(tmp_path, writable=True) as logdir:
        logdir.create_partition("t", 0).append_records([rec()])
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).read_bytes() == b'{"version":0,"brokerEpoch":-1}'
    # byte for byte what a Kafka 3.7.1 broker wrote
    assert (fixtures_dir / "kafka-logs-a" / CLEAN_SHUTDOWN_FILE).read_bytes() == clean_shutdown_content()
    assert parse_clean_shutdown(b"") == -1  # older brokers: an empty file
    assert parse_clean_shutdown(b'{"version":0,"brokerEpoch":42}') == 42
    assert parse_clean_shutdown(b'{"version":"0","broker_epoch":"7"}') == 7  # later brokers: strings
    assert parse_clean_shutdown(b"not json") == -1
    assert parse_clean_shutdown(b"[1]") == -1
    for content in (b"", b'{"version":0,"brokerEpoch":42}', b"garbage"):
        (tmp_path / CLEAN_SHUTDOWN_FILE).write_bytes(content)
        with LogDir(tmp_path) as reader:
            assert reader.clean_shutdown  # its presence is what counts
        with LogDir(tmp_path, writable=True) as logdir:
            assert logdir.clean_shutdown
            assert logdir.log("t-0").last_recovery.recovered_segments == []  # type: ignore[union-attr]
            assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
        # the marker found goes back byte for byte (a KRaft broker's epoch kept: R20-1)
        assert (tmp_path / CLEAN_SHUTDOWN_FILE).read_bytes() == content
    (tmp_path / CLEAN_SHUTDOWN_FILE).unlink()  # none found: a writer that recovered every log says -1
    with LogDir(tmp_path, writable=True) as logdir:
        logdir.recover_all = True
        logdir.log("t-0")
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).read_bytes() == b'{"version":0,"brokerEpoch":-1}'


@pytest.mark.allow_warnings("recovery cuts")
def test_a_kraft_brokers_epoch_is_kept_unless_damage_was_repaired(tmp_path: Path) -> None:
    """R20-1: Kafka 4.4 sends the marker's epoch when it registers; -1 makes its controller treat the
    restart as unclean (an unclean election where the broker was the last eligible replica)."""
    marker = b'{"version":0,"brokerEpoch":97}'
    with LogDir(tmp_path, writable=True) as logdir:
        logdir.create_partition("t", 0).append_records([rec()])
    (tmp_path / CLEAN_SHUTDOWN_FILE).write_bytes(marker)
    for recover_all in (False, True):  # produce and clean; recover (every segment checked, nothing wrong)
        with LogDir(tmp_path, writable=True) as logdir:
            logdir.recover_all = recover_all
            logdir.log("t-0").append_records([rec()])
        assert (tmp_path / CLEAN_SHUTDOWN_FILE).read_bytes() == marker
    segment = next((tmp_path / "t-0").glob("*.log"))
    with open(segment, "ab") as f:
        f.write(b"\0" * 7)  # bytes after the last whole batch: recover cuts them (damage repaired)
    with LogDir(tmp_path, writable=True) as logdir:
        logdir.recover_all = True
        assert logdir.log("t-0").last_recovery.damaged()  # type: ignore[union-attr]
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).read_bytes() == b'{"version":0,"brokerEpoch":-1}'


def test_cleaner_checkpoint_merges_and_drops_partitions_that_are_gone(tmp_path: Path) -> None:
    with LogDir(tmp_path, writable=True) as logdir:
        for name in ("a", "b"):
            logdir.create_partition(name, 0)
        logdir.update_cleaner_checkpoint({("a", 0): 5, ("gone", 0): 9})
        assert logdir.cleaner_offsets() == {("a", 0): 5}
        logdir.update_cleaner_checkpoint({("b", 0): 7})
        assert (tmp_path / "cleaner-offset-checkpoint").read_bytes() == b"0\n2\na 0 5\nb 0 7\n"
    with LogDir(tmp_path) as reader:
        assert reader.cleaner_offsets() == {("a", 0): 5, ("b", 0): 7}
        with pytest.raises(ReadOnlyError):
            reader.update_cleaner_checkpoint({("a", 0): 6})


def test_a_refused_partition_served_read_only_says_why_whoever_opened_it_first(tmp_path, caplog):
    """A --rw mount serves a partition folder that links outside LOGDIR read-only; the reason must be
    logged even when another user of the log directory (the mount's cleaner) met the refusal first,
    or the mount's append file answers EACCES with nothing said anywhere."""
    from kafkafs.errors import UnsafeFileError

    outside = tmp_path / "outside"
    (tmp_path / "src").mkdir()
    with LogDir(tmp_path / "src", writable=True) as d:
        d.create_partition("t", 0).append_records([ProducerRecord(1, None, b"v", ())])
    (tmp_path / "src" / "t-0").rename(outside)
    logdir = tmp_path / "logs"
    logdir.mkdir()
    os.symlink(outside, logdir / "t-0")
    with LogDir(logdir, writable=True) as d:
        with pytest.raises(UnsafeFileError):
            d.log("t-0")  # the cleaner's way: refused, not opened
        caplog.clear()
        log_ = d.log("t-0", read_only_fallback=True)  # the tree's way
        assert not log_.writable
        assert "outside the log directory" in caplog.text and "serving it read-only" in caplog.text


def test_log_start_checkpoint_lists_only_starts_above_the_first_segment(tmp_path: Path) -> None:
    """Finding 2 of issue 19: Kafka's LogManager checkpoints a partition's log start only where it is
    above the base offset of its first segment (DeleteRecords moved it); kafkafs listed every partition
    (``t 0 0``). A start a broker checkpointed stays, within the log, and is kept."""
    with LogDir(tmp_path, writable=True) as logdir:
        logdir.create_partition("moved", 0).append_records([rec()] * 5)
        logdir.create_partition("still", 0).append_records([rec()] * 5)
    (tmp_path / "log-start-offset-checkpoint").write_bytes(b"0\n1\nmoved 0 3\n")
    with LogDir(tmp_path, writable=True) as logdir:
        assert logdir.log("moved-0").log_start_offset == 3
        logdir.log("still-0").append_records([rec()])
    starts = parse_offset_checkpoint((tmp_path / "log-start-offset-checkpoint").read_bytes())
    assert starts == {("moved", 0): 3}


def test_a_read_only_open_looks_at_its_folder_three_times(tmp_path: Path, monkeypatch) -> None:
    """Issue 25: every look is a system call that lets the GIL go (a mount opens partitions on a thread beside
    the FUSE loop): one lstat says folder-and-not-an-alias, one stat gives the folder's identity and its mtime
    before the listing, one after it. An alias (a link), a file and a link to nothing are still no partition."""
    with LogDir(tmp_path, writable=True) as writer:
        writer.create_partition("t", 0).append_records([rec()])
    os.symlink(tmp_path / "t-0", tmp_path / "t-1")
    (tmp_path / "t-2").write_bytes(b"")
    os.symlink(tmp_path / "gone", tmp_path / "t-3")
    folder = str(tmp_path / "t-0")
    looks: list[str] = []
    real_stat, real_lstat = os.stat, os.lstat

    def stat(path, *args, **kwargs):
        if str(path) == folder:
            looks.append("stat")
        return real_stat(path, *args, **kwargs)

    def lstat(path, *args, **kwargs):
        if str(path) == folder:
            looks.append("lstat")
        return real_lstat(path, *args, **kwargs)

    with LogDir(tmp_path) as logdir:
        monkeypatch.setattr(os, "stat", stat)
        monkeypatch.setattr(os, "lstat", lstat)
        log_ = logdir.log("t-0")
        monkeypatch.undo()
        assert len(looks) <= 3, looks
        assert [s.base_offset for s in log_.segments] == [0] and log_.log_end_offset == 1
        for name in ("t-1", "t-2", "t-3"):
            with pytest.raises(InvalidName):
                logdir.log(name)
