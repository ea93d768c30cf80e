"""Whole-file readers beside appends read whole lines of records that exist (issue 20, defect 2; SPEC §3
"Live"): never a NUL byte, never a byte that differs from what ``consume`` prints for the same record.

With a ``--rw`` mount appending, 2.2% of whole-file reads of ``records.jsonl`` returned runs of NUL
bytes where the file grew during the read: a read that ends at the end of the file makes the kernel
zero the rest of its last page, and when the file grows the kernel shows the new size before it drops
that page (fs/fuse: the size is set, then the pages are invalidated). Files that grow are now read with
direct I/O. The readers and the check are in readers.py; the slow test is the long measurement
(``KAFKAFS_READERS_SECONDS``).
"""

from __future__ import annotations

import os
import time

import pytest

from kafkafs.storage.logdir import LogDir

from . import readers
from .readers import Times, check_reads, check_whole_reads, consume_lines, kinds, run_readers, whole_read

SECONDS = float(os.environ.get("KAFKAFS_READERS_SECONDS", "8"))


def test_the_check_of_whole_reads_finds_what_differs() -> None:
    """The long runs keep a read of records.jsonl as its size and hash: the check still tells a start
    of consume's lines from a read that differs, ends mid-line or runs past what consume printed."""
    expected = {o: b'{"offset": %d, "v": "%s"}' % (o, b"x" * o) for o in range(50)}
    stream = b"".join(expected[o] + b"\n" for o in range(50))
    ends = [i + 1 for i, c in enumerate(stream) if c == 10]
    good = [whole_read(stream[:n]) for n in [0, *ends[::7], len(stream)]]
    assert check_whole_reads(good, expected) == ([], sum(ends.index(r.size) + 1 for r in good if r.size))
    corrupt = bytearray(stream[: ends[20]])
    corrupt[ends[10] + 3] ^= 1
    nul = stream[: ends[5]] + bytes(4) + stream[ends[5] + 4 : ends[9]]
    wrong = [whole_read(bytes(corrupt)), whole_read(stream[: ends[30] - 2]), whole_read(stream + b"{}\n"), whole_read(nul)]
    bad, _ = check_whole_reads(good + wrong, expected)
    assert len(bad) == 4 and wrong[3].nul, bad


def test_a_differing_read_says_where_it_parts_from_consume(tmp_path, monkeypatch) -> None:
    """A read that differs is told by its first differing chunk and, kept on disk because it disagreed
    with an earlier read, by the place where its offsets stop following on (here: ten records missing)."""
    monkeypatch.setattr(readers, "CHUNK", 256)
    expected = {o: b'{"topic":"t","partition":0,"offset":%d,"v":"%s"}' % (o, b"x" * (o % 7)) for o in range(120)}
    good = b"".join(expected[o] + b"\n" for o in range(120))
    gap = b"".join(expected[o] + b"\n" for o in [*range(50), *range(60, 120)])
    keeper = readers._Keeper(tmp_path / "kept")
    first = keeper.check(whole_read(good), good)
    wrong = keeper.check(whole_read(gap), gap)
    assert first.kept is None and wrong.kept is not None
    bad, _ = check_whole_reads([first, wrong], expected)
    assert len(bad) == 1 and "offsets break 1 times" in bad[0] and "(2486, 49, 60)" in bad[0], bad
    assert "consume's line there is offset 50; the read's line is b'{\"topic\":\"t\",\"partition\":0,\"offset\":60," in bad[0], bad
    assert "chunk 10: read has offset 62 at byte 2590, consume 52 (+6 bytes into its line)" in bad[0], bad


@pytest.mark.parametrize("shuffled", [False, True])
def test_the_by_time_check_bisects_as_a_scan_would_find(shuffled: bool) -> None:
    """Times answers as the scan of consume's lines it replaces, with timestamps in order or not."""
    import random

    rng = random.Random(7)
    stamps = sorted(rng.randrange(1000, 1400) for _ in range(300))
    if shuffled:
        rng.shuffle(stamps)
    expected = {o + 5: b'{"offset": %d, "timestamp": %d}' % (o + 5, t) for o, t in enumerate(stamps)}
    times = Times(expected)
    for ts in range(990, 1410, 3):
        assert times.first_at_or_after(ts) == next((o for o in sorted(expected) if stamps[o - 5] >= ts), None)
        for width in (1, 7, 50):
            assert times.window(ts, ts + width) == [o for o in sorted(expected) if ts <= stamps[o - 5] < ts + width]


def test_whole_file_readers_beside_appends_read_only_records_that_exist(tmp_path, mounted):
    logdir = tmp_path / "logs"
    logdir.mkdir()
    with LogDir(logdir, writable=True) as d:
        d.create_partition("live", 0)
    m = mounted(logdir, "--rw")
    started = time.monotonic()
    result = run_readers(m.path, SECONDS, readers=4, rate=1000)
    m.stop()
    took = time.monotonic() - started
    checked = check_reads(result, consume_lines(logdir))
    assert not result["hangs"], result["hangs"]
    assert not result["errors"], result["errors"][:5]
    assert checked["nul"] == 0 and not checked["bad"], (checked["nul"], checked["bad"][:5])
    assert checked["reads"] > 20 and result["appended"] > 1000, (checked, result["appended"], took)


@pytest.mark.slow
def test_ten_minutes_of_readers_beside_appends(tmp_path, mounted):
    """Issue 20's done-when: 8 readers, 10 minutes, 2,000 records/s (set KAFKAFS_READERS_SECONDS)."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    with LogDir(logdir, writable=True) as d:
        d.create_partition("live", 0)
    m = mounted(logdir, "--rw")
    seconds = float(os.environ.get("KAFKAFS_READERS_SECONDS", "600"))
    started = time.monotonic()
    # 200 records a write(), one every 0.1 s (a producer's linger), and what fell due while a write waited
    # behind the readers' requests in the next one, as a producer batches (run_readers' own process)
    result = run_readers(m.path, seconds, batch=200, keep=tmp_path / "differing")
    m.stop()
    checked = check_reads(result, consume_lines(logdir))
    print(f"\nreaders: {seconds:.0f} s ({time.monotonic() - started:.0f} s in all), {result['appended']} records "
          f"appended, {checked['reads']} reads, {checked['lines']} lines, {checked['nul']} with NUL bytes, "
          f"{len(checked['bad'])} differing, {len(result['hangs'])} hangs (300 s), {len(result['slow'])} reads over 30 s, "
          f"{len(result['errors'])} errors; "
          f"{result['rate']:.0f} records/s in {len(result['writes'])} writes ({sum(k > 200 for k in result['writes'])} "
          f"over 200 records, the largest {max(result['writes'], default=0)}); by kind {kinds(result)}; slowest read {result['slowest'][0]:.2f} s "
          f"({result['slowest'][1]}); load {os.getloadavg()}")
    for line in checked["bad"][:30]:
        print("differs:", line)
    assert not result["hangs"] and not result["errors"] and checked["nul"] == 0 and not checked["bad"], (
        result["hangs"][:5], result["errors"][:5], checked["bad"][:5])
