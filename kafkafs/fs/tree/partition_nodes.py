"""A partition folder of the mount and its children: ``records.jsonl``, ``by-offset/``, ``by-time/``,
``segments/`` (:mod:`.segment_nodes`), ``partition.json`` and ``append`` (SPEC §3), and the files
under them. Each asks the partition's views (:mod:`kafkafs.fs.views`) for its bytes and sizes."""

from __future__ import annotations

import errno
import functools
import os
import threading
from collections.abc import Iterator

import orjson

from ...errors import Deferred, NotFound, NotPermitted, SegmentClosedError
from ...storage.names import is_internal_topic, parse_partition_dir_name
from ..views.partition import PartitionState
from ..views.record import RenderedRecord
from ..views.streams import RecordsStream
from ..views.summary import Sized
from . import key_nodes, names
from .handles import AppendHandle, BytesHandle, Handle, RangeHandle, RecordsHandle, Snapshots
from .inodes import record_ino
from .nodes import (
    DIR_TIMEOUT,
    OFFSET_RANGE,
    STABLE_TIMEOUT,
    TIME_RANGE,
    VOLATILE_TIMEOUT,
    WATCHED_TIMEOUT,
    Attr,
    Dir,
    File,
    Key,
    Node,
    RangeKey,
    RecordKey,
    RecordsKey,
    dir_attr,
    file_attr,
    ms_to_ns,
    mtime_ns,
)
from .partitions import Partitions
from .segment_nodes import SegmentsDir

__all__ = [
    "PartitionDir", "RecordsFile", "PartitionJsonFile", "AppendFile", "ByOffsetDir", "RecordFile", "RangeFile",
    "ByTimeDir",
]


class PartitionDir(Dir):
    """``<topic>-<partition>/``: its children are made afresh on each lookup (``records.jsonl`` as its
    current generation)."""

    def __init__(self, partitions: Partitions, name: str, parent: Node | None,
                 seen_mtime_ns: int | None = None) -> None:
        """``seen_mtime_ns``: the folder's modification time as the lookup that made this node saw it just
        now (the attributes of that lookup's reply take it instead of a stat of their own; used once)."""
        super().__init__(partitions, Key("partition", name), parent)
        self.name = name
        self._seen_mtime_ns = seen_mtime_ns

    def attr(self) -> Attr:
        partitions = self.partitions
        # watched: its events drop what the kernel keeps (the Invalidator), so it may keep it longer
        timeout = WATCHED_TIMEOUT if partitions.folder_watched(self.name) else DIR_TIMEOUT
        seen, self._seen_mtime_ns = self._seen_mtime_ns, None
        if seen is None:
            seen = mtime_ns(os.path.join(partitions.logdir_path, self.name), partitions.mount_ns)
        return dir_attr(seen, timeout=timeout)

    def _children(self) -> list[str]:
        out = [names.RECORDS, names.BY_OFFSET, names.BY_TIME, names.SEGMENTS, names.PARTITION_JSON,
               key_nodes.BY_KEY, key_nodes.TABLE, key_nodes.TRANSACTIONS_JSON]
        # Kafka's internal topics take no user writes (a broker refuses client produce to them)
        if self.partitions.rw and not is_internal_topic(parse_partition_dir_name(self.name)[0]):
            out.append(names.APPEND)
        return out

    def lookup(self, name: str) -> Node:
        if name not in self._children() or self.partitions.folder_gone(self.name):
            raise NotFound(name)
        return self.child(name, current=True)

    def lookup_now(self, name: str) -> Node | None:
        """``records.jsonl`` on the loop when nothing needs doing: the partition is open, watched (no
        refresh at a stat) and its size known (sized ahead by a sibling's stat, or before), so that
        ``ls -l MOUNT/*/records.jsonl`` costs no worker trip per partition. ``by-offset/``, ``by-time/``
        and ``segments/`` of an open partition too (their attributes come from memory, or a stat of the
        folder): the path of a first ``by-offset/N.json`` goes through one, and a worker trip there cost
        more than the record's own lookup (issue 25)."""
        partitions = self.partitions
        state = partitions.open_state(self.name)
        if name in _FOLDERS_NOW:
            if state is None:
                return None  # opening the partition is a worker's
            if partitions.folder_gone(self.name):  # (no stat while watched)
                return None  # a worker's lookup says ENOENT (R13-3)
            return _CHILDREN[name](partitions, Key(name, self.name), self)
        if name != names.RECORDS:
            return None
        if state is None:
            # not opened yet: answered from the size summary when it holds (a remount's ls -l), the
            # folder watched first (so that any change after the check drops the answer in the kernel);
            # the summary holds for no folder gone (it lists the folder)
            if self.name in partitions.summary:
                partitions.watch_early(self.name)
            sized = partitions.presized(self.name)
            return RecordsFile.presized(partitions, self.name, self, sized) if sized is not None else None
        if not state.watched or partitions.folder_gone(self.name):
            return None  # a worker's lookup refreshes it, or says ENOENT (R13-3)
        generations = partitions.records_generations_now(self.name)
        stream = generations.current_now() if generations is not None else None
        return RecordsFile(partitions, stream, self) if stream is not None else None

    def entries(self, start_id: int) -> Iterator[tuple[int, str, Node]]:
        for i, name in enumerate(self._children(), 1):
            if i > start_id:
                yield i, name, self.child(name)

    def child(self, name: str, *, current: bool = False) -> Node:
        """The child ``name``. ``records.jsonl`` is its current generation: checked against the
        partition (and renewed if compaction or retention rewrote it) when ``current``, as it is
        otherwise (a listing renders nothing)."""
        if name == names.RECORDS:
            generations = self.partitions.records_generations(self.name)
            stream = generations.current() if current else generations.peek()
            return RecordsFile(self.partitions, stream, self)
        return _CHILDREN[name](self.partitions, Key(name, self.name), self)


