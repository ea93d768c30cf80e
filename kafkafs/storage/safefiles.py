"""Link-safe file access inside a log directory: the one place that opens, lists and checks files.

A log directory is often writable by more people than the files a root process could reach through
it. A symbolic link ``orders-0/00000000000000000005.log -> /etc/shadow`` must never make kafkafs read,
truncate or rename the target. So, inside a partition folder:

- every file is opened with ``O_NOFOLLOW`` (:func:`open_file`): a link there fails with
  :class:`~kafkafs.errors.UnsafeFileError` instead of being followed, even one created after a check;
- writers refuse a partition folder holding any link or other non-regular entry (or a folder named as
  one of its files) up front (:func:`check_partition_folder`), with one line naming it;
- readers list only regular files (:func:`regular_files`), and a link is skipped with a warning; a
  folder another process is adding files to is listed by :func:`regular_files_in_order`.

The log directory itself and the partition folders may be links (operators use them for mounts and
moves): readers follow them; writers follow a partition folder's link only when it resolves inside the
log directory (SPEC §4: nothing outside LOGDIR changes). What is inside a partition folder is checked
with ``lstat``. Renames and unlinks act on
the directory entry, never on a link's target, so they need no special care beyond the refusal.

Owners: a broker runs as its own user, and a file it cannot open (a root-owned active segment,
checkpoint or snapshot) takes its log directory offline. So when kafkafs runs as root, a file or folder
it creates takes the owner and group of the folder it is created in (as ``chown --reference`` would:
:func:`take_folder_owner`, applied by :func:`open_file` and :func:`make_dir` to what they create), and a
file :func:`write_atomically` replaces keeps the replaced file's owner, group and mode (mode for anyone).
Other users cannot give files away: their files are theirs, as any program's.

Thread safety: the functions keep no state; the warning sets are guarded by a lock.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import stat
import threading
from collections.abc import Callable, Collection
from pathlib import Path

from ..errors import InvalidName, ReadOnlyError, UnsafeFileError, doing, tag_os_error
from .handles import retrying_open
from .names import is_partition_file_name, parse_partition_dir_name

__all__ = [
    "O_NOFOLLOW",
    "open_file",
    "read_regular_file",
    "regular_entry",
    "regular_files",
    "regular_files_in_order",
    "regular_file_stat",
    "unsafe_entries",
    "check_partition_folder",
    "is_regular_file",
    "is_dir",
    "is_link",
    "write_atomically",
    "reserve",
    "require_writable",
    "fsync_directory",
    "folder_identity",
    "take_folder_owner",
    "make_dir",
]

log = logging.getLogger("kafkafs.storage")

O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)

_warned: set[str] = set()
_warned_guard = threading.Lock()


def fsync_directory(path: str | os.PathLike[str]) -> None:
    """fsync a folder, so that files created, renamed or deleted in it stay so after a power loss."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


#: The errors of a stat that mean "not there" to pathlib's ``is_dir`` and ``is_symlink`` (others are raised).
_NOT_THERE = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP})


def _mode(path: str, follow: bool) -> int | None:
    """The file type bits of ``path`` (through a last link when ``follow``), None where nothing is
    (pathlib's ``is_dir``/``is_symlink`` answers: other OS errors raised)."""
    try:
        return (os.stat(path) if follow else os.lstat(path)).st_mode
    except OSError as exc:
        if exc.errno not in _NOT_THERE:
            raise
        return None
    except ValueError:
        return None


def file_mode(path: str, *, follow: bool) -> int | None:
    """The file type and mode bits of ``path`` (``os.stat``'s ``st_mode``; through a last link when
    ``follow``), None where nothing is; other OS errors raised, as :func:`is_dir` and :func:`is_link`:
    one look answers both (``follow=False``: a link's own mode)."""
    return _mode(path, follow)


def is_dir(path: str) -> bool:
    """``Path(path).is_dir()`` (the same answer and errors) without making a Path: the paths of a partition's
    open (issue 25: pathlib was a good part of the 0.2-0.5 ms each of 200 partitions cost a mount)."""
    mode = _mode(path, True)
    return mode is not None and stat.S_ISDIR(mode)


