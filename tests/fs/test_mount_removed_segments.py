"""A read-only mount beside another process's retention (a live broker, a ``--rw`` mount, ``kafkafs
clean``): a lagging reader of ``records.jsonl`` whose segments are removed before the mount noticed
(fix62's finding: EIO "corrupt batch ... segment file is missing").

Kafka removes a segment by renaming its files ``NNN.log`` -> ``NNN.log.deleted`` (and the indexes), and
unlinks them ``file.delete.delay.ms`` later. Reads go to the segments' files by name when the handle
budget had closed their descriptors (a mount over more segments than its budget); the mount notices the
rename some milliseconds later (inotify, then one refresh). Between the two, a read found the name gone
and called it damage. Now it reads the same file (inode) under its ``.deleted`` name; once the file is
gone from the disk too the read is ESTALE (removed under the reader, as for a read back past
``file.delete.delay.ms``), never EIO: retention is not corruption."""

from __future__ import annotations

import errno
import os
import sys
import time
from pathlib import Path

import pytest

from kafkafs.format.batch import encode_batch
from kafkafs.format.jsonview import render_batch_jsonl
from kafkafs.storage.logdir import LogDir

from .conftest import BASE_TS, Mount, expected_jsonl

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux: FUSE, prlimit")

#: ``ulimit -n`` of the daemon: a descriptor budget of 16 segments (handles.default_budget_limit)
LIMIT = 80
SEGMENTS = 60
REMOVED = 30


def _logdir(path: Path) -> Path:
    """``ev-0`` and ``ev-1`` of :data:`SEGMENTS` sealed segments each (``.log`` files as a broker leaves them,
    their indexes left out: they would only cost the test time), 3 batches of 9 records a segment."""
    for partition in (0, 1):
        folder = path / f"ev-{partition}"
        folder.mkdir(parents=True)
        for s in range(SEGMENTS):
            batches = [encode_batch([(BASE_TS + i, None, b"event %06d %s" % (i, b"x" * 40), ()) for i in range(b, b + 9)],
                                    base_offset=b) for b in range(s * 27, s * 27 + 27, 9)]
            (folder / f"{s * 27:020d}.log").write_bytes(b"".join(batches))
    return path


def _remove(folder: Path, base: int, unlink: bool) -> None:
    """Kafka's retention of the segment at ``base``: its files renamed ``.deleted`` (then unlinked:
    ``file.delete.delay.ms`` over)."""
    stem = f"{base:020d}"
    for suffix in (".log", ".index", ".timeindex"):
        src = folder / (stem + suffix)
        if src.exists():
            os.rename(src, folder / (stem + suffix + ".deleted"))
            if unlink:
                os.unlink(folder / (stem + suffix + ".deleted"))


@pytest.fixture
def low_limit_mount(tmp_path):
    logdir = _logdir(tmp_path / "logs")
    mount = Mount(logdir, tmp_path / "mnt", ("--cache-dir", str(tmp_path / "cache")), tmp_path / "mount.log")
    mount.prefix = ("prlimit", f"--nofile={LIMIT}:{LIMIT}", "--")
    mount.start()
    try:
        yield mount
    finally:
        mount.stop()
    assert not os.path.ismount(mount.path)


def _lagging_read(mount: Mount, name: str, unlink: bool) -> tuple[bytes, list[int]]:
    """Open records.jsonl and read its first bytes (a reader that lags); then retention removes the first
    :data:`REMOVED` segments one by one, and the reader reads each one's records right after (before the
    mount noticed: it refreshes some milliseconds after the first event; the page cache dropped, so the
    read reaches the mount): the bytes read and the errors met."""
    folder = mount.logdir / name
    with LogDir(mount.logdir) as logdir:
        log = logdir.log(name)
        bases = [segment.base_offset for segment in log.segments][: REMOVED + 1]
        lengths = [(batch.header.base_offset, len(render_batch_jsonl(log.topic, log.partition, batch, "auto")))
                   for batch in log.read()]
    ends = [sum(n for offset, n in lengths if offset < hi) for hi in bases[1:]]
    path = mount / name / "records.jsonl"
    fd = os.open(path, os.O_RDONLY)
    try:
        out = [os.pread(fd, 100, 0)]
        errors = []
        position = 100
        for base, end in zip(bases, ends, strict=False):
            _remove(folder, base, unlink)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            try:
                data = os.pread(fd, end - position, position)
            except OSError as exc:
                errors.append(exc.errno)
                data = b""
            out.append(data)
            position = end
    finally:
        os.close(fd)
    return b"".join(out), errors


def test_a_lagging_reader_reads_segments_renamed_deleted_before_the_mount_noticed_and_gone_ones_are_stale(
    low_limit_mount,
):
    mount = low_limit_mount
    expected = expected_jsonl(mount.logdir, "ev-0")
    gone_expected = expected_jsonl(mount.logdir, "ev-1")
    # Kafka's rename: the lagging reader reads every removed segment (before: EIO, "segment file is missing")
    data, errors = _lagging_read(mount, "ev-0", unlink=False)
    assert errors == [] and expected.startswith(data) and len(data) > len(expected) // 3
    new = (mount / "ev-0" / "records.jsonl").read_bytes()  # a new open at once: the files are there
    assert expected.endswith(new) and len(new) >= len(expected) - len(data)
    # renamed and unlinked before the mount noticed: those bytes are gone, ESTALE (before: EIO)
    gone, errors = _lagging_read(mount, "ev-1", unlink=True)
    assert errors and set(errors) == {errno.ESTALE}, errors
    assert len(errors) > REMOVED - 16  # (the budget kept the descriptors of some: those read whole)
    assert gone_expected.startswith(gone[:100])
    time.sleep(1)
    for name in os.listdir(mount.logdir / "ev-0"):  # file.delete.delay.ms later (Kafka: a minute)
        if name.endswith(".deleted"):
            os.unlink(mount.logdir / "ev-0" / name)
    text = (mount / "ev-0" / "records.jsonl").read_bytes()  # a new open: the log as it is now
    assert text and expected.endswith(text) and len(text) == len(expected) - len(data)
    assert gone_expected.endswith((mount / "ev-1" / "records.jsonl").read_bytes())
    assert "corrupt" not in mount.log() and "ERROR" not in mount.log(), mount.log()
