"""One exception tree for the whole package.

The format and storage layers raise only these. The FUSE layer maps them to errno values and the
command line maps them to one line on stderr and an exit code; nothing here knows about either.
"""

from __future__ import annotations

import contextlib
import os
import re
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
        """The same error (its class and fields kept), placed in a file and shifted by the buffer's
        position in it."""
        pos = None if self.position is None else self.position + base_position
        return self.placed(pos, file)

    def placed(self, position: int | None, file: str | None = None) -> CorruptRecordError:
        """A copy of this error (its class and every field kept) at ``position`` (and in ``file``, when
        given): what a reader raises for an error met in a buffer whose place it knows."""
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.position = position
        if file is not None:
            new.file = file
        new.args = (new._message(),)
        return new

    def __reduce__(self) -> tuple:  # pickled whole (its class and fields), not rebuilt from its message
        return _restored, (type(self), dict(self.__dict__))


def _restored(cls: type[CorruptRecordError], fields: dict) -> CorruptRecordError:
    error = cls.__new__(cls)
    error.__dict__.update(fields)
    error.args = (error._message(),)
    return error


def said_again(reason: str, position: int | None = None, file: str | None = None) -> CorruptRecordError:
    """The error whose ``reason`` was kept (a key index keeps a scan's damage as its reason): an
    :class:`UninflatableBatch` when the reason is one (its offsets not known), else a CorruptRecordError."""
    found = _INFLATES_PAST.search(reason)
    if found is None:
        return CorruptRecordError(reason, position, file)
    return UninflatableBatch(reason, position, file, limit=int(found.group(1)))


_INFLATES_PAST = re.compile(r" data inflates past (\d+) bytes$")


def _mib(size: int) -> str:
    return f"{size >> 20} MiB" if size and not size & ((1 << 20) - 1) else f"{size} bytes"


class UninflatableBatch(CorruptRecordError):
    """A batch whose records inflate past ``limit`` bytes, what a reader holds of one batch in memory.

    Not damage: its CRC holds (a decompression bomb's too), and Kafka stores and serves such a batch
    (``max.message.bytes`` bounds the compressed batch only). kafkafs does not inflate it whole:
    ``verify`` and ``recover`` note it, ``consume`` reads its records a piece at a time
    (:mod:`kafkafs.format.bigbatch`; a legacy wrapper it says it does not show and reads on after it), a
    mount's reads that need its records fail (EIO). Raised for that only, never for a codec
    error. ``base_offset`` and ``next_offset`` (one past its last offset) are the batch's once its reader
    placed it (:meth:`of_batch`); ``base_offset`` stays None for a legacy compressed wrapper (its header
    holds only its last offset). A subclass of :class:`CorruptRecordError`, so that every reader that does
    not tell it apart still stops there, as before.
    """

    def __init__(self, reason: str, position: int | None = None, file: str | None = None, *, limit: int = 0,
                 base_offset: int | None = None, next_offset: int | None = None) -> None:
        self.limit = limit
        self.base_offset = base_offset
        self.next_offset = next_offset
        #: the partition (``TOPIC-P``) whose reader met it, once one said so (:meth:`in_partition`)
        self.partition: str | None = None
        super().__init__(reason, position, file)

    def of_batch(self, position: int, base_offset: int | None, next_offset: int) -> UninflatableBatch:
        """This error placed at the batch at ``position`` whose offsets are ``base_offset`` up to
        ``next_offset`` - 1."""
        new = self.placed(position)
        assert isinstance(new, UninflatableBatch)
        new.base_offset, new.next_offset = base_offset, next_offset
        return new

    def starting_at(self, first: int) -> UninflatableBatch:
        """This error with ``first`` as its base offset when its batch's header does not hold one (a legacy
        wrapper's: ``first`` is where its reader expected the next record, review19 R19-3)."""
        if self.base_offset is not None:
            return self
        new = self.placed(self.position)
        assert isinstance(new, UninflatableBatch)
        new.base_offset = first
        return new

    def in_partition(self, name: str, first: int) -> UninflatableBatch:
        """This error as the reader of partition ``name`` met it, expecting offset ``first`` next: its
        ``base_offset`` becomes the first offset the reader does not show (``first`` when the batch's
        header does not hold its base, or when the read started inside the batch)."""
        new = self.placed(self.position)
        assert isinstance(new, UninflatableBatch)
        new.partition = name
        new.base_offset = first if new.base_offset is None else max(new.base_offset, first)
        return new

    def not_shown(self) -> str:
        """What a reader that goes on past the batch says: ``offsets X..Y of T-P not shown: ...``."""
        where = f" of {self.partition}" if self.partition is not None else ""
        return f"offsets {self.offsets_text()}{where} not shown: a batch inflates past {self.size_text}"

    @property
    def size_text(self) -> str:
        """The limit as people say it: ``64 MiB``."""
        return _mib(self.limit)

    def offsets_text(self, first: int | None = None) -> str:
        """``X..Y``, the batch's offsets; ``first`` stands for an unknown base offset (a legacy wrapper's:
        where its reader expected the next record)."""
        base = self.base_offset if self.base_offset is not None else first
        last = "?" if self.next_offset is None else str(self.next_offset - 1)
        return f"{'?' if base is None else base}..{last}"


class RecordNotShown(UninflatableBatch):
    """One record of a batch read a piece at a time (:mod:`kafkafs.format.bigbatch`) that a reader does not
    hold: its bytes past the most kept of one record, or its JSON line past the most kept of one line
    (``reason`` says which, with the size). Its ``base_offset`` is the record's offset, ``next_offset`` one
    past it; the batch's other records are read on. Like :class:`UninflatableBatch`, valid data, not damage."""

    def not_shown(self) -> str:
        where = f" of {self.partition}" if self.partition is not None else ""
        return f"offsets {self.offsets_text()}{where} not shown: {self.reason}"


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


class WriteRefused(KafkafsError):
    """A user write kafkafs refuses on purpose, its message the one line that says why (a ``--rw``
    mount's mkdir of a partition whose topic the metadata log does not name: EPERM, logged)."""


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


def one_line(exc: BaseException) -> str:
    """The error's message in one line (an OS error as :func:`describe_os_error` says it)."""
    text = describe_os_error(exc) if isinstance(exc, OSError) else str(exc)
    return " ".join(text.split()) or type(exc).__name__


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
