"""The children of a partition folder in the mount: ``records.jsonl``, ``by-offset/``, ``by-time/``,
``segments/``, ``partition.json`` and ``append`` (SPEC §3), and the files under them."""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

import orjson

from ..errors import SegmentClosedError
from ..storage.safefiles import regular_file_stat, regular_files
from . import names
from .generations import RecordsStream
from .handles import (
    AppendHandle,
    BytesHandle,
    Handle,
    NotFound,
    NotPermitted,
    OSFileHandle,
    RangeHandle,
    RecordsHandle,
)
from .inodes import record_ino
from .nodes import (
    STABLE_TIMEOUT,
    VOLATILE_TIMEOUT,
    Attr,
    Dir,
    File,
    Node,
    _dir_attr,
    _file_attr,
    _ms_to_ns,
    _mtime_ns,
)
from .partition import Deferred, PartitionState

if TYPE_CHECKING:  # the tree makes the nodes and hands itself to them
    from .tree import Tree

__all__ = [
    "RecordsFile", "PartitionJsonFile", "AppendFile", "ByOffsetDir", "RecordFile", "RangeFile", "ByTimeDir",
    "SegmentsDir", "SegmentFile", "CHILDREN",
]


class RecordsFile(File):
    """``records.jsonl``: one generation of it (:mod:`kafkafs.fs.generations`), an inode whose bytes
    never change and whose size only grows; a lookup after a compaction or retention gets a new one."""

    def __init__(self, tree: Tree, stream: RecordsStream, parent: Node | None) -> None:
        super().__init__(tree, (names.RECORDS, stream.state.name, stream.number), parent)
        self.stream = stream

    def attr(self) -> Attr:
        state = self.stream.state
        state.refresh()
        view = self.stream.advance()
        return _file_attr(view.total, self.tree.records_mtime_ns(state), VOLATILE_TIMEOUT)

    def quick_attr(self) -> Attr:
        state = self.stream.state
        view = self.stream.quick_view()
        if view is None:
            return _file_attr(0, self.tree.records_mtime_ns(state), 0)
        return _file_attr(view.total, self.tree.records_mtime_ns(state), VOLATILE_TIMEOUT)

    def volatile(self) -> bool:
        return True

    def _open(self) -> Handle:
        return RecordsHandle(self.stream)


class PartitionJsonFile(File):
    def render(self) -> bytes:
        state = self.tree.state(self.partition_name)
        state.refresh()
        info = state.log.describe()
        info["valuesMode"] = self.tree.mode
        info["writable"] = state.log.writable
        info["checkpoints"] = self.tree.logdir.checkpointed(state.log.topic, state.log.partition)
        info["highWatermark"] = info["checkpoints"]["highWatermark"]
        info["recoveryPoint"] = info["checkpoints"]["recoveryPoint"]
        return orjson.dumps(info, option=orjson.OPT_INDENT_2) + b"\n"

    def attr(self) -> Attr:
        state = self.tree.state(self.partition_name)
        return _file_attr(len(self.render()), self.tree.records_mtime_ns(state), VOLATILE_TIMEOUT)

    def volatile(self) -> bool:
        return True

    def _open(self) -> Handle:
        return BytesHandle(self.render(), keep_cache=False, direct_io=True)


class AppendFile(File):
    def attr(self) -> Attr:
        state = self.tree.state(self.partition_name)
        return _file_attr(0, self.tree.records_mtime_ns(state), VOLATILE_TIMEOUT, 0o200)

    def open(self, write: bool) -> Handle:
        state = self.tree.state(self.partition_name)
        if not state.log.writable:
            raise NotPermitted("the log directory is open read-only")
        return AppendHandle(state, self.tree.appended)


class _RecordsDir(Dir):
    """by-offset/ and by-time/: a name is one record's file or a range's file; both change with
    each append."""

    _range_kind = ""  # the first item of a range node's key

    def _record_offset(self, state: PartitionState, name: str) -> int | None:
        """The offset of the record ``name`` names (None: not a record's name)."""
        raise NotImplementedError

    def _range_bounds(self, name: str) -> tuple[int, int] | None:
        """The bounds of the range ``name`` names (None: not a range's name)."""
        raise NotImplementedError

    def attr(self) -> Attr:
        state = self.tree.state(self.partition_name)
        return _dir_attr(state.last_change_ns, timeout=VOLATILE_TIMEOUT)

    def lookup(self, name: str) -> Node:
        state = self.tree.state(self.partition_name)
        offset = self._record_offset(state, name)
        if offset is not None:
            node = RecordFile(self.tree, state, offset, self)
            node.rendered()  # raises NotFound when there is no such record
            return node
        bounds = self._range_bounds(name)
        if bounds is not None:
            return self._range_node(state, *bounds, name)
        raise NotFound(name)

    def _range_node(self, state: PartitionState, first: int, last: int, name: str) -> Node:
        # a range's key holds the partition's rewrites: after a compaction or retention a lookup
        # gets a new file, and one already open keeps what it held (each piece reads its segment)
        return self.tree.range_node(state, (self._range_kind, state.name, first, last, state.rewrites), self, name)


