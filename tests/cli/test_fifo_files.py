"""A FIFO named as a partition file never blocks kafkafs (review15 R15-8, SPEC §3: files inside a partition
folder are served only when they are regular files). Opening a FIFO with no writer blocks forever, so
every run here has a timeout: a regression fails instead of hanging."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kafkafs.errors import UnsafeFileError
from kafkafs.storage.safefiles import open_file, read_regular_file

_TIMEOUT = 20


def _kafkafs(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "kafkafs.cli", *args], capture_output=True, timeout=_TIMEOUT)
    assert b"Traceback" not in proc.stderr, proc.stderr.decode()
    return proc


def _with_fifo(tmp_path: Path, name: str) -> tuple[Path, Path]:
    logs = tmp_path / "logs"
    logs.mkdir()
    proc = subprocess.run([sys.executable, "-m", "kafkafs.cli", "produce", str(logs), "t-0"],
                          input=b"".join(b"%d\n" % i for i in range(30)), capture_output=True, timeout=_TIMEOUT)
    assert proc.returncode == 0, proc.stderr.decode()
    fifo = logs / "t-0" / name
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    return logs, fifo


NAMES = ["00000000000000000000.index", "00000000000000000030.log", "leader-epoch-checkpoint"]


@pytest.mark.parametrize("name", NAMES)
def test_a_fifo_as_a_partition_file_never_blocks_consume_verify_recover(tmp_path, name):
    logs, fifo = _with_fifo(tmp_path, name)
    consumed = _kafkafs("consume", str(logs), "t-0")  # failed before (seen: timeout) for .index
    # a .log that is no file: the records from its base offset on are left out, damage (R27-8)
    assert consumed.returncode == (1 if name.endswith(".log") else 0), consumed.stderr.decode()
    assert consumed.stdout.count(b"\n") == 30
    verified = _kafkafs("verify", str(logs))  # failed before (seen: timeout) for .index, leader-epoch-checkpoint
    assert verified.returncode == 1, verified.stdout.decode()
    assert name in verified.stdout.decode() + verified.stderr.decode()
    recovered = _kafkafs("recover", str(logs))  # failed before (seen: timeout) for leader-epoch-checkpoint
    assert recovered.returncode in (1, 2), recovered.stderr.decode()  # SPEC §4: refused, one line, or damage
    if recovered.returncode == 2:
        assert recovered.stderr.decode().count("\n") == 1
    assert name in recovered.stdout.decode() + recovered.stderr.decode()
    assert not (logs / "t-0" / ".lock").exists() or _kafkafs("recover", str(logs)).returncode in (1, 2)
    assert fifo.is_fifo()  # never replaced


def test_open_file_refuses_a_fifo_without_blocking(tmp_path):
    fifo = tmp_path / "00000000000000000000.index"
    os.mkfifo(fifo)
    with pytest.raises(UnsafeFileError, match="special file"):
        open_file(fifo, os.O_RDONLY)
    with pytest.raises(UnsafeFileError):
        read_regular_file(fifo, follow=True)  # LOGDIR's own files (checkpoints, meta.properties) too
    regular = tmp_path / "r"
    regular.write_bytes(b"abc")
    fd = open_file(regular, os.O_RDONLY)
    try:
        assert os.get_blocking(fd)  # O_NONBLOCK is cleared once the file is known to be regular
    finally:
        os.close(fd)


@pytest.mark.parametrize("name", ["recovery-point-offset-checkpoint", "meta.properties"])
def test_a_fifo_as_a_log_directory_file_never_blocks(tmp_path, name):
    logs, _ = _with_fifo(tmp_path, "00000000000000000000.index")
    (logs / "t-0" / "00000000000000000000.index").unlink()
    (logs / name).unlink(missing_ok=True)
    os.mkfifo(logs / name)
    assert _kafkafs("consume", str(logs), "t-0").returncode == 0
    assert _kafkafs("verify", str(logs)).returncode in (0, 1)
    assert _kafkafs("recover", str(logs)).returncode in (0, 1, 2)


@pytest.mark.parametrize("name", [*NAMES, "00000000000000000000.timeindex", "00000000000000000000.snapshot"])
def test_dump_of_a_fifo_the_user_names_says_so_in_one_line(tmp_path, name):
    """fix38's leftover: ``kafkafs dump`` of a FIFO (or any file that is not regular) must not wait on it:
    one line, exit 2 (SPEC §4: a path that is not what the command takes)."""
    _logs, fifo = _with_fifo(tmp_path, name)
    for args in (["dump", str(fifo)], ["dump", "--files", str(fifo), "--deep-iteration"]):
        dumped = _kafkafs(*args)
        assert dumped.returncode == 2 and dumped.stderr.decode().count("\n") == 1, dumped.stderr.decode()
        assert str(fifo) in dumped.stderr.decode() and "not a file" in dumped.stderr.decode()


@pytest.mark.parametrize("flag", [None, "--verify-index-only", "--index-sanity-check"])
@pytest.mark.parametrize("index", ["00000000000000000000.index", "00000000000000000000.timeindex"])
def test_dump_of_an_index_beside_a_fifo_log_never_blocks(tmp_path, index, flag):
    """fix38's leftover: an index is dumped against the ``.log`` beside it, which dump opened blindly: a
    FIFO there (the user named the index, a regular file) blocked it forever. Now one line, exit 1, as
    for a ``.log`` that is missing or a folder (the work failed: SPEC §4)."""
    logs, fifo = _with_fifo(tmp_path, "00000000000000000000.log")
    dumped = _kafkafs("dump", *([flag] if flag else []), "--files", str(logs / "t-0" / index))  # timed out before
    assert dumped.returncode == 1, dumped.stderr.decode()
    said = dumped.stderr.decode().splitlines()
    assert len(said) == 1 and str(fifo) in said[0] and "not a regular file" in said[0], said


def _segments(tmp_path: Path) -> Path:
    """LOGDIR with t-0 in three segments of 100 records each (0..99, 100..199, 200..299: the active one)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    for _ in range(3):
        proc = subprocess.run([sys.executable, "-m", "kafkafs.cli", "produce", "--set", "segment.bytes=1200", str(logs),
                               "t-0"], input=b"".join(b"%d\n" % i for i in range(100)), capture_output=True,
                              timeout=_TIMEOUT)
        assert proc.returncode == 0, proc.stderr.decode()
    assert sorted(p.name for p in (logs / "t-0").glob("*.log")) == [f"{b:020d}.log" for b in (0, 100, 200)]
    return logs


