"""A bad stretch in the middle of a file of ``segments/`` fails the reads that need it, and only those
(review15 R15-2, HIGH; SPEC §3 "byte-identical", "Damage and disk errors are local").

The disk gave the pages before the bad stretch and then failed: ``pread`` returned those pages, short.
The mount passed the short read on, which the kernel takes for the end of the file: with the page cache
on (a sealed segment's files), the read of the bad page and of EVERY later offset returned 0 bytes, and
``cp`` exited 0 with a 4,096-byte copy of a 17,988-byte segment whose ``stat`` said 17,988. Now the
short read is read on, the disk's error fails that read with EIO, and the kernel asks again for the
pages its reader needs: the bad page reads EIO, every other page reads its bytes.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

from kafkafs.format.jsonview import ProducerRecord
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir

BASE_TS = 1_763_700_000_000
BAD = (5000, 5100)  # the bytes the disk cannot read, inside the second page


def _build(path: Path) -> tuple[Path, list[int]]:
    """``t-0``: sealed segments of ~80 KB whose indexes hold an entry per batch (both over 8 KB), then an
    active one of ~14 KB: (LOGDIR, bases)."""
    path.mkdir(parents=True)
    with LogDir(path, Settings({"segment.bytes": 80_000, "index.interval.bytes": 1}), writable=True) as d:
        log = d.create_partition("t", 0)
        for i in range(2500):
            log.append_records([ProducerRecord(BASE_TS + i, None, b"r%05d" % i, ())])
        bases = [s.base_offset for s in log.segments]
    return path, bases


def _pread(path: Path, offset: int, size: int = 4096) -> bytes | int:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, size, offset)
    except OSError as exc:
        return exc.errno
    finally:
        os.close(fd)


def test_a_bad_stretch_in_a_segment_file_fails_its_reads_and_no_later_one(tmp_path, eio_layer, mounted):
    logdir, bases = _build(tmp_path / "logs")
    assert len(bases) >= 3, bases
    sealed, active = f"{bases[1]:020d}", f"{bases[-1]:020d}"
    files = [f"{sealed}.log", f"{sealed}.index", f"{sealed}.timeindex", f"{active}.log"]
    for name in files:
        assert (logdir / "t-0" / name).stat().st_size > 2 * 4096, name
    layer = eio_layer(logdir)
    layer.fail(*({"name": f"t-0/{name}", "from": BAD[0], "to": BAD[1], "op": "read"} for name in files))
    m = mounted(layer.path)
    m.allow_errors = True
    segments = m / "t-0" / "segments"
    for name in files:
        real = (logdir / "t-0" / name).read_bytes()
        path = segments / name
        assert path.stat().st_size == len(real), name
        # the pages around the bad one read their bytes; the bad page fails, and so does the whole file
        assert _pread(path, 0) == real[:4096], name
        assert _pread(path, 4096) == errno.EIO, name
        for offset in range(8192, len(real), 4096):
            assert _pread(path, offset) == real[offset:offset + 4096], (name, offset)
        assert _pread(path, 4096) == errno.EIO, name  # still, after the later pages were read
        copy = tmp_path / "copy"
        proc = subprocess.run(["cp", str(path), str(copy)], capture_output=True)
        assert proc.returncode != 0 and b"Input/output error" in proc.stderr, (name, proc)
        copy.unlink(missing_ok=True)
    assert layer.hits(), "the bad stretch was never asked for: the test proves nothing"
    # the other segments' files are whole
    other = f"{bases[0]:020d}.log"
    shutil.copyfile(segments / other, tmp_path / "other")
    assert (tmp_path / "other").read_bytes() == (logdir / "t-0" / other).read_bytes()
    assert m.proc.poll() is None and "Traceback" not in m.log()
