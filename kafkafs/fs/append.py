"""The ``append`` file of a read-write mount: lines in, one batch per write out (SPEC §3).

The complete lines of one ``write()`` are parsed first and appended as one batch, so a line that does
not parse fails the whole write (InvalidInput, EINVAL upstairs) and nothing is appended. A partial last
line waits for the next write, or for ``flush()`` (close) which appends it and makes everything durable.
"""

from __future__ import annotations

import threading

from ..errors import InvalidInput
from ..format.jsonview import parse_lines, parse_record_line
from ..storage.log import AppendResult, Log

__all__ = ["AppendBuffer"]


class AppendBuffer:
    """One open ``append`` file: the partial line it holds and the log it appends to."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.pending = b""
        self.appended = 0
        self._lock = threading.Lock()

    def write(self, data: bytes) -> AppendResult | None:
        """Append the complete lines of ``pending + data`` as one batch; keep the partial rest."""
        with self._lock:
            buf = self.pending + data
            cut = buf.rfind(b"\n")
            if cut < 0:
                self.pending = buf
                return None
            lines = buf[:cut].split(b"\n")
            try:
                records = parse_lines(lines)
            except InvalidInput:
                if self.pending and not _first_line_parses(lines[0]):
                    self.pending = b""  # the bad line began in an earlier write: do not keep it
                raise
            result = self.log.append_records(records)
            self.pending = buf[cut + 1 :]
            self.appended += len(records)
            return result

    def flush(self) -> None:
        """Append a pending partial line (as a record of its own) and fsync: durable on return."""
        with self._lock:
            pending, self.pending = self.pending, b""
            if pending:
                records = parse_lines([pending])
                self.log.append_records(records, flush=True)
                self.appended += 1
            else:
                self.log.flush()


def _first_line_parses(line: bytes) -> bool:
    try:
        parse_record_line(line)
        return True
    except InvalidInput:
        return False
