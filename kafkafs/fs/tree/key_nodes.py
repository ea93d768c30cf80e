"""The nodes of a topic as a table (SPEC §3): a partition's ``by-key/``, ``table.jsonl`` and
``transactions.json``, and the top's ``groups/`` and ``transactions/``. Each asks its views
(:mod:`kafkafs.fs.views.keys`, :mod:`kafkafs.fs.views.coordinators`) through the mount's
:class:`~.partitions.Partitions`.

Names in ``by-key/`` are ``<name>.json`` (the latest record of the key) and ``<name>.jsonl`` (every
record of it), ``<name>`` as :mod:`kafkafs.format.keynames` names keys; a group or transactional id is
named the same way, ``groups/<name>.json`` and ``transactions/<name>.json``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from ...errors import CorruptRecordError, NotFound
from ...format.keynames import key_name, parse_key_name, split_suffix
from ...storage.groups import OFFSETS_TOPIC
from ...storage.txnstate import TRANSACTION_TOPIC
from ..views.filtered import FilteredStream
from ..views.record import RenderedRecord
from ..views.render import report_corrupt
from .handles import BytesHandle, Handle, Snapshots
from .nodes import (
    VOLATILE_TIMEOUT,
    WATCHED_TIMEOUT,
    Attr,
    Dir,
    File,
    Key,
    Node,
    dir_attr,
    file_attr,
    ms_to_ns,
)
from .partitions import Partitions

__all__ = [
    "BY_KEY", "TABLE", "TRANSACTIONS_JSON", "GROUPS", "TRANSACTIONS",
    "ByKeyDir", "KeyRecordFile", "KeyHistoryFile", "TableFile", "TransactionsFile", "GroupsDir", "TransactionIdsDir",
    "StreamHandle", "top_dirs",
]

BY_KEY = "by-key"
TABLE = "table.jsonl"
TRANSACTIONS_JSON = "transactions.json"
GROUPS = "groups"
TRANSACTIONS = "transactions"


class StreamHandle(Handle):
    """An open of ``table.jsonl`` or ``by-key/<name>.jsonl``: the stream as it was at the open. Another
    open may see another one, so the kernel keeps no pages across opens; and while records may arrive
    (``live``: :meth:`~kafkafs.fs.views.partition.PartitionState.live`) every read comes here (direct
    I/O): the size the kernel holds is then of another moment than the open's stream, and a read capped
    by it, or padded up to it with zeros, ended mid-line or in NUL bytes (review8 R8-1)."""

    def __init__(self, stream: FilteredStream, live: bool) -> None:
        self.stream = stream
        self.direct_io = live

    def read(self, offset: int, size: int) -> bytes:
        return self.stream.read(offset, size)


def _id_named(name: str, every) -> str:
    """The id (a group's, a transactional id) the file name ``name`` of ``groups/`` or ``transactions/``
    names; a ``$sha256:`` name is looked for among ``every()``. NotFound when no id has that name."""
    split = split_suffix(name, (".json",))
    parsed = parse_key_name(split[0]) if split is not None else None
    if parsed is None:
        raise NotFound(name)
    if parsed.key is not None:
        try:
            return parsed.key.decode("utf-8")
        except UnicodeDecodeError:
            raise NotFound(name) from None
    found = next((i for i in every() if f"{key_name(i.encode())}.json" == name), None)
    if found is None:
        raise NotFound(name)
    return found


# ---------------------------------------------------------------------------------------------- by-key/


def _record_timeout(partitions: Partitions, partition: str | None) -> float:
    """How long the kernel may keep a ``by-key/<name>.json``'s name and size: as ``records.jsonl``'s,
    briefly unless the partition's changes come by inotify events (the invalidator then drops what the
    kernel keeps of every file of it that can change, these included). Kept, ``du`` and ``find -size``,
    which read a whole folder before they ``stat`` its names, find them sized by the listing (review24
    R24-5: past 0.1 s each name was looked up again)."""
    return WATCHED_TIMEOUT if partitions.state(partition).watched else VOLATILE_TIMEOUT


class ByKeyDir(Dir):
    """``by-key/``: every name resolves on lookup; listed while the partition holds at most the list
    limit of keys."""

    def attr(self) -> Attr:
        state = self.partitions.state(self.partition_name)
        return dir_attr(state.last_change_ns, timeout=VOLATILE_TIMEOUT)

    def volatile(self) -> bool:
        return True

    def lookup(self, name: str) -> Node:
        split = split_suffix(name)
        if split is None:
            raise NotFound(name)
        stem, suffix = split
        views = self.partitions.key_views(self.partition_name)
        key = views.key_of(stem)
        if key is None:
            raise NotFound(name)
        if suffix == ".json":
            record = KeyRecordFile(self.partitions, Key("by-key-record", self.partition_name, stem), self, key)
            record.rendered()  # NotFound when the key has no record
            return record
        if views.keys.latest(key) is None:  # no record of it (cheaper than laying out its history)
            raise NotFound(name)
        return KeyHistoryFile(self.partitions, Key("by-key-history", self.partition_name, stem), self, key)

    def listing(self, start_id: int) -> Iterator[tuple[int, bytes, Node | int, Attr]]:
        """Every name with the size of its file and the attributes' timeout a lookup gives (sized from
        the listing's own render of the latest records: review24 R24-5, `ls -l by-key/` looked each name
        up, a scan of the active segment each); a name whose size is not known so is given size 0 with
        timeout 0, and its ``stat`` asks."""
        views = self.partitions.key_views(self.partition_name)
        if views.count() > self.partitions.list_limit:
            return
        mount_ns = self.partitions.mount_ns
        timeout = _record_timeout(self.partitions, self.partition_name)
        for i, (name, sized) in enumerate(views.names_sized(), 1):
            if i > start_id:
                node = self._record_file(name)
                attr = (node.quick_attr() if sized is None
                        else file_attr(sized[0], ms_to_ns(sized[1], mount_ns), timeout))
                yield i, os.fsencode(f"{name}.json"), node, attr

    def _record_file(self, name: str) -> KeyRecordFile:
        key = parse_key_name(name)
        return KeyRecordFile(self.partitions, Key("by-key-record", self.partition_name, name), self,
                             key.key if key is not None else None)

    def entries(self, start_id: int) -> Iterator[tuple[int, str, Node]]:
        views = self.partitions.key_views(self.partition_name)
        if views.count() > self.partitions.list_limit:
            return
        for i, name in enumerate(views.names(), 1):
            if i > start_id:
                yield i, f"{name}.json", self._record_file(name)


class KeyRecordFile(File):
    """``by-key/<name>.json``: the latest record of the key, pretty-printed (a tombstone included)."""

    __slots__ = ("name", "record_key")  # one per name the kernel remembers (Node's slots)

    def __init__(self, partitions: Partitions, key: Key, parent: Node | None, record_key: bytes | None) -> None:
        super().__init__(partitions, key, parent)
        self.name = key.name or ""
        self.record_key = record_key

    def rendered(self) -> RenderedRecord:
        views = self.partitions.key_views(self.partition_name)
        record_key = self.record_key if self.record_key is not None else views.key_of(self.name)
        found = views.latest(record_key) if record_key is not None else None
        if found is None:
            raise NotFound(f"{self.partition_name}: no record of key {self.name}")
        return found

    def attr(self) -> Attr:
        found = self.rendered()
        return file_attr(len(found.data), ms_to_ns(found.timestamp, self.partitions.mount_ns),
                         _record_timeout(self.partitions, self.partition_name))

    def quick_attr(self) -> Attr:
        return file_attr(0, self.partitions.mount_ns, 0)

    def volatile(self) -> bool:
        return True

    def _open(self) -> Handle:  # direct I/O while records may arrive: the latest record changes (StreamHandle)
        live = self.partitions.state(self.partition_name).live()
        return BytesHandle(self.rendered().data, keep_cache=False, direct_io=live)


class KeyHistoryFile(File):
    """``by-key/<name>.jsonl``: every record of the key, in offset order (as of the open)."""

    def __init__(self, partitions: Partitions, key: Key, parent: Node | None, record_key: bytes) -> None:
        super().__init__(partitions, key, parent)
        self.name = key.name or ""
        self.record_key = record_key

    def stream(self) -> FilteredStream:
        found = self.partitions.key_views(self.partition_name).history(self.record_key)
        if found is None:
            raise NotFound(f"{self.partition_name}: no record of key {self.name}")
        return found

    def attr(self) -> Attr:
        return file_attr(self.stream().total, self.partitions.records_mtime_ns(
            self.partitions.state(self.partition_name)), VOLATILE_TIMEOUT)

    def volatile(self) -> bool:
        return True

    def _open(self) -> Handle:
        return StreamHandle(self.stream(), self.partitions.state(self.partition_name).live())


# ---------------------------------------------------------------------------------------------- table.jsonl, transactions.json


class TableFile(File):
    """``table.jsonl``: the latest record of every key whose latest record is not a tombstone. While a
    batch it needs is damaged (or the disk will not give it) its ``stat`` works, size 0 and kept by the
    kernel for no time, and its open fails with EIO: damage fails only the reads that need its bytes
    (SPEC §3), and ``ls -l`` of the partition folder is not one of them (review15 R15-12)."""

    def attr(self) -> Attr:
        state = self.partitions.state(self.partition_name)
        try:
            total = self.partitions.key_views(self.partition_name).table().total
        except CorruptRecordError as exc:
            report_corrupt(exc)
            return file_attr(0, self.partitions.records_mtime_ns(state), 0)
        return file_attr(total, self.partitions.records_mtime_ns(state), VOLATILE_TIMEOUT)

    def quick_attr(self) -> Attr:
        return file_attr(0, self.partitions.mount_ns, 0)  # a listing never makes a table

    def volatile(self) -> bool:
        return True

    def _open(self) -> Handle:
        table = self.partitions.key_views(self.partition_name).table()
        return StreamHandle(table, self.partitions.state(self.partition_name).live())


class _JsonFile(File):
    """A small JSON file rendered on each open and each ``getattr`` (``render``, given by whoever made
    it, returns None when there is nothing of that name). Its attributes are never kept by the kernel
    (timeout 0: what it shows changes with no event the kernel is told of); its size and the bytes its
    open files read come from one snapshot at a time (:class:`~.handles.Snapshots`, review14 R14-9)."""

    def __init__(self, partitions: Partitions, key: Key, parent: Node | None, render) -> None:
        super().__init__(partitions, key, parent)
        self.name = key.name or ""
        self._render = render
        self.snapshots = Snapshots()

    def render(self) -> bytes:
        data = self._render()
        if data is None:
            raise NotFound(self.name)
        return data

    def attr(self) -> Attr:
        return file_attr(len(self.snapshots.attr_data(self.render)), self.partitions.mount_ns, 0)

    def quick_attr(self) -> Attr:
        return file_attr(0, self.partitions.mount_ns, 0)

    def volatile(self) -> bool:
        return True

    def _open(self) -> Handle:
        return self.snapshots.open(self.render)


class TransactionsFile(_JsonFile):
    """``transactions.json``: the partition's open transactions, last stable offset, aborted ranges."""

    def __init__(self, partitions: Partitions, key: Key, parent: Node | None) -> None:
        super().__init__(partitions, key, parent,
                         lambda: partitions.coordinators.partition_transactions(partitions.state(key.partition)))