def _timeout(state: PartitionState) -> float:
    """How long the kernel may keep ``records.jsonl``'s name and size: briefly, unless the partition's
    changes come by inotify events, which drop what the kernel keeps as they come (the mount's
    invalidator), so that the kernel keeps it and a ``stat`` costs no request."""
    return WATCHED_TIMEOUT if state.watched else VOLATILE_TIMEOUT


class RecordsFile(File):
    """``records.jsonl``: one generation of it (:mod:`kafkafs.fs.views.streams`), an inode whose bytes
    never change and whose size only grows; a lookup after a compaction or retention gets a new one.

    Made :meth:`presized` (a partition not opened yet, whose size the size summary knows), it is the
    partition's first generation, answered from the summary until anything but its size is asked of
    it (or the summary stops holding): then the partition opens and it is that generation."""

    def __init__(self, partitions: Partitions, stream: RecordsStream | None, parent: Node | None,
                 partition: str | None = None) -> None:
        number, name = (stream.number, stream.state.name) if stream is not None else (1, partition)
        assert name is not None
        super().__init__(partitions, RecordsKey(names.RECORDS, name, number), parent)
        self._stream = stream
        self._partition = name
        self._checked: Sized | None = None  # the summary's answer of the lookup that made it (used once)
        self._summary_told = 0  # the largest size the summary answered for it (the stream is told once made)

    @classmethod
    def presized(cls, partitions: Partitions, partition: str, parent: Node | None, sized: Sized) -> RecordsFile:
        """The node of a lookup that the size summary answered (``sized``, checked just now)."""
        node = cls(partitions, None, parent, partition)
        node._checked = sized
        return node

    @property
    def stream(self) -> RecordsStream:
        """The generation shown (the partition opens here if it was answered from the summary)."""
        stream = self._stream
        if stream is None:
            stream = self.partitions.records_generations(self._partition).current()
            stream.told(self._summary_told)
            self._stream = stream
        return stream

    def _summarized(self) -> Attr | None:
        """The attributes from the size summary while this node has not opened its partition."""
        if self._stream is not None:
            return None
        sized, self._checked = self._checked, None
        if sized is None:
            sized = self.partitions.presized(self._partition)
        if sized is None:
            return None
        watched = self.partitions.folder_watched(self._partition)
        self._summary_told = max(self._summary_told, sized.total)
        return file_attr(sized.total, sized.mtime_ns, WATCHED_TIMEOUT if watched else VOLATILE_TIMEOUT)

    def attr(self) -> Attr:
        summarized = self._summarized()
        if summarized is not None:
            return summarized
        state = self.stream.state
        if not state.watched:  # a watched partition is refreshed by its events (kafkafs.fs.watching)
            state.refresh()
        self.partitions.size_siblings(state)  # the first time: the topic's other partitions, in the background
        stream = self.stream
        view = stream.view_if_current() or stream.advance()
        stream.told(view.total)
        return file_attr(view.total, self.partitions.records_mtime_ns(state), _timeout(state))

    def quick_attr(self) -> Attr:
        summarized = self._summarized()
        if summarized is not None:
            return summarized
        if self._stream is None:
            return file_attr(0, self.partitions.mount_ns, 0)
        state = self.stream.state
        view = self.stream.quick_view()
        if view is None:
            return file_attr(0, self.partitions.records_mtime_ns(state), 0)
        self.stream.told(view.total)
        return file_attr(view.total, self.partitions.records_mtime_ns(state), _timeout(state))

    def volatile(self) -> bool:
        return True

    def _open(self) -> Handle:
        stream = self.stream
        if not stream.state.watched:
            stream.state.refresh()
        _require_current(stream)
        self.partitions.opening(self._partition)
        return RecordsHandle(stream, functools.partial(self.partitions.reading_to_end, self._partition),
                             functools.partial(self.partitions.shown_unsized, stream.state))

    def open_now(self) -> Handle | None:
        """On the FUSE loop when the partition is open and nothing needs doing (opened ahead of a reader
        going through the partitions in order: :meth:`~.partitions.Partitions.reading_to_end`)."""
        stream = self._stream
        if stream is None:
            generations = self.partitions.records_generations_now(self._partition)
            stream = generations.current_now() if generations is not None else None
            if stream is None:
                return None
            stream.told(self._summary_told)
            self._stream = stream
        _require_current(stream)
        self.partitions.opening(self._partition)
        return RecordsHandle(stream, functools.partial(self.partitions.reading_to_end, self._partition),
                             functools.partial(self.partitions.shown_unsized, stream.state))


