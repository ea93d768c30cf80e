"""segments/: the partition folder's files, byte-identical, in Kafka's order; one lstat a lookup."""

from __future__ import annotations

import os

import pytest

from kafkafs.errors import NotFound, NotPermitted

from ..conftest import tree_of


def test_segments_are_byte_identical(tree, built_logdir):
    listed = tree.listdir("orders-0/segments")
    on_disk = sorted(n for n in os.listdir(built_logdir / "orders-0") if not n.endswith((".tmp", ".deleted")))
    assert sorted(listed) == on_disk
    assert {"leader-epoch-checkpoint", "partition.metadata"} <= set(listed) and any(n.endswith(".snapshot") for n in listed)
    assert listed[:2] == ["leader-epoch-checkpoint", "partition.metadata"]
    for name in listed:
        assert tree.read_file(f"orders-0/segments/{name}") == (built_logdir / "orders-0" / name).read_bytes()
        assert (
            tree.resolve(f"orders-0/segments/{name}").attr().size
            == (built_logdir / "orders-0" / name).stat().st_size
        )


def test_segment_file_lookup_stats_the_file_once(tree, built_logdir, monkeypatch):
    """A lookup of segments/<name> makes one lstat: the node keeps the inode the check found."""
    segments = tree.resolve("orders-0/segments")
    name = tree.listdir("orders-0/segments")[-1]
    path = built_logdir / "orders-0" / name
    seen = []
    real_lstat = os.lstat

    def counting_lstat(p, *args, **kwargs):
        seen.append(os.fspath(p))
        return real_lstat(p, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", counting_lstat)
    node = segments.lookup(name)
    monkeypatch.undo()
    assert seen == [os.fspath(path)]
    assert node.file_id == path.lstat().st_ino and not node.replaced()


def test_segments_lists_every_file_but_transient_ones(logdir_copy):
    """SPEC §3: every file of the partition folder (producer snapshots, the state files, any other
    regular file); not files on their way in or out of the log, which vanish at any moment."""
    folder = logdir_copy / "events-3"
    first = sorted(folder.glob("*.log"))[0].name[:20]
    shown = [f"{first}.snapshot", "00000000000000000099.snapshot", "quorum-state", "notes.txt"]
    hidden = [f"{first}.log.deleted", f"{first}.index.deleted", f"{first}.log.cleaned", f"{first}.timeindex.swap",
              "leader-epoch-checkpoint.tmp"]
    for name in shown + hidden:
        (folder / name).write_bytes(b"x")
    t = tree_of(logdir_copy)
    try:
        listed = t.listdir("events-3/segments")
        assert set(shown) <= set(listed) and not set(hidden) & set(listed)
        assert listed[:3] == ["leader-epoch-checkpoint", "partition.metadata", "quorum-state"]
        assert listed[-1] == "notes.txt" and listed.index(f"{first}.snapshot") == listed.index(f"{first}.log") + 3
        for name in hidden:
            with pytest.raises(NotFound):
                t.resolve(f"events-3/segments/{name}")
        for name in listed:
            assert t.read_file(f"events-3/segments/{name}") == (folder / name).read_bytes()
        with pytest.raises(NotPermitted):
            t.resolve("events-3/segments/leader-epoch-checkpoint").open(True)
    finally:
        t.close()


