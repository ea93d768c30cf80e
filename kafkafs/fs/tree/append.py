"""The ``append`` file of a read-write mount: lines in, records out (SPEC §3).

* The complete lines of one ``write()`` are parsed first and appended together, atomically
  (:meth:`~kafkafs.storage.log.Log.append_lines`, the compiled write path): a line that does not parse
  fails the whole write (InvalidInput, EINVAL upstairs) and nothing is appended.
  They are one batch; only when one batch could not hold them within the topic's
  ``max.message.bytes`` (or its segment size, when smaller: ``LogConfig.max_batch_bytes``) are they cut
  into several, still appended by one call (all or nothing while the process runs; a segment may roll
  between them, as Kafka rolls between a producer's batches: :meth:`~kafkafs.storage.log.Log.append_batches`).
* A record too large for a batch of ``max.message.bytes`` (or of the segment size) fails the write with RecordTooLargeError
  (EFBIG upstairs: "File too large", Kafka's RECORD_TOO_LARGE) and nothing is appended. So does a
  partial line that has already grown past what any record could hold: a plain line longer than
  ``max.message.bytes`` less :data:`PLAIN_LINE_OVERHEAD` (its bytes are the value, byte for byte), a
  JSON line longer than :data:`JSON_LINE_FACTOR` times ``max.message.bytes`` (JSON may be padded or
  escaped, so only a generous bound is sure), whether it began in an earlier write or after this
  write's last newline (then the lines before it in this write are not appended either: R15-1,
  ``small\n`` and a 1.1 MB line in one request). With Kafka's default ``max.message.bytes`` a request
  that holds 1 MiB of a plain line too large for a record is already past that bound (issue 20: a
  5 MiB line in one write was dropped with success).
* A partial last line waits for the next write, or for the last close of the open file, which appends
  it as a record of its own and makes everything durable. :meth:`AppendBuffer.sync` (fsync) makes the
  complete lines durable and leaves the partial line waiting. The kernel reports every close of a
  descriptor (FUSE ``flush``, :meth:`AppendBuffer.flush`), a copy a forked child inherited included: a
  shell's child closes its copy at its exit or when it replaces its standard output, while the shell goes
  on writing the line (R21-7: ``( printf 'CCC'; sleep 1; printf '333\n' ) >> append`` made two records,
  and a half JSON object was refused at ``/bin/true``'s close, which nobody checks). So a close with a
  partial line pending asks whether another process still holds a descriptor of the file
  (:mod:`.holders`, from ``/proc``): then the line keeps waiting and the close succeeds; else it is the
  last close and the line is appended before close() returns (or close() fails, nothing of it appended).
  The kernel's own signal of the last close (FUSE ``release``, :meth:`AppendBuffer.release`) comes after
  close() has returned and can report nothing; it appends a line still pending then (a close that took
  another open of the same file, in the same process, for a holder left it), and an error there is only
  logged.
* A failed write never leaves a cut-off record behind. When it ended a line that began in an earlier
  write, or it made a line too long to be a record, that line is dropped whole. The kernel cuts
  a large ``write()`` into pieces (``max_write``, about 1 MiB) and, when a later piece fails, returns
  a short count rather than the error; a writer that then retries the rest (stdio, Python's buffered
  files) sends the failed piece again. So after a failure, a write that repeats the failed data fails
  with the same error and appends nothing; so do the writes that carry the rest of a too-long line up
  to its newline when that line began in an earlier write (one that was taken: the writer holds its
  start as written). A line that began in the failed write itself was not taken at all, and the first
  write after it that does not repeat it starts afresh (review6 F5).

A write that waits for no other thread is done on the FUSE loop itself (:meth:`AppendBuffer.write_now`);
the rules are the same.

Writes larger than one FUSE request (256 pages of the writer's buffer: 1 MiB from a buffer that starts
on a page) reach this class in pieces, and each piece is a write here: the all-or-nothing rule holds per
piece, and the kernel reports the pieces before a failed one as written (a short count), so exactly the
complete lines of the bytes it reports written are appended (README, "Writes"; R15-1).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import NamedTuple

from ...errors import InvalidInput, RecordTooLargeError
from ...format.compression import Codec, codec_by_name
from ...storage.log import AppendResult, Log
from ...storage.names import refuse_internal_topic

__all__ = ["AppendBuffer", "JSON_LINE_FACTOR", "PLAIN_LINE_OVERHEAD", "WouldWait"]

#: A JSON line may be this many times ``max.message.bytes`` long before it is refused unparsed.
JSON_LINE_FACTOR = 16
#: The least a batch holding one plain line adds to its bytes: the 61-byte batch header, and a record's
#: length, attributes, timestamp and offset deltas, null key, value length and header count (one byte
#: each at least). A plain line longer than ``max.message.bytes`` less this can never be a record.
PLAIN_LINE_OVERHEAD = 61 + 7
#: A write that starts with the whole of a failed write, or with this much of it (the kernel may cut
#: a retry elsewhere), is taken for a retry of it.
_RETRY_MATCH = 64 * 1024


class WouldWait(Exception):
    """:meth:`AppendBuffer.write_now` could not append without waiting for another thread or an fsync;
    nothing was done (ask :meth:`AppendBuffer.write` in a thread that may wait)."""


class _Failure(NamedTuple):
    data: bytes  # the failed write
    error: Exception
    dropping: bool  # the dropped line's newline has not been seen yet


def _again(exc: Exception) -> Exception:
    return type(exc)(*exc.args)


def _repeats(data: bytes, failed: bytes) -> bool:
    """Whether ``data`` looks like a retry of the failed write ``failed``."""
    if not failed or not data:
        return False
    if data.startswith(failed):
        return True
    return len(data) >= min(len(failed), _RETRY_MATCH) and failed.startswith(data)


class AppendBuffer:
    """One open ``append`` file: the partial line it holds and the log it appends to.

    Threads: safe to share; writes, fsync and close of one open file serialise on its lock (the kernel
    may send them from several threads), and the log serialises appends from every open file.
    :meth:`write_now` is for the FUSE loop: it takes neither lock when another thread holds it.
    """

    def __init__(self, log: Log) -> None:
        self.log = log
        self._pending = bytearray()
        self._failed: _Failure | None = None
        self.appended = 0
        self._lock = threading.Lock()

    @property
    def pending(self) -> bytes:
        """The partial last line waiting for its newline (or for close)."""
        return bytes(self._pending)

    def write(self, data: bytes) -> AppendResult | None:
        """Append the complete lines of ``pending + data`` (None when there is none); keep the partial
        rest. Raises InvalidInput or RecordTooLargeError, having appended nothing; InternalTopicRefused
        for a partition of one of Kafka's internal topics."""
        refuse_internal_topic(self.log.topic)
        with self._lock:
            return self._write(data)

    def write_now(self, data: bytes) -> AppendResult | None:
        """:meth:`write`, for a caller that must not wait (the FUSE loop): raises :class:`WouldWait`,
        having done nothing, when another thread holds this file or the log (a write, an fsync, a
        compaction), or when the append would fsync (the topic's ``flush.messages`` / ``flush.ms``)."""
        refuse_internal_topic(self.log.topic)
        if not self._lock.acquire(blocking=False):
            raise WouldWait
        try:
            with self.log.appending_now(len(self._pending) + len(data) + 1) as free:
                if not free:
                    raise WouldWait
                return self._write(data)
        finally:
            self._lock.release()

    def _write(self, data: bytes) -> AppendResult | None:
        failed = self._failed
        if failed is not None:
            if _repeats(data, failed.data):
                raise _again(failed.error)
            if failed.dropping:  # the rest of a dropped line, up to its newline, goes too
                self._failed = _Failure(data, failed.error, b"\n" not in data)
                raise _again(failed.error)
            self._failed = None
        pending = self._pending
        cut = data.rfind(b"\n")
        if cut < 0:
            size = len(pending) + len(data)
            if size > self._plain_limit():
                self._check_partial_size(size, bytes(pending[:4096]) + data[:4096], data, dropping=bool(pending))
            pending += data
            return None
        rest = len(data) - cut - 1
        if rest > self._plain_limit():  # the line this write begins is already too long: the write fails whole
            self._check_partial_size(rest, data[cut + 1 : cut + 4097], data, dropping=False)
        try:
            result, count = self.log.append_lines(bytes(pending) + data[:cut])
        except (InvalidInput, RecordTooLargeError) as exc:
            if pending:  # it was in the middle of a line: drop that line whole
                self._drop(data, exc, dropping=False)
            raise
        self._pending = bytearray(data[cut + 1 :])
        self.appended += count
        return result

    def _plain_limit(self) -> int:
        """The longest plain line that can be a record: ``max.message.bytes`` less the overhead of a batch
        of one record; for a topic whose batches kafkafs compresses, ``max.message.bytes`` itself (a
        compressed line may be larger, the append then says)."""
        config = self.log.config
        if codec_by_name(config.compression_type) is not Codec.NONE:
            return config.max_batch_bytes
        return config.max_batch_bytes - PLAIN_LINE_OVERHEAD

    def _check_partial_size(self, size: int, start: bytes, data: bytes, *, dropping: bool) -> None:
        """Raise RecordTooLargeError (the write ``data`` fails whole) when a partial line of ``size`` bytes
        starting with ``start`` cannot be a record. ``dropping``: the line began in an earlier write that was
        taken, so the writes that carry its rest up to its newline go too. A line that began in this write
        was not taken at all (the writer sees the error): the next write starts a new line (review6 F5)."""
        limit = self.log.config.max_batch_bytes
        json_line = start.lstrip()[:1] in (b"{", b"")
        if size > (JSON_LINE_FACTOR * limit if json_line else self._plain_limit()):
            kind = "a JSON line" if json_line else "a line"
            exc = RecordTooLargeError(
                f"{kind} already {size} bytes long cannot fit a record batch of {self.log.config.batch_limit}"
            )
            self._drop(data, exc, dropping=dropping)
            raise exc

    def _drop(self, data: bytes, exc: Exception, *, dropping: bool) -> None:
        self._pending = bytearray()
        self._failed = _Failure(bytes(data), exc, dropping)

    def sync(self) -> None:
        """fsync: make the appended records durable; a partial line keeps waiting for its newline."""
        with self._lock:
            self.log.flush()

    def flush(self, shared: Callable[[], bool] | None = None) -> None:
        """close of a descriptor (FUSE FLUSH): make the appended records durable; durable on return.

        A pending partial line is appended (as a record of its own, durable too) unless ``shared()``,
        asked only then, says another descriptor of this open file remains (a child's copy was closed,
        its parent goes on writing): then it keeps waiting for the next write or the last close
        (:meth:`release`). A pending line that cannot be a record raises (and is dropped)."""
        with self._lock:
            if self._pending and shared is not None and shared():
                self.log.flush()
                return
            self._finish()

    def release(self) -> bool:
        """The last close of the open file (FUSE RELEASE), which close(2) does not wait for: append a
        partial line still pending (a close that took another descriptor for a holder left it), durable
        on return. True when there was one. A line that cannot be a record raises (and is dropped)."""
        with self._lock:
            if not self._pending:
                return False
            self._finish()
            return True

    def _finish(self) -> None:
        pending, self._pending = bytes(self._pending), bytearray()
        self._failed = None  # close ends whatever line was being dropped
        if pending:
            self.log.append_lines(pending, flush=True)
            self.appended += 1
        else:
            self.log.flush()