def is_link(path: str) -> bool:
    """``Path(path).is_symlink()`` without making a Path (see :func:`is_dir`)."""
    mode = _mode(path, False)
    return mode is not None and stat.S_ISLNK(mode)


def folder_identity(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """A folder's device and inode number (None when it is gone): which folder a name stands for."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _first_time(seen: set[str], key: str) -> bool:
    """Whether ``key`` is new to ``seen`` (one of the warning sets), adding it: each warning once."""
    with _warned_guard:
        if key in seen:
            return False
        seen.add(key)
        return True


def _warn_once(path: str, what: str) -> None:
    if _first_time(_warned, path):
        log.warning("%s is %s, not a regular file: skipped, never followed", path, what)


def said_by_caller(path: str) -> None:
    """``path`` (a name :func:`regular_entry` skips) is said by the caller in its own words (consume: the
    records of a segment ``.log`` that is not a regular file are left out, review27 R27-8): no warning of
    it from here."""
    with _warned_guard:
        _warned.add(path)


def kind_of(path: str) -> str:
    """What ``path`` is, for a line that says it is not a regular file ("a special file", "a directory",
    "a symbolic link"); "gone" when nothing is there."""
    mode = _mode(path, False)
    return "gone" if mode is None else _kind(mode)


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "a special file"


def require_writable(what: str | os.PathLike[str], writable: bool, closed: bool) -> None:
    """ReadOnlyError, naming ``what``, unless it is open for writing and not closed yet."""
    if not writable:
        raise ReadOnlyError(f"{what} is open read-only")
    if closed:
        raise ReadOnlyError(f"{what} is closed")


def _opening(flags: int) -> str:
    """What an ``open`` with ``flags`` is doing, for the error line (:func:`~kafkafs.errors.describe_os_error`)."""
    if flags & os.O_CREAT and flags & os.O_EXCL:
        return "create {path}"
    if flags & (os.O_WRONLY | os.O_RDWR):
        return "open {path} for writing"
    return "read {path}"


def _as_root() -> bool:
    """Whether files this process creates would be root's (it may give them to another owner)."""
    return hasattr(os, "geteuid") and os.geteuid() == 0


_owner_warned: set[str] = set()


def take_folder_owner(fd: int, path: str | os.PathLike[str]) -> None:
    """When running as root: give the file or folder just created at ``path`` (open as ``fd``) the owner
    and group of the folder that holds it (module docstring: a broker running as its own user must be able
    to open what kafkafs created in its log directory). Anyone else: nothing. A file system that refuses
    (a root-squashing NFS) is warned of once per folder; the write goes on."""
    if not _as_root():
        return
    folder = os.path.dirname(os.path.abspath(os.fspath(path)))
    try:
        want = os.stat(folder)
        have = os.fstat(fd)
        if (have.st_uid, have.st_gid) != (want.st_uid, want.st_gid):
            os.fchown(fd, want.st_uid, want.st_gid)
    except OSError as exc:
        if _first_time(_owner_warned, folder):
            log.warning("%s: cannot give it the owner of %s (%s); it stays root's", path, folder, exc.strerror or exc)


def make_dir(path: str | os.PathLike[str], *, parents: bool = False, exist_ok: bool = False) -> None:
    """``Path(path).mkdir(parents=..., exist_ok=...)``, where every folder created takes the owner of the
    folder that holds it when running as root (:func:`take_folder_owner`)."""
    path = os.fspath(path)
    parent = os.path.dirname(os.path.abspath(path))
    if parents and not os.path.isdir(parent):
        make_dir(parent, parents=True, exist_ok=True)
    try:
        os.mkdir(path)
    except FileExistsError:
        if not exist_ok or not os.path.isdir(path):
            raise
        return
    if _as_root():
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | O_NOFOLLOW)
        try:
            take_folder_owner(fd, path)
        finally:
            os.close(fd)


