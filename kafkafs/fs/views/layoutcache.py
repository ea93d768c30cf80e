"""The layout cache: rendered layouts of segments kept across mounts, in a folder outside the log
directory (what README and ``--cache-dir`` call the size cache).

A segment's layout in ``records.jsonl`` (per piece: file position, size, last offset, rendered end;
see :mod:`.layout`) is a pure function of the segment's bytes, the partition's name, the
values mode and the decoder. Rendering it again on every mount is what made ``ls -l`` slow on large
partitions; this cache keeps it.

An entry is one file ``<hash>.layout`` named after (device, inode, topic, partition, mode, decoder), so
a segment rewritten in place overwrites its own entry and the folder does not grow with each change.
Inside, next to the arrays, the entry repeats its whole key, including the segment's size,
``mtime_ns`` and ``ctime_ns`` when it was laid out (the ctime because ``cp -p``, ``rsync --inplace -t``
or ``touch -r`` put an old mtime back on changed bytes; nobody can set a ctime), and ends with a BLAKE2b checksum of everything before it. An entry
is served only when the key matches the segment as it is now, in full, and the checksum and the arrays'
shape hold; anything else (stale, corrupt, written by another version or for another segment) is
ignored and the layout is rebuilt, then stored over it.

Writes go to a temporary file in the same folder, then ``os.replace``: a reader sees a whole entry or
none. Nothing here ever writes inside the log directory: :func:`check_outside` refuses such a folder.

Thread safety: a :class:`LayoutCache` holds no mutable state besides counters (updated under a lock);
loads and stores of different or the same entries may run in any threads at once.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import threading
from array import array
from pathlib import Path
from typing import NamedTuple

import orjson

from ... import __version__
from ...storage.cachedir import check_outside, default_cache_dir, discard_entry, write_entry

__all__ = ["LayoutCache", "LayoutKey", "CachedLayout", "FORMAT_VERSION", "default_cache_dir", "check_outside"]

log = logging.getLogger("kafkafs.fs")

#: Bumped whenever the entry format or the rendering changes (3: control records show their key and a
#: transaction marker's value decoded; 4: a batch whose offsets are out of order is damage, issue 20,
#: never laid out as records). Entries are also tied to the kafkafs version that wrote them.
FORMAT_VERSION = 4
_MAGIC = b"KAFKAFS-LAYOUT\n"
_DIGEST = 32
_LEN = struct.Struct(">I")


class LayoutKey(NamedTuple):
    """What a layout depends on. ``size``, ``mtime_ns`` and ``ctime_ns`` are the segment's when it was
    laid out."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int
    topic: str
    partition: int
    mode: str
    decoder: str | None

    def file_stem(self) -> str:
        ident = orjson.dumps(
            [FORMAT_VERSION, __version__, self.dev, self.ino, self.topic, self.partition, self.mode, self.decoder]
        )
        return hashlib.blake2b(ident, digest_size=20).hexdigest()


class CachedLayout(NamedTuple):
    """A sealed (or unchanged) segment's pieces, as :class:`~.layout.SegmentLayout` holds them."""

    positions: array
    sizes: array
    last_offsets: array
    ends: array
    scanned: int


def stat_key(path: str | os.PathLike[str], topic: str, partition: int, mode: str, decoder: str | None) -> LayoutKey | None:
    """The key of the segment file at ``path`` as it is now (None when it cannot be stat'ed)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return LayoutKey(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, topic, partition, mode, decoder)


def _read_whole(path: str) -> bytes:
    """The bytes of the file at ``path``: ``open(path, "rb").read()`` in four system calls (open, fstat,
    read, close) where the buffered file makes nine (each lets the GIL go and takes it back: a partition's
    open on the ahead thread hands it to the FUSE loop the fewer times, issue 25). Entries are replaced
    whole (``os.replace``), so one read of the size the fstat says is all; a longer file is read on."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        size = os.fstat(fd).st_size
        data = os.read(fd, size + 1)
        if len(data) <= size:
            return data
        chunks = [data]
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


