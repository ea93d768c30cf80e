"""The file of a key index (:mod:`.keyindex`): its layout, reading it with every block checked, and
writing it.

A file::

    [0, 4096)          "KAFKAFS-KEYS\\n", u32 length, the head (JSON: version, kafkafs version, the
                       segment's key, counts, where each section is), zeros
    data               the entries sorted by (h1, h2, rel); the fanout: 2**bits + 1 uint64, entry
                       index of the first entry whose h1 starts with each bits-long prefix; the
                       transactional batches; the long keys (sha256, h1, h2; sorted)
    CRC table          a CRC-32C of every 4 KiB block of data
    BLAKE2b            of the head's 4 KiB and the CRC table

:meth:`SegmentKeyIndex.open` uses a file only when its head holds the expected key and the BLAKE2b
holds; each block read afterwards is checked against its CRC-32C as it is read (so a lookup reads a few
blocks, not the file), and a block that fails raises :class:`DamagedIndex`.

Its descriptor comes out of the process's handle budget (:mod:`.handles`), as a segment's ``.log``
does: given back when too many are open, opened again by its path at the next read (the same file, by
device, inode and size, or :class:`DamagedIndex`: the next use rebuilds it). An index of this process
only (no cache folder, or the active segment's) lives in a file of :func:`private_folder`, removed
when the index is closed or dropped; the folder goes at the process's exit, or, when it was killed, at
the next kafkafs process's first use of its own (:func:`sweep_stale_folders`).

Threads: a :class:`SegmentKeyIndex` is immutable once written; reads use ``pread`` and may come from
any thread (a descriptor given back meanwhile closes when the last read holding it is done). A
:class:`BlockWriter` belongs to the one thread building the file.
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import hashlib
import json
import os
import shutil
import stat
import struct
import tempfile
import threading
import weakref
from array import array
from bisect import bisect_left
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from .. import __version__
from ..errors import CorruptRecordError, said_again
from ..format.crc import crc32c
from ..format.keyindex import ENTRY, ENTRY_SIZE, TXN, find_entries
from .handles import BUDGET, FileHandle, HandleBudget, retrying_open

__all__ = ["DamagedIndex", "SegmentKeyIndex", "Skipped", "BlockWriter", "FORMAT_VERSION", "HEAD_SIZE", "BLOCK", "LONG",
           "fanout_bits", "private_folder", "sweep_stale_folders", "temporary_index_file"]

#: 2: the last batch of a segment judged against the next segment's base; 3: damage kept as the batch's
#: own error (reason and position), so that it is said as every other reader says that batch; 4: a batch
#: too large to inflate is gone past (``skipped``), the records after it indexed (review19 R19-2)
FORMAT_VERSION = 4
MAGIC = b"KAFKAFS-KEYS\n"
HEAD_SIZE = 4096
BLOCK = 4096
_DIGEST = 32
_LEN = struct.Struct(">I")
_U64 = struct.Struct("<Q")
#: A long key's row: its SHA-256, then its hash halves.
LONG = struct.Struct("=32sQQ")


class Skipped(NamedTuple):
    """The batches of a segment a key scan went past without their records (too large to inflate: valid
    data, not damage; review19 R19-2), as queries need them: the first offset the first of them may hold
    and its error (a key's history stops there), and the last offset of the newest of them (a key's
    latest record is known only when one follows it)."""

    first: int
    last: int
    error: CorruptRecordError

    @staticmethod
    def of(skipped: Skipped | None, first: int, last: int, error: CorruptRecordError) -> Skipped:
        """``skipped`` (None: none yet) with a batch of offsets ``first..last`` after it."""
        return Skipped(first, last, error) if skipped is None else skipped._replace(last=max(skipped.last, last))

    def as_dict(self) -> dict[str, Any]:
        """What a key index keeps of them (:meth:`SegmentKeyIndex.skipped`)."""
        return {"first": self.first, "last": self.last, "position": self.error.position, "reason": self.error.reason}


class DamagedIndex(Exception):
    """An index file failed a check while it was read (``index``: that index, when it was open): it
    must be rebuilt."""

    def __init__(self, reason: str, index: SegmentKeyIndex | None = None) -> None:
        super().__init__(reason)
        self.index = index


def fanout_bits(entries: int) -> int:
    """About 16 entries a fanout bucket, at most 2**20 buckets."""
    bits = 0
    while bits < 20 and (entries >> (bits + 4)) > 0:
        bits += 1
    return bits


# -------------------------------------------------------------------------------------------- temporary files

_private_lock = threading.Lock()
_private: tuple[int, Path] | None = None  # (the process that made it, the folder)
#: The descriptors of this process's private folders, each holding an ``flock`` on its folder while the
#: process (or a child it forked) lives: what tells a sweeper the folder is in use.
_held: list[int] = []
PRIVATE_PREFIX = "kafkafs-keys-"
_OWN_FILE = ("keys-", ".keys")  # what temporary_index_file names its files


def _remove_private(pid: int, folder: Path) -> None:
    if os.getpid() == pid:  # never a parent's folder from a forked child (the daemon), or the reverse
        shutil.rmtree(folder, ignore_errors=True)


def private_folder() -> Path:
    """This process's folder for key indexes in temporary files (made on first use in the system's
    temporary folder, removed when the process exits). Made, it is locked (``flock``) for the life of
    the process, and the folders that killed processes left are swept (:func:`sweep_stale_folders`)."""
    global _private
    with _private_lock:
        made = _private
        if made is None or made[0] != os.getpid() or not made[1].is_dir():
            folder = Path(tempfile.mkdtemp(prefix=f"{PRIVATE_PREFIX}{os.getpid()}-"))
            try:
                fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                _held.append(fd)
            except OSError:  # no lock: the pid alone keeps a sweeper off it while this process lives
                pass
            atexit.register(_remove_private, os.getpid(), folder)
            made = _private = (os.getpid(), folder)
            sweep_stale_folders(folder.parent)
        return made[1]


def sweep_stale_folders(parent: str | os.PathLike[str]) -> list[str]:
    """Remove the private folders (:func:`private_folder`) in ``parent`` that processes killed before
    their exit left behind (an ``atexit`` handler does not run on SIGKILL); returns their names.

    A folder goes only when all of these hold: its name is ``kafkafs-keys-<pid>-...``; it is a folder
    (a link is never followed or removed) of this user; no process ``<pid>`` lives; no process holds its
    lock (a live kafkafs of another pid namespace sharing the folder does); and it holds nothing but
    regular files named as :func:`temporary_index_file` names them. Anything else is left as it is.
    Errors (a folder gone meanwhile, no permission) leave the folder too."""
    removed: list[str] = []
    try:
        names = [e.name for e in os.scandir(parent) if e.name.startswith(PRIVATE_PREFIX)]
    except OSError:
        return removed
    me = os.getpid()
    for name in names:
        pid = name[len(PRIVATE_PREFIX):].partition("-")[0]
        if not pid.isdigit() or int(pid) == me or _alive(int(pid)):
            continue
        if _remove_stale(os.fspath(parent), name):
            removed.append(name)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: another user's process
        return True
    return True


def _remove_stale(parent: str, name: str) -> bool:
    try:
        fd = os.open(os.path.join(parent, name), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:  # a link (ELOOP, ENOTDIR), gone, or not ours to read
        return False
    try:
        if os.fstat(fd).st_uid != os.getuid():
            return False
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError: a live process holds it
        inside = os.listdir(fd)
        for entry in inside:
            if not (entry.startswith(_OWN_FILE[0]) and entry.endswith(_OWN_FILE[1])):
                return False
            if not stat.S_ISREG(os.stat(entry, dir_fd=fd, follow_symlinks=False).st_mode):
                return False
        for entry in inside:
            os.unlink(entry, dir_fd=fd)
        os.rmdir(os.path.join(parent, name))  # rmdir never follows a link
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def temporary_index_file() -> tuple[BinaryIO, Path]:
    """A new file of :func:`private_folder`, open for writing and reading, and its path."""
    fd, name = retrying_open(lambda: tempfile.mkstemp(prefix="keys-", suffix=".keys", dir=private_folder()))
    return os.fdopen(fd, "w+b"), Path(name)


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


# -------------------------------------------------------------------------------------------- reading


class SegmentKeyIndex:
    """One segment's key index file, open for reading (see the module's docstring). ``temporary``: the
    file at ``path`` is this process's own (:func:`temporary_index_file`), removed when the index is
    closed or dropped. Without a ``path`` the descriptor cannot be opened again and is never given back."""

    def __init__(self, fd: int, head: dict[str, Any], crcs: array[int], path: Path | None, *,
                 temporary: bool = False, budget: HandleBudget | None = None) -> None:
        st = os.fstat(fd)
        self._file_id = (st.st_dev, st.st_ino, st.st_size)
        self._budget = budget if budget is not None else BUDGET
        self._closed = False
        self.path = path
        self.temporary = temporary
        self._remove = weakref.finalize(self, _unlink, path) if temporary and path is not None else None
        self.head = head
        self._crcs = crcs
        self.base_offset: int = head["base"]
        self.entries: int = head["entries"]
        self.bits: int = head["bits"]
        self.txns: int = head["txns"]
        self.longs: int = head["longs"]
        #: None, or {"offset", "position", "reason"}: the scan stopped at damage there (see :meth:`damage`).
        self.damaged: dict[str, Any] | None = head["damaged"]
        #: None, or {"first", "last", "position", "reason"}: batches too large to inflate the scan went past
        #: (see :meth:`skipped`)
        self._skipped: dict[str, Any] | None = head.get("skipped")
        self.next_offset: int = head["next_offset"]
        self._entries_at = 0
        self._fanout_at = self.entries * ENTRY_SIZE
        self._txns_at = self._fanout_at + ((1 << self.bits) + 1) * 8
        self._longs_at = self._txns_at + self.txns * TXN.size
        self._txn_cache: list[tuple[int, int, int]] | None = None
        self._lock = threading.Lock()
        self._handle: FileHandle | None = FileHandle(fd)  # last: from here on it closes the descriptor
        self._budget.opened(self)

    def __repr__(self) -> str:
        return f"<SegmentKeyIndex base={self.base_offset} entries={self.entries}>"

    def damage(self, log_path: str | os.PathLike[str]) -> CorruptRecordError | None:
        """What a reader that needs every record of the segment at ``log_path`` meets first: the first
        batch too large to inflate the scan went past (:meth:`skipped`), else the damage it stopped at, as
        the error that batch raises to any reader (same reason, file and position: the mount logs it once
        per file and position, whichever view meets it); None when the index is whole."""
        skipped = self.skipped(log_path)
        if skipped is not None:
            return skipped.error
        if self.damaged is None:
            return None
        return said_again(self.damaged["reason"], self.damaged["position"], str(log_path))

    def true_damage(self, log_path: str | os.PathLike[str]) -> CorruptRecordError | None:
        """The damage the scan stopped at (:meth:`damage` without the batches it went past), or None."""
        if self.damaged is None:
            return None
        return said_again(self.damaged["reason"], self.damaged["position"], str(log_path))

    def skipped(self, log_path: str | os.PathLike[str]) -> Skipped | None:
        """The batches too large to inflate that the scan of the segment at ``log_path`` went past (valid
        data: the entries of the records after them are in the index), or None."""
        s = self._skipped
        if s is None:
            return None
        return Skipped(s["first"], s["last"], said_again(s["reason"], s["position"], str(log_path)))

    @classmethod
    def open(cls, file: BinaryIO | int, key: list[Any], path: Path | None = None, *, temporary: bool = False,
             budget: HandleBudget | None = None) -> SegmentKeyIndex:
        """Check the file's head (its key must be ``key``), size and checksum; DamagedIndex otherwise.
        ``file``: a descriptor, which the index owns from now on (closed here when a check fails), or
        a file object, whose descriptor the index duplicates (the caller closes the file)."""
        if isinstance(file, int):
            fd = file
        else:
            source: BinaryIO = file
            fd = retrying_open(lambda: os.dup(source.fileno()))
        try:
            return cls._checked(fd, key, path, temporary, budget)
        except BaseException:
            os.close(fd)
            raise

    @classmethod
    def _checked(cls, fd: int, key: list[Any], path: Path | None, temporary: bool,
                 budget: HandleBudget | None) -> SegmentKeyIndex:
        size = os.fstat(fd).st_size
        first = os.pread(fd, HEAD_SIZE, 0)
        if len(first) < HEAD_SIZE or not first.startswith(MAGIC):
            raise DamagedIndex("not a key index")
        (length,) = _LEN.unpack_from(first, len(MAGIC))
        start = len(MAGIC) + _LEN.size
        try:
            head = json.loads(first[start : start + length])
            data_size = int(head["data_size"])
            blocks = int(head["blocks"])
        except (ValueError, KeyError, TypeError) as exc:
            raise DamagedIndex(f"unreadable head: {exc}") from None
        if head.get("version") != FORMAT_VERSION or head.get("kafkafs") != __version__ or head.get("key") != key:
            raise DamagedIndex("stale: written for another file, version or kafkafs")
        if blocks != -(-data_size // BLOCK) or size != HEAD_SIZE + data_size + 4 * blocks + _DIGEST:
            raise DamagedIndex("its size does not match its head")
        tail = os.pread(fd, 4 * blocks + _DIGEST, HEAD_SIZE + data_size)
        if hashlib.blake2b(first + tail[:-_DIGEST], digest_size=_DIGEST).digest() != tail[-_DIGEST:]:
            raise DamagedIndex("checksum mismatch")
        crcs = array("I")
        crcs.frombytes(tail[:-_DIGEST])
        return cls(fd, head, crcs, path, temporary=temporary, budget=budget)

    @property
    def file_id(self) -> tuple[int, int, int]:
        """The file's device, inode and size when it was opened."""
        return self._file_id

    @property
    def pinned(self) -> bool:
        """An index without a path keeps its descriptor (it could not open its file again)."""
        return self.path is None and not self._closed

    def release_handles(self) -> None:
        """Give the descriptor back (the handle budget; lock-free): it closes once no read holds it."""
        if self.path is not None:
            self._handle = None

    def _fd_handle(self) -> FileHandle:
        """The descriptor, opened again by the path when it was given back; hold it while reading."""
        handle = self._handle
        if handle is not None:
            return handle
        with self._lock:
            handle = self._handle
            if handle is None:
                if self._closed or self.path is None:
                    raise OSError(errno.EBADF, f"the key index {self.path or ''} is closed")
                path = self.path
                try:
                    fd = retrying_open(lambda: os.open(path, os.O_RDONLY | os.O_CLOEXEC))
                except FileNotFoundError:
                    raise DamagedIndex(f"{path} is gone", self) from None
                st = os.fstat(fd)
                if (st.st_dev, st.st_ino, st.st_size) != self._file_id:
                    os.close(fd)
                    raise DamagedIndex(f"{path} is another file since it was opened", self)
                handle = self._handle = FileHandle(fd)
        self._budget.opened(self)
        return handle

    def close(self) -> None:
        """Close the file now (reads after it fail with EBADF, never from another file); a temporary
        one is removed."""
        with self._lock:
            self._closed = True
            self._handle = None
        self._budget.forget(self)
        if self._remove is not None:
            self._remove()

    def read(self, position: int, size: int) -> bytes:
        """``size`` bytes of data from ``position``, each 4 KiB block checked; DamagedIndex when one fails."""
        if size <= 0:
            return b""
        first = position // BLOCK
        last = (position + size - 1) // BLOCK
        start = first * BLOCK
        handle = self._fd_handle()  # held in a local for the read: a release meanwhile cannot close it
        raw = os.pread(handle.fd, (last + 1) * BLOCK - start, HEAD_SIZE + start)
        data_size = self.head["data_size"]
        crcs = self._crcs
        view = memoryview(raw)
        for b in range(first, last + 1):
            lo = (b - first) * BLOCK
            hi = min(lo + BLOCK, data_size - start)
            if b >= len(crcs) or hi > len(raw) or crc32c(view[lo:hi]) != crcs[b]:
                raise DamagedIndex(f"{self.path or 'a temporary key index'}: block {b} fails its check", self)
        at = position - start
        return raw[at : at + size]

    def _fanout(self, i: int, j: int) -> tuple[int, int]:
        """Entry indexes where fanout buckets ``i`` and ``j`` start."""
        if j == i + 1:
            a, b = struct.unpack("<QQ", self.read(self._fanout_at + 8 * i, 16))
            return a, b
        return (_U64.unpack(self.read(self._fanout_at + 8 * i, 8))[0],
                _U64.unpack(self.read(self._fanout_at + 8 * j, 8))[0])

    def entry_bytes(self, lo: int, hi: int) -> bytes:
        """Entries ``lo:hi`` (packed)."""
        return self.read(self._entries_at + lo * ENTRY_SIZE, (hi - lo) * ENTRY_SIZE) if hi > lo else b""

    def find(self, h1: int, h2: int) -> list[tuple[int, int]]:
        """``[(rel, flags)]`` of the hash, by rel."""
        if not self.entries:
            return []
        bucket = h1 >> (64 - self.bits) if self.bits else 0
        lo, hi = self._fanout(bucket, bucket + 1)
        return find_entries(self.entry_bytes(lo, hi), h1, h2)

    def slice(self, prefix: int, bits: int) -> bytes:
        """The entries whose h1 starts with the ``bits``-long ``prefix`` (sorted)."""
        if not self.entries:
            return b""
        if bits <= self.bits:
            shift = self.bits - bits
            lo, hi = self._fanout(prefix << shift, (prefix + 1) << shift)
            return self.entry_bytes(lo, hi)
        coarse = prefix >> (bits - self.bits)
        lo, hi = self._fanout(coarse, coarse + 1) if self.bits else (0, self.entries)
        data = self.entry_bytes(lo, hi)
        heads = [ENTRY.unpack_from(data, i)[0] >> (64 - bits) for i in range(0, len(data), ENTRY_SIZE)]
        a, b = bisect_left(heads, prefix), bisect_left(heads, prefix + 1)
        return data[a * ENTRY_SIZE : b * ENTRY_SIZE]

    def transactional_batches(self) -> list[tuple[int, int, int]]:
        """``(base offset, last offset, producer id)`` of each transactional data batch, by offset."""
        cached = self._txn_cache
        if cached is None:
            raw = self.read(self._txns_at, self.txns * TXN.size)
            cached = [TXN.unpack_from(raw, i) for i in range(0, len(raw), TXN.size)]
            with self._lock:
                self._txn_cache = cached
        return cached

    def long_key(self, digest: bytes) -> tuple[int, int] | None:
        """``(h1, h2)`` of the long key whose SHA-256 is ``digest``, if the segment has it."""
        lo, hi = 0, self.longs
        size = LONG.size
        while lo < hi:
            mid = (lo + hi) // 2
            sha, h1, h2 = LONG.unpack(self.read(self._longs_at + mid * size, size))
            if sha == digest:
                return h1, h2
            if sha < digest:
                lo = mid + 1
            else:
                hi = mid
        return None


