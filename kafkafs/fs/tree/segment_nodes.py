"""``segments/`` of a partition folder in the mount: the folder's own files, byte-identical and
read-only (SPEC §3), each node tied to the file (inode) its name held when it was looked up."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator

from ...errors import NotFound, SegmentClosedError
from ...storage.safefiles import regular_file_stat, regular_files
from ..views.partition import PartitionState
from . import names
from .handles import Handle, OSFileHandle
from .nodes import (
    STABLE_TIMEOUT,
    VOLATILE_TIMEOUT,
    Attr,
    Dir,
    File,
    Node,
    SegmentKey,
    dir_attr,
    file_attr,
    mtime_ns,
)
from .partitions import Partitions

__all__ = ["SegmentsDir", "SegmentFile"]


class SegmentsDir(Dir):
    """``segments/``: every regular file of the partition folder (links and files in passing not shown),
    in Kafka's order (:func:`~.names.partition_file_key`)."""

    def attr(self) -> Attr:
        state = self.partitions.state(self.partition_name)
        return dir_attr(mtime_ns(state.log.dir, self.partitions.mount_ns), timeout=VOLATILE_TIMEOUT)

    def _files(self) -> tuple[list[str], list[str]]:
        """(every shown file in ``readdir`` order, the sorted names of the "other" files)."""
        state = self.partitions.state(self.partition_name)
        try:
            listed = [n for n in regular_files(state.log.dir) if names.is_partition_file(n)]  # links skipped
        except FileNotFoundError:
            return [], []
        others = sorted(n for n in listed if names.is_other_file(n))
        return sorted(listed, key=lambda n: names.partition_file_key(n, others)), others

    def lookup(self, name: str) -> Node:
        state = self.partitions.state(self.partition_name)
        st = regular_file_stat(state.log.dir / name) if names.is_partition_file(name) and "/" not in name else None
        if st is None:
            raise NotFound(name)
        return SegmentFile(self.partitions, state, name, self, st)  # the lookup's one lstat: the node keeps its inode

    def entries(self, start_id: int) -> Iterator[tuple[int, str, Node]]:
        state = self.partitions.state(self.partition_name)
        files, others = self._files()
        for name in files:
            next_id = names.partition_file_key(name, others) + 1
            if next_id > start_id:
                yield next_id, name, SegmentFile(self.partitions, state, name, self)

    def volatile(self) -> bool:
        return True


class SegmentFile(File):
    """``segments/<name>``: one file of the partition folder, byte-identical. Its key holds the file's
    inode number on disk: when compaction swaps a new ``.log`` in under the same name, the name is a
    new file in the mount too (the old one keeps its size and pages for whoever has it open), and the
    mount drops the kernel's entry for the name (:class:`~kafkafs.fs.invalidation.Invalidator`)."""

    def __init__(
        self,
        partitions: Partitions,
        state: PartitionState,
        name: str,
        parent: Node | None,
        st: os.stat_result | None = None,
    ) -> None:
        """``st``: the file's ``lstat`` when the caller just made it (a lookup), else it is made here."""
        path = state.log.dir / name
        file_id: int | None
        if st is not None:
            file_id = st.st_ino
        else:
            try:
                file_id = os.lstat(path).st_ino
            except FileNotFoundError:
                file_id = None
        super().__init__(partitions, SegmentKey("segment", state.name, name, file_id), parent)
        self.state = state
        self.name = name
        self.path = path
        self.file_id = file_id
        self._last: Attr | None = None  # what the file said while the name held it
        # a sealed segment's files never change; state files (checkpoints, snapshots) may be rewritten
        self.base_offset = int(name[:20]) if names.is_segment_file(name) else None

    def sealed(self) -> bool:
        active = self.state.log.active_segment
        return self.base_offset is not None and active is not None and self.base_offset < active.base_offset

    def replaced(self) -> bool:
        """Whether the name no longer holds this file (compaction swapped another in, retention removed it)."""
        try:
            return os.lstat(self.path).st_ino != self.file_id
        except FileNotFoundError:
            return True

    def attr(self) -> Attr:
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            st = None
        if st is None or st.st_ino != self.file_id:
            if self._last is not None:  # gone or replaced: it stays what it was for those who hold it
                return self._last
            raise NotFound(self.name)
        if not stat.S_ISREG(st.st_mode):  # replaced by a link since the lookup: never followed
            raise NotFound(self.name)
        self._last = file_attr(st.st_size, st.st_mtime_ns, STABLE_TIMEOUT if self.sealed() else VOLATILE_TIMEOUT)
        return self._last

    def volatile(self) -> bool:
        return not self.sealed()

    def _open(self) -> Handle:
        sealed = self.sealed()
        # a file that may grow or be replaced while open is read without the page cache (issue 20: the
        # kernel shows a new size before it drops the zeroed tail of the old last page)
        handle = OSFileHandle(self.path, keep_cache=sealed, direct_io=not sealed)
        if os.fstat(handle.fd).st_ino != self.file_id:  # another file took the name since the lookup
            handle.release()
            # ESTALE: the kernel looks the name up again and opens the new file
            raise SegmentClosedError(f"{self.path} was replaced since it was looked up")
        return handle
