"""The cache folder: where what kafkafs learns about sealed segments is kept across runs, outside the log
directory (the mount's rendered sizes, :mod:`kafkafs.fs.views.layoutcache`; the key indexes,
:mod:`kafkafs.storage.keyindex`).

Both key their entries the same way: by the segment file's identity as it is now (device, inode, size,
``mtime_ns`` and ``ctime_ns``: the ctime because ``cp -p`` or ``rsync --inplace -t`` put an old mtime
back on changed bytes, and nobody can set a ctime), the partition and the kafkafs version; an entry
holds its whole key and is served only when that key matches the segment as it is now, and its
checksums hold. Anything else is rebuilt.

Functions only; thread-safe.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from ..errors import InvalidInput

__all__ = ["FileKey", "default_cache_dir", "check_outside", "file_key", "write_entry", "entry_head", "discard_entry",
           "prune_entries", "segment_path", "SEGMENT_ENTRY_SUFFIXES"]

log = logging.getLogger("kafkafs.cache")

#: The entries kept per segment file (layouts, key indexes): each starts with a magic line, a big-endian
#: 4-byte length and a JSON head holding ``key`` ([dev, ino, size, mtime_ns, ctime_ns, topic, partition,
#: ...]) and ``path`` (the segment file's real path when it was written).
SEGMENT_ENTRY_SUFFIXES = (".layout", ".keys")
_HEAD_READ = 8192


class FileKey(NamedTuple):
    """A file's identity as it is now."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int


def file_key(st: os.stat_result) -> FileKey:
    return FileKey(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/kafkafs``, else ``~/.cache/kafkafs`` (``$CACHE_DIRECTORY`` under systemd's
    ``CacheDirectory=`` wins over both)."""
    systemd = os.environ.get("CACHE_DIRECTORY")
    if systemd:
        return Path(systemd.split(":")[0])
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "kafkafs"
    return Path(os.path.expanduser("~")) / ".cache" / "kafkafs"


def check_outside(cache_dir: str | os.PathLike[str], logdir: str | os.PathLike[str]) -> Path:
    """``cache_dir`` made absolute; InvalidInput when it is, or is inside, the log directory."""
    cache = Path(os.path.realpath(cache_dir))
    root = Path(os.path.realpath(logdir))
    if cache == root or cache.is_relative_to(root):
        raise InvalidInput(f"--cache-dir {cache_dir}: the size cache cannot be inside the log directory")
    return cache


def write_entry(directory: Path, name: str, write: Callable[[BinaryIO], object]) -> Path:
    """Write the entry ``name`` of the cache folder ``directory`` (made if missing) whole or not at all:
    ``write(f)`` fills a temporary file of the folder, which then replaces the entry, so a reader sees
    the old entry or the new one. OSError (a folder that cannot be written) passes to the caller."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, made = tempfile.mkstemp(prefix=".tmp-", suffix=Path(name).suffix, dir=directory)
    tmp: str | None = made
    try:
        with os.fdopen(fd, "w+b") as f:
            write(f)
        os.replace(made, directory / name)
        tmp = None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return directory / name


def segment_path(log_path: str | os.PathLike[str]) -> str:
    """How entries name their segment file: the log directory's real path, the partition folder's name,
    the file's name (a partition folder may be a link; the log directory is found through it)."""
    p = Path(log_path)
    return os.path.join(os.path.realpath(p.parent.parent), p.parent.name, p.name)


def entry_head(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The JSON head of a per-segment cache entry (a layout or a key index), None when it is not one."""
    try:
        with open(path, "rb") as f:
            first = f.read(_HEAD_READ)
    except OSError:
        return None
    if not first.startswith(b"KAFKAFS-"):
        return None
    nl = first.find(b"\n")
    if nl < 0 or len(first) < nl + 5:
        return None
    (length,) = struct.unpack_from(">I", first, nl + 1)
    body = first[nl + 5 : nl + 5 + length]
    if len(body) != length:
        return None
    try:
        head = json.loads(body)
    except ValueError:
        return None
    return head if isinstance(head, dict) else None


def _segment_gone(head: dict[str, Any], root: str) -> bool:
    """True when the entry was written for a segment file under ``root`` that is no longer there (or is
    another file now)."""
    seg = head.get("path")
    key = head.get("key")
    if not isinstance(seg, str) or not isinstance(key, list) or len(key) < 2:
        return False
    if os.path.dirname(os.path.dirname(seg)) != root:
        return False
    try:
        st = os.stat(seg)
    except FileNotFoundError:
        return True
    except OSError:
        return False  # cannot tell: keep it
    return [st.st_dev, st.st_ino] != key[:2]


def discard_entry(path: str | os.PathLike[str], dev: int, ino: int) -> bool:
    """Remove the per-segment entry at ``path`` when it (still) names the segment file (dev, ino) and that
    file is gone from where it was written; True when removed. Another mount still using it only misses
    (it renders or builds again)."""
    head = entry_head(path)
    if head is None or not isinstance(head.get("key"), list) or head["key"][:2] != [dev, ino]:
        return False
    seg = head.get("path")
    if isinstance(seg, str):
        try:
            st = os.stat(seg)
            if (st.st_dev, st.st_ino) == (dev, ino):
                return False  # still there (another name of it, or not deleted after all)
        except OSError:
            pass
    try:
        os.unlink(path)
    except OSError:
        return False
    return True


def prune_entries(directory: str | os.PathLike[str] | None, logdir: str | os.PathLike[str]) -> int:
    """Remove the per-segment entries of ``directory`` (the cache folder) written for segment files of
    ``logdir`` that are gone (deleted by retention or compaction, or replaced); returns how many. Only
    entries this cache wrote (their magic and head) are looked at, only those naming a file of this
    log directory are removed, and nothing in ``logdir`` is touched. Two mounts may share the folder:
    an entry the other still uses is only a miss for it."""
    if directory is None:
        return 0
    root = os.path.realpath(logdir)
    removed = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names:
        if name.startswith(".") or not name.endswith(SEGMENT_ENTRY_SUFFIXES):
            continue
        path = os.path.join(directory, name)
        head = entry_head(path)
        if head is None or not _segment_gone(head, root):
            continue
        try:
            os.unlink(path)
            removed += 1
        except OSError:
            pass
    if removed:
        log.info("cache %s: removed %d entries of segments no longer in %s", directory, removed, root)
    return removed
