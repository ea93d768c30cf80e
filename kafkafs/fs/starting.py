"""The mount's start: what libfuse prints while it starts, kept for the one error line."""

from __future__ import annotations

import os
import sys
import tempfile

__all__ = ["StartingStderr", "first_exception"]


class StartingStderr:
    """File descriptor 2 into a temporary file while the mount starts (``pyfuse3.init`` until the mount
    answers), so that what libfuse and fusermount3 print there ("fuse: unknown option(s): `-o bogus'")
    becomes part of the one error line instead of lines before it; replayed as it was once the mount
    answers. Used by the one thread that starts the mount."""

    def __init__(self) -> None:
        sys.stderr.flush()
        self._saved: int | None = os.dup(2)
        self._file = tempfile.TemporaryFile()  # noqa: SIM115 - closed by restore()
        os.dup2(self._file.fileno(), 2)
        self.said: list[str] = []

    def restore(self, *, replay: bool) -> list[str]:
        """fd 2 back; what was printed meanwhile (written out again with ``replay``), as lines."""
        if self._saved is not None:
            sys.stderr.flush()
            os.dup2(self._saved, 2)
            os.close(self._saved)
            self._saved = None
            self._file.seek(0)
            text = self._file.read()
            self._file.close()
            if replay and text:
                os.write(2, text)
            lines = text.decode("utf-8", "replace").splitlines()
            self.said = [line.strip().removeprefix("fuse: ") for line in lines if line.strip()]
        return self.said


def first_exception(exc: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups, as trio raises them."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
