"""The errno boundary: kafkafs errors become errno in one place."""

from __future__ import annotations

import errno

import pytest

from kafkafs.errors import (
    CorruptRecordError,
    InternalTopicRefused,
    InvalidInput,
    InvalidName,
    NotFound,
    NotPermitted,
    ReadOnlyError,
    RecordTooLargeError,
)
from kafkafs.fs.errnos import errno_for


@pytest.mark.allow_warnings("errors are logged where they become errno")
def test_errno_mapping():
    assert errno_for(NotFound("x"), rw=False) == errno.ENOENT
    assert errno_for(NotPermitted("x"), rw=False) == errno.EROFS
    assert errno_for(NotPermitted("x"), rw=True) == errno.EACCES
    assert errno_for(ReadOnlyError("x"), rw=True) == errno.EROFS
    assert errno_for(CorruptRecordError("bad", 3, "/x.log"), rw=False) == errno.EIO
    assert errno_for(InvalidInput("x"), rw=True) == errno.EINVAL
    assert errno_for(InvalidName("x"), rw=True, mkdir=True) == errno.EINVAL
    assert errno_for(InternalTopicRefused("x"), rw=True) == errno.EPERM  # an append to an internal topic
    assert errno_for(InternalTopicRefused("x"), rw=True, mkdir=True) == errno.EPERM
    assert errno_for(InvalidName("x"), rw=True) == errno.ENOENT
    assert errno_for(RecordTooLargeError("x"), rw=True) == errno.EFBIG
    assert errno_for(FileExistsError(), rw=True) == errno.EEXIST
    assert errno_for(OSError(errno.ENOSPC, "full"), rw=True) == errno.ENOSPC
    assert errno_for(RuntimeError("?"), rw=True) == errno.EIO


@pytest.mark.allow_warnings("the bad descriptor is logged as an error")
def test_a_descriptor_closed_under_a_request_is_eio_and_said(caplog):
    """review26 R26-4: a race closed a segment's descriptor under a table read, and the reader got EBADF
    (on a descriptor it had not passed) with nothing in the mount's log. Now EIO, logged with its stack."""
    assert errno_for(OSError(errno.EBADF, "Bad file descriptor"), rw=False) == errno.EIO
    assert any(r.levelname == "ERROR" and "closed while in use" in r.getMessage() and r.exc_info
               for r in caplog.records)
    assert errno_for(OSError(errno.ENOSPC, "full"), rw=True) == errno.ENOSPC  # others pass through
