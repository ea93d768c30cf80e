"""The partition folders of a log directory, and the aliases among them.

A partition folder may be a symbolic link (SPEC §3: to another disk, say). One that leads to the folder
of another partition of the same log directory (``ln -s t1-0 LOGDIR/t9-0``) is an *alias*: the same
files under a second name, so a reader that listed both would show one log twice, its records under
both topics (review9 R9-9). A broker would not serve it either: Kafka's LogManager loads every folder
(``File.isDirectory`` follows the link) as the partition its name says, and keeps it as long as the
topic id in its ``partition.metadata`` (t1's) and its partition number are in the metadata, so the
alias becomes a second, unreplicated log over t1-0's files that no client can fetch, since topic t9
is not in the metadata. Writers refuse an alias (:func:`~kafkafs.storage.safefiles.check_partition_folder`);
readers leave it out of their listings and name it once (:func:`list_partition_folders`).

Which name is the partition's own: the folder that is not a link; else (all links) the one named as
the folder they lead to; else the first by topic and partition number. Functions only.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import InvalidName, doing
from .names import parse_partition_dir_name

__all__ = ["list_partition_folders", "alias_reason"]


def list_partition_folders(path: str | os.PathLike[str]) -> tuple[list[str], dict[str, str]]:
    """The partition folders of the log directory at ``path`` (sorted by topic, then partition number),
    aliases left out; and the aliases, each with the folder whose log it shows again. OSError (tagged
    with the path) when the directory cannot be listed. A folder that cannot be looked at is listed
    as before: its reader says why."""
    with doing("list {path}"), os.scandir(path) as listing:
        entries = list(listing)
    folders: list[tuple[tuple[str, int], os.DirEntry[str]]] = []
    links = False
    for entry in entries:
        if not entry.is_dir():
            continue
        try:
            folders.append((parse_partition_dir_name(entry.name), entry))
        except InvalidName:
            continue
        links = links or entry.is_symlink()
    folders.sort(key=lambda item: item[0])
    aliases: dict[str, str] = {}
    if links:  # only a link can be an alias: without one, nothing is looked at twice
        same: dict[tuple[int, int], list[os.DirEntry[str]]] = {}
        for _key, entry in folders:
            try:
                st = entry.stat()  # the folder the name leads to
            except OSError:
                continue
            same.setdefault((st.st_dev, st.st_ino), []).append(entry)
        for group in same.values():
            if len(group) > 1:
                own = _own_name(group)
                aliases.update((entry.name, own.name) for entry in group if entry is not own)
    return [entry.name for _key, entry in folders if entry.name not in aliases], aliases


def _own_name(group: list[os.DirEntry[str]]) -> os.DirEntry[str]:
    for entry in group:
        if not entry.is_symlink():
            return entry
    for entry in group:
        if os.path.basename(os.path.realpath(entry.path)) == entry.name:
            return entry
    return group[0]


def alias_reason(path: str | os.PathLike[str], alias: str, own: str) -> str:
    """What an alias is, in words (its callers add what they do with it)."""
    return f"{Path(path) / alias}: a link to {own}, another partition folder of this log directory (the same log)"
