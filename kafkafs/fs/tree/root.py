"""The mounted tree without FUSE: names resolve to nodes, nodes have attributes, files open to handles.

::

    <topic>-<partition>/  records.jsonl  by-offset/  by-time/  segments/  partition.json  [append]
                          by-key/  table.jsonl  transactions.json
    groups/  transactions/               from __consumer_offsets and __transaction_state
    meta.properties, *-checkpoint        the log directory's own files

:class:`Tree` holds the top of it (:class:`Root`: the partition folders and the log directory's own
files) and the mount's :class:`~.partitions.Partitions`, which every node asks for its partition.
Every method here may block (files, decoding) and is meant to run in a worker thread; the FUSE adapter
(:mod:`kafkafs.fs.operations`) only maps inodes to nodes and errors to errno.

Errors: :class:`~kafkafs.errors.NotFound` for a name that does not resolve,
:class:`~kafkafs.errors.NotPermitted` for a change to something read-only; the engine's own exceptions
pass through.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from typing import Unpack

from ...errors import InvalidName, NotFound, NotPermitted, WriteRefused
from ...storage.logdir import LogDir
from ...storage.names import parse_partition_dir_name, refuse_internal_topic
from ...storage.safefiles import is_regular_file, regular_files
from ...storage.strays import NEW_PARTITION_REFUSED, unnamed_partitions, unnamed_refusal
from . import names
from .handles import Handle, OSFileHandle
from .inodes import parse_record_ino
from .key_nodes import GROUPS, TRANSACTIONS, top_dirs
from .nodes import VOLATILE_TIMEOUT, Attr, Dir, File, Key, Node, dir_attr, file_attr, mtime_ns
from .partition_nodes import ByOffsetDir, PartitionDir, RecordFile
from .partitions import Partitions, ServeOptions

__all__ = ["Tree", "Root", "LogDirFile"]

_TOP_FILE_IDS = 1 << 40  # readdir ids of the log directory's own files: after every partition's
_TOP_DIR_IDS = 1 << 41  # and of groups/ and transactions/, after those


class Root(Dir):
    def attr(self) -> Attr:
        return dir_attr(mtime_ns(self.partitions.logdir.path, self.partitions.mount_ns), self.partitions.rw)

    def lookup(self, name: str) -> Node:
        if name in (GROUPS, TRANSACTIONS):
            found = top_dirs(self.partitions, self).get(name)
            if found is None:
                raise NotFound(name)
            return found
        if names.is_logdir_file(name):
            if not is_regular_file(self.partitions.logdir.path / name):
                raise NotFound(name)
            return LogDirFile(self.partitions, name, self)
        return self.partition_dir(name)

    def lookup_now(self, name: str) -> Node | None:
        """A partition folder on the FUSE loop (a stat of the folder; None, "ask in a worker", for any
        other name or while the partitions' lock is busy)."""
        if name in (GROUPS, TRANSACTIONS) or names.is_logdir_file(name):
            return None
        try:
            parse_partition_dir_name(name)
        except InvalidName:
            return None
        partitions = self.partitions
        try:  # one lstat on a str path: pathlib's is_symlink + is_dir cost a lookup twice as much (issue 25)
            st = os.lstat(os.path.join(partitions.logdir_path, name))
        except OSError:
            return None  # a worker's lookup says what is wrong
        if not stat.S_ISDIR(st.st_mode) or partitions.number_now(name) is None:
            return None  # a link may be an alias (partition_dir, in a worker, looks)
        if partitions.open_state(name) is None:
            # its records.jsonl may be answered from the size summary, and the kernel keeps the folder's
            # name while its events tell of changes (10 s, not 1 s: the path of the next lookup in it)
            partitions.watch_early(name)
        return PartitionDir(partitions, name, self, seen_mtime_ns=st.st_mtime_ns)

    def partition_dir(self, name: str) -> PartitionDir:
        try:
            parse_partition_dir_name(name)
        except InvalidName:
            raise NotFound(name) from None
        if not (self.partitions.logdir.path / name).is_dir() or self.partitions.logdir.alias_of(name) is not None:
            raise NotFound(name)  # an alias of another partition folder is not one of its own (.partition_folders)
        self.partitions.number(name)
        return PartitionDir(self.partitions, name, self)

    def _files(self) -> list[str]:
        # no warning here: a link at the top is most often a partition folder, which is served (SPEC §3)
        path = self.partitions.logdir.path
        return sorted(n for n in regular_files(path, warn=False) if names.is_logdir_file(n))

    def entries(self, start_id: int) -> Iterator[tuple[int, str, Node]]:
        partitions = self.partitions
        numbered = sorted((partitions.number(name), name) for name in partitions.logdir.partition_names())
        for number, name in numbered:
            if number + 1 > start_id:
                yield number + 1, name, PartitionDir(partitions, name, self)
        for i, name in enumerate(self._files()):
            if _TOP_FILE_IDS + i + 1 > start_id:
                yield _TOP_FILE_IDS + i + 1, name, LogDirFile(partitions, name, self)
        for i, (name, node) in enumerate(sorted(top_dirs(partitions, self).items())):
            if _TOP_DIR_IDS + i + 1 > start_id:
                yield _TOP_DIR_IDS + i + 1, name, node


class LogDirFile(File):
    """One of the log directory's own files (``meta.properties``, the checkpoints), byte-identical,
    read-only; a broker may rewrite it at any time, so nothing of it is cached."""

    def __init__(self, partitions: Partitions, name: str, parent: Node) -> None:
        super().__init__(partitions, Key("logdir-file", None, name), parent)
        self.path = partitions.logdir.path / name

    def attr(self) -> Attr:
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            raise NotFound(self.path.name) from None
        if not stat.S_ISREG(st.st_mode):  # never a link's target
            raise NotFound(self.path.name)
        return file_attr(st.st_size, st.st_mtime_ns, VOLATILE_TIMEOUT)

    def volatile(self) -> bool:
        return True

    def _open(self) -> Handle:
        return OSFileHandle(self.path, keep_cache=False, direct_io=True)  # replaced whole by a writer


class Tree:
    """The whole mount: the log directory's partitions (:attr:`partitions`) and the root node.

    Threads: safe to share (its partitions are; the root node is immutable)."""

    def __init__(self, logdir: LogDir, **options: Unpack[ServeOptions]) -> None:
        """``options``: how the log directory is served (:class:`~.partitions.ServeOptions`)."""
        self.partitions = Partitions(logdir, **options)
        self.root = Root(self.partitions, Key("root"), None)

    def mkdir(self, name: str) -> PartitionDir:
        """Create an empty partition ``<topic>-<partition>`` (InvalidName for a bad name)."""
        partitions = self.partitions
        if not partitions.rw:
            raise NotPermitted("read-only mount")
        topic, partition = parse_partition_dir_name(name)
        refuse_internal_topic(topic)
        logdir = partitions.logdir
        if (logdir.path / name).exists():
            raise FileExistsError(name)
        # a topic a whole metadata log does not name: refused as produce refuses it, nothing made (review22 R22-2)
        why = unnamed_partitions(logdir.path, [name], logdir.settings.recorded_topic_ids()).get(name)
        if why is not None:
            raise WriteRefused(f"{name}: refused: " + unnamed_refusal(why, NEW_PARTITION_REFUSED))
        logdir.create_partition(topic, partition)
        return self.root.partition_dir(name)

    def node_for_ino(self, ino: int) -> Node | None:
        """The node of a computed inode number (None when it is not one, or its partition is gone)."""
        parsed = parse_record_ino(ino)
        if parsed is None:
            return None
        state = self.partitions.by_number(parsed.number)
        if state is None:
            return None
        parent = ByOffsetDir(self.partitions, Key(names.BY_OFFSET, state.name), None)
        return RecordFile(self.partitions, state, parsed.offset, parent)

    # -- paths (tests, tools)

    def resolve(self, path: str) -> Node:
        """The node at ``path`` (relative to the mount, ``/``-separated)."""
        node: Node = self.root
        for part in path.strip("/").split("/"):
            if not part or part == ".":
                continue
            if part == "..":
                node = node.parent or self.root
                continue
            if not isinstance(node, Dir):
                raise NotFound(path)
            node = node.lookup(part)
        return node

    def listdir(self, path: str) -> list[str]:
        node = self.resolve(path)
        if not isinstance(node, Dir):
            raise NotFound(path)
        return [name for _id, name, _node in node.entries(0)]

    def read_file(self, path: str, chunk: int = 128 * 1024) -> bytes:
        node = self.resolve(path)
        if not isinstance(node, File):
            raise NotFound(path)
        handle = node.open(False)
        try:
            out = []
            offset = 0
            while True:
                data = handle.read(offset, chunk)
                if not data:
                    break
                out.append(data)
                offset += len(data)
            return b"".join(out)
        finally:
            handle.release()

    def close(self) -> None:
        """Keep the layouts the layout cache lacks, then close the log directory (flushes, checkpoints
        and unlocks when writable)."""
        self.partitions.close()
