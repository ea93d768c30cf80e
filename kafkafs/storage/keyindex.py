"""The key index of a sealed segment: a sorted, partitioned on-disk map of key hashes to offsets, built
in bounded memory whatever the number of keys (:mod:`.keyscan`), kept in the cache folder
(:mod:`.cachedir`) as a file of its own layout (:mod:`.keyfile`).

What an index holds is :mod:`kafkafs.format.keyindex`'s (entries of 24 bytes: the key's MD5 halves,
the offset less the segment's base, tombstone and transactional flags; the transactional batches;
the keys whose names are digests). :class:`KeyIndexStore` finds the index of a segment: open already,
or in the cache folder when its file holds the segment's key as it is now (device, inode, size,
mtime, ctime, the partition, the kafkafs version) and its checksums hold, or built now. A file that
fails a check (then or later, :class:`~.keyfile.DamagedIndex`) is rebuilt.

The descriptors of the indexes come out of the process's handle budget (:mod:`.handles`), with the
segments': the store keeps at most ``max_open`` indexes at hand, and the budget bounds how many of them
(and of every other index still in use) hold their file open at once.

Threads: a :class:`KeyIndexStore` may be shared; it builds each index once (a lock per segment file)
and keeps a bounded number of them at hand.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from .. import __version__
from .cachedir import FileKey, discard_entry, file_key, write_entry
from .handles import retrying_open
from .keyfile import FORMAT_VERSION, DamagedIndex, SegmentKeyIndex, temporary_index_file
from .keyscan import build_key_index

if TYPE_CHECKING:
    from .segment import LogSegment

__all__ = ["KeyIndexStore", "index_stem", "DamagedIndex", "SegmentKeyIndex"]

log = logging.getLogger("kafkafs.keyindex")

#: Builds of segments at least this large are said in the log (they take a second or more).
LOG_BUILDS_FROM = 128 * 1024 * 1024


def index_stem(key: FileKey, topic: str, partition: int) -> str:
    ident = json.dumps([FORMAT_VERSION, __version__, key.dev, key.ino, topic, partition, "keys"]).encode()
    return hashlib.blake2b(ident, digest_size=20).hexdigest()


def _head_key(key: FileKey, topic: str, partition: int) -> list[Any]:
    return [*key, topic, partition]


def _names(exc: OSError, path: str | os.PathLike[str]) -> bool:
    """Whether ``exc`` is about the file ``path`` (the segment's reads name it; the cache's, its own files)."""
    return exc.filename is not None and os.fspath(exc.filename) == os.fspath(path)


class KeyIndexStore:
    """Key indexes of sealed segments, kept in ``directory`` (the cache folder; None: in temporary files
    of this process only, :func:`~.keyfile.private_folder`). Loads what is there when it holds, builds
    what is missing or stale.

    Threads: safe to share; see the module's docstring."""

    def __init__(self, directory: str | os.PathLike[str] | None, *, max_open: int = 256) -> None:
        self.directory = Path(directory) if directory is not None else None
        self.max_open = max_open
        self._open: OrderedDict[tuple[Any, ...], SegmentKeyIndex] = OrderedDict()
        self._guard = threading.Lock()
        self._building: dict[str, threading.Lock] = {}
        self._warned = False
        self.loaded = 0
        self.built = 0
        self.rejected = 0

    def _remember(self, ident: tuple[Any, ...], index: SegmentKeyIndex) -> None:
        """Keep ``index`` at hand for the next :meth:`get`; past ``max_open`` the oldest is let go (not
        closed: a reader may still hold it, and its file closes when the last one lets go). A
        temporary index (no cache folder) cannot be found again, so the store keeps it."""
        with self._guard:
            self._open[ident] = index
            self._open.move_to_end(ident)
            for old_ident in list(self._open):
                if len(self._open) <= self.max_open:
                    break
                if not self._open[old_ident].temporary:
                    del self._open[old_ident]

    def _cached(self, ident: tuple[Any, ...]) -> SegmentKeyIndex | None:
        with self._guard:
            index = self._open.get(ident)
            if index is not None:
                self._open.move_to_end(ident)
            return index

    def get(
        self,
        segment: LogSegment,
        topic: str,
        partition: int,
        *,
        build: bool = True,
        on_bytes: Callable[[int], None] | None = None,
        upper: int | None = None,
    ) -> SegmentKeyIndex | None:
        """The index of the sealed ``segment`` as it is now: open already, or loaded from the cache
        folder, or (``build``) built now; None when it is not there and ``build`` is False. ``upper``:
        the next segment's base offset, which the offsets of the segment's last batch stay below (a
        batch past it is damage, where the index stops)."""
        handle = segment.records.handle()  # held while its number is used: a segment let go meanwhile
        key = file_key(os.fstat(handle.fd))  # (retention) closes it only after (review26 R26-4)
        del handle
        index = self._cached((key, topic, partition))
        if index is not None:
            return index
        head_key = _head_key(key, topic, partition)
        stem = index_stem(key, topic, partition)
        ident = (key, topic, partition)
        with self._guard:
            lock = self._building.setdefault(stem, threading.Lock())
        with lock:
            index = self._cached(ident)
            if index is not None:
                return index
            index = self._load(stem, head_key)
            if index is None and build:
                index = self._build(segment, stem, head_key, key.size, on_bytes, upper)
            if index is not None:
                self._remember(ident, index)
        with self._guard:  # the build lock is for builds at the same time: not kept per segment ever seen
            if self._building.get(stem) is lock and not lock.locked():
                del self._building[stem]
        return index

    def _load(self, stem: str, head_key: list[Any]) -> SegmentKeyIndex | None:
        if self.directory is None:
            return None
        path = self.directory / f"{stem}.keys"
        try:
            fd = retrying_open(lambda: os.open(path, os.O_RDONLY | os.O_CLOEXEC))
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.debug("key index %s not read (%s); rebuilding", path, exc)
            return None
        try:
            index = SegmentKeyIndex.open(fd, head_key, path)  # closes fd when a check fails
        except (DamagedIndex, OSError) as exc:
            self.rejected += 1
            log.debug("key index %s not used (%s); rebuilding", path, exc)
            return None
        self.loaded += 1
        return index

    def _build(self, segment: LogSegment, stem: str, head_key: list[Any], size: int,
               on_bytes: Callable[[int], None] | None, upper: int | None) -> SegmentKeyIndex:
        if size >= LOG_BUILDS_FROM:
            log.info("building the key index of %s (%.0f MB)", segment.log_path, size / 1e6)
        if self.directory is not None:
            entry = self.directory / f"{stem}.keys"
            opened: list[SegmentKeyIndex] = []

            def write(f: BinaryIO) -> None:
                build_key_index(segment, f, head_key, size=size, tmpdir=str(self.directory), on_bytes=on_bytes,
                                upper=upper)
                f.flush()
                # opened on the file written, not by its name once it has it: the entry may be gone by
                # then (segment_gone or another mount's prune, for a segment deleted meanwhile beside a
                # live broker), which costs only a later build, never this one (review26 R26-2)
                opened.append(SegmentKeyIndex.open(f, head_key, entry))

            try:
                write_entry(self.directory, entry.name, write)
            except OSError as exc:
                for index in opened:
                    index.close()
                if not self._cache_fault(exc, segment):
                    raise
                self._warn(exc)
            else:
                self.built += 1
                return opened[0]
        f, temporary = temporary_index_file()
        try:
            with f:
                build_key_index(segment, f, head_key, size=size, on_bytes=on_bytes, upper=upper)
                index = SegmentKeyIndex.open(f, head_key, temporary, temporary=True)
        except BaseException:
            os.unlink(temporary)
            raise
        self.built += 1
        return index

    def _cache_fault(self, exc: OSError, segment: LogSegment) -> bool:
        """Whether ``exc``, met while building an index into the cache folder, is the folder's fault (said
        once, then indexes go to temporary files). Not when it names the segment (a read the disk refused,
        R15-11) or any file outside the folder (the segment under the name it took since, ``.deleted``
        beside a broker's retention: review26 R26-2); an error naming no file is the folder's."""
        if exc.filename is None:
            return True
        if _names(exc, segment.log_path) or _names(exc, segment.records.path):
            return False
        assert self.directory is not None
        named: str = os.path.abspath(os.fspath(exc.filename))
        folder = os.path.abspath(self.directory)
        inside: bool = named == folder or named.startswith(folder + os.sep)
        return inside

    def _warn(self, exc: OSError) -> None:
        with self._guard:
            warn, self._warned = not self._warned, True
        if warn:
            log.warning("the key index cache %s is not writable (%s); indexes are kept in temporary files",
                        self.directory, exc.strerror or exc)

    def segment_gone(self, dev: int, ino: int, topic: str, partition: int) -> None:
        """The segment file (dev, ino) of the partition left the log: let go of its index and its build
        lock, and remove its file from the cache folder when it names that segment and the segment is
        gone from where it was (:func:`~.cachedir.discard_entry`)."""
        stem = index_stem(FileKey(dev, ino, 0, 0, 0), topic, partition)
        with self._guard:
            for ident in [i for i in self._open if i[0][:2] == (dev, ino) and i[1:] == (topic, partition)]:
                del self._open[ident]
            lock = self._building.get(stem)
            if lock is not None and not lock.locked():
                del self._building[stem]
        if self.directory is not None:
            discard_entry(self.directory / f"{stem}.keys", dev, ino)

    def forget(self, index: SegmentKeyIndex) -> None:
        """Drop an index that failed a check while read, and its file (the next :meth:`get` rebuilds it)
        while it is still the one the index read (another process may have put a new one there)."""
        with self._guard:
            for ident, found in list(self._open.items()):
                if found is index:
                    del self._open[ident]
        if index.path is not None:
            try:
                st = os.stat(index.path)
                if (st.st_dev, st.st_ino, st.st_size) == index.file_id:
                    os.unlink(index.path)
            except OSError:
                pass

    def close(self) -> None:
        with self._guard:
            indexes = list(self._open.values())
            self._open.clear()
        for index in indexes:
            index.close()
