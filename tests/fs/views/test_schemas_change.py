"""A Schema Registry's schemas that change while the mount runs (review10 R10-8; SPEC §8, §3 "Live"): a
schema registered (or hard-deleted) in LOGDIR's ``_schemas`` topic changes how records render, so the
partitions re-render as after a rewrite, and what an open reader was shown stays as it was shown.
Without FUSE (the mount's test: tests/fs/test_mount_schemas_live.py)."""

from __future__ import annotations

import io
import struct

import fastavro
import orjson
import pytest

from kafkafs.fs.tree.root import Tree
from kafkafs.fs.views.reading import PieceCache
from kafkafs.storage import schemas as schemas_module
from kafkafs.storage.logdir import LogDir

COUNT = {"type": "record", "name": "Count", "fields": [{"name": "n", "type": "long"}]}


def _schema(subject: str, schema_id: int, schema: object | None) -> tuple[bytes, bytes | None]:
    key = orjson.dumps({"keytype": "SCHEMA", "subject": subject, "version": 1, "magic": 1})
    if schema is None:
        return key, None  # a hard delete: the tombstone
    return key, orjson.dumps({"subject": subject, "version": 1, "id": schema_id, "schema": orjson.dumps(schema).decode()})


def _framed(schema_id: int, n: int) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(COUNT), {"n": n})
    return b"\x00" + struct.pack(">I", schema_id) + out.getvalue()


def _append(path, name: str, rows: list[tuple[bytes | None, bytes | None]], per_batch: int = 10) -> None:
    topic, _, number = name.rpartition("-")
    with LogDir(path, writable=True) as logdir:
        log = logdir.log(name) if (path / name).is_dir() else logdir.create_partition(topic, int(number))
        for at in range(0, len(rows), per_batch):
            log.append_records([(1_700_000_000_000 + k, key, value, ())
                                for k, (key, value) in enumerate(rows[at : at + per_batch], at)])


def _logdir(tmp_path):
    path = tmp_path / "logs"
    path.mkdir()
    _append(path, "_schemas-0", [_schema("a-value", 1, {"type": "string"})])
    # records framed with id 2, which the registry does not know yet; many, so that they take many pieces
    _append(path, "data-0", [(b"k%d" % (i % 7), _framed(2, i)) for i in range(300)])
    return path


def _tree(path) -> Tree:
    tree = Tree(LogDir(path), mode="auto")
    tree.partitions.load_schemas()
    return tree


def _values(data: bytes) -> list:
    return [orjson.loads(line)["value"] for line in data.splitlines()]


def _decoded(data: bytes) -> int:
    """How many of the lines of ``data`` show a value decoded by its schema."""
    return sum("valueSchemaId" in orjson.loads(line) for line in data.splitlines())


