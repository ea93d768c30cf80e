"""One exception tree for the whole package.

The format and storage layers raise only these. The FUSE layer maps them to errno values and the
command line maps them to one line on stderr and an exit code; nothing here knows about either.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


class KafkafsError(Exception):
    """Base of every error kafkafs raises on purpose."""


class CorruptRecordError(KafkafsError):
    """Bytes that are not a valid record batch (or index, or checkpoint).

    ``position`` is the byte position in the buffer or file where the bad data starts, ``file`` the
    file it came from when known. The storage layer fills ``file`` in when it re-raises.
    """

    def __init__(self, reason: str, position: int | None = None, file: str | None = None) -> None:
        self.reason = reason
        self.position = position
        self.file = file
        super().__init__(self._message())

    def _message(self) -> str:
        where = []
        if self.file is not None:
            where.append(str(self.file))
        if self.position is not None:
            where.append(f"position {self.position}")
        return f"{': '.join(where)}: {self.reason}" if where else self.reason

    def at(self, file: str | None = None, base_position: int = 0) -> CorruptRecordError:
        """The same error, placed in a file and shifted by the buffer's position in it."""
        pos = None if self.position is None else self.position + base_position
        return CorruptRecordError(self.reason, pos, file if file is not None else self.file)


class RecordTooLargeError(KafkafsError):
    """A batch or record over ``max.message.bytes``, or a batch that inflates past the limit."""


class OffsetOutOfRange(KafkafsError):
    """An offset below the log start offset or above the log end offset."""


class LogDirLocked(KafkafsError):
    """Another process holds the log directory's ``.lock``."""


class InvalidName(KafkafsError):
    """A topic, partition or file name that does not follow Kafka's rules."""


class InternalTopicRefused(InvalidName):
    """A user write to one of Kafka's internal topics (a broker refuses client writes to them:
    ``INVALID_TOPIC_EXCEPTION``); kafkafs's own maintenance of them (recover, clean) is not one."""


class InvalidInput(KafkafsError):
    """User input that does not parse: a bad JSON line, a bad timestamp, a bad option."""


class ConfigError(KafkafsError):
    """A setting with an unknown name or a value of the wrong type or range."""


class ReadOnlyError(KafkafsError):
    """A write was asked of something opened read-only."""


class UnsafeFileError(KafkafsError):
    """A symbolic link (or other non-regular file) where kafkafs expects a regular file inside a
    partition folder: never followed; writers refuse the partition that holds it."""


class NeedsRecovery(UnsafeFileError):
    """A partition whose recovery would cut more than a torn tail (whole batches: the valid ones after a
    damaged one, or the segments after a cut one). Every writer but ``kafkafs recover`` refuses it,
    untouched, as it refuses a partition holding a link: cutting data is asked for, never a side effect."""


class UsageError(KafkafsError):
    """A command used wrongly: a bad argument, or a path that is not what the command takes (a
    partition folder where a log directory is expected, a file that does not exist)."""


class WouldBlock(KafkafsError):
    """A read asked not to wait (``nowait``) needs bytes that are not in the page cache: the caller
    retries it where blocking is fine (a worker thread instead of the FUSE loop)."""


class SegmentClosedError(KafkafsError):
    """A segment (or its index) was closed while a reader still wanted it: removed by retention or
    replaced by compaction since the reader found it (the FUSE layer answers ESTALE)."""


# ---------------------------------------------------------------------------------------------- OS errors


def tag_os_error(exc: OSError, doing: str, path: str | os.PathLike[str] | None = None) -> OSError:
    """Note on ``exc`` what kafkafs was doing when it happened (SPEC §4: "cannot take LOGDIR/.lock:
    permission denied"). ``doing`` is a phrase with ``{path}`` for the file (``"take {path}"``,
    ``"open {path} for writing"``); ``path`` fills in an error that names no file. The first note
    wins: the place nearest the failure knows best. Returns ``exc``, the same object."""
    if getattr(exc, "kafkafs_doing", None) is None:
        exc.kafkafs_doing = doing  # type: ignore[attr-defined]  # kafkafs's note on a standard exception
        if exc.filename is None and path is not None:
            exc.filename = os.fspath(path)
    return exc


def note_os_error(exc: OSError, note: str) -> OSError:
    """Add ``note`` to the end of ``exc``'s line (:func:`describe_os_error`): what was done before it failed
    (``"; the 2000 records before it were appended"``). Returns ``exc``, the same object."""
    exc.kafkafs_note = note  # type: ignore[attr-defined]  # kafkafs's note on a standard exception
    return exc


@contextlib.contextmanager
def doing(what: str, path: str | os.PathLike[str] | None = None) -> Iterator[None]:
    """``with doing("take {path}", lock_path): ...``: :func:`tag_os_error` for any OSError inside."""
    try:
        yield
    except OSError as exc:
        tag_os_error(exc, what, path)
        raise


def describe_os_error(exc: OSError) -> str:
    """One line for an OS error: ``cannot take /data/logs/.lock: permission denied``, from the note of
    :func:`tag_os_error` (``use {path}`` without one) and the file the error names."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    reason = reason[:1].lower() + reason[1:] + getattr(exc, "kafkafs_note", "")
    what = getattr(exc, "kafkafs_doing", None) or "use {path}"
    path = exc.filename
    if path is None:
        what = what.replace(" {path}", "")
        return f"cannot {what}: {reason}"
    text = what.format(path=os.fsdecode(path) if isinstance(path, bytes) else path)
    if exc.filename2 is not None and "{path}" in what and "rename" in what:
        text += f" to {exc.filename2}"
    return f"cannot {text}: {reason}"


# ---------------------------------------------------------------------------------------------- the mount
# Raised by kafkafs.fs: the tree and its views raise the first three, the adapter maps them to errno
# (kafkafs.fs.errnos); the CLI prints the last two as one line.


class NotFound(KafkafsError):
    """A name of the mounted tree that does not resolve (ENOENT)."""


class NotPermitted(KafkafsError):
    """A change to something of the mounted tree that is read-only (EROFS on a read-only mount,
    EACCES otherwise)."""


class Deferred(KafkafsError):
    """Work asked for on the FUSE loop is longer than the loop should do: the adapter asks a worker
    thread instead."""


class MountError(KafkafsError):
    """The mount cannot be made (bad mount point, busy, FUSE missing, ...); the message says why."""


class MountPathError(MountError, UsageError):
    """A log directory or mount point that is not what ``mount`` takes (SPEC §4: exit code 2)."""