# -------------------------------------------------------------------------------------------- writing


class BlockWriter:
    """Writes data after the head, a CRC-32C per 4 KiB block."""

    def __init__(self, file: BinaryIO) -> None:
        self.file = file
        self.crcs = array("I")
        self.size = 0
        self._pending = bytearray()
        file.seek(HEAD_SIZE)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.size += len(data)
        pending = self._pending
        pending += data
        whole = len(pending) - len(pending) % BLOCK
        if whole:
            view = memoryview(pending)
            for at in range(0, whole, BLOCK):
                self.crcs.append(crc32c(view[at : at + BLOCK]))
            self.file.write(view[:whole])
            view.release()
            del pending[:whole]

    def finish(self, head: dict[str, Any]) -> None:
        if self._pending:
            self.crcs.append(crc32c(self._pending))
            self.file.write(self._pending)
            self._pending = bytearray()
        head = dict(head, data_size=self.size, blocks=len(self.crcs))
        body = json.dumps(head, separators=(",", ":")).encode()
        first = MAGIC + _LEN.pack(len(body)) + body
        if len(first) > HEAD_SIZE:
            raise ValueError("key index head too large")
        first += bytes(HEAD_SIZE - len(first))
        table = self.crcs.tobytes()
        self.file.write(table)
        self.file.write(hashlib.blake2b(first + table, digest_size=_DIGEST).digest())
        self.file.seek(0)
        self.file.write(first)
        self.file.flush()


