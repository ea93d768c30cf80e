"""Standard error for the commands: best effort, never the reason for an exit code or a lost file.

A command says its errors and notes on standard error (one line, SPEC §4). Two ways that can fail,
handled once for every command by :func:`guard_stderr`, before anything is said:

- ``2>&-``: Python starts with ``sys.stderr`` None, and ``print(..., file=sys.stderr)`` then writes to
  standard *output*, into the JSON lines of ``consume``. Worse, file descriptor 2 is free, so the next
  file kafkafs opens (a segment) would take it and anything written to "standard error" would land in
  that file. ``/dev/null`` takes file descriptor 2 (the user asked for silence) and ``sys.stderr`` writes
  there.
- ``2>/dev/full`` (or any standard error whose writes fail): a message that cannot be written is lost,
  and the command goes on with its work and its exit code (``produce`` does not exit 1 for a note it
  could not print after appending, so a script does not send the records again).

Nothing changes when ``sys.stderr`` is not file descriptor 2 (a test capturing it). Used by the main
thread before any other thread starts; the stream is as thread-safe as ``sys.stderr``.
"""

from __future__ import annotations

import io
import os
import sys
from typing import TYPE_CHECKING

from .stdout import FdOutput, closed_fd

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = ["guard_stderr", "LossyOutput"]


class LossyOutput(FdOutput):
    """File descriptor ``fd`` as a raw stream whose failed writes are dropped (:attr:`lost` counts the
    bytes), never raised."""

    def __init__(self, fd: int) -> None:
        super().__init__(fd)
        self.lost = 0

    def write(self, data: Buffer, /) -> int:
        n = memoryview(data).nbytes
        try:
            return os.write(self.fd, data)
        except OSError:
            self.lost += n
            return n


def guard_stderr() -> None:
    """Point ``sys.stderr`` at a :class:`LossyOutput` of file descriptor 2, first giving that descriptor
    to ``/dev/null`` when it is not open (``2>&-``); leaves a ``sys.stderr`` that is not descriptor 2
    alone."""
    before = sys.stderr
    if before is None or closed_fd(2):
        if before is not None:
            try:
                if before.fileno() != 2:
                    return
            except (AttributeError, OSError, ValueError):
                return
        null = os.open(os.devnull, os.O_WRONLY)
        if null != 2:
            os.dup2(null, 2)
            os.close(null)
    else:
        try:
            if before.fileno() != 2:
                return
        except (AttributeError, OSError, ValueError):
            return
        try:
            before.flush()
        except OSError:
            pass
    sys.stderr = io.TextIOWrapper(
        io.BufferedWriter(LossyOutput(2)),
        encoding=getattr(before, "encoding", None) or "utf-8",
        errors="backslashreplace",
        line_buffering=True,
    )