def _require_current(stream: RecordsStream) -> None:
    """A new open of a ``records.jsonl`` that a rewrite (compaction, retention) replaced since its lookup
    (a name the kernel kept) is refused, ESTALE: the kernel looks the name up again and opens the current
    file (review8 R8-3: the open went on, and its first read met a segment that was gone: ESTALE to the
    reader). Opens already made keep their file (:mod:`~kafkafs.fs.views.streams`); so does an open right
    after its lookup (:meth:`~kafkafs.fs.views.streams.RecordsStream.outdated_for_open`)."""
    if stream.outdated_for_open():
        raise SegmentClosedError(f"{stream.state.name}/records.jsonl was rewritten (compaction or retention) "
                                 "since it was looked up")


class PartitionJsonFile(File):
    """``partition.json``: rendered on each open and each ``getattr``, sized as ``transactions.json`` is
    (:class:`~.key_nodes._JsonFile`: attributes never kept, an open file serves what its ``fstat`` sized)."""

    def __init__(self, partitions: Partitions, key: Key, parent: Node | None) -> None:
        super().__init__(partitions, key, parent)
        self.snapshots = Snapshots()

    def render(self) -> bytes:
        state = self.partitions.state(self.partition_name)
        state.refresh()
        info = state.log.describe()
        info["valuesMode"] = self.partitions.mode
        info["writable"] = state.log.writable
        info["checkpoints"] = self.partitions.logdir.checkpointed(state.log.topic, state.log.partition)
        info["highWatermark"] = info["checkpoints"]["highWatermark"]
        info["recoveryPoint"] = info["checkpoints"]["recoveryPoint"]
        return orjson.dumps(info, option=orjson.OPT_INDENT_2) + b"\n"

    def attr(self) -> Attr:
        state = self.partitions.state(self.partition_name)
        data = self.snapshots.attr_data(self.render)
        return file_attr(len(data), self.partitions.records_mtime_ns(state), 0)

    def volatile(self) -> bool:
        return True

    def _open(self) -> Handle:
        return self.snapshots.open(self.render)


class AppendFile(File):
    def attr(self) -> Attr:
        state = self.partitions.state(self.partition_name)
        return file_attr(0, self.partitions.records_mtime_ns(state), VOLATILE_TIMEOUT, 0o200)

    def open(self, write: bool) -> Handle:
        state = self.partitions.state(self.partition_name)
        if not state.log.writable:
            unreadable = self.partitions.logdir.unreadable.get(state.name)
            if unreadable is not None:  # said when the partition was opened (SPEC §3: logged once)
                raise OSError(errno.EIO, f"{self.partition_name}: appends refused: {unreadable}")
            raise NotPermitted("the log directory is open read-only")
        return AppendHandle(state, self.partitions.appended)


