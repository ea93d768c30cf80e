"""review22 R22-6: writers run as root on a broker's log directory give what they create the owner of
the folder it is in, and what they replace keeps its owner and mode.

A broker runs as its own user; a root-owned active segment, index, snapshot or checkpoint in its log
directory is a file it cannot open for writing (Kafka then takes the log directory offline). Before,
every file and folder kafkafs created as root was root's (0:0). Runs only as root (the rule is about
what root creates); 65534 stands for the broker's user."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from kafkafs.format.compression import codec_by_name
from kafkafs.spark.write import _Pending, start_job
from kafkafs.storage.cleaner import clean_logdir
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir
from kafkafs.storage.publish_intent import write_intent
from kafkafs.storage.safefiles import make_dir, write_atomically
from tests.faults.conftest import cli

pytestmark = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root (chown)")

BROKER = 65534


def _brokers(tmp_path: Path, fixtures_dir: Path) -> Path:
    """A copy of the 3.7 broker's directory, every file and folder owned by the broker's user."""
    path = tmp_path / "logs"
    shutil.copytree(fixtures_dir / "kafka-logs-a", path)
    for folder, dirs, files in os.walk(path):
        for name in [*dirs, *files, ""]:
            p = os.path.join(folder, name) if name else folder
            os.chmod(p, os.stat(p).st_mode | stat.S_IWUSR)
            os.chown(p, BROKER, BROKER)
    return path


def _not_the_brokers(path: Path) -> list[str]:
    out = []
    for folder, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            st = os.lstat(os.path.join(folder, name))
            if (st.st_uid, st.st_gid) != (BROKER, BROKER):
                out.append(f"{os.path.relpath(os.path.join(folder, name), path)} {st.st_uid}:{st.st_gid}")
    return sorted(out)


@pytest.mark.slow  # four command runs (a few seconds each on a busy machine); the next test is the fast one
def test_every_writer_gives_what_it_creates_the_owner_of_its_folder(tmp_path, fixtures_dir):
    path = _brokers(tmp_path, fixtures_dir)
    checkpoint = path / "recovery-point-offset-checkpoint"
    os.chmod(checkpoint, 0o640)
    lines = b"".join(b"line-%04d-" % i + b"x" * 200 + b"\n" for i in range(40))
    # produce: rolled segments, indexes, snapshots, checkpoints, the marker; a new partition folder
    assert cli("produce", "--set", "segment.bytes=4096", str(path), "nikhilDemo-0", stdin=lines).returncode == 0
    assert cli("produce", str(path), "new-0", stdin=lines).returncode == 0
    # clean: compaction's .cleaned/.swap segments, the cleaner's checkpoint; retention
    proc = cli("clean", "--set", "retention.ms=1", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # recover: rebuilt index files
    for index in (path / "__consumer_offsets-12").glob("*.index"):
        index.unlink()
    assert cli("recover", str(path)).returncode == 0
    assert sorted(p.name for p in (path / "new-0").iterdir())  # it is there, with its files
    assert (path / "__consumer_offsets-12" / "00000000000000000000.index").exists()
    assert _not_the_brokers(path) == []
    assert stat.S_IMODE(os.stat(checkpoint).st_mode) == 0o640  # replaced, its mode kept


def test_what_a_spark_write_stages_and_a_replaced_file_are_owned_as_their_folder(tmp_path, fixtures_dir):
    path = _brokers(tmp_path, fixtures_dir)
    start_job(path / ".kafkafs-staging", "job1")
    make_dir(path / ".kafkafs-staging" / "job1" / "task1")
    pending = _Pending(path / ".kafkafs-staging" / "job1" / "task1" / "t-0.batches", 1 << 20, codec_by_name("none"))
    pending.file.close()
    write_intent(path, "job2", {"t-0": {"start": 0}})
    settings = Settings({"segment.bytes": 1024, "retention.ms": 1})
    with LogDir(path, settings, writable=True) as logdir:  # the lock, the marker, checkpoints
        fresh = logdir.create_partition("fresh", 0)  # produce's and the --rw mount's mkdir
        for i in range(8):  # rolled segments, indexes, snapshots
            fresh.append_records([(None, b"k", b"v%d" % i + b"x" * 300, ())])
        assert len(fresh.segments) > 2
        lines = clean_logdir(logdir)  # compaction of __consumer_offsets-12 (.cleaned, .swap), retention
        assert any("compacted" in line for line in lines) and any("deleted" in line for line in lines), lines
    assert _not_the_brokers(path) == []
    # a replaced file keeps its owner and mode, even where the folder's owner is another
    odd = path / "odd"
    odd.write_bytes(b"x")
    os.chown(odd, 1234, 4321)
    os.chmod(odd, 0o600)
    write_atomically(odd, b"y")
    st = os.stat(odd)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode), odd.read_bytes()) == (1234, 4321, 0o600, b"y")