class LayoutCache:
    """Layout entries in ``directory`` (created on the first store); ``None`` turns caching off."""

    def __init__(self, directory: str | os.PathLike[str] | None) -> None:
        self.directory = Path(directory) if directory is not None else None
        self._guard = threading.Lock()
        self._warned = False
        self.hits = 0
        self.misses = 0
        self.rejected = 0
        self.stored = 0

    @property
    def enabled(self) -> bool:
        return self.directory is not None

    def _path(self, key: LayoutKey) -> Path:
        assert self.directory is not None
        return self.directory / f"{key.file_stem()}.layout"

    def _count(self, field: str) -> None:
        with self._guard:
            setattr(self, field, getattr(self, field) + 1)

    # ------------------------------------------------------------------------------------------ load

    def load(self, key: LayoutKey) -> CachedLayout | None:
        """The layout stored for ``key``, or None (absent, stale, corrupt or foreign: never served)."""
        if self.directory is None:
            return None
        try:
            data = _read_whole(str(self._path(key)))
        except OSError:
            self._count("misses")
            return None
        found = _decode(data, key)
        if found is None:
            self._count("rejected")
            log.debug("size cache: entry for %s-%d (inode %d) is stale or damaged; rebuilding",
                      key.topic, key.partition, key.ino)
        else:
            self._count("hits")
        return found

    # ------------------------------------------------------------------------------------------ store

    def store(self, key: LayoutKey, layout: CachedLayout, path: str | None = None) -> bool:
        """Write the entry atomically; False (and one warning per cache) when the folder is not writable.
        ``path``: the segment file's (:func:`~kafkafs.storage.cachedir.segment_path`), kept in the entry so
        that it can be removed once the segment is gone (:func:`~kafkafs.storage.cachedir.prune_entries`)."""
        if self.directory is None:
            return False
        data = _encode(key, layout, path)
        try:
            write_entry(self.directory, self._path(key).name, lambda f: f.write(data))
        except OSError as exc:
            with self._guard:
                warn, self._warned = not self._warned, True
            if warn:
                log.warning("size cache %s is not writable (%s); sizes will not be kept across mounts",
                            self.directory, exc.strerror or exc)
            return False
        self._count("stored")
        return True

    def discard(self, key: LayoutKey) -> bool:
        """Remove the entry of a segment that left the log (its file gone from where the entry says);
        True when removed."""
        if self.directory is None:
            return False
        return discard_entry(self._path(key), key.dev, key.ino)


def _encode(key: LayoutKey, layout: CachedLayout, path: str | None = None) -> bytes:
    head = orjson.dumps({"version": FORMAT_VERSION, "kafkafs": __version__, "key": list(key),
                         "count": len(layout.ends), "scanned": layout.scanned, "path": path})
    body = [_MAGIC, _LEN.pack(len(head)), head]
    for a in (layout.positions, layout.sizes, layout.last_offsets, layout.ends):
        a = array("q", a)
        if a.itemsize != 8:  # pragma: no cover - "q" is 8 bytes on every platform CPython supports
            raise ValueError("array('q') is not 64-bit here")
        body.append(a.tobytes())
    data = b"".join(body)
    return data + hashlib.blake2b(data, digest_size=_DIGEST).digest()


def _decode(data: bytes, key: LayoutKey) -> CachedLayout | None:
    if len(data) < len(_MAGIC) + _LEN.size + _DIGEST or not data.startswith(_MAGIC):
        return None
    body, digest = data[:-_DIGEST], data[-_DIGEST:]
    if hashlib.blake2b(body, digest_size=_DIGEST).digest() != digest:
        return None
    at = len(_MAGIC)
    (head_len,) = _LEN.unpack_from(body, at)
    at += _LEN.size
    try:
        head = orjson.loads(body[at : at + head_len])
        count = int(head["count"])
        scanned = int(head["scanned"])
        stored_key = head["key"]
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None
    if head.get("version") != FORMAT_VERSION or head.get("kafkafs") != __version__ or stored_key != list(key):
        return None
    at += head_len
    if count < 0 or len(body) - at != 4 * 8 * count:
        return None
    arrays = []
    for _ in range(4):
        a = array("q")
        a.frombytes(body[at : at + 8 * count])
        arrays.append(a)
        at += 8 * count
    positions, sizes, last_offsets, ends = arrays
    # the shape a layout must have: pieces in file order, ends growing, all within the segment
    pos = 0
    prev_end = 0
    for i in range(count):
        if positions[i] < pos or sizes[i] <= 0 or ends[i] <= prev_end:
            return None
        pos = positions[i] + sizes[i]
        prev_end = ends[i]
    if pos > key.size or scanned < pos or scanned > key.size:
        return None
    return CachedLayout(positions, sizes, last_offsets, ends, scanned)
