"""A stretch of the ACTIVE segment that the disk will not give (EIO) is not its end (review11 R11-3, R11-4,
R11-6; SPEC §2 "truncate at the first invalid byte": an unreadable byte is not an invalid one; SPEC §3
"Damage and disk errors are local"; README Safety "Writers stop on a disk error: nothing is cut").

The kernel answers a read that meets a page it cannot read with the bytes before it (a short read), and
the batch scan took that for the end of the data being written: recover cut the healthy rest of the
segment, produce appended after it at an offset already used, consume printed the records before it
and exited 0, dump died with SIGBUS (its map touched the page), the mount served a short partition."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kafkafs.format.jsonview import ProducerRecord
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir

from .conftest import cli

SEGMENT = "t-0/00000000000000000000.log"
RECORDS = 2000


def _one_active_segment(path: Path, index_interval: int) -> tuple[Path, bytes]:
    """``t-0``: one segment of 100 batches of 20 keyed records; (LOGDIR, the segment's bytes)."""
    path.mkdir(parents=True)
    with LogDir(path, Settings({"index.interval.bytes": index_interval}), writable=True) as d:
        log = d.create_partition("t", 0)
        for b in range(RECORDS // 20):
            log.append_records([ProducerRecord(1_763_700_000_000 + i, b"k%d" % i, b"value %d %s" % (i, b"x" * 40), ())
                                for i in range(b * 20, b * 20 + 20)])
    return path, (path / SEGMENT).read_bytes()


def _unreadable_stretch(path: Path, eio_layer, index_interval: int):
    """:func:`_one_active_segment` under an EIO layer whose segment gives no byte of a 4,000-byte stretch
    from two fifths in; (LOGDIR, the segment's bytes, the layer)."""
    logdir, data = _one_active_segment(path, index_interval)
    layer = eio_layer(logdir)
    bad = len(data) * 2 // 5
    layer.fail({"name": SEGMENT, "from": bad, "to": bad + 4000, "op": "read"})
    return logdir, data, layer


def _unindexed_segments(logdir: Path) -> dict[str, tuple[int, int]]:
    """``t-0``: 30 batches of 20 records over segments of 6,000 bytes without offset index entries (as one
    producer process a batch leaves them); each segment's file name -> (base offset, next offset)."""
    logdir.mkdir()
    with LogDir(logdir, Settings({"segment.bytes": 6000, "index.interval.bytes": 10**8}), writable=True) as d:
        log = d.create_partition("t", 0)
        for b in range(30):
            log.append_records([ProducerRecord(1_763_700_000_000 + i, None, b"v%d %s" % (i, b"x" * 40), ())
                                for i in range(b * 20, b * 20 + 20)])
        return {s.log_path.name: (s.base_offset, s.next_offset) for s in log.segments}


@pytest.mark.parametrize("index_interval", [pytest.param(4096, marks=pytest.mark.slow), 10**8],
                         ids=["indexed", "no-index-entries"])
def test_the_cli_stops_at_an_unreadable_stretch_of_the_active_segment(tmp_path, eio_layer, index_interval) -> None:
    logdir, data, layer = _unreadable_stretch(tmp_path / "logs", eio_layer, index_interval)
    seg = str(layer.path / SEGMENT)

    consumed = cli("consume", str(layer.path), "t-0")
    offsets = [json.loads(line)["offset"] for line in consumed.stdout.splitlines()]
    assert consumed.returncode == 1 and 0 < len(offsets) < RECORDS and offsets == list(range(len(offsets)))
    assert f"cannot read {seg}: input/output error" in consumed.stderr.decode()

    recovered = cli("recover", str(layer.path))  # before: cut the healthy rest, WARNING only
    assert recovered.returncode == 1 and b"input/output error" in recovered.stderr, recovered.stderr
    assert (logdir / SEGMENT).read_bytes() == data

    produced = cli("produce", str(layer.path), "t-0", stdin=b"after the bad stretch\n")
    assert produced.returncode == 1 and b"input/output error" in produced.stderr, produced.stderr
    assert (logdir / SEGMENT).read_bytes() == data  # before: a batch at an offset already used

    dumped = cli("dump", seg)  # before: SIGBUS (-7), nothing said
    lines = dumped.stdout.decode().splitlines()
    assert dumped.returncode == 1 and lines[1] == "Log starting offset: 0" and lines[2].startswith("baseOffset: 0 ")
    assert f"cannot read {seg} from position" in dumped.stderr.decode()

    verified = cli("verify", str(layer.path))
    assert verified.returncode == 1 and f"cannot read {seg}: input/output error" in verified.stdout.decode()
    layer.fail()
    assert cli("verify", str(logdir)).returncode == 0  # and the segment is whole once the disk gives it


def test_a_mount_says_eio_past_an_unreadable_stretch_of_the_active_segment(tmp_path, eio_layer, mounted) -> None:
    """Before: records past the stretch were not there (by-offset/1999.json ENOENT, logEndOffset 760,
    nothing logged), for a segment whose offset index has no entry past it."""
    logdir, data, layer = _unreadable_stretch(tmp_path / "logs", eio_layer, 10**8)
    m = mounted(layer.path)
    m.allow_errors = True
    part = m / "t-0"
    assert json.loads((part / "partition.json").read_bytes())["logEndOffset"] == RECORDS
    assert json.loads((part / "by-offset" / "10.json").read_bytes())["offset"] == 10
    for offset in (1500, RECORDS - 1):
        with pytest.raises(OSError, match="Input/output error"):
            (part / "by-offset" / f"{offset}.json").read_bytes()
    with pytest.raises(OSError, match="Input/output error"):
        (part / "records.jsonl").read_bytes()
    assert "cannot read" in m.log() and SEGMENT in m.log()


def test_a_rw_mount_serves_what_it_can_of_a_partition_with_an_unreadable_stretch(tmp_path, eio_layer, mounted) -> None:
    """review11 R11-10 (SPEC §3 "Damage and disk errors are local ... logged once"): a ``--rw`` mount
    answered EIO for everything of the partition (stat of records.jsonl, by-offset/10.json that a
    read-only mount serves, append) and logged nothing. Now it serves it read-only: the reads that need
    the bytes fail, the rest is served, appends are refused with EIO, and one line names the file."""
    logdir, data, layer = _unreadable_stretch(tmp_path / "logs", eio_layer, 10**8)
    m = mounted(layer.path, "--rw")
    m.allow_errors = True
    part = m / "t-0"
    assert (part / "records.jsonl").stat().st_size > 0
    assert json.loads((part / "by-offset" / "10.json").read_bytes())["offset"] == 10
    with pytest.raises(OSError, match="Input/output error"):
        (part / "by-offset" / f"{RECORDS - 1}.json").read_bytes()
    for _ in range(2):
        with pytest.raises(OSError, match="Input/output error"):
            with open(part / "append", "a") as f:
                f.write("appended over the bad stretch\n")
    assert (logdir / SEGMENT).read_bytes() == data
    said = [line for line in m.log().splitlines() if "appends are refused with EIO" in line]
    assert len(said) == 1 and f"cannot read {layer.path / SEGMENT}: input/output error" in said[0], m.log()


def test_a_mount_says_eio_for_an_unreadable_stretch_of_the_first_sealed_segment(tmp_path, eio_layer, mounted) -> None:
    """review11 R11-7, segments without offset index entries (as one producer process a batch leaves
    them). Before: records.jsonl silently started at the second segment (cat exit 0, 500 of 600
    records) although the log said the reads that need the first one's bytes fail with EIO."""
    logdir = tmp_path / "logs"
    second = sorted(_unindexed_segments(logdir).values())[1][0]
    layer = eio_layer(logdir)
    layer.fail({"name": "t-0/00000000000000000000.log", "from": 100, "to": 200, "op": "read"})
    m = mounted(layer.path)
    m.allow_errors = True
    part = m / "t-0"
    with pytest.raises(OSError, match="Input/output error"):
        (part / "records.jsonl").read_bytes()
    assert json.loads((part / "by-offset" / f"{second}.json").read_bytes())["offset"] == second
    assert "cannot read" in m.log()


def test_a_write_back_error_of_an_index_names_the_index(tmp_path, eio_layer) -> None:
    """review11 R11-5 (SPEC §4 "An OS error names the path"): recover rebuilding indexes whose write-back
    (msync) fails with EIO said 'cannot recover LOGDIR: input/output error'."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    with LogDir(logdir, Settings({"segment.bytes": 8192}), writable=True) as d:
        log = d.create_partition("t", 0)
        for i in range(0, 400, 5):
            log.append_records([ProducerRecord(1000 + j, None, b"v%d %s" % (j, b"p" * 40), ()) for j in range(i, i + 5)])
    for index in (logdir / "t-0").glob("*.index"):
        index.unlink()
    layer = eio_layer(logdir)
    layer.fail({"name": ".index", "from": 0, "op": "fsync"})
    done = cli("recover", str(layer.path))
    assert done.returncode == 1, done.stderr
    line = done.stderr.decode().strip().splitlines()[-1]
    assert line.startswith(f"kafkafs: error: cannot write {layer.path / 't-0'}/") and line.endswith(
        ".index: input/output error"), line


def test_verify_checks_the_other_segments_of_a_partition_with_an_unreadable_one(tmp_path, eio_layer) -> None:
    """fix17's leftover of review11 R11-5: verify of a partition with one unreadable segment said 't-0: not
    checked (... cannot read FILE ...)' and checked none of its other segments. Now it checks them and
    names the one it could not read, exit 1."""
    logdir = tmp_path / "logs"
    sizes = {name: end - base for name, (base, end) in _unindexed_segments(logdir).items()}
    bad = sorted(sizes)[1]
    # another segment's damage must still be found: a CRC broken in the last one
    last = logdir / "t-0" / sorted(sizes)[-1]
    data = bytearray(last.read_bytes())
    data[-1] ^= 0xFF
    last.write_bytes(bytes(data))
    layer = eio_layer(logdir)
    layer.fail({"name": f"t-0/{bad}", "from": 100, "to": 200, "op": "read"})
    done = cli("verify", str(layer.path))
    out = done.stdout.decode()
    assert done.returncode == 1, out
    lines = out.splitlines()
    assert lines[0] == f"t-0: 6 segment(s), {600 - sizes[bad] - 20} records, offsets 0..599: 2 problem(s)", out  # less the bad batch
    assert f"  {bad}: not checked (kafkafs: error: cannot read {layer.path / 't-0' / bad}: input/output error)" in lines
    assert any(line.startswith(f"  {last.name} position ") and "CRC" in line for line in lines), out