@pytest.mark.parametrize("base, kind", [(100, "fifo"), (200, "folder")])
def test_consume_exits_1_when_a_segment_log_is_no_file(tmp_path, base, kind):
    """review27 R27-8: a sealed or active segment's .log that is a FIFO or a folder was skipped with a
    warning and consume exited 0 with its 100 records left out (verify: exit 1). Now one line naming the
    file and its offsets, exit 1 (SPEC §4); a start past it reads on with the warning, exit 0."""
    logs = _segments(tmp_path)
    seg = logs / "t-0" / f"{base:020d}.log"
    seg.unlink()
    os.mkfifo(seg) if kind == "fifo" else seg.mkdir()
    consumed = _kafkafs("consume", str(logs), "t-0")
    assert consumed.stdout.count(b"\n") == 200
    said = consumed.stderr.decode().splitlines()
    assert consumed.returncode == 1, said  # failed before (seen: 0)
    assert len(said) == 1 and str(seg) in said[0] and "left out" in said[0], said
    assert f"offsets {base}..{base + 99}" in said[0] if base == 100 else "offsets from 200 on" in said[0]
    if base == 200:  # the active segment is no file: --follow has nothing to wait for
        followed = _kafkafs("consume", str(logs), "t-0", "--from-offset", "195", "--follow")
        assert followed.returncode == 1 and followed.stdout.count(b"\n") == 5, followed.stderr.decode()
    else:  # a start past the hole needs none of it: read, the old warning, exit 0
        past = _kafkafs("consume", str(logs), "t-0", "--from-offset", "200")
        assert past.returncode == 0 and past.stdout.count(b"\n") == 100, past.stderr.decode()
        assert past.stderr.decode().count("\n") == 1 and "not a regular file" in past.stderr.decode()
    assert seg.is_fifo() if kind == "fifo" else seg.is_dir()  # left as it is
