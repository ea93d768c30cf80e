"""A pass-through FUSE file system that fails chosen reads or writes with EIO, as a failing disk does.

device-mapper (dm-error, dm-flakey) is not in this kernel, so the fault tests put this layer under
LOGDIR instead: ``python -m tests.faults.eiofs SOURCE MOUNTPOINT RULES`` mounts ``SOURCE`` at
``MOUNTPOINT`` and passes every operation through, except that a read (or write) of a file whose name
ends with a rule's ``name`` that touches bytes at or past the rule's ``from`` fails with the rule's
errno (EIO by default). ``RULES`` is a JSON file, read again on every open, read and write, so a test
changes the faults while the file system runs::

    [{"name": "00000000000000000100.log", "from": 3000, "op": "read"}]

``op`` is ``read``, ``write`` or ``fsync``; ``"from": 0`` fails every such call; ``"to"`` (optional) ends the
failing bytes there (a bad stretch in the middle of a file: a call must touch ``[from, to)`` to fail). Every failure is
counted in ``RULES.hits`` (one line per failure: op, name, offset). Run it as a child process (the
fixture :func:`eio_layer` in tests/faults/conftest.py does) and unmount with ``fusermount3 -u``; SIGTERM
unmounts too. Inodes are paths: a rename keeps the inode of its target name, enough for a log
directory (the files kafkafs renames are closed when they are).
"""

from __future__ import annotations

import errno
import json
import os
import signal
import sys
import threading
from pathlib import Path

import pyfuse3
import trio

ERRNOS = {"EIO": errno.EIO, "ENOSPC": errno.ENOSPC}


class Rules:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.hits = path.with_name(path.name + ".hits")
        self._lock = threading.Lock()

    def fault(self, op: str, name: str, offset: int, size: int) -> int | None:
        try:
            rules = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        for rule in rules:
            if (rule.get("op", "read") == op and name.endswith(rule["name"]) and offset + size > rule.get("from", 0)
                    and offset < rule.get("to", offset + 1)):
                with self._lock, open(self.hits, "a") as f:
                    f.write(f"{op} {name} {offset}\n")
                return ERRNOS.get(rule.get("errno", "EIO"), errno.EIO)
        return None


