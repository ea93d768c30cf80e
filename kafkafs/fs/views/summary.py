"""The size summary: each partition's ``records.jsonl`` size as a mount last knew it, kept across mounts
in the layout cache's folder, so that a remount answers ``stat`` of a partition it has not opened yet
with one listing and one ``stat`` per segment file instead of opening its log (SPEC §3, "Size and
speed").

One file per (log directory, values mode): ``<hash>.summary``. For each partition it holds the names in
the partition folder, the identity of every file whose name holds ``.log`` (device, inode, size,
``mtime_ns``, ``ctime_ns``: the layout cache's key), the log start offset the log directory's checkpoint
gave the partition, the decoder's identity, and the size of ``records.jsonl`` those files render to.
An entry is served only when all of that is as it is now: the same names, every segment file with the
same identity, the same checkpointed start and decoder. The size is a function of exactly those (the
mount opens a log from its folder and the checkpoint, and lays each segment out from its bytes), so a
changed segment, a new or removed file, or a moved log start is never answered from a stale entry;
such a partition is opened as before. The file ends with a BLAKE2b checksum and names the kafkafs
version and layout format that wrote it; anything that does not hold is ignored. It is written at
unmount (temporary file, then ``os.replace``), never inside the log directory.

Thread safety: :class:`SizeSummary` keeps its entries in a dict replaced whole under a lock; ``check``
runs from any thread (the FUSE loop included: a listing and a few ``stat`` calls, no lock held while
they run), ``record`` and ``save`` from the thread that unmounts.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from pathlib import Path
from typing import NamedTuple

import orjson

from ... import __version__
from ...storage.cachedir import FileKey, file_key, write_entry
from .layoutcache import FORMAT_VERSION

__all__ = ["SizeSummary", "Sized", "SummaryEntry"]

log = logging.getLogger("kafkafs.fs")

_MAGIC = b"KAFKAFS-SUMMARY\n"
_DIGEST = 32


class SummaryEntry(NamedTuple):
    """What one partition's ``records.jsonl`` size depends on, and the size."""

    names: tuple[str, ...]  # every name in the partition folder, sorted
    files: dict[str, FileKey]  # the identity of each name that holds ".log"
    start: int | None  # the log start offset the log directory's checkpoint gives the partition
    decoder: str | None  # the decoder's identity (render.decoder_identity)
    active: str | None  # the last segment's .log (its mtime is records.jsonl's)
    total: int


class Sized(NamedTuple):
    """A partition's ``records.jsonl`` as the summary answers it now."""

    total: int
    mtime_ns: int


def _scan(folder: str) -> tuple[tuple[str, ...], dict[str, FileKey]] | None:
    """The folder's names and the identity of its segment files as they are now (None: unreadable)."""
    try:
        with os.scandir(folder) as it:
            entries = list(it)
        files = {e.name: file_key(e.stat(follow_symlinks=False)) for e in entries if ".log" in e.name}
    except OSError:
        return None
    return tuple(sorted(e.name for e in entries)), files


class SizeSummary:
    """The summary of one log directory served in one values mode; ``directory`` None turns it off."""

    def __init__(self, directory: Path | None, logdir: Path, mode: str) -> None:
        self.logdir = logdir
        self._root = str(logdir)
        ident = orjson.dumps([FORMAT_VERSION, __version__, os.path.realpath(logdir), mode])
        self.path = directory / f"{hashlib.blake2b(ident, digest_size=20).hexdigest()}.summary" if directory else None
        self._ident = ident
        self._guard = threading.Lock()
        self._entries: dict[str, SummaryEntry] = self._load()
        self._changed = False

    @property
    def enabled(self) -> bool:
        return self.path is not None

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    # ------------------------------------------------------------------------------------------ answer

    def check(self, name: str, start: int | None, decoder: str | None) -> Sized | None:
        """The size of partition ``name``'s ``records.jsonl`` when its entry holds for the folder as it
        is now (``start``: the checkpointed log start the log directory has for it; ``decoder``: the
        identity of the decoder it would render with); None otherwise."""
        entry = self._entries.get(name)
        if entry is None or entry.start != start or entry.decoder != decoder:
            return None
        scanned = _scan(os.path.join(self._root, name))
        if scanned is None or scanned[0] != entry.names or scanned[1] != entry.files:
            return None
        mtime = entry.files[entry.active].mtime_ns if entry.active is not None else 0
        return Sized(entry.total, mtime)

    # ------------------------------------------------------------------------------------------ keep

    def record(self, name: str, start: int | None, decoder: str | None, measure) -> None:
        """Keep what partition ``name`` renders to now: ``measure(files)`` gets the identity of its
        segment files as they are now and returns ``(total, active .log name)`` when its laid-out
        ``records.jsonl`` covers exactly those files, else None (the partition is then left out)."""
        if self.path is None:
            return
        scanned = _scan(os.path.join(self._root, name))
        got = measure(scanned[1]) if scanned is not None else None
        with self._guard:
            if scanned is None or got is None:
                changed = self._entries.pop(name, None) is not None
            else:
                total, active = got
                entry = SummaryEntry(scanned[0], scanned[1], start, decoder, active, total)
                changed = self._entries.get(name) != entry
                if changed:
                    self._entries = {**self._entries, name: entry}
            self._changed |= changed

    def keep_only(self, names: set[str]) -> None:
        """Drop the entries of partitions no longer in the log directory."""
        with self._guard:
            gone = [n for n in self._entries if n not in names]
            if gone:
                self._entries = {n: e for n, e in self._entries.items() if n in names}
                self._changed = True

    def save(self) -> bool:
        """Write the summary when it changed; False when it could not be written (said once, as a
        warning: the mount works without it)."""
        if self.path is None or not self._changed:
            return False
        with self._guard:
            entries = self._entries
            self._changed = False
        body = _MAGIC + orjson.dumps({
            "ident": orjson.Fragment(self._ident),
            "partitions": {n: [list(e.names), {k: list(v) for k, v in e.files.items()}, e.start, e.decoder, e.active,
                               e.total] for n, e in entries.items()},
        })
        data = body + hashlib.blake2b(body, digest_size=_DIGEST).digest()
        try:
            write_entry(self.path.parent, self.path.name, lambda f: f.write(data))
        except OSError as exc:
            log.warning("size summary %s could not be written (%s)", self.path, exc.strerror or exc)
            return False
        return True

    def _load(self) -> dict[str, SummaryEntry]:
        if self.path is None:
            return {}
        try:
            data = self.path.read_bytes()
        except OSError:
            return {}
        body, digest = data[:-_DIGEST], data[-_DIGEST:]
        if not body.startswith(_MAGIC) or hashlib.blake2b(body, digest_size=_DIGEST).digest() != digest:
            log.debug("size summary %s is damaged; ignored", self.path)
            return {}
        try:
            doc = orjson.loads(body[len(_MAGIC):])
            if orjson.dumps(doc["ident"]) != self._ident:
                return {}
            return {
                name: SummaryEntry(tuple(names), {k: FileKey(*v) for k, v in files.items()}, start, decoder, active,
                                   int(total))
                for name, (names, files, start, decoder, active, total) in doc["partitions"].items()
            }
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            log.debug("size summary %s does not parse; ignored", self.path)
            return {}
