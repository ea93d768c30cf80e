"""The clean-shutdown marker is written only where it is true of every log in the directory (review12 R12-1).

A broker that finds ``.kafka_cleanshutdown`` skips the recovery of every log (Kafka's LogManager), so a
writer may leave it only when it knows every log is whole: the marker was there when it opened the
directory and it closed what it touched, or it recovered every log a broker loads itself. Never after a
failure that may have left a log half-written. Kafka's LogManager.shutdown writes it under the same two
conditions, and only once every log of the directory closed.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from kafkafs.errors import InvalidName
from kafkafs.format.checkpoint import parse_offset_checkpoint
from kafkafs.format.jsonview import ProducerRecord
from kafkafs.storage.logdir import CLEAN_SHUTDOWN_FILE, LogDir

pytestmark = pytest.mark.allow_warnings("the recovery of a-0 cuts its torn tail and says so")

TORN = b"garbagegarbage"  # what a crash in the middle of a write leaves at a segment's end


def rec(value: bytes = b"v") -> ProducerRecord:
    return ProducerRecord(1000, None, value, ())


def _two_partitions(path: Path) -> Path:
    """a-0 and b-0, 3 records each, closed cleanly; then a crash: no marker, a torn tail on a-0."""
    with LogDir(path, writable=True) as logdir:
        for topic in ("a", "b"):
            logdir.create_partition(topic, 0).append_records([rec()] * 3)
    assert (path / CLEAN_SHUTDOWN_FILE).exists()
    (path / CLEAN_SHUTDOWN_FILE).unlink()
    segment = path / "a-0" / "00000000000000000000.log"
    with open(segment, "ab") as f:
        f.write(TORN)
    return segment


def test_a_writer_does_not_vouch_for_a_partition_it_did_not_recover(tmp_path: Path) -> None:
    segment = _two_partitions(tmp_path)
    torn = segment.read_bytes()
    with LogDir(tmp_path, writable=True) as logdir:
        logdir.log("b-0").append_records([rec(b"new")])
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()  # was written: a broker then skipped a-0's recovery
    assert not logdir.marked_clean and "a-0 was not recovered" in str(logdir.not_marked_because)
    assert segment.read_bytes() == torn  # a-0 untouched: the next writer or broker recovers it
    recovery = parse_offset_checkpoint((tmp_path / "recovery-point-offset-checkpoint").read_bytes())
    assert recovery == {("a", 0): 3, ("b", 0): 4}

    with LogDir(tmp_path, writable=True) as logdir:  # one that recovers every partition may say it
        for log_ in logdir:
            assert log_.log_end_offset in (3, 4)
    assert logdir.marked_clean and (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert segment.read_bytes() == torn[: -len(TORN)]


def test_a_writer_that_found_the_marker_puts_it_back(tmp_path: Path) -> None:
    _two_partitions(tmp_path)
    with LogDir(tmp_path, writable=True) as logdir:
        list(logdir)  # every partition opened: recovered
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    with LogDir(tmp_path, writable=True) as logdir:
        logdir.log("b-0").append_records([rec(b"new")])
        assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()  # gone while it writes
    assert logdir.marked_clean and (tmp_path / CLEAN_SHUTDOWN_FILE).exists()


def test_folders_a_broker_loads_count_and_the_metadata_log_does_not(tmp_path: Path) -> None:
    _two_partitions(tmp_path)
    (tmp_path / "a-1.0123456789abcdef0123456789abcdef-future").mkdir()  # a future replica: a broker loads it
    (tmp_path / "a-2.0123456789abcdef0123456789abcdef-delete").mkdir()  # removed after the load: never mind
    with LogDir(tmp_path, writable=True) as logdir:
        list(logdir)  # every partition opened: recovered
    assert not logdir.marked_clean and "-future was not recovered" in str(logdir.not_marked_because)
    (tmp_path / "a-1.0123456789abcdef0123456789abcdef-future").rmdir()
    (tmp_path / "__cluster_metadata-0").mkdir()  # Kafka recovers it at every start, marker or not
    with LogDir(tmp_path, writable=True) as logdir:
        for name in ("a-0", "b-0"):
            logdir.log(name)
    assert logdir.marked_clean


def test_an_error_midway_leaves_no_marker_and_a_refusal_does(tmp_path: Path) -> None:
    _two_partitions(tmp_path)
    with LogDir(tmp_path, writable=True) as logdir:
        list(logdir)  # every partition opened: recovered
    with pytest.raises(InvalidName), LogDir(tmp_path, writable=True) as logdir:  # nothing written
        logdir.log("b-0").append_records([rec()])
        logdir.log("nope-0")
    assert logdir.marked_clean
    with pytest.raises(OSError), LogDir(tmp_path, writable=True) as logdir:  # e.g. a disk error in a recovery
        logdir.log("b-0").append_records([rec()])
        raise OSError(errno.EIO, "Input/output error")
    assert not logdir.marked_clean and not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    recovery = parse_offset_checkpoint((tmp_path / "recovery-point-offset-checkpoint").read_bytes())
    assert recovery == {("a", 0): 3, ("b", 0): 5}  # what was flushed is checkpointed all the same


def test_a_failed_append_leaves_no_marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _two_partitions(tmp_path)
    with LogDir(tmp_path, writable=True) as logdir:
        list(logdir)  # every partition opened: recovered
    with LogDir(tmp_path, writable=True) as logdir:
        log_ = logdir.log("b-0")
        segment = log_.active_segment
        assert segment is not None

        def full(*args: object) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(segment, "append", full)
        with pytest.raises(OSError):  # a caller that goes on after it (the mount answers the write ENOSPC)
            log_.append_records([rec()])
        monkeypatch.undo()
        assert log_.write_failed
    assert not logdir.marked_clean and "a write to b-0 failed" in str(logdir.not_marked_because)
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()


def test_every_log_is_closed_when_one_fails_and_its_checkpoint_entry_is_kept(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    _two_partitions(tmp_path)
    with LogDir(tmp_path, writable=True) as logdir:
        list(logdir)  # every partition opened: recovered
    logdir = LogDir(tmp_path, writable=True)
    a, b = logdir.log("a-0"), logdir.log("b-0")
    a.append_records([rec()] * 2)
    b.append_records([rec()] * 4)

    def failing_close() -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "a-0" / "00000000000000000000.index"))

    monkeypatch.setattr(a, "close", failing_close)
    with pytest.raises(PermissionError):
        logdir.close()
    assert b._closed  # closed (and flushed) all the same
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    recovery = parse_offset_checkpoint((tmp_path / "recovery-point-offset-checkpoint").read_bytes())
    assert recovery == {("a", 0): 3, ("b", 0): 7}  # a-0 keeps its old entry
    LogDir(tmp_path, writable=True).close()  # the lock was released