class PassThrough(pyfuse3.Operations):
    enable_writeback_cache = False

    def __init__(self, source: Path, rules: Rules) -> None:
        super().__init__()
        self.rules = rules
        self._paths: dict[int, str] = {pyfuse3.ROOT_INODE: str(source)}
        self._inos: dict[str, int] = {str(source): pyfuse3.ROOT_INODE}
        self._next = pyfuse3.ROOT_INODE + 1
        self._fds: dict[int, tuple[int, str]] = {}

    # -- inodes are paths

    def _ino(self, path: str) -> int:
        ino = self._inos.get(path)
        if ino is None:
            ino = self._next
            self._next += 1
            self._inos[path] = ino
            self._paths[ino] = path
        return ino

    def _path(self, ino: int) -> str:
        try:
            return self._paths[ino]
        except KeyError:
            raise pyfuse3.FUSEError(errno.ENOENT) from None

    def _attr(self, path: str, ino: int | None = None) -> pyfuse3.EntryAttributes:
        try:
            st = os.lstat(path)
        except OSError as exc:
            raise pyfuse3.FUSEError(exc.errno) from None
        entry = pyfuse3.EntryAttributes()
        for name in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_rdev", "st_size", "st_atime_ns", "st_mtime_ns",
                     "st_ctime_ns"):
            setattr(entry, name, getattr(st, name))
        entry.st_blksize = 4096
        entry.st_blocks = st.st_blocks
        entry.st_ino = ino if ino is not None else self._ino(path)
        entry.generation = 0
        entry.entry_timeout = 0
        entry.attr_timeout = 0
        return entry

    @staticmethod
    def _os(fn, *args, **kw):
        try:
            return fn(*args, **kw)
        except OSError as exc:
            raise pyfuse3.FUSEError(exc.errno or errno.EIO) from None

    # -- names

    async def lookup(self, parent_inode, name, ctx=None):
        path = os.path.join(self._path(parent_inode), os.fsdecode(name))
        return self._attr(path)

    async def getattr(self, inode, ctx=None):
        return self._attr(self._path(inode), inode)

    async def setattr(self, inode, attr, fields, fh, ctx):
        path = self._path(inode)
        if fields.update_size:
            if fh is not None and fh in self._fds:
                self._os(os.ftruncate, self._fds[fh][0], attr.st_size)
            else:
                self._os(os.truncate, path, attr.st_size)
        if fields.update_mode:
            self._os(os.chmod, path, attr.st_mode & 0o7777)
        if fields.update_mtime or fields.update_atime:
            st = self._os(os.lstat, path)
            atime = attr.st_atime_ns if fields.update_atime else st.st_atime_ns
            mtime = attr.st_mtime_ns if fields.update_mtime else st.st_mtime_ns
            self._os(os.utime, path, None, ns=(atime, mtime))
        return self._attr(path, inode)

    async def readlink(self, inode, ctx):
        return os.fsencode(self._os(os.readlink, self._path(inode)))

    async def opendir(self, inode, ctx):
        return inode

    async def readdir(self, fh, start_id, token):
        path = self._path(fh)
        names = sorted(self._os(os.listdir, path))
        for i, name in enumerate(names[start_id:], start_id):
            try:
                attr = self._attr(os.path.join(path, name))
            except pyfuse3.FUSEError:
                continue
            if not pyfuse3.readdir_reply(token, os.fsencode(name), attr, i + 1):
                return

    async def releasedir(self, fh):
        pass

    async def mkdir(self, parent_inode, name, mode, ctx):
        path = os.path.join(self._path(parent_inode), os.fsdecode(name))
        self._os(os.mkdir, path, mode)
        return self._attr(path)

    async def rmdir(self, parent_inode, name, ctx):
        self._os(os.rmdir, os.path.join(self._path(parent_inode), os.fsdecode(name)))

    async def unlink(self, parent_inode, name, ctx):
        self._os(os.unlink, os.path.join(self._path(parent_inode), os.fsdecode(name)))

    async def rename(self, parent_old, name_old, parent_new, name_new, flags, ctx):
        old = os.path.join(self._path(parent_old), os.fsdecode(name_old))
        new = os.path.join(self._path(parent_new), os.fsdecode(name_new))
        self._os(os.rename, old, new)
        ino = self._inos.pop(old, None)
        if ino is not None:  # the inode follows its file; the target name's old inode is gone
            gone = self._inos.pop(new, None)
            if gone is not None:
                self._paths.pop(gone, None)
            self._inos[new] = ino
            self._paths[ino] = new

    async def symlink(self, parent_inode, name, target, ctx):
        path = os.path.join(self._path(parent_inode), os.fsdecode(name))
        self._os(os.symlink, os.fsdecode(target), path)
        return self._attr(path)

    async def statfs(self, ctx):
        st = self._os(os.statvfs, self._paths[pyfuse3.ROOT_INODE])
        out = pyfuse3.StatvfsData()
        for name in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_favail"):
            setattr(out, name, getattr(st, name))
        out.f_namemax = 255
        return out

    # -- files

    async def open(self, inode, flags, ctx):
        path = self._path(inode)
        fd = self._os(os.open, path, flags & ~os.O_CREAT)
        self._fds[fd] = (fd, path)
        return pyfuse3.FileInfo(fh=fd)  # page cache: the indexes are memory-mapped

    async def create(self, parent_inode, name, mode, flags, ctx):
        path = os.path.join(self._path(parent_inode), os.fsdecode(name))
        fd = self._os(os.open, path, flags | os.O_CREAT, mode)
        self._fds[fd] = (fd, path)
        return pyfuse3.FileInfo(fh=fd), self._attr(path)

    async def read(self, fh, off, size):
        fd, path = self._fds[fh]
        failure = self.rules.fault("read", path, off, size)
        if failure is not None:
            raise pyfuse3.FUSEError(failure)
        return self._os(os.pread, fd, size, off)

    async def write(self, fh, off, buf):
        fd, path = self._fds[fh]
        failure = self.rules.fault("write", path, off, len(buf))
        if failure is not None:
            raise pyfuse3.FUSEError(failure)
        return self._os(os.pwrite, fd, buf, off)

    async def fsync(self, fh, datasync):
        fd, path = self._fds[fh]
        failure = self.rules.fault("fsync", path, 0, 1)
        if failure is not None:
            raise pyfuse3.FUSEError(failure)
        self._os(os.fdatasync if datasync else os.fsync, fd)

    async def flush(self, fh):
        pass

    async def release(self, fh):
        entry = self._fds.pop(fh, None)
        if entry is not None:
            os.close(entry[0])


def main(argv: list[str]) -> int:
    source, target, rules = Path(argv[0]).resolve(), argv[1], Path(argv[2])
    ops = PassThrough(source, Rules(rules))
    options = set(pyfuse3.default_options)
    options |= {"fsname=eiofs", "allow_other"} if os.getuid() == 0 else {"fsname=eiofs"}
    options.discard("default_permissions")
    pyfuse3.init(ops, target, options)

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            async def serve() -> None:
                await pyfuse3.main()
                nursery.cancel_scope.cancel()  # unmounted from outside (fusermount3 -u): no signal will come

            nursery.start_soon(serve)
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    pyfuse3.terminate()
                    break

    try:
        trio.run(run)
    finally:
        pyfuse3.close(unmount=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
