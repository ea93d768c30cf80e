"""Issue 9 on a real mount: link targets are never served, a locked directory is never mounted
read-only in place of the writable mount that was asked for."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest

from kafkafs.storage.logdir import LogDir

from .conftest import ROOT


def test_finding2_read_only_mount_never_serves_link_targets(mounted, logdir_copy, tmp_path):
    secret = tmp_path / "shadow"
    secret.write_bytes(b"root:$6$secret-hash:19000:0:99999:7:::\n")
    part = logdir_copy / "orders-0"
    os.symlink(secret, part / "00000000000000000500.log")
    os.symlink(secret, part / "00000000000000000000.timeindex.link")
    (part / "leader-epoch-checkpoint").unlink(missing_ok=True)  # the demo's own, replaced by a link
    os.symlink(secret, part / "leader-epoch-checkpoint")
    m = mounted(logdir_copy)
    m.allow_errors = True  # the skipped links are logged as warnings
    listed = os.listdir(m / "orders-0" / "segments")
    assert "00000000000000000500.log" not in listed and "leader-epoch-checkpoint" not in listed
    assert "00000000000000000000.log" in listed
    with pytest.raises(FileNotFoundError):
        (m / "orders-0" / "segments" / "00000000000000000500.log").read_bytes()
    # no view of the partition shows the target's bytes
    for name in ("records.jsonl", "partition.json"):
        assert b"secret-hash" not in (m / "orders-0" / name).read_bytes()
    for name in listed:
        assert b"secret-hash" not in (m / "orders-0" / "segments" / name).read_bytes()
    assert "symbolic link" in m.log() and "Traceback" not in m.log()


def test_finding8_rw_mount_of_a_locked_directory_fails(logdir_copy, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with LogDir(logdir_copy, writable=True):
        for command in (["-m", "kafkafs.cli", "mount", "--rw"], ["-m", "kafkafs.cli", "mount", "--rw", "-f"]):
            proc = subprocess.run(
                [sys.executable, *command, str(logdir_copy), str(mnt)],
                capture_output=True, timeout=60, env=env, cwd=str(ROOT),
            )
            try:
                assert proc.returncode == 1, proc
                err = proc.stderr.decode()
                assert err.count("\n") == 1 and "locked by another writer" in err and "Traceback" not in err, err
                assert not os.path.ismount(mnt)
            finally:
                if os.path.ismount(mnt):
                    subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)
    assert os.listdir(mnt) == []


def test_rw_mount_serves_a_linked_partition_read_only(mounted, logdir_copy, tmp_path):
    secret = tmp_path / "outside.log"
    secret.write_bytes(b"not yours")
    os.symlink(secret, logdir_copy / "events-3" / "00000000000000000009.log")
    m = mounted(logdir_copy, "--rw")
    m.allow_errors = True
    with pytest.raises(OSError) as info:
        with open(m / "events-3" / "append", "ab") as f:
            f.write(b"x\n")
    assert info.value.errno in (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT)
    assert b"event 0" in (m / "events-3" / "records.jsonl").read_bytes()
    assert secret.read_bytes() == b"not yours"
    with open(m / "orders-0" / "append", "ab") as f:  # the other partitions stay writable
        f.write(b"fine\n")
    assert "symbolic link" in m.log() and "Traceback" not in m.log()


def test_rw_mount_serves_a_partition_with_a_folder_named_as_its_file_read_only(mounted, logdir_copy):
    """review6 F0: a directory named as a segment file made every lookup in the partition EIO, with an
    "unexpected error" traceback in the log at each; now it is served read-only with one warning."""
    index = logdir_copy / "events-3" / "00000000000000000000.index"
    if index.exists():
        index.unlink()
    index.mkdir()
    m = mounted(logdir_copy, "--rw")
    m.allow_errors = True
    for _ in range(2):
        assert b"event 0" in (m / "events-3" / "records.jsonl").read_bytes()
        assert json.loads((m / "events-3" / "partition.json").read_bytes())["topic"] == "events"
    _appends_refused_in(m, "events-3", writable="orders-0")
    log = m.log()
    assert "Traceback" not in log and "unexpected error" not in log, log
    said = [line for line in log.splitlines() if "events-3" in line]  # refused for writes; the folder skipped
    assert len(said) == 2 and len(set(said)) == 2 and "serving it read-only" in said[0], log


def _appends_refused_in(m, refused: str, *, writable: str) -> None:
    """A write to ``refused``'s append fails (the partition is served read-only); ``writable``'s still works."""
    with pytest.raises(OSError) as info:
        with open(m / refused / "append", "ab") as f:
            f.write(b"x\n")
    assert info.value.errno in (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT)
    with open(m / writable / "append", "ab") as f:  # the other partitions stay writable
        f.write(b"fine\n")


def test_rw_mount_serves_a_partition_whose_recovery_would_cut_batches_read_only(mounted, logdir_copy):
    """review6 F8/F9: a --rw mount of a copy without .kafka_cleanshutdown ran the unclean-start recovery on
    first touch and cut a CRC-bad batch and every valid one after it; now that partition is served
    read-only, untouched (the damage EIO where read), with one warning naming `kafkafs recover`."""
    from kafkafs.format.batch import read_batch_header

    (logdir_copy / ".kafka_cleanshutdown").unlink(missing_ok=True)
    (logdir_copy / "recovery-point-offset-checkpoint").unlink(missing_ok=True)  # recovered from offset 0
    segment = sorted((logdir_copy / "orders-0").glob("*.log"))[0]
    data = bytearray(segment.read_bytes())
    first = read_batch_header(bytes(data), 0)
    assert first.end < len(data)
    data[first.end - 3] ^= 0x55
    segment.write_bytes(bytes(data))
    m = mounted(logdir_copy, "--rw")
    m.allow_errors = True
    assert json.loads((m / "orders-0" / "partition.json").read_bytes())["topic"] == "orders"
    _appends_refused_in(m, "orders-0", writable="events-3")
    m.stop()
    assert segment.read_bytes() == bytes(data)
    log = m.log()
    assert "Traceback" not in log and "kafkafs recover" in log, log


def _answers(path, timeout: float = 5.0, command: str = "cat") -> subprocess.CompletedProcess:
    """``cat``/``ls`` of ``path`` in a child killed after ``timeout`` s (nothing here touches the mount
    itself): a hung mount fails the test instead of hanging it."""
    return subprocess.run([command, str(path)], capture_output=True, timeout=timeout)


def test_a_fifo_as_a_partition_file_never_blocks_a_read_only_mount(mounted, logdir_copy):
    # review15 R15-8: the daemon opened a FIFO .index on its main thread and blocked there, so every
    # request of the mount hung (failed before, seen: timeout). SPEC §3: only regular files are served.
    part = logdir_copy / "orders-0"
    fifos = [part / "00000000000000000000.index", part / "leader-epoch-checkpoint"]
    for fifo in fifos:
        fifo.unlink(missing_ok=True)
        os.mkfifo(fifo)
    m = mounted(logdir_copy)
    m.allow_errors = True  # the FIFOs are logged as skipped
    try:
        assert _answers(m / "orders-0" / "by-offset" / "5.json").returncode in (0, 1)
        info = _answers(m / "orders-0" / "partition.json")
        assert info.returncode == 0 and json.loads(info.stdout)
        assert "orders-0" in _answers(m.path, command="ls").stdout.decode()
        assert _answers(m / "orders-0" / "records.jsonl").returncode in (0, 1)
        listed = _answers(m / "orders-0" / "segments", command="ls").stdout.decode().split()
        assert "00000000000000000000.index" not in listed and "leader-epoch-checkpoint" not in listed
    finally:
        for fifo in fifos:  # free a daemon blocked opening one (a regression), so the unmount works
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
    assert "Traceback" not in m.log()
