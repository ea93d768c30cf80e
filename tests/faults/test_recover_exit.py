"""``recover`` exits with what ``verify`` would have said before it ran (issue 20, defect 8; SPEC §4).

After a SIGKILL, ``recover`` exited 1 in 28 of 30 rounds when all it did was rebuild the active
segment's index, which a broker does at every unclean start. 1 when it cut bytes or replaced a damaged
file; 0 when it only rebuilt what an unclean stop or a missing index leaves.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fs.conftest import ROOT

WRITER = """
import os, sys
from pathlib import Path

import pytest
from kafkafs.format.jsonview import ProducerRecord
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir

path = Path(sys.argv[1])
path.mkdir(exist_ok=True)
d = LogDir(path, Settings({"segment.bytes": 20000, "index.interval.bytes": 512}), writable=True)
log = d.log("t-0") if (path / "t-0").exists() else d.create_partition("t", 0)
start = log.log_end_offset
for i in range(int(sys.argv[2])):
    log.append_records([ProducerRecord(1_763_700_000_000 + start + i, None, b"value %d" % (start + i), ())])
print("appended", flush=True)
if len(sys.argv) > 3:
    import time
    time.sleep(60)  # killed here
os._exit(0)  # no close: an unclean stop
"""


def _kafkafs(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "kafkafs", *args], env=env, capture_output=True, timeout=120)


def _write(logdir: Path, n: int, *, kill: bool = False) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-c", WRITER, str(logdir), str(n), *(["sleep"] if kill else [])]
    if not kill:
        subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=120)
        return
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"appended\n"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def test_recover_after_sigkill_exits_0_when_it_only_rebuilt_the_active_index(tmp_path):
    logdir = tmp_path / "logs"
    for round_ in range(3):
        _write(logdir, 400, kill=True)
        segments = sorted((logdir / "t-0").glob("*.log"))
        assert len(segments) > 1
        active_index = segments[-1].with_suffix(".index")
        assert active_index.stat().st_size == 10 * 1024 * 1024  # preallocated, as a kill leaves it
        assert _kafkafs("verify", str(logdir)).returncode == 0
        done = _kafkafs("recover", str(logdir))
        assert done.returncode == 0, (round_, done.stdout, done.stderr)
        out = done.stdout.decode()
        assert f"rebuilt {active_index.name}" in out and "nothing wrong" in out
        assert active_index.stat().st_size < 4096
        assert _kafkafs("verify", str(logdir)).returncode == 0


def test_recover_exits_0_for_a_missing_index_and_1_for_damage(tmp_path):
    logdir = tmp_path / "logs"
    _write(logdir, 600)
    sealed = sorted((logdir / "t-0").glob("*.log"))[0]
    sealed.with_suffix(".index").unlink()
    sealed.with_suffix(".timeindex").unlink()
    done = _kafkafs("recover", str(logdir))
    assert done.returncode == 0, done.stdout
    assert sealed.with_suffix(".index").stat().st_size > 0
    # a sealed index holding entries that point nowhere: a damaged file, replaced
    index = sealed.with_suffix(".index")
    data = bytearray(index.read_bytes())
    data[4:8] = (123457).to_bytes(4, "big")
    index.write_bytes(bytes(data))
    _write(logdir, 1)  # leaves an unclean stop, so recover re-validates
    assert _kafkafs("verify", str(logdir)).returncode == 1
    assert _kafkafs("recover", str(logdir)).returncode == 1
    assert _kafkafs("verify", str(logdir)).returncode == 0
    # a torn tail: bytes cut
    active = sorted((logdir / "t-0").glob("*.log"))[-1]
    _write(logdir, 5)
    with open(active, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x40torn")
    done = _kafkafs("recover", str(logdir))
    assert done.returncode == 1 and b"truncated" in done.stdout


@pytest.mark.parametrize("garbage", [bytes(range(100, 137)), (7).to_bytes(4, "big") + (65536).to_bytes(4, "big")],
                         ids=["odd-size", "entry-pointing-nowhere"])
@pytest.mark.parametrize("clean", [True, False], ids=["clean-stop", "unclean-stop"])
def test_verify_and_recover_agree_on_a_damaged_active_index(tmp_path, clean, garbage):
    """review6 F4: one rule for the active segment's index in both commands, Kafka's: after a clean stop a
    broker loads it as it is (LogLoader recovers nothing, and LogSegment.sanityCheck checks only the
    .txnindex), so garbage there is damage: verify 1, recover replaces it and exits 1. After an unclean
    stop a broker recovers from the recovery point on, the active segment always, rebuilding its
    indexes whatever they hold: no damage, verify 0 (a note), recover 0. Before, verify said 1 and
    recover 0 in both cases."""
    logdir = tmp_path / "logs"
    _write(logdir, 400)
    assert _kafkafs("recover", str(logdir)).returncode == 0  # a clean close: trimmed indexes, the marker
    assert (logdir / ".kafka_cleanshutdown").exists()
    active_index = sorted((logdir / "t-0").glob("*.log"))[-1].with_suffix(".index")
    with open(active_index, "ab") as f:
        f.write(garbage)
    if not clean:
        (logdir / ".kafka_cleanshutdown").unlink()
    verified = _kafkafs("verify", str(logdir))
    assert verified.returncode == (1 if clean else 0), verified.stdout
    assert active_index.name in verified.stdout.decode()  # said either way: a problem, or a note
    done = _kafkafs("recover", str(logdir))
    assert done.returncode == verified.returncode, (done.stdout, verified.stdout)
    assert f"rebuilt {active_index.name}" in done.stdout.decode()
    assert ("nothing wrong" in done.stdout.decode()) is not clean, done.stdout
    assert _kafkafs("verify", str(logdir)).returncode == 0


def _leftover_after_recover(logdir: Path, leftover: str) -> tuple[str, list[Path]]:
    """A recovered directory (marked clean) with one compaction leftover beside t-0's first segment:
    the leftover's name, and t-0's segments."""
    _write(logdir, 400)
    assert _kafkafs("recover", str(logdir)).returncode == 0
    segments = sorted((logdir / "t-0").glob("*.log"))
    source = segments[0] if leftover != ".timeindex" else segments[0].with_suffix(".timeindex")
    name = f"{int(segments[0].stem) + 999_999:020d}{leftover}" if leftover == ".timeindex" else \
        segments[0].stem + leftover
    (logdir / "t-0" / name).write_bytes(source.read_bytes())
    return name, segments


@pytest.mark.parametrize("leftover", [".log.cleaned", ".log.swap", ".index.swap", ".timeindex"])
def test_verify_says_what_recover_finishes_of_an_interrupted_compaction(tmp_path, leftover):
    """review6 F17: a compaction's leftovers (.cleaned, .swap) and an index whose .log is gone: recover
    deletes or completes them and exits 1 (damage repaired), so verify must say them and exit 1 (it said
    OK). A .deleted file (retention's pending removal) is no damage to either."""
    logdir = tmp_path / "logs"
    name, segments = _leftover_after_recover(logdir, leftover)
    verified = _kafkafs("verify", str(logdir))
    assert verified.returncode == 1 and name in verified.stdout.decode(), verified.stdout
    done = _kafkafs("recover", str(logdir))
    assert done.returncode == 1, done.stdout
    assert _kafkafs("verify", str(logdir)).returncode == 0
    (logdir / "t-0" / (segments[0].stem + ".log.deleted")).write_bytes(b"")
    assert _kafkafs("verify", str(logdir)).returncode == 0


@pytest.mark.parametrize("leftover", [".log.cleaned", ".log.swap", ".index.swap", ".timeindex"])
def test_an_interrupted_compaction_after_an_unclean_stop_is_routine(tmp_path, leftover):
    """review21 R21-8: a --rw --clean mount killed while compacting leaves .swap/.cleaned files; a broker's
    start finishes or undoes them at INFO ("recoverable"), so after an unclean stop (no marker) verify
    notes them (exit 0) and recover finishes them and exits 0, saying so (both said 1: damage; failed
    before, seen). Where the last writer closed cleanly they stay damage (the test above)."""
    logdir = tmp_path / "logs"
    name, segments = _leftover_after_recover(logdir, leftover)
    (logdir / ".kafka_cleanshutdown").unlink()  # the writer was killed
    verified = _kafkafs("verify", str(logdir))
    assert verified.returncode == 0 and name in verified.stdout.decode(), verified.stdout
    assert "after an unclean stop" in verified.stdout.decode(), verified.stdout
    done = _kafkafs("recover", str(logdir))
    assert done.returncode == 0, done.stdout
    assert "finished an interrupted compaction or deletion" in done.stdout.decode(), done.stdout
    assert not (logdir / "t-0" / name).exists()
    assert _kafkafs("verify", str(logdir)).returncode == 0


def test_recover_of_a_cleanly_stopped_kraft_directory_exits_0(tmp_path, fixtures_dir):
    """review7 R6: a Kafka 4.4 KRaft broker's clean stop leaves __cluster_metadata-0's active .index and
    .timeindex preallocated (10 MiB, untrimmed: the raft log is not closed through the log manager; the
    broker recovers it at every start). Here fixture a (a broker's clean stop) with its active segment's
    indexes preallocated as that broker leaves them: verify said 0 and recover 1 ("rebuilt")."""
    import shutil

    copy = tmp_path / "a"
    shutil.copytree(fixtures_dir / "kafka-logs-a", copy)
    assert (copy / ".kafka_cleanshutdown").exists()
    part = copy / "__consumer_offsets-12"
    for name, size in (("00000000000000000862.index", 10485760), ("00000000000000000862.timeindex", 10485756)):
        path = part / name
        path.chmod(0o644)
        with open(path, "r+b") as f:
            f.truncate(size)
    assert _kafkafs("verify", str(copy)).returncode == 0
    proc = _kafkafs("recover", str(copy))
    assert proc.returncode == 0, (proc.stdout + proc.stderr).decode()
    # left as the broker left them (review20 R20-2: a clean start rebuilds nothing; recover trimmed them)
    assert b"__consumer_offsets-12: checked, nothing to change" in proc.stdout
    assert (part / "00000000000000000862.index").stat().st_size == 10485760


@pytest.mark.parametrize("case", ["preallocated", "after-a-clean-stop", "zeros-of-another-length"])
def test_a_preallocated_active_segment_is_no_damage_after_an_unclean_stop(tmp_path, case):
    """review7 R7: a broker with preallocate creates the active .log at the segment size, zero-filled,
    and trims it at a roll or a clean stop: a running broker's directory (or a killed one's) holds such
    a file, and its start trims the zeros. verify said "N bytes after the last whole batch", exit 1.
    Now verify notes it and recover trims it, both 0; zeros after a clean stop, or a file of another
    length (zeros a crash appended), stay damage to both."""
    logdir = tmp_path / "logs"
    _write(logdir, 50)  # an unclean stop: no .kafka_cleanshutdown
    active = sorted((logdir / "t-0").glob("*.log"))[-1]
    data = active.stat().st_size
    os.truncate(active, 20000 if case != "zeros-of-another-length" else 19000)  # the writer's segment.bytes
    if case == "after-a-clean-stop":
        (logdir / ".kafka_cleanshutdown").touch()
    settings = ("--set", "segment.bytes=20000")
    damage = case != "preallocated"
    verified = _kafkafs("verify", str(logdir), *settings)
    assert verified.returncode == int(damage), verified.stdout
    said = verified.stdout.decode()
    assert ("bytes after the last whole batch" in said) is damage and ("preallocates" in said) is not damage, said
    done = _kafkafs("recover", str(logdir), *settings)
    assert done.returncode == verified.returncode, (done.stdout, done.stderr)
    assert (f"trimmed {20000 - data} preallocated zero bytes" in done.stdout.decode()) is not damage, done.stdout
    assert active.stat().st_size == data
    assert _kafkafs("verify", str(logdir), *settings).returncode == 0


def test_recover_of_a_compacted_aborted_transaction_exits_0(tmp_path):
    """review7 R9: compaction removes an aborted transaction's records, keeps its ABORT marker (until the
    delete horizon) and writes the cleaned segment's .txnindex with the marker's entry, as Kafka's
    cleaner does; a recovery's rebuild finds no transaction for a marker alone. Both are valid: verify
    said 0, recover rebuilt the .txnindex and said 1."""
    from kafkafs.format.batch import encode_batch, encode_control_batch
    from kafkafs.storage.config import Settings
    from kafkafs.storage.logdir import LogDir

    logdir = tmp_path / "logs"
    logdir.mkdir()
    settings = ["--set", "cleanup.policy=compact", "--set", "segment.bytes=400", "--set", "min.cleanable.dirty.ratio=0.01"]
    with LogDir(logdir, Settings({"cleanup.policy": "compact", "segment.bytes": 400}), writable=True) as ld:
        log = ld.create_partition("c", 0)
        for i in range(6):
            log.append_records([(1, b"k%d" % (i % 2), b"v%d" % i, ())])
        log.append_batches(encode_batch([(1, b"k9", b"aborted", ())], transactional=True, producer_id=7,
                                        producer_epoch=0, base_sequence=0))
        log.append_batches(encode_control_batch("ABORT", producer_id=7, producer_epoch=0, timestamp=1))
        for i in range(12):
            log.append_records([(1, b"k%d" % (i % 2), b"w%d" % i, ())])
    assert _kafkafs("clean", str(logdir), *settings).returncode == 0
    entries = [p for p in (logdir / "c-0").glob("*.txnindex") if p.stat().st_size]
    assert entries, "the cleaned segment keeps the ABORT marker's entry"
    assert _kafkafs("verify", str(logdir)).returncode == 0
    done = _kafkafs("recover", str(logdir))
    assert done.returncode == 0, done.stdout.decode()


def test_a_txnindex_entry_no_marker_supports_is_damage_to_both(tmp_path):
    """review7 R12: a well-formed .txnindex entry that names no ABORT marker (producer 99 here): recover
    replaces it (1); verify said OK (0). A broker writes each entry into its marker's segment."""
    import struct

    from kafkafs.format.batch import encode_batch, encode_control_batch
    from kafkafs.storage.logdir import LogDir

    logdir = tmp_path / "logs"
    logdir.mkdir()
    with LogDir(logdir, writable=True) as ld:
        log = ld.create_partition("t", 0)
        log.append_batches(encode_batch([(1, b"k", b"aborted", ())], transactional=True, producer_id=7,
                                        producer_epoch=0, base_sequence=0))
        log.append_batches(encode_control_batch("ABORT", producer_id=7, producer_epoch=0, timestamp=1))
        log.append_records([(1, b"k", b"v", ())])
    assert _kafkafs("verify", str(logdir)).returncode == 0  # the real entry: its marker is there
    with open(logdir / "t-0" / "00000000000000000000.txnindex", "ab") as f:
        f.write(struct.pack(">hqqqq", 0, 99, 0, 1, 2))
    verified = _kafkafs("verify", str(logdir))
    assert verified.returncode == 1 and b"entry of producer 99 (0..1) names no ABORT marker" in verified.stdout
    assert _kafkafs("recover", str(logdir)).returncode == 1
    assert _kafkafs("verify", str(logdir)).returncode == 0


@pytest.mark.parametrize("field, value, said", [
    (2, 0, b"entry 0 of producer 7 (0..3, lastStableOffset 4) is not what the log gives for that ABORT marker: "
           b"producer 7 (2..3, lastStableOffset 4)"),
    (4, 3, b"entry 0 of producer 7 (2..3, lastStableOffset 3) is not what the log gives"),
    (None, None, b"lacks the entry of producer 7 (2..3, lastStableOffset 4) that the ABORT marker at offset 3 gives"),
])
def test_a_txnindex_entry_the_log_does_not_give_is_damage_to_both(tmp_path, field, value, said):
    """review17 R17-3: an entry whose firstOffset (here the committed transaction's 0 instead of 2) or
    lastStableOffset is wrong, or a lost entry, passed verify (0) while recover rebuilt the .txnindex (1);
    read_committed and `transactions` trust it. verify compares with what recover's rebuild writes."""
    import struct

    from kafkafs.format.batch import encode_batch, encode_control_batch
    from kafkafs.storage.logdir import LogDir

    logdir = tmp_path / "logs"
    logdir.mkdir()
    with LogDir(logdir, writable=True) as ld:
        log = ld.create_partition("t", 0)
        for i, marker in enumerate(("COMMIT", "ABORT")):
            log.append_batches(encode_batch([(1, b"k", b"v%d" % i, ())], transactional=True, producer_id=7,
                                            producer_epoch=0, base_sequence=i))
            log.append_batches(encode_control_batch(marker, producer_id=7, producer_epoch=0, timestamp=1))
        log.append_records([(1, b"k", b"v", ())])
    path = logdir / "t-0" / "00000000000000000000.txnindex"
    data = bytearray(path.read_bytes())
    assert struct.unpack(">hqqqq", data) == (0, 7, 2, 3, 4)
    assert _kafkafs("verify", str(logdir)).returncode == 0
    if field is None:
        data = bytearray()
    else:
        struct.pack_into(">q", data, 2 + 8 * (field - 1), value)
    path.write_bytes(bytes(data))
    verified = _kafkafs("verify", str(logdir))
    assert verified.returncode == 1 and said in verified.stdout, verified.stdout
    done = _kafkafs("recover", str(logdir))
    assert done.returncode == 1 and b"rebuilt 00000000000000000000.txnindex" in done.stdout, done.stdout
    assert struct.unpack(">hqqqq", path.read_bytes()) == (0, 7, 2, 3, 4)
    assert _kafkafs("verify", str(logdir)).returncode == 0


def test_a_followers_later_last_stable_offset_is_no_damage(tmp_path):
    """A follower appends a fetched run of batches at once and computes an aborted transaction's last
    stable offset once the run is in: a transaction of another producer begun after the marker in that
    run makes it larger than a rebuild's (Kafka's lastStableOffset(completedTxn)). That is Kafka's own
    file: verify says nothing, recover exits 0 (a lower value, above, is damage)."""
    import struct

    from kafkafs.format.batch import encode_batch, encode_control_batch
    from kafkafs.storage.logdir import LogDir

    logdir = tmp_path / "logs"
    logdir.mkdir()
    with LogDir(logdir, writable=True) as ld:
        log = ld.create_partition("t", 0)
        log.append_batches(encode_batch([(1, b"k", b"v", ())], transactional=True, producer_id=7, producer_epoch=0,
                                        base_sequence=0))
        log.append_batches(encode_control_batch("ABORT", producer_id=7, producer_epoch=0, timestamp=1))
        log.append_records([(1, b"k", b"plain", ())])
        log.append_batches(encode_batch([(1, b"k", b"w", ())], transactional=True, producer_id=8, producer_epoch=0,
                                        base_sequence=0))
    path = logdir / "t-0" / "00000000000000000000.txnindex"
    assert struct.unpack(">hqqqq", path.read_bytes()) == (0, 7, 0, 1, 2)  # as the leader appended it
    # as a follower that fetched offsets 0..3 in one run writes it: producer 8's transaction (first
    # offset 3) was ongoing when the run's aborted transaction was indexed
    follower = struct.pack(">hqqqq", 0, 7, 0, 1, 3)
    path.write_bytes(follower)
    verified = _kafkafs("verify", str(logdir))
    assert verified.returncode == 0, verified.stdout
    done = _kafkafs("recover", str(logdir))  # the active segment's indexes are rebuilt, as at a broker's start
    assert done.returncode == 0 and b"0 changed" in done.stdout and b"damage" not in done.stdout, done.stdout


def test_recover_exits_0_for_empty_indexes_verify_accepts(tmp_path):
    """review12 R12-3: sealed segments whose .index is empty and trimmed (a broker counts
    index.interval.bytes from a restart, or wrote with a larger interval) are no damage to verify (0),
    yet recover, rebuilding them after an unclean stop with entries, said 'rebuilt ...index' and exit 1.
    Written here with a larger interval than the rebuild's, then the stop made unclean."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    writer = WRITER.replace('"index.interval.bytes": 512', '"index.interval.bytes": 10_000_000')
    subprocess.run([sys.executable, "-c", writer, str(tmp_path), "1200"], env=env, check=True, capture_output=True,
                   timeout=120)
    indexes = sorted((tmp_path / "t-0").glob("*.index"))
    assert len(indexes) > 2 and all(p.stat().st_size == 0 for p in indexes[:-1])
    (tmp_path / "recovery-point-offset-checkpoint").write_text("0\n1\nt 0 0\n")
    assert _kafkafs("verify", str(tmp_path)).returncode == 0
    done = _kafkafs("recover", str(tmp_path))
    assert done.returncode == 0, done.stdout.decode()
    assert _kafkafs("verify", str(tmp_path)).returncode == 0


def test_a_producer_snapshot_kafka_refuses_is_damage_to_both(tmp_path):
    """review17 (fuzz): a flipped bit in a producer-state .snapshot: verify 0, dump 1 (CRC mismatch),
    recover 0 and the file kept. Kafka's load deletes such a snapshot and rebuilds the producer state
    from the log: a damaged file replaced (SPEC §4), so verify says it (1) and recover removes it (1)."""
    logdir, snapshot = _snapshot_partition(tmp_path)
    snapshots = sorted((logdir / "t-0").glob("*.snapshot"))
    assert snapshots == [snapshot]
    assert _kafkafs("verify", str(logdir)).returncode == 0
    data = bytearray(snapshots[0].read_bytes())
    data[20] ^= 4
    snapshots[0].write_bytes(bytes(data))
    assert _kafkafs("dump", str(snapshots[0])).returncode == 1
    verified = _kafkafs("verify", str(logdir))
    assert verified.returncode == 1, verified.stdout
    assert b"00000000000000000003.snapshot: Snapshot is corrupt (CRC is no longer valid)" in verified.stdout
    done = _kafkafs("recover", str(logdir))
    assert done.returncode == 1 and b"removed damaged 00000000000000000003.snapshot" in done.stdout, done.stdout
    assert _kafkafs("verify", str(logdir)).returncode == 0
    assert _kafkafs("dump", str(snapshots[0])).returncode == 0  # written again at the close, from the log


def _snapshot_partition(tmp_path):
    """A partition t-0 of offsets 0..2 by one idempotent producer, closed (marked clean) with its
    producer snapshot at 3; returns (log directory, snapshot path)."""
    from kafkafs.format.batch import encode_batch
    from kafkafs.storage.logdir import LogDir

    logdir = tmp_path / "logs"
    logdir.mkdir()
    with LogDir(logdir, writable=True) as ld:
        log = ld.create_partition("t", 0)
        for i in range(3):
            log.append_batches(encode_batch([(1, b"k", b"v%d" % i, ())], producer_id=7, producer_epoch=0,
                                            base_sequence=i))
    snapshot = logdir / "t-0" / "00000000000000000003.snapshot"
    assert snapshot.stat().st_size > 20
    return logdir, snapshot


@pytest.mark.parametrize("cut", [0, 20], ids=["empty", "cut"])
def test_a_cut_producer_snapshot_past_the_recovery_point_after_an_unclean_stop_is_a_note(tmp_path, cut):
    """review19 R19-7: a power loss leaves the snapshot written at a roll empty or cut (flushed later).
    Kafka's unclean start deletes every snapshot past the recovery point unread (INFO "Deleted producer
    state snapshot") and rebuilds the producer state from the log: what an unclean stop leaves, so verify
    notes it (0) and recover removes it and exits 0 (84a0234 said damage: 1 and 1)."""
    logdir, snapshot = _snapshot_partition(tmp_path)
    (logdir / ".kafka_cleanshutdown").unlink()
    (logdir / "recovery-point-offset-checkpoint").write_text("0\n1\nt 0 0\n")
    with open(snapshot, "r+b") as f:
        f.truncate(cut)
    verified = _kafkafs("verify", str(logdir))
    assert verified.returncode == 0, verified.stdout
    assert b"note: 00000000000000000003.snapshot:" in verified.stdout, verified.stdout
    done = _kafkafs("recover", str(logdir))
    assert done.returncode == 0, done.stdout
    assert b"removed 00000000000000000003.snapshot" in done.stdout, done.stdout
    assert _kafkafs("verify", str(logdir)).returncode == 0
    assert _kafkafs("dump", str(snapshot)).returncode == 0  # written again at the close, from the log


@pytest.mark.parametrize("stop", ["clean", "unclean at the recovery point"])
def test_an_empty_producer_snapshot_kafka_reads_is_damage_to_both(tmp_path, stop):
    """R19-7's bounds: after a clean stop Kafka loads the latest snapshot, and after an unclean one it reads
    those at or below the recovery point (flushed): an empty one there stays damage to both (1, 1)."""
    logdir, snapshot = _snapshot_partition(tmp_path)
    if stop != "clean":
        (logdir / ".kafka_cleanshutdown").unlink()
        (logdir / "recovery-point-offset-checkpoint").write_text("0\n1\nt 0 3\n")
    snapshot.write_bytes(b"")
    verified = _kafkafs("verify", str(logdir))
    assert verified.returncode == 1, verified.stdout
    assert b"00000000000000000003.snapshot:" in verified.stdout and b"note: 0000" not in verified.stdout
    done = _kafkafs("recover", str(logdir))
    assert done.returncode == 1 and b"removed damaged 00000000000000000003.snapshot" in done.stdout, done.stdout
    assert _kafkafs("verify", str(logdir)).returncode == 0


def test_a_writer_never_appends_after_a_batch_cut_short_in_a_cleanly_stopped_directory(tmp_path):
    """review23 R23-6: the active segment of a cleanly stopped directory ends inside its last batch (the
    file cut short, its header whole): a reader takes that for a write in progress, and the writers
    did too: `produce` appended after it (then failed on the time index, exit 2), the mount's `append`
    said success for a record no reader would see (failed before, seen). Now refused in one line as for
    torn bytes (exit 1, nothing changed); `recover` cuts the batch, and the next produce appends."""
    logdir = tmp_path / "logs"
    _write(logdir, 50)
    assert _kafkafs("recover", str(logdir)).returncode == 0
    active = sorted((logdir / "t-0").glob("*.log"))[-1]
    data = active.read_bytes()
    pos = last = 0
    while pos < len(data):  # the last batch's position
        last = pos
        pos += 12 + int.from_bytes(data[pos + 8:pos + 12], "big")
    os.truncate(active, last + (len(data) - last) // 2)
    before = {p.name: p.read_bytes() for p in (logdir / "t-0").iterdir()}
    proc = subprocess.run([sys.executable, "-m", "kafkafs", "produce", str(logdir), "t-0"], input=b"after\n",
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, timeout=120)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    errors = [line for line in proc.stderr.decode().splitlines() if "WARNING" not in line]
    assert len(errors) == 1 and f"position {last}: the file ends inside the batch" in errors[0], proc.stderr
    assert "refusing to write" in errors[0] and "kafkafs recover" in errors[0], proc.stderr
    assert {p.name: p.read_bytes() for p in (logdir / "t-0").iterdir()} == before
    assert _kafkafs("recover", str(logdir)).returncode == 1  # cut: damage
    assert active.stat().st_size == last
    proc = subprocess.run([sys.executable, "-m", "kafkafs", "produce", str(logdir), "t-0"], input=b"after\n",
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    consumed = _kafkafs("consume", str(logdir), "t-0", "-o", "-1")
    assert consumed.returncode == 0 and b'"value":"after"' in consumed.stdout, consumed


def test_a_writer_never_appends_after_torn_bytes_of_a_cleanly_stopped_directory(tmp_path):
    """review22 R22-1: with the clean-shutdown marker no recovery runs, and `produce` appended its batch
    after a few torn bytes at the end of the active segment: "appended", exit 0, marker kept, the record
    unreadable for every reader and a 4.4 broker then failed to start (failed before, seen: exit 0).
    Now the partition is refused in one line (exit 1) and nothing in it changes; `recover` cuts the
    bytes (exit 1: damage) and the next produce appends."""
    logdir = tmp_path / "logs"
    _write(logdir, 50)
    assert _kafkafs("recover", str(logdir)).returncode == 0
    assert (logdir / ".kafka_cleanshutdown").exists()
    active = sorted((logdir / "t-0").glob("*.log"))[-1]
    with open(active, "ab") as f:
        f.write(bytes.fromhex("0000000000000044000000300000") + b"\x02garbage")  # a batch of length 48: torn
    before = {p.name: p.read_bytes() for p in (logdir / "t-0").iterdir()}
    proc = subprocess.run([sys.executable, "-m", "kafkafs", "produce", str(logdir), "t-0"], input=b"after\n",
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, timeout=120)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    errors = [line for line in proc.stderr.decode().splitlines() if "WARNING" not in line]
    assert len(errors) == 1 and "refusing to write" in errors[0] and "kafkafs recover" in errors[0], proc.stderr
    assert {p.name: p.read_bytes() for p in (logdir / "t-0").iterdir()} == before
    # as for every partition a writer refuses: no marker, so that a broker's start recovers it (cuts them)
    assert not (logdir / ".kafka_cleanshutdown").exists()
    assert _kafkafs("recover", str(logdir)).returncode == 1  # cut: damage
    proc = subprocess.run([sys.executable, "-m", "kafkafs", "produce", str(logdir), "t-0"], input=b"after\n",
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    consumed = _kafkafs("consume", str(logdir), "t-0", "-o", "-1")
    assert consumed.returncode == 0 and b'"value":"after"' in consumed.stdout, consumed


def test_recover_of_more_partitions_than_the_open_file_limit_allows(tmp_path):
    """review24 R24-3: recover kept every partition it recovered open until the end, three descriptors
    each (the active segment's .log and index maps), so a broker's directory of thousands of
    partitions failed with "too many open files" at any usual ``ulimit -n`` (failed before, seen: 60
    partitions at a limit of 64). Now it closes each partition once done with it; what it leaves is
    the same as with no limit."""
    import resource

    from kafkafs.format.jsonview import ProducerRecord
    from kafkafs.storage.logdir import LogDir

    logdir = tmp_path / "logs"
    logdir.mkdir()
    with LogDir(logdir, writable=True) as d:
        for p in range(60):
            d.create_partition("m", p).append_records([ProducerRecord(None, None, b"v%d" % p, ())])
    (logdir / ".kafka_cleanshutdown").unlink()  # an unclean stop: every partition recovered from 0

    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    done = subprocess.run([sys.executable, "-m", "kafkafs", "recover", str(logdir)], capture_output=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300, preexec_fn=low_limit)
    assert done.returncode == 0, done.stderr.decode()
    assert b"recovered 60 partition(s), 0 changed; clean shutdown marked" in done.stdout, done.stdout
    assert _kafkafs("verify", str(logdir)).returncode == 0