class ByOffsetDir(_RecordsDir):
    _range_kind = "offset-range"

    def _record_offset(self, state: PartitionState, name: str) -> int | None:
        return names.parse_offset_file(name)

    def _range_bounds(self, name: str) -> tuple[int, int] | None:
        return names.parse_offset_range(name)

    def lookup_now(self, name: str) -> Node | None:
        """A record's name, looked up on the loop when its batch is short work (see PartitionState.record)."""
        offset = names.parse_offset_file(name)
        if offset is None:
            return None
        state = self.tree.state(self.partition_name)
        try:
            if state.record(offset, inline=True) is None:
                raise NotFound(name)
        except Deferred:
            return None
        return RecordFile(self.tree, state, offset, self)

    def _ranges(self, state: PartitionState, start_id: int) -> Iterator[tuple[int, str, Node]] | None:
        """Past the list limit: one ``<first>-<last>.jsonl`` per segment (None below it)."""
        if state.listed_records(self.tree.list_limit) <= self.tree.list_limit:
            return None
        return (
            (r.last + 1, name, self._range_node(state, r.first, r.last, name))
            for r in state.segment_ranges(start_id)
            for name in (f"{r.first}-{r.last}.jsonl",)
        )

    def entries(self, start_id: int) -> Iterator[tuple[int, str, Node]]:
        state = self.tree.state(self.partition_name)
        ranges = self._ranges(state, start_id)
        if ranges is not None:
            yield from ranges
            return
        for run in state.offset_runs(start_id):
            offsets = range(run.first, run.last + 1) if run.offsets is None else run.offsets
            for offset in offsets:
                yield (
                    offset + 1,
                    f"{offset}.json",
                    RecordFile(self.tree, state, offset, self, run.max_timestamp),
                )

    def listing(self, start_id: int) -> Iterator[tuple[int, bytes, Node | int, Attr]]:
        """Every offset, a batch at a time from its header, without a node per name (a million names
        list in constant memory). Sizes are not rendered here: they come with timeout 0, so a ``stat``
        asks for the real ones."""
        state = self.tree.state(self.partition_name)
        ranges = self._ranges(state, start_id)
        if ranges is not None:
            for next_id, name, node in ranges:
                yield next_id, os.fsencode(name), node, _file_attr(0, self.tree.mount_ns, 0)
            return
        ino_of = record_ino
        number = state.index
        for run in state.offset_runs(start_id):
            offsets = range(run.first, run.last + 1) if run.offsets is None else run.offsets
            attr = _file_attr(0, _ms_to_ns(run.max_timestamp, self.tree.mount_ns), 0)
            for offset in offsets:
                ino = ino_of(number, offset)
                target = (
                    ino if ino is not None else RecordFile(self.tree, state, offset, self, run.max_timestamp)
                )
                yield offset + 1, b"%d.json" % offset, target, attr

    def volatile(self) -> bool:
        return True


class RecordFile(File):
    """``by-offset/<offset>.json``: its inode number is computed from (partition number, offset)."""

    def __init__(
        self,
        tree: Tree,
        state: PartitionState,
        offset: int,
        parent: Node | None,
        hint_timestamp: int | None = None,
    ) -> None:
        super().__init__(tree, ("record", state.name, offset), parent)
        self.state = state
        self.offset = offset
        self.hint_timestamp = hint_timestamp
        self.fixed_ino = record_ino(state.index, offset)

    def rendered(self):
        found = self.state.record(self.offset)
        if found is None:
            raise NotFound(f"{self.state.name}: no record at offset {self.offset}")
        return found

    def attr(self) -> Attr:
        found = self.rendered()
        return _file_attr(len(found.data), _ms_to_ns(found.timestamp, self.tree.mount_ns), STABLE_TIMEOUT)

    def quick_attr(self) -> Attr:
        ts = self.hint_timestamp if self.hint_timestamp is not None else -1
        return _file_attr(0, _ms_to_ns(ts, self.tree.mount_ns), 0)

    def _open(self) -> Handle:
        return BytesHandle(self.rendered().data)

    def open_now(self) -> Handle | None:
        found = self.state.cached_record(self.offset)  # the lookup just before rendered it
        return BytesHandle(found.data) if found is not None else None


