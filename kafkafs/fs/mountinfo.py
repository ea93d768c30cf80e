"""The mount table (``/proc/self/mountinfo``) as kafkafs reads it: which mount is on top at a path,
without touching the mount itself (a stat of a FUSE mount point is a request to its daemon, which may
not answer). Functions only; safe from any thread. Imports nothing heavy: ``kafkafs umount`` uses it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["MountEntry", "find_mount", "mount_entries", "mount_path", "unescape"]


def unescape(field: str) -> str:
    """A path as /proc/self/mountinfo writes it (space, tab, newline, backslash as octal escapes)."""
    return field.encode().decode("unicode_escape").encode("latin-1").decode("utf-8", "surrogateescape")


@dataclass(frozen=True)
class MountEntry:
    """One line of /proc/self/mountinfo: a mount at ``path``."""

    path: str
    fstype: str
    source: str
    options: frozenset[str]  # the mount's own (rw or ro, nosuid, ...) and its super block's
    device: str = ""  # its super block's major:minor (a FUSE connection's own)


def mount_path(mountpoint: str) -> str:
    """The absolute mount point, its folders resolved but not the mount point itself (a stat of it is a
    request to the mount, which may not answer)."""
    path = os.path.abspath(mountpoint)
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def mount_entries(table: str = "/proc/self/mountinfo") -> Iterator[MountEntry]:
    """Every mount of a mount table (this namespace's, or ``/proc/PID/mountinfo``), in its order (a later
    mount at a path is on top of an earlier one); OSError if it cannot be read."""
    with open(table, encoding="utf-8", errors="surrogateescape") as mountinfo:
        for line in mountinfo:
            fields = line.split()
            if len(fields) < 10 or "-" not in fields:
                continue
            at = fields.index("-")
            options = fields[5].split(",") + (fields[at + 3].split(",") if len(fields) > at + 3 else [])
            yield MountEntry(unescape(fields[4]), fields[at + 1], unescape(fields[at + 2]), frozenset(options),
                             fields[2])


def find_mount(mountpoint: str) -> MountEntry | None:
    """The mount on top at ``mountpoint``, or None (from ``/proc/self/mountinfo``: touches no file of it)."""
    path = mount_path(mountpoint)
    found = None
    for entry in mount_entries():
        if entry.path == path:
            found = entry
    return found
