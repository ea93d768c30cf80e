"""EIO from the disk in one segment is local (issue 20, defect 3; SPEC §3 "Damage and disk errors are
local"): it fails only the reads that need that segment's bytes, is logged once per segment, and every
other file of the partition (and every other partition) stays readable.

With reads of one segment failing from byte 3000 on (a failing disk, through :mod:`tests.faults.eiofs`),
every file of that partition answered EIO (``by-offset/50.json`` in the healthy first segment and
``records.jsonl`` from byte 0 included) and the daemon logged nothing.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from kafkafs.format.jsonview import ProducerRecord
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir
from tests.faults.conftest import PAGE, cli, read_pages
from tests.fs.conftest import expected_jsonl

BASE_TS = 1_763_700_000_000


def _build(path: Path) -> tuple[Path, list[int]]:
    """``disk-0`` in segments of ~8 KB (a hundred records each), ``other-0`` small: (LOGDIR, disk-0's bases)."""
    path.mkdir(parents=True)
    with LogDir(path, Settings({"segment.bytes": 8192, "index.interval.bytes": 1024}), writable=True) as d:
        log = d.create_partition("disk", 0)
        for i in range(0, 400, 5):
            log.append_records([ProducerRecord(BASE_TS + j, b"k%d" % j, b'{"n":%d,"pad":"%s"}' % (j, b"p" * 40), ())
                                for j in range(i, i + 5)])
        d.create_partition("other", 0).append_records([ProducerRecord(BASE_TS, None, b"fine %d" % i, ())
                                                       for i in range(50)])
        bases = [s.base_offset for s in log.segments]
    return path, bases


def _eio(fn) -> bool:
    try:
        fn()
    except OSError as exc:
        assert exc.errno == errno.EIO, exc
        return True
    return False


def test_eio_in_one_segment_fails_only_the_reads_that_need_it(tmp_path, eio_layer, mounted):
    logdir, bases = _build(tmp_path / "logs")
    assert len(bases) >= 4
    expected = expected_jsonl(logdir, "disk-0")
    lines = expected.splitlines(keepends=True)
    offsets = [json.loads(line)["offset"] for line in lines]
    bad = bases[1]  # the second segment: readable up to byte 3000, EIO past it
    layer = eio_layer(logdir)
    m = mounted(layer.path)
    m.allow_errors = True
    layer.fail({"name": f"disk-0/{bad:020d}.log", "from": 3000, "op": "read"})
    part = m / "disk-0"
    # every other partition, whole
    assert (m / "other-0" / "records.jsonl").read_bytes() == expected_jsonl(logdir, "other-0")
    # the healthy segments' records by offset, and every range inside them
    for n in (0, 50, bad - 1, bases[2], offsets[-1]):
        assert json.loads((part / "by-offset" / f"{n}.json").read_bytes())["offset"] == n
    assert (part / "by-offset" / f"0-{bad - 1}.jsonl").read_bytes() == expected_jsonl(logdir, "disk-0", 0, bad - 1)
    last = offsets[-1]
    assert (part / "by-offset" / f"{bases[2]}-{last}.jsonl").read_bytes() == expected_jsonl(
        logdir, "disk-0", bases[2], last)
    # records.jsonl: the pages before the bad segment's bytes and those after them read (what the bad
    # segment renders to cannot be known: its place in the file holds a placeholder that reads EIO)
    size = (part / "records.jsonl").stat().st_size
    start = sum(len(line) for line, o in zip(lines, offsets, strict=True) if o < bad)
    tail = len(expected) - sum(len(line) for line, o in zip(lines, offsets, strict=True) if o < bases[2])
    good = start // PAGE * PAGE
    assert read_pages(part / "records.jsonl", 0, good) == expected[:good]
    after = -(-(size - tail) // PAGE) * PAGE
    assert read_pages(part / "records.jsonl", after, size - after) == expected[len(expected) - (size - after):]
    # what needs the bad bytes fails with EIO: the whole file, the range, a record past byte 3000
    assert _eio(lambda: (part / "records.jsonl").read_bytes())
    assert _eio(lambda: (part / "by-offset" / f"{bad}-{bases[2] - 1}.jsonl").read_bytes())
    assert _eio(lambda: (part / "by-offset" / f"{bases[2] - 1}.json").read_bytes())
    assert _eio(lambda: (part / "segments" / f"{bad:020d}.log").read_bytes())
    assert (part / "segments" / f"{bases[2]:020d}.log").read_bytes() == (logdir / "disk-0" / f"{bases[2]:020d}.log").read_bytes()
    json.loads((part / "partition.json").read_bytes())
    assert sorted(os.listdir(part / "by-offset"))
    # logged once for that segment, however many reads failed
    said = [line for line in m.log().splitlines() if f"{bad:020d}.log" in line]
    assert len(said) == 1, said
    assert "Traceback" not in m.log()
    # the disk heals: everything reads again
    layer.fail()
    with pytest.raises(AssertionError):
        assert _eio(lambda: (part / "by-offset" / f"{bases[2] - 1}.json").read_bytes())


def test_consume_reads_every_other_partition_past_a_disk_error(tmp_path, eio_layer):
    """review23 R23-5: EIO reading one partition's segment stopped `consume TOPIC` for every partition
    (interleaved: the others cut where the failing one stopped; ``--no-interleave``: none after it). Now
    that partition ends at the bad stretch (every record before the read that failed printed), the error
    is said in one line, every other partition is read to its end, exit 1, as for damage: the kernel's
    merge, one partition after the other, and the line by line way (``--grep``)."""
    source = tmp_path / "logs"
    source.mkdir()
    with LogDir(source, Settings({"segment.bytes": 8192, "index.interval.bytes": 1024}), writable=True) as d:
        for p in (0, 1):
            log = d.create_partition("t", p)
            for i in range(0, 300, 20):
                log.append_records([ProducerRecord(BASE_TS + 2 * j + p, b"k%d" % j, b"v%d-%s" % (j, b"p" * 40), ())
                                    for j in range(i, i + 20)])
            if p == 0:
                bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 3
    layer = eio_layer(source)
    name = f"{bases[1]:020d}.log"
    bad = (source / "t-0" / name).stat().st_size // 2

    def lines_of(out: bytes, p: int) -> list[bytes]:
        return [line for line in out.splitlines() if b'"partition":%d,' % p in line]

    whole = cli("consume", str(source), "t")  # each partition's lines, in offset order, whatever the way
    assert whole.returncode == 0
    layer.fail({"name": f"t-0/{name}", "from": bad, "to": bad + 100, "op": "read"})
    for how in ([], ["--no-interleave"], ["--grep", "."]):
        proc = cli("consume", str(layer.path), "t", *how)
        assert proc.returncode == 1, how
        said = f"kafkafs: error: cannot read {layer.path}/t-0/{name}: input/output error"
        assert proc.stderr.decode().splitlines() == [said], how
        assert lines_of(proc.stdout, 1) == lines_of(whole.stdout, 1), how
        got = lines_of(proc.stdout, 0)
        assert got == lines_of(whole.stdout, 0)[: len(got)] and bases[1] <= len(got) < bases[2], how
