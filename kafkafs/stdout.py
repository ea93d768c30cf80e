"""Standard output for the commands, with a reader that may go away (``kafkafs recover | head -2``).

SPEC §4: a closed standard output changes neither the work nor the exit code. Python ignores SIGPIPE,
so a write to a pipe whose reader is gone fails with EPIPE (``BrokenPipeError``) wherever it happens:
in the middle of a report, or in the flush at exit. :func:`guarded_stdout` handles it once, for every
command: the first EPIPE points file descriptor 1 at ``/dev/null``, so that nothing printed later (nor
the flush at exit) fails again, and the command goes on with its work and its exit code.

A command whose work *is* its output (``consume``, which with ``--follow`` would otherwise run for
ever) asks ``stop=True``: the first EPIPE is raised, once, and the command ends there (exit 0: the
reader had what it wanted).

Used by the main thread of the command line; the wrapped stream is as thread-safe as ``sys.stdout``.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = ["guarded_stdout", "ReaderSafeOutput"]


class ReaderSafeOutput(io.RawIOBase):
    """File descriptor ``fd`` as a raw stream whose first EPIPE sends the rest to ``/dev/null``
    (:attr:`reader_gone` says it happened); with ``stop`` that first EPIPE is raised as well."""

    def __init__(self, fd: int, *, stop: bool = False) -> None:
        super().__init__()
        self.fd = fd
        self.stop = stop
        self.reader_gone = False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd

    def isatty(self) -> bool:
        return os.isatty(self.fd)

    def write(self, data: Buffer, /) -> int:
        if self.reader_gone:
            return memoryview(data).nbytes  # (bytes BufferedWriter hands over: their len)
        try:
            return os.write(self.fd, data)
        except BrokenPipeError:
            self.reader_gone = True
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, self.fd)
            finally:
                os.close(null)
            if self.stop:
                raise
            return memoryview(data).nbytes


@contextlib.contextmanager
def guarded_stdout(*, stop: bool = False) -> Iterator[ReaderSafeOutput | None]:
    """``sys.stdout`` (and its ``.buffer``) over a :class:`ReaderSafeOutput` of file descriptor 1 for
    the ``with`` block, then the stream it replaced, flushed. Nothing changes when ``sys.stdout`` is
    not file descriptor 1 (a test capturing output): yields None then."""
    before = sys.stdout
    try:
        fd = before.fileno() if before is not None else -1
    except (AttributeError, OSError, ValueError):
        fd = -1
    if fd != 1:
        yield None
        return
    before.flush()
    raw = ReaderSafeOutput(1, stop=stop)
    stream = io.TextIOWrapper(
        io.BufferedWriter(raw),
        encoding=before.encoding,
        errors=before.errors,
        line_buffering=bool(before.line_buffering),
    )
    sys.stdout = stream
    try:
        yield raw
    finally:
        try:
            stream.flush()
        except BrokenPipeError:  # stop=True: said once already
            pass
        sys.stdout = before
        stream.detach()  # the BufferedWriter and raw object go; file descriptor 1 stays open