class RangeFile(File):
    """``by-offset/<first>-<last>.jsonl`` and ``by-time/<ts1>..<ts2>.jsonl``: key ``(kind, partition,
    first, last, the partition's rewrites when looked up)``. Its layout lives as long as the node: its
    bytes never change (each piece reads the segment it was laid out from) and it grows while the range
    reaches the log end; after a compaction or retention, a new lookup gets a new node."""

    def __init__(self, tree: Tree, state: PartitionState, key: tuple, parent: Node | None, name: str = "") -> None:
        super().__init__(tree, key, parent)
        self.state = state
        self.name = name
        self._lock = threading.Lock()
        if key[0] == "offset-range":
            self.layout = state.offset_range(key[2], key[3])
        else:
            self.layout = state.time_range(key[2], key[3])

    def rewritten(self) -> bool:
        """Whether compaction or retention rewrote the partition since this node was looked up."""
        return self.key[-1] != self.state.rewrites

    def attr(self) -> Attr:
        with self._lock:
            if not self.layout.complete:
                self.state.refresh()
                self.state.extend_range(self.layout)
        growing = not self.layout.complete
        mtime = self.tree.records_mtime_ns(self.state) if growing else self.tree.mount_ns
        return _file_attr(self.layout.total(), mtime, VOLATILE_TIMEOUT if growing else STABLE_TIMEOUT)

    def volatile(self) -> bool:
        return not self.layout.complete

    def _open(self) -> Handle:
        return RangeHandle(self.state, self.layout)


class ByTimeDir(_RecordsDir):
    _range_kind = "time-range"

    def _record_offset(self, state: PartitionState, name: str) -> int | None:
        ts = names.parse_time_file(name)
        if ts is None:
            return None
        found = state.log.offset_for_timestamp(ts)
        if found is None:
            raise NotFound(name)
        return found[0]

    def _range_bounds(self, name: str) -> tuple[int, int] | None:
        return names.parse_time_range(name)


class SegmentsDir(Dir):
    def attr(self) -> Attr:
        state = self.tree.state(self.partition_name)
        return _dir_attr(_mtime_ns(state.log.dir, self.tree.mount_ns), timeout=VOLATILE_TIMEOUT)

    def _files(self) -> tuple[list[str], list[str]]:
        """(every shown file in ``readdir`` order, the sorted names of the "other" files)."""
        state = self.tree.state(self.partition_name)
        try:
            listed = [n for n in regular_files(state.log.dir) if names.is_partition_file(n)]  # links skipped
        except FileNotFoundError:
            return [], []
        others = sorted(n for n in listed if names.is_other_file(n))
        return sorted(listed, key=lambda n: names.partition_file_key(n, others)), others

    def lookup(self, name: str) -> Node:
        state = self.tree.state(self.partition_name)
        st = regular_file_stat(state.log.dir / name) if names.is_partition_file(name) and "/" not in name else None
        if st is None:
            raise NotFound(name)
        return self.tree.segment_file(state, name, self, st)  # the lookup's one lstat: the node keeps its inode

    def entries(self, start_id: int) -> Iterator[tuple[int, str, Node]]:
        state = self.tree.state(self.partition_name)
        files, others = self._files()
        for name in files:
            next_id = names.partition_file_key(name, others) + 1
            if next_id > start_id:
                yield next_id, name, self.tree.segment_file(state, name, self)

    def volatile(self) -> bool:
        return True


class SegmentFile(File):
    """``segments/<name>``: one file of the partition folder, byte-identical. Its key holds the file's
    inode number on disk: when compaction swaps a new ``.log`` in under the same name, the name is a
    new file in the mount too (the old one keeps its size and pages for whoever has it open), and the
    mount drops the kernel's entry for the name (:class:`~kafkafs.fs.live.Invalidator`)."""

    def __init__(
        self, tree: Tree, state: PartitionState, name: str, parent: Node | None, st: os.stat_result | None = None
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
        super().__init__(tree, ("segment", state.name, name, file_id), parent)
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
        self._last = _file_attr(st.st_size, st.st_mtime_ns, STABLE_TIMEOUT if self.sealed() else VOLATILE_TIMEOUT)
        return self._last

    def volatile(self) -> bool:
        return not self.sealed()

    def _open(self) -> Handle:
        handle = OSFileHandle(self.path, keep_cache=self.sealed())
        if os.fstat(handle.fd).st_ino != self.file_id:  # another file took the name since the lookup
            handle.release()
            # ESTALE: the kernel looks the name up again and opens the new file
            raise SegmentClosedError(f"{self.path} was replaced since it was looked up")
        return handle


CHILDREN = {
    names.RECORDS: RecordsFile,
    names.BY_OFFSET: ByOffsetDir,
    names.BY_TIME: ByTimeDir,
    names.SEGMENTS: SegmentsDir,
    names.PARTITION_JSON: PartitionJsonFile,
    names.APPEND: AppendFile,
}



