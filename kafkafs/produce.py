"""``kafkafs produce``'s input: lines on a descriptor, grouped as the ``append`` file groups one write."""

from __future__ import annotations

import os
from collections.abc import Iterator

__all__ = ["read_line_groups"]


def read_line_groups(fd: int, max_lines: int = 1000, max_bytes: int = 512 * 1024) -> Iterator[tuple[int, list[bytes]]]:
    """Complete lines as they arrive on ``fd``, as ``(first line number, lines)`` groups: the complete
    lines of one ``read()`` form a group (cut at ``max_lines`` / ``max_bytes`` so a batch stays under
    ``max.message.bytes``), as the ``append`` file does with one ``write()``. A last line without a
    newline counts at end of input."""
    pending = b""
    number = 1
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            lines = [pending] if pending else []
        else:
            data = pending + chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                pending = data
                continue
            lines = data[:cut].split(b"\n")
            pending = data[cut + 1 :]
        group: list[bytes] = []
        size = 0
        first = number
        for line in lines:
            group.append(line)
            size += len(line)
            number += 1
            if len(group) >= max_lines or size >= max_bytes:
                yield first, group
                group, size, first = [], 0, number
        if group:
            yield first, group
        if not chunk:
            return
