"""Damage is local (SPEC §3): a sealed segment cut inside its last batch is damage, never a quiet gap.

A segment that a later segment follows was complete when its writer rolled (Kafka trims it before the
next segment exists), so bytes after its last whole batch are a torn or cut batch. Before this test the
mount served ``records.jsonl`` without that batch's records, answered ENOENT for its offsets and
``by-time`` found the next segment's record instead, all with no word in the log: records gone with
success. Now the reads that need that batch answer EIO, the damage is logged, and everything else
(the records before it, the next segments, lookups of their offsets) reads as before. The active
segment's partial batch is a write in progress and stays quiet.
"""

from __future__ import annotations

import errno
import json
import mmap
import os
import shutil
from pathlib import Path

import pytest

from kafkafs.format.batch import read_batch_header
from tests.fs.conftest import expected_jsonl


def _batches(segment: Path) -> list[tuple[int, int, int, int]]:
    """(position, size, base offset, last offset) of every batch of a segment."""
    buf = segment.read_bytes()
    out, pos = [], 0
    while pos < len(buf):
        h = read_batch_header(buf, pos)
        out.append((pos, h.size, h.base_offset, h.last_offset))
        pos = h.end
    return out


@pytest.fixture
def torn(built_logdir, tmp_path) -> tuple[Path, bytes, int, int, int]:
    """A copy of the built log directory whose first ``orders-0`` segment lost the last 10 bytes of its
    last batch. (logdir, records.jsonl before the cut, the torn batch's first and last offset, the
    number of bytes of records.jsonl before that batch)."""
    logdir = tmp_path / "logs"
    shutil.copytree(built_logdir, logdir)
    segments = sorted((logdir / "orders-0").glob("*.log"))
    assert len(segments) > 2
    before = expected_jsonl(logdir, "orders-0")
    first = segments[0]
    _pos, _size, base, last = _batches(first)[-1]
    os.truncate(first, first.stat().st_size - 10)
    lines = before.splitlines(keepends=True)
    prefix = sum(len(line) for line in lines if json.loads(line)["offset"] < base)
    return logdir, before, base, last, prefix


def _errno(path: Path) -> int | None:
    try:
        path.read_bytes()
    except OSError as exc:
        return exc.errno
    return None


def test_a_torn_batch_in_a_sealed_segment_reads_eio_and_the_rest_stays(mounted, torn):
    logdir, before, base, last, prefix = torn
    m = mounted(logdir)
    m.allow_errors = True
    part = m / "orders-0"
    # the records before the torn batch and the segments after it are served as before (a read that
    # reaches the torn batch's place is short, the next one fails: test_cat_gets_every_record_before_...)
    after = before[before.index(b'"offset":%d,' % (last + 1)) - len(b'{"topic":"orders","partition":0,'):]
    size = os.stat(part / "records.jsonl").st_size
    # the kernel reads whole pages: the page that holds the torn batch's first byte needs it (EIO), so the
    # records before it are read up to that page (how much of that page is served depends on the kernel's
    # read-ahead and timing: under load a read of exactly ``prefix`` bytes came back short there)
    head = prefix - prefix % mmap.PAGESIZE
    fd = os.open(part / "records.jsonl", os.O_RDONLY)
    try:
        assert os.pread(fd, head, 0) == before[:head]
        assert os.pread(fd, len(after), size - len(after)) == after
    finally:
        os.close(fd)
    assert json.loads((part / "by-offset" / f"{last + 1}.json").read_bytes())["offset"] == last + 1
    assert json.loads((part / "by-offset" / f"{base - 1}.json").read_bytes())["offset"] == base - 1
    # what needs the torn batch is EIO, never a quiet gap (ENOENT) or the next record
    assert _errno(part / "records.jsonl") == errno.EIO
    for offset in (base, last):
        assert _errno(part / "by-offset" / f"{offset}.json") == errno.EIO, offset
    assert _errno(part / "by-offset" / f"{base - 2}-{last + 2}.jsonl") == errno.EIO
    lines = before.splitlines()
    torn_ts = next(json.loads(line)["timestamp"] for line in lines if json.loads(line)["offset"] == base)
    assert _errno(part / "by-time" / f"{torn_ts}.json") == errno.EIO
    # the key views need every record with a key: the torn batch may hold any key
    key = next(json.loads(line)["key"] for line in lines
               if base <= json.loads(line)["offset"] <= last and json.loads(line)["key"] is not None)
    assert _errno(part / "by-key" / f"{key}.jsonl") == errno.EIO
    assert _errno(part / "by-key" / "no-such-key.json") == errno.EIO
    assert _errno(part / "table.jsonl") == errno.EIO
    assert "bytes after the last whole batch" in m.log(), m.log()
    assert "Traceback" not in m.log()


