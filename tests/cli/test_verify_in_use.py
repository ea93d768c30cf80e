"""`verify` beside the writer that holds LOGDIR/.lock (review26 R26-1): a running broker's in-flight writes
(the active segment's index ahead of the log verify sized, a compaction's ``.cleaned`` file, the producer
snapshot of a roll) are said as being written, not as what "an unclean stop" or "an interrupted
compaction" leaves, and no writer (``kafkafs recover``) is advised there; the exit code stays SPEC §4's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kafkafs.format.jsonview import ProducerRecord
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir
from tests.storage.helpers import lock_held

ROOT = Path(__file__).resolve().parents[2]


def _verify(logdir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkafs", "verify", str(logdir)], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)


def _logdir(tmp_path: Path) -> Path:
    """t-0 of several segments, closed cleanly (a broker's stop); its recovery point then set back to 0, as
    a running broker's checkpoint lags its rolls."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    with LogDir(logdir, Settings({"segment.bytes": 20000, "index.interval.bytes": 512}), writable=True) as d:
        log = d.create_partition("t", 0)
        for i in range(400):
            log.append_records([ProducerRecord(1_763_700_000_000 + i, None, b"value %d" % i, ())])
    (logdir / "recovery-point-offset-checkpoint").write_text("0\n1\nt 0 0\n")
    return logdir


def _in_flight(logdir: Path) -> tuple[str, str, str]:
    """What a broker writing t-0 leaves for a reader to meet: an index entry past the active segment's end
    (written after the reader sized the log), a compaction's .cleaned file, the newest producer snapshot
    not yet written (created at a roll, filled a moment later). Returns their names."""
    part = logdir / "t-0"
    logs = sorted(part.glob("*.log"))
    assert len(logs) > 1
    index = logs[-1].with_suffix(".index")
    with open(index, "ab") as f:  # offset delta 7, position 64 KiB: past the end of the active segment
        f.write((7).to_bytes(4, "big") + (65536).to_bytes(4, "big"))
    cleaned = logs[0].name + ".cleaned"
    (part / cleaned).write_bytes(logs[0].read_bytes()[:100])
    snapshot = sorted(part.glob("*.snapshot"))[-1]
    snapshot.write_bytes(b"")
    return index.name, cleaned, snapshot.name


def test_verify_beside_the_running_broker_says_its_writes_are_in_flight(tmp_path):
    said = "a running broker"  # the holder's command names Kafka's main class (tests/storage/test_dirlock.py)
    logdir = _logdir(tmp_path)
    with lock_held(logdir, tmp_path, "kafka.Kafka") as pid:  # a broker's stand-in: holds .lock, the marker removed
        names = _in_flight(logdir)
        done = _verify(logdir)
        assert done.returncode == 0, done.stdout + done.stderr
        first = done.stdout.splitlines()[0]
        assert first.startswith(f"{logdir}: in use by {said}: process {pid} ("), first
        assert f"holds {logdir}/.lock" in first
        for name in names:
            lines = [line for line in done.stdout.splitlines() if name in line]
            assert lines and all(line.startswith("  note: ") for line in lines), done.stdout
            assert all(f"being written: the log directory is in use by {said}; no damage" in line for line in lines)
        assert "unclean stop" not in done.stdout and "interrupted compaction" not in done.stdout, done.stdout
        assert "recover" not in done.stdout, done.stdout
    # the writer gone (killed: an unclean stop), the same files are what an unclean stop leaves again
    after = _verify(logdir)
    assert after.returncode == 0, after.stdout
    assert "in use" not in after.stdout and "being written" not in after.stdout
    assert "after an unclean stop" in after.stdout and "`kafkafs recover` finishes or undoes it" in after.stdout


def test_damage_beside_the_running_writer_is_still_damage(tmp_path):
    """Exit codes stay SPEC §4's: a sealed segment's damaged index is damage (1) whoever holds the lock."""
    logdir = _logdir(tmp_path)
    sealed = sorted((logdir / "t-0").glob("*.index"))[0]
    with open(sealed, "ab") as f:
        f.write(bytes(range(100, 137)))
    with lock_held(logdir, tmp_path, "kafka.Kafka"):
        done = _verify(logdir)
    assert done.returncode == 1, done.stdout
    assert f"  {sealed.name}: " in done.stdout, done.stdout
