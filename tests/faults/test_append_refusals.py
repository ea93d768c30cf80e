"""Every refusal of ``append`` is an error the writer sees (issue 20, defect 5; SPEC §3 Writes).

A single 5 MiB line written with one ``os.write`` returned without an error (the kernel hands a large
write to the file system in pieces of up to ``max_write``, about 1 MiB, the first one shorter when the
writer's buffer does not start on a page; the second piece was refused, and the kernel turned that into
a short count of the first) and nothing was appended. The first piece of a plain line that no record can
hold is refused now: the ``write()`` itself fails with EFBIG. Where the first piece is short of that
bound (an unaligned buffer), the refusal comes with the next piece: the writer sees a short count, and
its retry of the rest fails with EFBIG; nothing is appended either way.
"""

from __future__ import annotations

import errno
import mmap
import os

import pytest

from kafkafs.storage.logdir import LogDir

LIMIT = 1048588  # Kafka's default max.message.bytes


def _write(path, data: bytes, *, aligned: bool = True) -> int:
    """One ``os.write`` of ``data``, from a page-aligned buffer (the kernel's first piece is then a full
    ``max_write``) or from one that starts 100 bytes into a page."""
    fd = os.open(path, os.O_WRONLY)
    try:
        return _write_fd(fd, data, 0 if aligned else 100)
    finally:
        os.close(fd)


def _records(logdir, name="empty-0"):
    with LogDir(logdir) as d:
        return [r.value for r in d.log(name).records()]


@pytest.mark.parametrize("size", [5 * 1024 * 1024, 2 * 1024 * 1024, LIMIT, LIMIT - 60])
def test_a_line_too_large_in_one_write_fails_that_write(logdir_copy, mounted, size):
    m = mounted(logdir_copy, "--rw")
    m.allow_errors = True
    append = m / "empty-0" / "append"
    with pytest.raises(OSError) as exc:
        _write(append, b"x" * size + b"\n")
    assert exc.value.errno == errno.EFBIG
    assert _write(append, b"after\n") == 6  # the next write starts afresh
    assert _records(logdir_copy) == [b"after"]


def test_the_longest_plain_line_a_record_holds_is_appended(logdir_copy, mounted):
    m = mounted(logdir_copy, "--rw")
    line = b"y" * (LIMIT - 90)  # a batch of one record of it: 61 + 7 + 3 + 3 bytes more, within the limit
    assert _write(m / "empty-0" / "append", line + b"\n") == len(line) + 1
    assert _records(logdir_copy) == [line]


def test_a_line_refused_after_its_first_piece_is_a_short_count_then_efbig(logdir_copy, mounted):
    m = mounted(logdir_copy, "--rw")
    m.allow_errors = True
    append = m / "empty-0" / "append"
    data = b"z" * (3 * 1024 * 1024) + b"\n"
    fd = os.open(append, os.O_WRONLY)
    try:
        sent = 0
        with pytest.raises(OSError) as exc:
            while sent < len(data):  # what a careful writer (stdio, Python's files) does with a short count
                n = _write_fd(fd, data[sent:])
                assert 0 < n < len(data) - sent
                sent += n
        assert exc.value.errno == errno.EFBIG
    finally:
        os.close(fd)
    assert _records(logdir_copy) == []


def _write_fd(fd: int, data: bytes, skip: int = 100) -> int:
    """One ``os.write`` of ``data`` from a buffer that starts ``skip`` bytes into a page."""
    buf = mmap.mmap(-1, len(data) + skip)
    try:
        buf[skip:] = data
        return os.write(fd, memoryview(buf)[skip:])
    finally:
        buf.close()


def test_a_refused_write_leaves_no_line_behind_on_its_descriptor(logdir_copy, mounted):
    """Review6 F5 (SPEC §3: a write that cannot be appended fails only that write): a too-long line refused
    with EFBIG at its first piece was not taken at all, so the next write() on the same descriptor starts a
    new line: it was refused too, as if it carried the rest of the refused line."""
    m = mounted(logdir_copy, "--rw")
    m.allow_errors = True
    fd = os.open(m / "empty-0" / "append", os.O_WRONLY)
    try:
        for _ in range(2):  # and again, after a write that was appended
            with pytest.raises(OSError) as exc:
                _write_fd(fd, b"x" * 1_100_000 + b"\n", skip=0)  # its first piece is refused
            assert exc.value.errno == errno.EFBIG
            assert os.write(fd, b"ok2\n") == 4
            assert os.write(fd, b"ok3\n") == 4
    finally:
        os.close(fd)
    assert _records(logdir_copy) == [b"ok2", b"ok3"] * 2