def _cat(path: Path) -> tuple[bytes, int | None, int]:
    """What ``cat`` gets: 128 KiB reads from the start until the end or an error (the bytes, the errno or
    None, the file's size after)."""
    out = []
    fd = os.open(path, os.O_RDONLY)
    try:
        while True:
            try:
                data = os.read(fd, 128 * 1024)
            except OSError as exc:
                return b"".join(out), exc.errno, os.fstat(fd).st_size
            if not data:
                return b"".join(out), None, os.fstat(fd).st_size
            out.append(data)
    finally:
        os.close(fd)


@pytest.mark.parametrize("damage", ["torn", "crc"])
def test_cat_gets_every_record_before_the_damage_then_eio(mounted, built_logdir, tmp_path, damage):
    """review23 R23-14: `cat records.jsonl` lost the records just before a damaged batch: the 128 KiB read
    that reached it failed as a whole (EIO with 0 bytes when the damage lies in the first window). Now
    the file is read with direct I/O once it shows damage, the read that reaches it is short (up to the
    last whole record before it), and only the next read fails. (Through the page cache the kernel takes
    a short read for the end of the file: it shrinks the inode, `cat` ends quietly with exit 0.)"""
    logdir = tmp_path / "logs"
    shutil.copytree(built_logdir, logdir)
    before = expected_jsonl(logdir, "orders-0")
    first = sorted((logdir / "orders-0").glob("*.log"))[0]
    _pos, _size, base, last = _batches(first)[-1]
    if damage == "torn":
        os.truncate(first, first.stat().st_size - 10)
    else:
        _flip(first, len(_batches(first)) - 1)
    lines = before.splitlines(keepends=True)
    prefix = sum(len(line) for line in lines if json.loads(line)["offset"] < base)
    m = mounted(logdir)
    m.allow_errors = True
    path = m / "orders-0" / "records.jsonl"
    size = os.stat(path).st_size
    got, err, size_after = _cat(path)
    assert err == errno.EIO and got == before[:prefix], (len(got), prefix)  # before: 0 bytes, EIO
    assert size_after == size
    after = before[before.index(b'"offset":%d,' % (last + 1)) - len(b'{"topic":"orders","partition":0,'):]
    fd = os.open(path, os.O_RDONLY)
    try:
        assert os.pread(fd, len(after), size - len(after)) == after
    finally:
        os.close(fd)
    # a range that holds the batch: the same (before: EIO with no line)
    got, err, _size = _cat(m / "orders-0" / "by-offset" / f"{base - 2}-{last + 2}.jsonl")
    assert err == errno.EIO and got == b"".join(line for line in lines if base - 2 <= json.loads(line)["offset"] < base)
    assert "Traceback" not in m.log()


def _flip(segment: Path, batch: int) -> int:
    """Flip a byte near the end of ``segment``'s batch number ``batch`` (its CRC fails); its position."""
    pos, size, _base, _last = _batches(segment)[batch]
    with open(segment, "r+b") as f:
        f.seek(pos + size - 5)
        byte = f.read(1)
        f.seek(pos + size - 5)
        f.write(bytes([byte[0] ^ 0xFF]))
    return pos


