"""The one place where kafkafs errors become errno values (the FUSE layer is the only one that knows
errno). Damage is logged here too, naming the segment and the position, once per place."""

from __future__ import annotations

import errno
import logging
import threading
import time

from ..errors import (
    ConfigError,
    CorruptRecordError,
    InternalTopicRefused,
    InvalidInput,
    InvalidName,
    LogDirLocked,
    NotFound,
    NotPermitted,
    OffsetOutOfRange,
    ReadOnlyError,
    RecordTooLargeError,
    SegmentClosedError,
    WriteRefused,
)
from ..storage.handles import TOO_MANY_FILES, release_all
from .views.render import report_corrupt

__all__ = ["errno_for", "no_descriptor_free", "refresh_failed"]

log = logging.getLogger("kafkafs.fs")


def errno_for(exc: BaseException, *, rw: bool, mkdir: bool = False) -> int:
    """The errno a failed request answers with. ``rw``: the mount is read-write (a change to something
    read-only is then EACCES, not EROFS); ``mkdir``: a bad name is EINVAL rather than ENOENT."""
    if isinstance(exc, NotFound | OffsetOutOfRange):
        return errno.ENOENT
    if isinstance(exc, SegmentClosedError):  # retention or compaction removed it under the reader
        log.info("%s", exc)
        return errno.ESTALE
    if isinstance(exc, NotPermitted):
        return errno.EACCES if rw else errno.EROFS
    if isinstance(exc, ReadOnlyError | LogDirLocked):
        return errno.EROFS
    if isinstance(exc, CorruptRecordError):
        report_corrupt(exc)
        return errno.EIO
    if isinstance(exc, InternalTopicRefused):  # an append or mkdir: EPERM, as for any file not ours to write
        log.warning("refused: %s", exc)
        return errno.EPERM
    if isinstance(exc, WriteRefused):  # a name that is well formed, refused: as for an internal topic
        log.warning("%s", exc)
        return errno.EPERM
    if isinstance(exc, InvalidName):
        return errno.EINVAL if mkdir else errno.ENOENT
    if isinstance(exc, InvalidInput | ConfigError):
        log.info("rejected: %s", exc)
        return errno.EINVAL
    if isinstance(exc, RecordTooLargeError):
        log.info("rejected: %s", exc)
        return errno.EFBIG
    if isinstance(exc, FileExistsError):
        return errno.EEXIST
    if isinstance(exc, OSError) and exc.errno in TOO_MANY_FILES:
        no_descriptor_free(exc)
        return exc.errno
    if isinstance(exc, OSError) and exc.errno == errno.EBADF:
        # a descriptor of ours closed under the request (review26 R26-4's race): a bug, never the
        # reader's bad descriptor; EIO, said with where it came from, so the next such race is seen
        log.error("unexpected error (a file of the log directory closed while in use): %r", exc, exc_info=exc)
        return errno.EIO
    if isinstance(exc, OSError) and exc.errno:
        return exc.errno
    log.error("unexpected error: %r", exc, exc_info=exc)
    return errno.EIO


#: At most one line about a lack of descriptors in this many seconds (those in between: counted in the next).
TOO_MANY_FILES_EVERY = 10.0
_too_many_lock = threading.Lock()
_too_many_said = float("-inf")
_too_many_unsaid = 0


def no_descriptor_free(exc: OSError, what: str = "a request") -> None:
    """An open found no descriptor free (EMFILE, ENFILE) although the storage layer had already given
    back what it keeps and tried again: give back again (the next try may find one) and say it in one
    line, at most every :data:`TOO_MANY_FILES_EVERY` seconds. ``what`` failed (a request answers with
    the error); the mount goes on. Safe from any thread."""
    global _too_many_said, _too_many_unsaid
    release_all()
    now = time.monotonic()
    with _too_many_lock:
        if now - _too_many_said < TOO_MANY_FILES_EVERY:
            _too_many_unsaid += 1
            return
        _too_many_said, unsaid, _too_many_unsaid = now, _too_many_unsaid, 0
    more = f" ({unsaid} more since the last such line)" if unsaid else ""
    log.warning("no file descriptor free: %s failed with %s%s; the open file limit may be too low for this "
                "log directory (ulimit -n)", what, exc, more)


def refresh_failed(name: str, exc: Exception) -> None:
    """Say that looking for new records of the partition ``name`` failed (tried again at the next look)."""
    if isinstance(exc, OSError) and exc.errno in TOO_MANY_FILES:
        no_descriptor_free(exc, f"looking for new records of {name}")
    else:
        log.warning("%s: could not look for new records: %s", name, exc)