def open_file(path: str | os.PathLike[str], flags: int, mode: int = 0o644, *, doing: str | None = None,
              follow: bool = False) -> int:
    """``os.open`` that never follows a symbolic link as the last component (``O_NOFOLLOW``) and refuses
    anything but a regular file: :class:`UnsafeFileError` for a link, a FIFO, a device or a directory.
    No descriptor free (EMFILE, ENFILE): the budgets give theirs back and it is tried once more
    (:func:`~.handles.retrying_open`).
    ``FileNotFoundError`` and other ``OSError`` pass through, noting what the open was for (``doing``,
    by default read, open for writing or create, from ``flags``).
    Never blocks on a FIFO or a device (``O_NONBLOCK`` until the descriptor is known to be a regular file).
    ``follow``: a link is followed (LOGDIR's own files, which may be links like LOGDIR itself).
    A file it creates (``O_CREAT``) takes its folder's owner when running as root (:func:`take_folder_owner`);
    a file that was there keeps its own."""
    if flags & os.O_CREAT and not flags & os.O_EXCL and _as_root():
        # which of the two it is must be known: a file that was there is opened, a new one created
        # (O_EXCL) and given away; a file that comes or goes between the two is tried again
        for _ in range(3):
            try:
                return _open_file(path, flags & ~os.O_CREAT, mode, doing, follow)
            except FileNotFoundError:
                pass
            try:
                return _open_file(path, flags | os.O_EXCL, mode, doing, follow)
            except FileExistsError:
                continue
    return _open_file(path, flags, mode, doing, follow)


def _open_file(path: str | os.PathLike[str], flags: int, mode: int, doing: str | None, follow: bool) -> int:
    nofollow = 0 if follow else O_NOFOLLOW
    try:
        # O_NONBLOCK: opening a FIFO with no writer (or a device) never blocks; cleared below once the
        # descriptor is known to be a regular file (which ignores it anyway)
        fd = retrying_open(lambda: os.open(path, flags | nofollow | _O_CLOEXEC | _O_NONBLOCK, mode))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeFileError(f"{path} is a symbolic link; kafkafs never reads or writes through one") from None
        if exc.errno in (errno.ENXIO, errno.EISDIR):  # a socket, a FIFO without writer opened O_WRONLY...
            raise UnsafeFileError(f"{path} is not a regular file") from None
        tag_os_error(exc, doing or _opening(flags), path)
        raise
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UnsafeFileError(f"{path} is {_kind(st.st_mode)}, not a regular file")
    if _O_NONBLOCK and not flags & _O_NONBLOCK:
        os.set_blocking(fd, True)
    if flags & os.O_CREAT and flags & os.O_EXCL:
        take_folder_owner(fd, path)
    return fd