def test_damage_seen_through_the_key_views_is_logged_once_with_its_file(mounted, built_logdir, tmp_path):
    """A bad-CRC batch in a sealed and in the active segment: every key view that needs them is EIO, and
    each batch is logged once, naming its file and position, however often and through whichever view
    it is met (SPEC §3). Before, every by-key access logged "the key index stops at damage" again (a
    key index of the active segment is built at each access), and a damaged index's ERROR line had no
    file or position of its own ("corrupt batch in None at position None" at first, later the path
    twice), so records.jsonl's line for the same batch came on top."""
    logdir = tmp_path / "logs"
    shutil.copytree(built_logdir, logdir)
    segments = sorted((logdir / "orders-0").glob("*.log"))
    sealed, active = segments[0], segments[-1]
    damaged = {sealed: _flip(sealed, 3), active: _flip(active, 1)}
    m = mounted(logdir)
    m.allow_errors = True
    part = m / "orders-0"
    for _round in range(3):
        assert _errno(part / "by-key" / "no-such-key.json") == errno.EIO
        assert _errno(part / "by-key" / "no-such-key.jsonl") == errno.EIO
        with pytest.raises(OSError) as listing:
            os.listdir(part / "by-key")
        assert listing.value.errno == errno.EIO
        assert _errno(part / "table.jsonl") == errno.EIO
        assert _errno(part / "records.jsonl") == errno.EIO
    lines = m.log().splitlines()
    for segment, pos in damaged.items():
        said = [line for line in lines if str(segment) in line]
        assert len(said) == 1, lines
        assert f"position {pos}" in said[0] and "CRC mismatch" in said[0], said
        assert said[0].count(str(segment)) == 1, said
    assert not [line for line in lines if "WARNING" in line or "None" in line], lines


def test_a_partial_batch_at_the_end_of_the_active_segment_is_quiet(mounted, built_logdir, tmp_path):
    logdir = tmp_path / "logs"
    shutil.copytree(built_logdir, logdir)
    last_segment = sorted((logdir / "orders-0").glob("*.log"))[-1]
    whole = expected_jsonl(logdir, "orders-0")
    batches = _batches(last_segment)
    pos, _size, base, _last = batches[-1]
    with open(last_segment, "r+b") as f:  # a batch still being written: its first 30 bytes
        f.truncate(pos + 30)
    m = mounted(logdir)
    got = (m / "orders-0" / "records.jsonl").read_bytes()
    assert got == whole[: whole.index(b'"offset":%d,' % base) - len(b'{"topic":"orders","partition":0,')]


def test_a_legacy_wrapper_overlapping_the_entry_before_reads_eio_and_is_logged_once(mounted, tmp_path):
    """review6 F11 remainder (SPEC §3, §4): a gzip wrapper (magic 1) at offset 6 whose inner offsets 4, 5, 6
    overlap the entry at 4 before it. records.jsonl served 0..8 with the inner 4 dropped and nothing
    logged; now the reads that need the two entries are EIO, each logged once, and the rest reads."""
    from tests.format.test_legacy import overlapping_wrapper_segment

    segment = tmp_path / "logs" / "old-0" / "00000000000000000000.log"
    segment.parent.mkdir(parents=True)
    segment.write_bytes(overlapping_wrapper_segment(1))
    m = mounted(tmp_path / "logs")
    m.allow_errors = True
    part = m / "old-0"
    for _round in range(2):
        assert _errno(part / "records.jsonl") == errno.EIO
        assert _errno(part / "by-offset" / "4-6.jsonl") == errno.EIO
    assert [json.loads(line)["offset"] for line in (part / "by-offset" / "0-3.jsonl").read_bytes().splitlines()] == [
        0, 1, 2, 3]
    assert [json.loads(line)["offset"] for line in (part / "by-offset" / "7-8.jsonl").read_bytes().splitlines()] == [
        7, 8]
    lines = [line for line in m.log().splitlines() if str(segment) in line]
    assert len(lines) == 2, m.log()
    assert "position 152: offsets run past the next batch's base (4, then 4)" in lines[0], lines
    assert "position 190: offsets go backwards (4 after 4) in the compressed message at offset 6" in lines[1], lines
    assert "Traceback" not in m.log()


