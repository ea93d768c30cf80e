"""The binding's floor under ``cat MNT/*/records.jsonl``: a bare pyfuse3 + trio file system that serves
``--files`` files, each the same bytes held in memory (one partition's ``records.jsonl``, rendered once
at start), as the mount answers a read of rendered bytes on its loop (a memoryview slice: no render, no
copy, no worker thread). It sets the mount's read-ahead as the mount does (1 MiB, when allowed), prints
``READY <bytes a file>`` once it answers, and serves until unmounted (``fusermount3 -u MNT``).

``--distinct``: every file its own copy of those bytes, made at start (``--files`` x the file's size of
memory), so each reply copies bytes that no cache holds, as the mount's replies do (its bytes were
rendered moments before on another core). One buffer served again and again stays in the CPU's cache,
which no file system serving fresh bytes gets: the reply's copy into the page cache then costs
about half as much (issue 25, speed13).

    python bench/memfs.py LOGFILE TOPIC PARTITION MNT [--files 200] [--distinct]

Used by ``bench/many.py``'s read rows; run alone, ``cat MNT/f0 MNT/f1 ... > /dev/null`` reads it.
"""

from __future__ import annotations

import argparse
import errno
import os
import stat
import sys
from pathlib import Path

import pyfuse3
import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kafkafs.format.jsonspan import render_span_jsonl  # noqa: E402
from kafkafs.fs.mount import larger_reads  # noqa: E402

__all__ = ["MemoryFiles"]


class MemoryFiles(pyfuse3.Operations):
    """``f0`` .. ``f{count-1}`` in the root folder, each ``data``; lookups, attributes, opens, reads."""

    def __init__(self, data: bytes, count: int, distinct: bool = False) -> None:
        super().__init__()
        self.data = data
        #: with ``distinct``, file ``i``'s own copy of ``data`` (inode ROOT_INODE + 1 + i)
        self.copies = [bytearray(data) for _ in range(count)] if distinct else None
        self.names = {f"f{i}".encode(): pyfuse3.ROOT_INODE + 1 + i for i in range(count)}

    def _attr(self, ino: int) -> pyfuse3.EntryAttributes:
        attr = pyfuse3.EntryAttributes()
        attr.st_ino = ino
        attr.entry_timeout = attr.attr_timeout = 300
        if ino == pyfuse3.ROOT_INODE:
            attr.st_mode, attr.st_nlink = stat.S_IFDIR | 0o755, 2
        else:
            attr.st_mode, attr.st_nlink, attr.st_size = stat.S_IFREG | 0o444, 1, len(self.data)
        attr.st_blksize = 4096
        return attr

    async def getattr(self, inode, ctx=None):
        return self._attr(inode)

    async def lookup(self, parent_inode, name, ctx=None):
        if parent_inode != pyfuse3.ROOT_INODE or name not in self.names:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._attr(self.names[name])

    async def open(self, inode, flags, ctx):
        return pyfuse3.FileInfo(fh=inode, keep_cache=False)

    async def read(self, fh, off, size):
        data = self.data if self.copies is None else self.copies[fh - pyfuse3.ROOT_INODE - 1]
        return memoryview(data)[off : off + size]

    async def release(self, fh):
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", help="a segment's .log: its records.jsonl is what every file holds")
    parser.add_argument("topic")
    parser.add_argument("partition", type=int)
    parser.add_argument("mnt")
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--distinct", action="store_true", help="every file its own copy of the bytes")
    args = parser.parse_args()
    data = render_span_jsonl(args.topic, args.partition, Path(args.log).read_bytes(), "auto").data
    pyfuse3.init(MemoryFiles(data, args.files, args.distinct), args.mnt, {"ro", "fsname=kafkafs-memfs"})

    async def serve() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pyfuse3.main)
            dev = (await trio.to_thread.run_sync(os.stat, args.mnt)).st_dev  # answered by the loop
            larger_reads(dev)
            print(f"READY {len(data)}", flush=True)

    try:
        trio.run(serve)
    finally:
        pyfuse3.close()


if __name__ == "__main__":
    main()
