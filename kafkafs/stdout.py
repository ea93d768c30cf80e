"""Standard output for the commands, with a reader that may go away (``kafkafs recover | head -2``).

SPEC §4: a closed standard output changes neither the work nor the exit code. Python ignores SIGPIPE,
so a write to a pipe whose reader is gone fails with EPIPE (``BrokenPipeError``) wherever it happens:
in the middle of a report, or in the flush at exit. :func:`guarded_stdout` handles it once, for every
command: the first EPIPE points file descriptor 1 at ``/dev/null``, so that nothing printed later (nor
the flush at exit) fails again, and the command goes on with its work and its exit code.

A command whose work *is* its output (``consume``, which with ``--follow`` would otherwise run for
ever) asks ``stop=True``: the first EPIPE is raised, once, and the command ends there (exit 0: the
reader had what it wanted).

Any other error of a write (``> report`` on a full disk: ENOSPC, EIO) is not a reader gone but output
lost: it is kept (:attr:`ReaderSafeOutput.failure`, noted "write standard output"), the rest goes to
``/dev/null`` as after EPIPE so that the work goes on, and the command line says it in one line
(:mod:`kafkafs.outcome`); with ``stop`` it is raised. A standard output that is not open at all
(``>&-``) is one whose reader has gone from the start: ``/dev/null`` takes file descriptor 1.

Used by the main thread of the command line; the wrapped stream is as thread-safe as ``sys.stdout``.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .errors import tag_os_error

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = ["guarded_stdout", "ReaderSafeOutput", "FdOutput", "closed_fd"]


class FdOutput(io.RawIOBase):
    """File descriptor ``fd`` as a writable raw stream; subclasses say what a failed write does."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self.fd = fd

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd

    def isatty(self) -> bool:
        return os.isatty(self.fd)


class ReaderSafeOutput(FdOutput):
    """File descriptor ``fd`` as a raw stream whose first EPIPE sends the rest to ``/dev/null``
    (:attr:`reader_gone` says it happened); with ``stop`` that first EPIPE is raised as well. Another
    write error does the same and is kept in :attr:`failure` (raised instead with ``stop``)."""

    def __init__(self, fd: int, *, stop: bool = False, reader_gone: bool = False) -> None:
        super().__init__(fd)
        self.stop = stop
        self.reader_gone = reader_gone
        self.failure: OSError | None = None

    def write(self, data: Buffer, /) -> int:
        if self.reader_gone:
            return memoryview(data).nbytes  # (bytes BufferedWriter hands over: their len)
        try:
            return os.write(self.fd, data)
        except OSError as exc:
            self.reader_gone = True
            _to_devnull(self.fd)
            if not isinstance(exc, BrokenPipeError):
                tag_os_error(exc, "write {path}", "standard output")
                if not self.stop:
                    self.failure = exc
            if self.stop:
                raise
            return memoryview(data).nbytes


def _to_devnull(fd: int) -> None:
    null = os.open(os.devnull, os.O_WRONLY)
    if null == fd:  # ``fd`` was closed and is the lowest free descriptor: /dev/null holds it now (closing
        return      # it would free it for the next file opened, a segment, say, on standard output)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)


def closed_fd(fd: int) -> bool:
    """Whether file descriptor ``fd`` is not open (``>&-``, ``2>&-``)."""
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


@contextlib.contextmanager
def guarded_stdout(*, stop: bool = False) -> Iterator[ReaderSafeOutput | None]:
    """``sys.stdout`` (and its ``.buffer``) over a :class:`ReaderSafeOutput` of file descriptor 1 for
    the ``with`` block, then the stream it replaced, flushed (its write errors kept as the block's
    are). Nothing changes when ``sys.stdout`` is not file descriptor 1 (a test capturing output):
    yields None then."""
    before = sys.stdout
    gone = before is None and closed_fd(1)  # `>&-`: Python started without a standard output
    if gone:
        _to_devnull(1)
    try:
        fd = 1 if gone else before.fileno() if before is not None else -1
    except (AttributeError, OSError, ValueError):
        fd = -1
    if fd != 1:
        yield None
        return
    if before is not None:
        before.flush()
    raw = ReaderSafeOutput(1, stop=stop, reader_gone=gone)
    stream = io.TextIOWrapper(
        io.BufferedWriter(raw),
        encoding=before.encoding if before is not None else "utf-8",
        errors=before.errors if before is not None else "strict",
        line_buffering=bool(before.line_buffering) if before is not None else False,
    )
    sys.stdout = stream
    try:
        yield raw
    finally:
        try:
            stream.flush()
        except BrokenPipeError:  # stop=True: said once already
            pass
        except OSError as exc:  # stop=True, at the last flush: kept, said by the caller
            raw.failure = exc
        sys.stdout = before
        stream.detach()  # the BufferedWriter and raw object go; file descriptor 1 stays open