@pytest.mark.parametrize("magic", [0, 1])
def test_a_legacy_inner_message_whose_crc_fails_reads_eio_and_is_logged_once(mounted, tmp_path, magic):
    """fix37's leftover of review16 R16-4: a gzip wrapper whose inner message at offset 4 fails its own CRC
    (the wrapper's holds) was served as sound, silently. As a v2 batch that fails its CRC, it is now damage
    to the reads that need it (EIO, logged once, naming the record), and the rest of the partition reads."""
    from tests.format.test_legacy import inner_crc_damaged

    segment = tmp_path / "logs" / "old-0" / "00000000000000000000.log"
    segment.parent.mkdir(parents=True)
    segment.write_bytes(inner_crc_damaged(magic))
    m = mounted(tmp_path / "logs")
    m.allow_errors = True
    part = m / "old-0"
    for _round in range(2):
        assert _errno(part / "records.jsonl") == errno.EIO
        for n in (3, 4, 5):
            assert _errno(part / "by-offset" / f"{n}.json") == errno.EIO, n
    for n in (0, 2, 6, 7):
        assert json.loads((part / "by-offset" / f"{n}.json").read_bytes())["offset"] == n
    assert [json.loads(line)["offset"] for line in (part / "by-offset" / "6-7.jsonl").read_bytes().splitlines()] == [
        6, 7]
    lines = [line for line in m.log().splitlines() if str(segment) in line]
    assert len(lines) == 1 and "inner message at offset 4: crc mismatch" in lines[0], m.log()
    assert "Traceback" not in m.log()


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_a_segment_the_daemon_may_not_read_fails_only_its_reads(mounted, logdir_copy):
    """review22 R22-4: a sealed segment (and, in another partition, the active one) of mode 000, the daemon
    without DAC override (root then obeys modes): records.jsonl stays listed, sized and readable up to that
    segment; the reads that need it fail (EIO), the file is logged once (SPEC §3: damage is local). It was
    EACCES at lookup: the whole records.jsonl vanished."""
    from tests.fs.conftest import Mount

    segments = sorted((logdir_copy / "orders-0").glob("*.log"))
    assert len(segments) > 2
    before = expected_jsonl(logdir_copy, "orders-0")
    sealed = segments[1]
    active = logdir_copy / "events-3" / "00000000000000000000.log"
    sealed.chmod(0)
    active.chmod(0)
    m = Mount(logdir_copy, mounted.base / "mnt-nocap", ("--cache-dir", str(mounted.base / "cache-nocap")),
              mounted.base / "mount-nocap.log")
    m.prefix = ("setpriv", "--bounding-set", "-dac_override,-dac_read_search")
    m.allow_errors = True
    mounted.mounts.append(m)
    m.start()
    base = int(sealed.stem)
    lines = before.splitlines(keepends=True)
    prefix = sum(len(line) for line in lines if json.loads(line)["offset"] < base)
    head = prefix - prefix % mmap.PAGESIZE  # the kernel reads whole pages (see the torn test above)
    assert head > 0
    fd = os.open(m / "orders-0" / "records.jsonl", os.O_RDONLY)
    try:
        assert os.pread(fd, head, 0) == before[:head]  # the first segment's records
    finally:
        os.close(fd)
    for name in ("orders-0", "events-3"):
        part = m / name
        assert "records.jsonl" in os.listdir(part)
        assert os.stat(part / "records.jsonl").st_size >= 0
        assert _errno(part / "records.jsonl") == errno.EIO
    assert _errno(m / "orders-0" / "by-offset" / "0.json") is None
    m.stop()
    log = m.log()
    assert "Traceback" not in log
    for path in (sealed, active):
        assert log.count(f"cannot read {path}") == 1, log