class _RecordsDir(Dir):
    """by-offset/ and by-time/: a name is one record's file or a range's file; both change with
    each append."""

    _range_kind = ""  # the kind of a range node's key

    def _record_offset(self, state: PartitionState, name: str) -> int | None:
        """The offset of the record ``name`` names (None: not a record's name)."""
        raise NotImplementedError

    def _range_bounds(self, name: str) -> tuple[int, int] | None:
        """The bounds of the range ``name`` names (None: not a range's name)."""
        raise NotImplementedError

    def attr(self) -> Attr:
        state = self.partitions.state(self.partition_name)
        # its mtime moves with each append: kept long only while events tell of them (the invalidator drops
        # a watched partition's folders' attributes at each change), else briefly
        return dir_attr(state.last_change_ns, timeout=_timeout(state))

    def lookup(self, name: str) -> Node:
        state = self.partitions.state(self.partition_name)
        offset = self._record_offset(state, name)
        if offset is not None:
            node = RecordFile(self.partitions, state, offset, self)
            node.rendered()  # raises NotFound when there is no such record
            self.partitions.record_looked_up(state.name, node.fixed_ino, STABLE_TIMEOUT)
            return node
        bounds = self._range_bounds(name)
        if bounds is not None:
            return self._range_node(state, *bounds, name)
        raise NotFound(name)

    def _range_node(self, state: PartitionState, first: int, last: int, name: str) -> Node:
        # a range's key holds the partition's rewrites: after a compaction or retention a lookup
        # gets a new file, and one already open keeps what it held (each piece reads its segment)
        if self._range_kind != OFFSET_RANGE or last >= state.log.log_end_offset:
            state.catch_up()  # the range reaches past the known end: look for new records once
        key = RangeKey(self._range_kind, state.name, first, last, state.rewrites)
        return RangeFile(self.partitions, state, key, self, name)


class ByOffsetDir(_RecordsDir):
    _range_kind = OFFSET_RANGE

    def _record_offset(self, state: PartitionState, name: str) -> int | None:
        return names.parse_offset_file(name)

    def _range_bounds(self, name: str) -> tuple[int, int] | None:
        return names.parse_offset_range(name)

    def lookup_now(self, name: str) -> Node | None:
        """A record's name, looked up on the loop when its batch is short work (see
        :class:`~kafkafs.fs.views.record.RecordFinder`)."""
        offset = names.parse_offset_file(name)
        if offset is None:
            return None
        state = self.partitions.state(self.partition_name)
        try:
            if state.record_finder.find(offset, inline=True) is None:
                raise NotFound(name)
        except Deferred:
            return None
        node = RecordFile(self.partitions, state, offset, self)
        self.partitions.record_looked_up(state.name, node.fixed_ino, STABLE_TIMEOUT)
        return node

    def _ranges(self, state: PartitionState, start_id: int) -> Iterator[tuple[int, str, Node]] | None:
        """Past the list limit: one ``<first>-<last>.jsonl`` per segment (None below it)."""
        limit = self.partitions.list_limit
        if state.listed_records(limit) <= limit:
            return None
        return (
            (r.last + 1, name, self._range_node(state, r.first, r.last, name))
            for r in state.segment_ranges(start_id)
            for name in (f"{r.first}-{r.last}.jsonl",)
        )

    def entries(self, start_id: int) -> Iterator[tuple[int, str, Node]]:
        state = self.partitions.state(self.partition_name)
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
                    RecordFile(self.partitions, state, offset, self, run.max_timestamp),
                )

    def listing(self, start_id: int) -> Iterator[tuple[int, bytes, Node | int, Attr]]:
        """Every offset, a batch at a time, without a node per name (a million names list in constant
        memory). Each batch is rendered once for the sizes of all its names, given with the attributes'
        timeout a lookup gives them, so that ``ls -l``, ``find -size`` or ``du`` of the folder ask
        nothing more per name (review24 R24-5: a lookup each, 0.25 ms to 11 ms a name); a batch whose
        sizes are not known so (see :meth:`~kafkafs.fs.views.record.RecordFinder.sizes`) gives size 0
        with timeout 0, so that a ``stat`` asks for the real ones."""
        partitions = self.partitions
        state = partitions.state(self.partition_name)
        ranges = self._ranges(state, start_id)
        if ranges is not None:
            for next_id, name, node in ranges:
                yield next_id, os.fsencode(name), node, file_attr(0, partitions.mount_ns, 0)
            return
        ino_of = record_ino
        number = state.index
        finder = state.record_finder
        mount_ns = partitions.mount_ns
        looked_up = partitions.record_looked_up
        for run in state.offset_runs(start_id):
            offsets = range(run.first, run.last + 1) if run.offsets is None else run.offsets
            attr = file_attr(0, ms_to_ns(run.max_timestamp, mount_ns), 0)
            sizes = finder.sizes(run.view, run.first, run.last) if run.view is not None else None
            for offset in offsets:
                ino = ino_of(number, offset)
                target = (
                    ino if ino is not None else RecordFile(partitions, state, offset, self, run.max_timestamp)
                )
                sized = sizes.get(offset) if sizes is not None else None
                if sized is None or ino is None:
                    yield offset + 1, b"%d.json" % offset, target, attr
                    continue
                looked_up(state.name, ino, STABLE_TIMEOUT)  # as a lookup: a change of schemas drops it
                yield offset + 1, b"%d.json" % offset, ino, file_attr(sized[0], ms_to_ns(sized[1], mount_ns),
                                                                      STABLE_TIMEOUT)

    def volatile(self) -> bool:
        return True


