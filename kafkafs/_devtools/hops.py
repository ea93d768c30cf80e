"""The modules a request goes through: ``python -m kafkafs._devtools.hops``.

Drives the pyfuse3 adapter (:class:`~kafkafs.fs.operations.Operations`, wired as ``kafkafs mount``
wires it, invalidator included) without a kernel, with a profiler hook on every thread, and prints the
kafkafs modules whose code runs for three requests: a first ``cat by-offset/N.json`` (lookup, open,
read, release), a first ``cat records.jsonl`` (lookup, getattr, open, reads to the end, release; the
sizing included) and one ``write`` to ``append``. The count of ``fs`` modules is the number of hops
through the mount's rooms.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import FrameType
from typing import Any

import trio

from ..format.jsonview import ProducerRecord
from ..fs.invalidation import Invalidator
from ..fs.operations import Operations
from ..fs.tree.root import Tree
from ..fs.views.layoutcache import LayoutCache
from ..storage.config import Settings
from ..storage.logdir import LogDir

__all__ = ["SCENARIOS", "modules_run", "main"]

ROOT_INODE = 1
SETTINGS = Settings({"segment.bytes": 64 * 1024, "index.interval.bytes": 1024})


def _build(path: Path) -> None:
    path.mkdir()
    with LogDir(path, SETTINGS, writable=True) as d:
        log = d.create_partition("orders", 0)
        for start in range(0, 3000, 50):
            log.append_records([ProducerRecord(1_763_700_000_000 + i, b"k%d" % (i % 7), b'{"n":%d}' % i, ())
                                for i in range(start, start + 50)])


class _Seen:
    """A profiler hook: the kafkafs modules of the functions called while ``on``."""

    def __init__(self) -> None:
        self.modules: set[str] = set()
        self.on = False

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.on:
            return
        if event == "call":
            name = frame.f_globals.get("__name__", "")
        elif event == "c_call":
            name = getattr(arg, "__module__", None) or ""
        else:
            return
        if name.startswith("kafkafs"):
            self.modules.add(name)


Scenario = Callable[[Operations, _Seen], Awaitable[None]]


def modules_run(rw: bool, scenario: Scenario) -> set[str]:
    """The kafkafs modules whose code runs while ``scenario`` has its hook on."""
    with tempfile.TemporaryDirectory() as tmp:
        logdir = Path(tmp) / "logdir"
        _build(logdir)
        tree = Tree(LogDir(logdir, SETTINGS, writable=rw), rw=rw, cache=LayoutCache(Path(tmp) / "cache"))
        ops = Operations(tree)
        inv = Invalidator(ops.inodes, lambda ino, attr_only=False: None, lambda parent, name: None)
        tree.partitions.add_listener(inv.partition_changed)
        tree.partitions.add_append_listener(inv.attrs_now)
        inv.start()
        seen = _Seen()
        sys.setprofile(seen)
        threading.setprofile(seen)
        try:
            trio.run(scenario, ops, seen)
            time.sleep(0.3)  # the invalidator's thread and render-ahead finish
        finally:
            seen.on = False
            sys.setprofile(None)
            threading.setprofile(None)
            inv.stop()
            ops.workers.stop()
            tree.close()
        return seen.modules


async def _by_offset(ops: Operations, seen: _Seen) -> None:
    part = await ops.lookup(ROOT_INODE, b"orders-0")
    folder = await ops.lookup(part.st_ino, b"by-offset")
    seen.on = True
    entry = await ops.lookup(folder.st_ino, b"1234.json")
    info = await ops.open(entry.st_ino, os.O_RDONLY, None)
    await ops.read(info.fh, 0, 128 * 1024)
    await ops.release(info.fh)


async def _records(ops: Operations, seen: _Seen) -> None:
    part = await ops.lookup(ROOT_INODE, b"orders-0")
    seen.on = True
    entry = await ops.lookup(part.st_ino, b"records.jsonl")
    await ops.getattr(entry.st_ino)
    info = await ops.open(entry.st_ino, os.O_RDONLY, None)
    off = 0
    while data := await ops.read(info.fh, off, 128 * 1024):
        off += len(data)
    await ops.release(info.fh)


async def _append(ops: Operations, seen: _Seen) -> None:
    part = await ops.lookup(ROOT_INODE, b"orders-0")
    entry = await ops.lookup(part.st_ino, b"append")
    info = await ops.open(entry.st_ino, os.O_WRONLY, None)
    seen.on = True
    await ops.write(info.fh, 0, b'hello\n{"key": "k", "value": {"a": 1}}\n')
    seen.on = False
    await ops.release(info.fh)


#: (what it stands for, read-write, the requests)
SCENARIOS: tuple[tuple[str, bool, Scenario], ...] = (
    ("cat by-offset/N.json", False, _by_offset),
    ("first cat records.jsonl", False, _records),
    ("one append write", True, _append),
)


def main(argv: list[str] | None = None) -> int:
    for label, rw, scenario in SCENARIOS:
        mods = sorted(modules_run(rw, scenario))
        fs = [m for m in mods if m.startswith("kafkafs.fs")]
        print(f"{label}: {len(fs)} fs modules, {len(mods)} kafkafs modules in all")
        print("  fs:    " + ", ".join(m.removeprefix("kafkafs.fs.") for m in fs))
        print("  below: " + ", ".join(m.removeprefix("kafkafs.") for m in mods if not m.startswith("kafkafs.fs")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