def read_regular_file(path: str | os.PathLike[str], *, follow: bool = False) -> bytes:
    """The bytes of ``path`` when it is a regular file (:func:`open_file`: never through a link, never
    blocking on a FIFO or device): :class:`UnsafeFileError` otherwise, ``OSError`` as ``os.open``.
    ``follow``: through a link too (LOGDIR's own files)."""
    fd = open_file(path, os.O_RDONLY, follow=follow)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def is_regular_file(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` itself (``lstat``: a link is not followed) is a regular file."""
    return regular_file_stat(path) is not None


def regular_file_stat(path: str | os.PathLike[str]) -> os.stat_result | None:
    """``lstat(path)`` when ``path`` itself (a link is not followed) is a regular file, else None: for a
    caller that wants the file's inode too, in one system call."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st if stat.S_ISREG(st.st_mode) else None


def unsafe_entries(directory: str | os.PathLike[str]) -> list[str]:
    """Names in ``directory`` that are neither regular files nor plain directories (links, FIFOs,
    sockets, devices), and directories named as a file of a partition folder (a writer would open,
    truncate or rename that name as its file), sorted. A missing folder has none."""
    def unsafe(entry: os.DirEntry[str]) -> bool:
        if entry.is_symlink() or not (entry.is_file(follow_symlinks=False) or entry.is_dir(follow_symlinks=False)):
            return True
        return entry.is_dir(follow_symlinks=False) and is_partition_file_name(entry.name)

    return _names_where(directory, unsafe)


def hard_linked_files(directory: str | os.PathLike[str]) -> list[str]:
    """Regular files in ``directory`` that another name shares (``st_nlink`` above 1: a ``cp -al`` or
    ``rsync --link-dest`` copy), sorted: a write there in place changes them in the other directory
    too. A missing folder has none."""
    return _names_where(
        directory, lambda entry: entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_nlink > 1
    )


def _names_where(directory: str | os.PathLike[str], keep: Callable[[os.DirEntry[str]], bool]) -> list[str]:
    """The sorted names of ``directory``'s entries that ``keep`` takes; an entry that vanishes or cannot
    be stat'ed meanwhile is left out, and a missing folder has none."""
    out = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                try:
                    if keep(entry):
                        out.append(entry.name)
                except OSError:
                    continue
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(out)


def check_partition_folder(directory: str | os.PathLike[str]) -> None:
    """Refuse a partition folder that a writer must not touch: :class:`UnsafeFileError` with one line
    when it holds a symbolic link, any other non-regular file or a folder named as one of its files
    (:func:`unsafe_entries`), since writing, truncating or
    renaming there could reach outside the log directory, when it is itself a link that leads
    outside the log directory that holds it (or to another partition's folder), or when its files
    have other hard links (:func:`hard_linked_files`)."""
    folder = Path(directory)
    if folder.is_symlink():
        # a linked partition folder may be read (SPEC §3), but a writer never changes anything
        # outside LOGDIR (SPEC §4): the link must resolve inside the log directory that holds it
        logdir = os.path.realpath(folder.parent)
        target = os.path.realpath(folder)
        if os.path.commonpath([logdir, target]) != logdir or target == logdir:
            raise UnsafeFileError(
                f"{directory}: refusing to write: it is a link to {target}, outside the log directory; "
                "kafkafs never changes anything outside LOGDIR"
            )
        if _names_another_partition(folder.name, os.path.basename(target)):
            raise UnsafeFileError(
                f"{directory}: refusing to write: it is a link to {target}, the folder of another partition; "
                "its records would go into that partition's log"
            )
    bad = unsafe_entries(directory)
    if bad:
        shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        raise UnsafeFileError(
            f"{directory}: refusing to write: it holds {len(bad)} symbolic link(s), special file(s) or folder(s) "
            f"named as its files ({shown}); kafkafs never writes through links"
        )
    shared = hard_linked_files(directory)
    if shared:
        shown = ", ".join(shared[:3]) + (f" and {len(shared) - 3} more" if len(shared) > 3 else "")
        raise UnsafeFileError(
            f"{directory}: refusing to write: {len(shared)} of its files have another hard link ({shown}): "
            "another directory shares them (a cp -al or rsync --link-dest copy) and would change too; "
            "copy it with cp -a"
        )


def _names_another_partition(name: str, target: str) -> bool:
    """Whether a partition folder ``name`` that is a link leads to the folder of another partition."""
    if target == name:
        return False
    try:
        parse_partition_dir_name(target)
    except InvalidName:  # a folder of no partition (a link's target may be named anyhow)
        return False
    return True


def regular_entry(entry: os.DirEntry[str], *, warn: bool = True) -> bool:
    """Whether a listed entry is a regular file (``lstat``: a link is not followed). A link, a special
    file or a folder named as a partition folder's file is skipped with a warning once per path unless
    ``warn`` is False; other folders quietly."""
    try:
        if entry.is_file(follow_symlinks=False):
            return True
        if warn and (not entry.is_dir(follow_symlinks=False) or is_partition_file_name(entry.name)):
            _warn_once(entry.path, _kind(entry.stat(follow_symlinks=False).st_mode))
    except OSError:
        pass
    return False


def regular_files(directory: str | os.PathLike[str], *, warn: bool = True) -> list[str]:
    """The names of the regular files in ``directory`` (``lstat``: links are not followed), unsorted;
    the others are skipped as :func:`regular_entry` says."""
    try:
        with os.scandir(directory) as entries:
            return [entry.name for entry in entries if regular_entry(entry, warn=warn)]
    except (FileNotFoundError, NotADirectoryError):
        return []


#: At most this many listings of a folder that keeps showing new files (:func:`regular_files_in_order`).
LISTINGS = 10


def regular_files_in_order(
    directory: str | os.PathLike[str], key: Callable[[str], int | None], known: Collection[int]
) -> list[str]:
    """:func:`regular_files` of a folder another process adds files to in the order of ``key(name)`` (a
    broker creates its segments in base offset order), with no file missing below the highest new key.

    A listing is no snapshot: a name created while readdir runs may be missed while a name created after
    it is seen (a broker that rolled twice meanwhile: its newest segment listed, the one before it not),
    and a reader would take the newest for the one that follows the last segment it knew. So when a
    listing shows keys not in ``known``, the folder is listed again, until a listing shows none past the
    highest new key of the listing before it: every name created before a listing began is in that
    listing, and so, by the order, is every name whose key is below one the listing before it showed.
    Should the folder not settle in :data:`LISTINGS` listings, names past what is sure are left for the
    next look."""

    def highest_new(names: list[str]) -> int | None:
        return max((k for k in map(key, names) if k is not None and k not in known), default=None)

    names = regular_files(directory)
    top = highest_new(names)
    sure: int | None = None  # every new key up to this one is in ``names``
    for _ in range(LISTINGS - 1):
        if top is None or (sure is not None and top <= sure):
            return names
        sure = top
        names = regular_files(directory)
        top = highest_new(names)
    if top is None or sure is None or top <= sure:
        return names
    return [name for name in names if (k := key(name)) is None or k in known or k <= sure]


def write_atomically(path: str | os.PathLike[str], data: bytes, *, fsync_dir: bool = True) -> None:
    """Write ``path.tmp`` (created afresh, never through a link), fsync it, rename it over ``path`` and
    fsync the folder (Kafka's checkpoint way). A rename replaces a link at ``path`` itself, not its
    target. The new file keeps the mode of the file it replaces, and its owner and group when running
    as root; a new one takes its folder's (:func:`take_folder_owner`). A failed write removes its
    ``.tmp``."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        os.unlink(tmp)  # a leftover (or a planted link): the entry goes, never its target
    except FileNotFoundError:
        pass
    fd = open_file(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        try:
            with doing("write {path}", tmp):
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                _keep_owner_and_mode(fd, path)
                os.fsync(fd)
        finally:
            os.close(fd)
        with doing("rename {path}"):
            os.replace(tmp, path)
    except BaseException:  # a full disk: no half-written .tmp left behind (review23 R23-7)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if fsync_dir:
        fd = os.open(path.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _keep_owner_and_mode(fd: int, replaced: Path) -> None:
    """Give the open file ``fd`` the mode of the regular file at ``replaced`` (when there is one), and its
    owner and group when running as root."""
    try:
        old = os.lstat(replaced)
    except OSError:
        return
    if not stat.S_ISREG(old.st_mode):
        return
    try:
        have = os.fstat(fd)
        if stat.S_IMODE(have.st_mode) != stat.S_IMODE(old.st_mode):
            os.fchmod(fd, stat.S_IMODE(old.st_mode))
        if _as_root() and (have.st_uid, have.st_gid) != (old.st_uid, old.st_gid):
            os.fchown(fd, old.st_uid, old.st_gid)
    except OSError as exc:  # a file system that refuses (a root-squashing NFS): said once, the write goes on
        if _first_time(_owner_warned, os.fspath(replaced.parent)):
            log.warning("%s: cannot keep its owner and mode (%s)", replaced, exc.strerror or exc)


def reserve(path: str | os.PathLike[str], reserved: int, needed: int, limit: int) -> int:
    """Reserve the blocks of a writable memory-mapped file from ``reserved`` to past ``needed`` (a
    page at a time, up to ``limit``); return the new reserved length.

    A preallocated index is sparse, and a page the disk has no room for is a SIGBUS when an entry is
    written through the map (the process dies, a mount's daemon with it). Reserved first, a full disk is
    an ``OSError`` (ENOSPC) at the append instead. File systems that cannot reserve stay sparse."""
    end = min(limit, max(needed, reserved + mmap.PAGESIZE))
    fd = open_file(path, os.O_RDWR)
    try:
        os.posix_fallocate(fd, reserved, end - reserved)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP)):
            tag_os_error(exc, "reserve space in {path}", path)
            raise
    finally:
        os.close(fd)
    return end
