"""The one place where kafkafs errors become errno values (the FUSE layer is the only one that knows
errno). Damage is logged here too, naming the segment and the position, once per place."""

from __future__ import annotations

import errno
import logging

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
)
from .views.render import report_corrupt

__all__ = ["errno_for"]

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
    if isinstance(exc, OSError) and exc.errno:
        return exc.errno
    log.error("unexpected error: %r", exc, exc_info=exc)
    return errno.EIO