class RecordFile(File):
    """``by-offset/<offset>.json``: its inode number is computed from (partition number, offset)."""

    def __init__(
        self,
        partitions: Partitions,
        state: PartitionState,
        offset: int,
        parent: Node | None,
        hint_timestamp: int | None = None,
    ) -> None:
        super().__init__(partitions, RecordKey("record", state.name, offset), parent)
        self.state = state
        self.offset = offset
        self.hint_timestamp = hint_timestamp
        self.fixed_ino = record_ino(state.index, offset)

    def rendered(self) -> RenderedRecord:
        found = self.state.record_finder.find(self.offset)
        if found is None:
            raise NotFound(f"{self.state.name}: no record at offset {self.offset}")
        return found

    def attr(self) -> Attr:
        found = self.rendered()
        return file_attr(len(found.data), ms_to_ns(found.timestamp, self.partitions.mount_ns), STABLE_TIMEOUT)

    def quick_attr(self) -> Attr:
        ts = self.hint_timestamp if self.hint_timestamp is not None else -1
        return file_attr(0, ms_to_ns(ts, self.partitions.mount_ns), 0)

    def _open(self) -> Handle:
        return BytesHandle(self.rendered().data)

    def open_now(self) -> Handle | None:
        found = self.state.record_finder.cached(self.offset)  # the lookup just before rendered it
        return BytesHandle(found.data) if found is not None else None


class RangeFile(File):
    """``by-offset/<first>-<last>.jsonl`` and ``by-time/<ts1>..<ts2>.jsonl``: its key is a
    :class:`~.nodes.RangeKey`. Its layout lives as long as the node: its
    bytes never change (each piece reads the segment it was laid out from) and it grows while the range
    reaches the log end; after a compaction or retention, a new lookup gets a new node."""

    key: RangeKey

    def __init__(
        self, partitions: Partitions, state: PartitionState, key: RangeKey, parent: Node | None, name: str = ""
    ) -> None:
        super().__init__(partitions, key, parent)
        self.state = state
        self.name = name
        self._lock = threading.Lock()
        if key.kind == OFFSET_RANGE:
            self.layout = state.offset_range(key.first, key.last)
        else:
            self.layout = state.time_range(key.first, key.last)

    def rewritten(self) -> bool:
        """Whether compaction or retention rewrote the partition since this node was looked up."""
        return self.key.rewrites != self.state.rewrites

    def attr(self) -> Attr:
        with self._lock:
            if not self.layout.complete:
                self.state.refresh()
                self.state.extend_range(self.layout)
        growing = not self.layout.complete
        mtime = self.partitions.records_mtime_ns(self.state) if growing else self.partitions.mount_ns
        return file_attr(self.layout.total(), mtime, VOLATILE_TIMEOUT if growing else STABLE_TIMEOUT)

    def volatile(self) -> bool:
        return not self.layout.complete

    def _open(self) -> Handle:
        return RangeHandle(self.state, self.layout)


class ByTimeDir(_RecordsDir):
    _range_kind = TIME_RANGE

    def _record_offset(self, state: PartitionState, name: str) -> int | None:
        ts = names.parse_time_file(name)
        if ts is None:
            return None
        found = state.log.offset_for_timestamp(ts)
        if found is None and state.catch_up():  # every record known is older: look for new ones once
            found = state.log.offset_for_timestamp(ts)
        if found is None:
            raise NotFound(name)
        return found[0]

    def _range_bounds(self, name: str) -> tuple[int, int] | None:
        return names.parse_time_range(name)


#: A partition's folders looked up on the FUSE loop once it is open (:meth:`PartitionDir.lookup_now`).
_FOLDERS_NOW = frozenset((names.BY_OFFSET, names.BY_TIME, names.SEGMENTS))

_CHILDREN: dict[str, type[Node]] = {
    names.BY_OFFSET: ByOffsetDir,
    names.BY_TIME: ByTimeDir,
    names.SEGMENTS: SegmentsDir,
    names.PARTITION_JSON: PartitionJsonFile,
    names.APPEND: AppendFile,
    key_nodes.BY_KEY: key_nodes.ByKeyDir,
    key_nodes.TABLE: key_nodes.TableFile,
    key_nodes.TRANSACTIONS_JSON: key_nodes.TransactionsFile,
}