# ---------------------------------------------------------------------------------------------- the top


class _IdsDir(Dir):
    """A folder of one ``<name>.json`` per id of a coordinator's topic (named as a key is, SPEC §3),
    rendered on each open; the subclasses say which ids and what JSON."""

    kind = ""  # the Key kind of its files

    def ids(self) -> list[str]:
        raise NotImplementedError

    def json_of(self, ident: str) -> bytes | None:
        raise NotImplementedError

    def attr(self) -> Attr:
        return dir_attr(self.partitions.mount_ns, timeout=VOLATILE_TIMEOUT)

    def volatile(self) -> bool:
        return True

    def _file(self, ident: str) -> _JsonFile:
        return _JsonFile(self.partitions, Key(self.kind, None, ident), self, lambda: self.json_of(ident))

    def lookup(self, name: str) -> Node:
        node = self._file(_id_named(name, self.ids))
        node.render()
        return node

    def entries(self, start_id: int) -> Iterator[tuple[int, str, Node]]:
        for i, ident in enumerate(self.ids(), 1):
            if i > start_id:
                yield i, f"{key_name(ident.encode())}.json", self._file(ident)


class GroupsDir(_IdsDir):
    """``groups/``: one ``<name>.json`` per consumer group of ``__consumer_offsets``."""

    kind = "group"

    def ids(self) -> list[str]:
        return self.partitions.coordinators.groups()

    def json_of(self, ident: str) -> bytes | None:
        return self.partitions.coordinators.group_json(ident)


class TransactionIdsDir(_IdsDir):
    """``transactions/``: one ``<name>.json`` per transactional id of ``__transaction_state``."""

    kind = "transactional-id"

    def ids(self) -> list[str]:
        return list(self.partitions.coordinators.transaction_ids())

    def json_of(self, ident: str) -> bytes | None:
        return self.partitions.coordinators.transaction_json(ident)


def top_dirs(partitions: Partitions, parent: Node) -> dict[str, Dir]:
    """``groups/`` and ``transactions/``, those the log directory has the topic of."""
    out: dict[str, Dir] = {}
    coordinators = partitions.coordinators
    if coordinators.has(OFFSETS_TOPIC):
        out[GROUPS] = GroupsDir(partitions, Key(GROUPS), parent)
    if coordinators.has(TRANSACTION_TOPIC):
        out[TRANSACTIONS] = TransactionIdsDir(partitions, Key(TRANSACTIONS), parent)
    return out

