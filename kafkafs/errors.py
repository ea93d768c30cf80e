"""One exception tree for the whole package.

The format and storage layers raise only these. The FUSE layer maps them to errno values and the
command line maps them to one line on stderr and an exit code; nothing here knows about either.
"""

from __future__ import annotations


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


class InvalidInput(KafkafsError):
    """User input that does not parse: a bad JSON line, a bad timestamp, a bad option."""


class ConfigError(KafkafsError):
    """A setting with an unknown name or a value of the wrong type or range."""


class ReadOnlyError(KafkafsError):
    """A write was asked of something opened read-only."""


class UnsafeFileError(KafkafsError):
    """A symbolic link (or other non-regular file) where kafkafs expects a regular file inside a
    partition folder: never followed; writers refuse the partition that holds it."""


class UsageError(KafkafsError):
    """A command used wrongly: a bad argument, or a path that is not what the command takes (a
    partition folder where a log directory is expected, a file that does not exist)."""


class WouldBlock(KafkafsError):
    """A read asked not to wait (``nowait``) needs bytes that are not in the page cache: the caller
    retries it where blocking is fine (a worker thread instead of the FUSE loop)."""


class SegmentClosedError(KafkafsError):
    """A segment (or its index) was closed while a reader still wanted it: removed by retention or
    replaced by compaction since the reader found it (the FUSE layer answers ESTALE)."""


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
