"""Writers leave the clean-shutdown marker only where it is true of every log (review12 R12-1, R12-2).

A Kafka broker that finds ``.kafka_cleanshutdown`` recovers no log; one that does not recovers every log
past its recovery point (LogManager). ``produce`` into one partition of a directory a crashed broker
left (no marker, another partition ending in a torn tail) wrote the marker, so a broker appended after
the torn bytes and its consumers stopped there; so did a ``recover`` or ``clean`` that failed midway,
which also rewrote the recovery-point checkpoint with the partitions done so far only. A ``produce``
whose close failed said nothing of the records it had appended, so a script sent them again.

The failing commands run as a user that file permissions apply to, as in ``test_os_errors.py``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kafkafs.format.checkpoint import parse_offset_checkpoint

ROOT = Path(__file__).resolve().parents[2]
CAPS = "-dac_override,-dac_read_search,-fowner"
MARKER = ".kafka_cleanshutdown"
TORN = b"garbagegarbage"


def run(*args: str | Path, stdin: bytes = b"", unprivileged: bool = False) -> subprocess.CompletedProcess:
    prefix: list[str] = []
    if unprivileged and os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv (util-linux): no way to run a command that lacks permissions")
        prefix = ["setpriv", f"--inh-caps={CAPS}", f"--bounding-set={CAPS}"]
    proc = subprocess.run([*prefix, sys.executable, "-m", "kafkafs", *map(str, args)], input=stdin,
                          capture_output=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert b"Traceback" not in proc.stderr, proc.stderr.decode()
    return proc


@pytest.fixture(scope="module")
def demo_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logdir = tmp_path_factory.mktemp("marker") / "logs"
    done = run("demo", logdir)
    assert done.returncode == 0, done.stderr
    assert (logdir / MARKER).exists()
    return logdir


@pytest.fixture
def crashed(demo_source: Path, tmp_path: Path) -> Path:
    """A copy of the demo as a crash leaves it: no marker, sensors-0 (the last partition) ends in a torn tail."""
    logdir = tmp_path / "logs"
    shutil.copytree(demo_source, logdir, symlinks=True)
    (logdir / MARKER).unlink()
    with open(logdir / "sensors-0" / "00000000000000000000.log", "ab") as f:
        f.write(TORN)
    return logdir


def _sensors(logdir: Path) -> bytes:
    return (logdir / "sensors-0" / "00000000000000000000.log").read_bytes()


def test_produce_into_one_partition_does_not_mark_a_crashed_directory_clean(crashed: Path) -> None:
    torn = _sensors(crashed)
    done = run("produce", crashed, "orders-0", stdin=b"hi\n")
    assert done.returncode == 0, done.stderr
    assert not (crashed / MARKER).exists()  # was written: a broker then skipped sensors-0's recovery
    assert _sensors(crashed) == torn

    done = run("recover", crashed)  # recovers every partition: the marker is true now
    assert done.returncode == 1, done.stdout  # it cut the torn tail (SPEC §4)
    assert done.stdout.decode().splitlines()[-1].startswith("recovered 5 partition(s), 1 changed; clean shutdown marked")
    assert (crashed / MARKER).exists() and _sensors(crashed) == torn[: -len(TORN)]


@pytest.mark.parametrize("command", ["recover", "clean"])
def test_a_recover_or_clean_that_fails_midway_marks_nothing_and_keeps_the_checkpoint(crashed: Path,
                                                                                      command: str) -> None:
    before = parse_offset_checkpoint((crashed / "recovery-point-offset-checkpoint").read_bytes())
    assert len(before) == 5
    torn = _sensors(crashed)
    (crashed / "orders-0" / "00000000000000000000.index").chmod(0o444)  # a sealed segment's index
    done = run(command, crashed, unprivileged=True)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.decode().strip() == (
        f"kafkafs: error: cannot open {crashed}/orders-0/00000000000000000000.index for writing: permission denied")
    assert not (crashed / MARKER).exists()  # was written although sensors-0 was never recovered
    assert _sensors(crashed) == torn
    after = parse_offset_checkpoint((crashed / "recovery-point-offset-checkpoint").read_bytes())
    assert after.keys() == before.keys()  # recover kept images-0 only (5 -> 1 entries)


def test_produce_says_the_records_it_appended_before_its_close_failed(demo_source: Path, tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    shutil.copytree(demo_source, logdir, symlinks=True)
    (logdir / "orders-0" / "00000000000000000000.index").chmod(0o444)  # a sealed segment's index
    done = run("produce", logdir, "orders-0", stdin=b"hi\n", unprivileged=True)
    assert done.returncode == 1
    assert done.stderr.decode().strip() == (
        f"kafkafs: error: cannot open {logdir}/orders-0/00000000000000000000.index for writing: permission denied"
        "; the record before it was appended, at offsets 715..715 (do not send them again)")
    assert not (logdir / MARKER).exists()  # the partition did not close
    last = run("consume", logdir, "orders-0", "-o", "-1")
    assert b'"offset":715' in last.stdout and b'"value":"hi"' in last.stdout
