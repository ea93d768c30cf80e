"""EIO from the disk while writing: during append, at a roll, at fsync, through the ``--rw`` mount, and
during compaction (issue 20), through :mod:`tests.faults.eiofs` under LOGDIR. The writer reports one clear
error (the command: one line and exit 1; the mount: the write() fails with EIO), loses nothing it
acknowledged, and once the disk heals ``recover`` leaves a directory that ``verify`` accepts, which takes
appends again."""

from __future__ import annotations

import errno
import re
import subprocess
from pathlib import Path

import pytest

from tests.faults.conftest import (
    COMPACT,
    append_rounds,
    cli,
    files_of,
    heals_through_the_mount,
    produce_keyed,
    produce_rounds,
    recovers_and_cleans,
    recovers_with_every_ack,
    rw_mount_of_t0,
    values,
    verified,
)


def one_line_eio(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 1, (proc.returncode, proc.stdout[-500:], proc.stderr)
    lines = [line for line in proc.stderr.decode().splitlines() if line.strip()]
    # one error line; a close that fails again after it is a warning of its own, printed before it (LogDir.__exit__);
    # `clean`'s progress line (a run past a second, as under load) is no error
    errors = [line for line in lines if not line.startswith("kafkafs: WARNING:")
              and not re.match(r"clean: \d+/\d+ partition\(s\), ", line)]
    assert len(errors) == 1 and "input/output error" in errors[0].lower(), proc.stderr


def segments(logdir: Path, name: str) -> int:
    return len(list((logdir / name).glob("*.log")))


# where the disk fails: every write of a segment's .log; only its first bytes (the first append to a segment
# that was just rolled); every fsync of a .log (a flush, and the flush of the segment a roll seals)
FAULTS = {
    "append": {"name": ".log", "from": 0, "op": "write"},
    "roll": {"name": ".log", "from": 0, "to": 1, "op": "write"},
    "fsync": {"name": ".log", "from": 0, "op": "fsync"},
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_eio_during_append_roll_and_flush(tmp_path, eio_layer, fault):
    source = tmp_path / "logs"
    source.mkdir()
    layer = eio_layer(source)
    logs = layer.path
    acked: list[bytes] = []
    assert produce_rounds(logs, range(6), acked)[0] is None  # a healthy start over a few segments
    before = segments(source, "t-0")
    assert before >= 2
    layer.fail(FAULTS[fault])
    # "roll" fails only when a segment rolls: keep appending until one does
    failed, round_ = produce_rounds(logs, range(6, 60), acked)
    assert failed is not None, f"no write failed with {FAULTS[fault]}"
    one_line_eio(failed)
    assert layer.hits()
    if fault == "roll":
        assert acked[-1].startswith(b"r%d-" % (round_ - 1)) and segments(source, "t-0") > before
    layer.fail()  # the disk heals
    recovers_with_every_ack(logs, acked)
    assert cli("verify", str(logs)).returncode == 0


def test_eio_through_a_rw_mount(tmp_path, eio_layer, mounted):
    source = tmp_path / "logs"
    source.mkdir()
    layer = eio_layer(source)
    m = rw_mount_of_t0(mounted, source, layer.path, tmp_path / "kafkafs.toml")
    acked: list[bytes] = []
    assert append_rounds(m, range(20), acked) is None
    layer.fail(FAULTS["append"])
    error = append_rounds(m, range(20, 40), acked)
    assert error is not None and error.errno == errno.EIO, error
    assert m.proc.poll() is None  # the daemon lives on
    layer.fail()
    heals_through_the_mount(m, layer.path, acked)


def test_eio_during_compaction(tmp_path, eio_layer):
    source = tmp_path / "logs"
    source.mkdir()
    layer = eio_layer(source)
    logs = layer.path
    latest = produce_keyed(logs)
    layer.fail({"name": ".cleaned", "from": 0, "op": "write"})  # the cleaner's new segments cannot be written
    one_line_eio(cli("clean", str(logs), *COMPACT))
    assert layer.hits()
    assert latest <= set(values(logs, "t-0"))  # the latest value of every key is there
    layer.fail()
    recovers_and_cleans(logs, latest)


def test_clean_says_what_it_compacted_before_the_disk_filled(tmp_path, eio_layer):
    """review11 R11-2 (SPEC §4 "the reason said"): ``clean`` stopped by a full disk printed only the
    ENOSPC line, not that it had already compacted and swapped in part of a partition (a-0's first
    segment, whose records are all superseded: its new segment is empty, no write). Now each change
    is said as it is made, and the error line says that the ones before it were made."""
    source = tmp_path / "logs"
    source.mkdir()
    layer = eio_layer(source)
    logs = layer.path
    for name in ("a-0", "b-0"):
        lines = b"".join(b'{"key": "k%d", "value": "v%d-%s"}\n' % (i % 20, i, b"z" * 200) for i in range(600))
        assert cli("produce", str(logs), name, *COMPACT, stdin=lines).returncode == 0
    before = {name: values(logs, name) for name in ("a-0", "b-0")}
    layer.fail({"name": ".cleaned", "from": 0, "op": "write", "errno": "ENOSPC"})  # a new segment's first byte
    proc = cli("clean", str(logs), *COMPACT)
    assert proc.returncode == 1 and layer.hits(), (proc.stdout, proc.stderr)
    said = proc.stdout.decode().splitlines()
    # a-0's first segments, their records all superseded (fix50: one produce's batches roll at segment.bytes,
    # so these are several segments, where they were one of 282 records past it: review19 R19-6)
    removed = [re.fullmatch(r"a-0: compacted \d{20}\.log: (\d+) superseded record\(s\) removed", line) for line in said]
    assert said and all(removed), said
    gone = sum(int(m.group(1)) for m in removed if m)
    assert len(values(logs, "a-0")) == len(before["a-0"]) - gone and values(logs, "b-0") == before["b-0"]
    errors = [line for line in proc.stderr.decode().splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].endswith(
        f"no space left on device; the {len(said)} change(s) said before it were made"), proc.stderr


def test_a_recover_stopped_by_eio_in_a_sealed_segment_leaves_its_indexes_as_they_were(tmp_path, eio_layer):
    """review23 R23-1: a ``recover`` whose rebuild of a sealed segment's indexes met a bad stretch of its
    ``.log`` stopped with the right line, but left the segment's ``.index`` / ``.timeindex`` as 10 MiB of
    zeros: damage ``verify`` then reported, and the valid index that let readers seek past the bad stretch
    was gone. Now every file is as it was. (``produce`` reads the segments it would recover before it
    rebuilds anything: a disk error stops it earlier.)"""
    source = tmp_path / "logs"
    assert cli("demo", str(source)).returncode == 0
    folder = source / "orders-0"
    sealed = sorted(folder.glob("*.log"))[0]
    before, said = files_of(folder), verified(source)
    layer = eio_layer(source)
    bad = sealed.stat().st_size // 3
    layer.fail({"name": f"orders-0/{sealed.name}", "from": bad, "to": bad + 100, "op": "read"})
    one_line_eio(cli("recover", str(layer.path)))
    assert layer.hits()
    layer.fail()
    assert files_of(folder) == before
    assert verified(source) == said

