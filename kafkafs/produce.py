"""``kafkafs produce``'s input: lines on a descriptor, grouped as the ``append`` file groups one write."""

from __future__ import annotations

import os
from collections.abc import Iterator

__all__ = ["read_line_blobs", "MAX_LINES", "MAX_BYTES"]

#: A group (one batch, appended at once): at most this many lines, cut once its lines reach MAX_BYTES,
#: so that a batch stays under ``max.message.bytes``.
MAX_LINES = 1000
MAX_BYTES = 512 * 1024


def read_line_blobs(fd: int) -> Iterator[tuple[int, bytes]]:
    """Complete lines as they arrive on ``fd``, as ``(first line number, lines)``: the complete lines of
    one ``read()`` joined by their newlines (without the last), as the ``append`` file takes one
    ``write()``; :func:`kafkafs.format.lineencode.encode_lines` cuts them into groups of
    :data:`MAX_LINES` / :data:`MAX_BYTES`. A last line without a newline counts at end of input."""
    pending = b""
    number = 1
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            if pending:
                yield number, pending
            return
        data = pending + chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            pending = data
            continue
        blob = data[:cut]
        pending = data[cut + 1 :]
        yield number, blob
        number += blob.count(b"\n") + 1