def test_an_open_stream_keeps_rendering_what_it_was_shown_and_new_lookups_decode(tmp_path, monkeypatch):
    from kafkafs.fs.views import layout as layout_module

    monkeypatch.setattr(layout_module, "GROUP_BYTES", 256)  # many pieces: a read renders only some of them
    path = _logdir(tmp_path)
    tree = _tree(path)
    try:
        partitions = tree.partitions
        state = partitions.state("data-0")
        old = partitions.records_generations("data-0").current()
        view = old.advance()
        assert sum(p.pieces for p in view.parts) > 10
        cache = PieceCache(renderer=state.piece_renderer)
        handle = object()
        old.opened(handle)
        head = bytes(old.read(handle, 0, 4096, cache))  # the reader has read its start, not the rest
        lagging = object()  # another reader, shown the size but nothing read yet (or its pages dropped)
        old.opened(lagging)
        assert _values(head[: head.rindex(b"\n")])[0] == "\x00\x00\x00\x00\x02\x00"  # id 2 unknown: the bytes
        assert _decoded(head[: head.rindex(b"\n")]) == 0
        assert not partitions.follow_schemas()  # nothing changed: nothing is read again

        _append(path, "_schemas-0", [_schema("b-value", 2, COUNT)])  # the registry registers id 2
        assert partitions.follow_schemas()
        assert state.decoding == 1 and old.outdated_for_open() is False  # (within the open grace after its lookup)

        # the open reader reads on: the bytes it was shown, whole lines of the lengths laid out
        rest = bytes(old.read(handle, len(head), view.total, cache))
        shown = head + rest
        assert len(shown) == view.total and shown.endswith(b"\n")
        assert _decoded(shown) == 0 and len(shown.splitlines()) == 300
        assert bytes(old.read(lagging, 0, view.total, PieceCache(renderer=state.piece_renderer))) == shown

        # a new lookup gets a new file, every record decoded; by-offset/, by-key/, table.jsonl too
        new = partitions.records_generations("data-0").current()
        assert new is not old
        cur = new.advance()
        data = bytes(new.read(object(), 0, cur.total, PieceCache(renderer=state.piece_renderer)))
        assert len(data) == cur.total
        assert _values(data) == [{"n": i} for i in range(300)]
        assert orjson.loads(state.record_finder.find(5).data)["value"] == {"n": 5}
        keys = partitions.key_views("data-0")
        assert orjson.loads(keys.latest(b"k3").data) ["value"] == {"n": 297}
        table = keys.table()
        assert [v["n"] for v in _values(table.read(0, table.total))] == list(range(293, 300))
        rng = state.offset_range(10, 12)
        state.extend_range(rng)
        assert _values(bytes(state.read_range(rng, 0, rng.total(), PieceCache()))) == [{"n": 10}, {"n": 11}, {"n": 12}]

        # the old stream follows the records appended since, as the new schemas render them
        _append(path, "data-0", [(b"k0", _framed(2, 300))])
        state.refresh(force=True)
        grown = old.advance()
        tail = bytes(old.read(handle, view.total, grown.total - view.total, cache))
        assert _values(tail) == [{"n": 300}]

        # a hard delete (the tombstone) takes the schema away again: bytes, as Schema Registry resolves it
        _append(path, "_schemas-0", [_schema("b-value", 2, None)])
        assert partitions.follow_schemas() and state.decoding == 2
        again = partitions.records_generations("data-0").current()
        cur = again.advance()
        data = bytes(again.read(object(), 0, cur.total, PieceCache(renderer=state.piece_renderer)))
        assert len(data) == cur.total and _decoded(data) == 0
        assert len(data.splitlines()) == 301
    finally:
        tree.close()


def test_the_schemas_are_read_again_only_when_the_topic_changed(tmp_path, monkeypatch):
    path = _logdir(tmp_path)
    tree = _tree(path)
    reads = []
    real = schemas_module.registry_from_log
    monkeypatch.setattr(schemas_module, "registry_from_log", lambda dirs, *a: reads.append(dirs) or real(dirs, *a))
    try:
        state = tree.partitions.state("data-0")
        for _ in range(5):
            assert not tree.partitions.follow_schemas()
        assert reads == []
        # a record that is not a schema (a registry's NOOP): read again, nothing re-renders
        _append(path, "_schemas-0", [(orjson.dumps({"keytype": "NOOP", "magic": 0}), None)])
        assert not tree.partitions.follow_schemas()
        assert len(reads) == 1 and state.decoding == 0
        assert not tree.partitions.follow_schemas() and len(reads) == 1
    finally:
        tree.close()


def test_a_registry_that_appears_after_the_start_is_followed(tmp_path):
    """No ``_schemas`` topic when the mount started (no decoder at all): the first schema registered
    makes framed values decode."""
    path = tmp_path / "logs"
    path.mkdir()
    _append(path, "data-0", [(None, _framed(2, 7))])
    tree = _tree(path)
    try:
        state = tree.partitions.state("data-0")
        assert state.renderer.decoder is None
        _append(path, "_schemas-0", [_schema("b-value", 2, COUNT)])
        assert tree.partitions.follow_schemas()
        cur = tree.partitions.records_generations("data-0").current().advance()
        assert cur.total == len(b"".join(state.render_piece(p.layout, i) for p in cur.parts for i in range(p.pieces)))
        assert orjson.loads(state.record_finder.find(0).data)["value"] == {"n": 7}
    finally:
        tree.close()


