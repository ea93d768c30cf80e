"""The children of a partition folder in the mount: ``records.jsonl``, ``by-offset/``, ``by-time/``,
``segments/`` (:mod:`.segment_nodes`), ``partition.json`` and ``append`` (SPEC §3), and the files
under them."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

import orjson

from . import names
from .generations import RecordsStream
from .handles import (
    AppendHandle,
    BytesHandle,
    Handle,
    NotFound,
    NotPermitted,
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
)
from .partition import Deferred, PartitionState
from .segment_nodes import SegmentsDir

if TYPE_CHECKING:  # the tree makes the nodes and hands itself to them
    from .tree import Tree

__all__ = [
    "RecordsFile", "PartitionJsonFile", "AppendFile", "ByOffsetDir", "RecordFile", "RangeFile", "ByTimeDir",
    "CHILDREN",
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


CHILDREN = {
    names.RECORDS: RecordsFile,
    names.BY_OFFSET: ByOffsetDir,
    names.BY_TIME: ByTimeDir,
    names.SEGMENTS: SegmentsDir,
    names.PARTITION_JSON: PartitionJsonFile,
    names.APPEND: AppendFile,
}



