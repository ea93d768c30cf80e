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

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, NamedTuple

from ..errors import InvalidInput

__all__ = ["FileKey", "default_cache_dir", "check_outside", "file_key", "write_entry"]


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
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=Path(name).suffix, dir=directory)
    try:
        with os.fdopen(fd, "w+b") as f:
            write(f)
        os.replace(tmp, directory / name)
        tmp = None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return directory / name