@pytest.mark.parametrize("mode", ["string", "base64"])
def test_other_values_modes_follow_nothing(tmp_path, mode):
    path = _logdir(tmp_path)
    tree = Tree(LogDir(path), mode=mode)
    tree.partitions.load_schemas()
    try:
        tree.partitions.state("data-0")
        _append(path, "_schemas-0", [_schema("b-value", 2, COUNT)])
        assert not tree.partitions.follow_schemas()
    finally:
        tree.close()


def test_the_stamp_sees_appends_new_segments_and_new_folders(tmp_path):
    from kafkafs.storage.schemas import SchemasStamp

    path = tmp_path / "logs"
    path.mkdir()
    stamp = SchemasStamp(path)
    assert not stamp.changed()
    _append(path, "_schemas-0", [_schema("a-value", 1, {"type": "string"})])
    assert stamp.changed() and not stamp.changed()
    _append(path, "_schemas-0", [_schema("b-value", 2, COUNT)])
    assert stamp.changed() and not stamp.changed()
    (path / "_schemas-0" / "00000000000000000100.log").write_bytes(b"")  # a segment rolled
    assert stamp.changed() and not stamp.changed()


def test_a_change_of_the_schemas_waits_for_no_composition(tmp_path):
    """The watcher's thread follows the schemas: it must not wait while a partition is being laid out
    (a first sizing of a large partition takes minutes), and what that sizing lays out meanwhile is
    not taken for the file under the new schemas."""
    import threading

    path = _logdir(tmp_path)
    tree = _tree(path)
    try:
        state = tree.partitions.state("data-0")
        _append(path, "_schemas-0", [_schema("b-value", 2, COUNT)])
        with state._compose_lock:  # a composition being laid out
            follower = threading.Thread(target=tree.partitions.follow_schemas, daemon=True)
            follower.start()
            follower.join(timeout=10)
            assert not follower.is_alive() and state.decoding == 1
        view = tree.partitions.records_generations("data-0").current().advance()
        assert all(part.layout.renderer is state.renderer for part in view.parts)
        data = b"".join(bytes(state.render_piece(p.layout, i)) for p in view.parts for i in range(p.pieces))
        assert len(data) == view.total and _decoded(data) == 300
    finally:
        tree.close()


def test_a_schema_file_added_to_the_schemas_dir_is_followed(tmp_path):
    """R10-8 leftover: ``--schemas DIR`` was read once at the mount; a schema file added there later (or
    edited in place) is now followed as a schema registered in ``_schemas`` is."""
    import os

    path = tmp_path / "logs"
    path.mkdir()
    _append(path, "data-0", [(b"k%d" % (i % 7), _framed(2, i)) for i in range(30)])  # id 2: no schema yet
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "1.avsc").write_text('"string"')
    tree = Tree(LogDir(path), mode="auto")
    try:
        partitions = tree.partitions
        partitions.load_schemas(str(schemas))
        partitions.state("data-0")  # open before the change
        assert _decoded(_rendered(tree)) == 0
        assert not partitions.follow_schemas()
        (schemas / "2.avsc").write_text(orjson.dumps(COUNT).decode())
        assert partitions.follow_schemas() and _decoded(_rendered(tree)) == 30
        assert not partitions.follow_schemas()
        assert _values(_rendered(tree))[5] == {"n": 5}
        other = {"type": "record", "name": "Other", "fields": [{"name": "m", "type": "long"}]}
        with open(schemas / "2.avsc", "r+b") as f:  # edited in place: the same inode
            f.write(orjson.dumps(other))
            f.truncate()
        os.utime(schemas / "2.avsc", ns=(1, 1))  # (a size and time of its own, whatever the clock's grain)
        assert partitions.follow_schemas() and _values(_rendered(tree))[5] == {"m": 5}
    finally:
        tree.close()


def _rendered(tree: Tree) -> bytes:
    state = tree.partitions.state("data-0")
    view = tree.partitions.records_generations("data-0").current().advance()
    return b"".join(bytes(state.render_piece(p.layout, i)) for p in view.parts for i in range(p.pieces))
