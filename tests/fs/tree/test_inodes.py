"""InodeTable: inode numbers and the kernel's lookup counts; computed numbers of by-offset records."""

from __future__ import annotations

import pytest

from kafkafs.fs.tree.inodes import ROOT_INODE, InodeTable
from kafkafs.fs.tree.root import Tree
from kafkafs.storage.logdir import LogDir


@pytest.fixture
def tree(built_logdir):
    t = Tree(LogDir(built_logdir))
    yield t
    t.close()


def test_inode_table_counts_and_forgets(tree):
    table = InodeTable(tree)
    node = tree.resolve("orders-0/by-offset/5-9.jsonl")
    ino, same = table.register(node, count=1)
    assert same is node and ino != ROOT_INODE
    again, known = table.register(tree.resolve("orders-0/by-offset/5-9.jsonl"))
    assert again == ino and known is node  # the same key: the same inode and the same node (its layout)
    table.remember(ino, 2)
    table.forget(ino, 2)
    assert table.get(ino) is node
    table.forget(ino, 1)
    assert table.get(ino) is None
    assert table.register(node)[0] != ino  # a new number after the old one was forgotten
    assert table.get(ROOT_INODE) is tree.root
    table.forget(ROOT_INODE, 100)
    assert table.get(ROOT_INODE) is tree.root


def test_record_inodes_are_computed(tree):
    table = InodeTable(tree)
    node = tree.resolve("orders-0/by-offset/1234.json")
    ino, _ = table.register(node, count=1)
    assert ino == node.fixed_ino and len(table) == 1  # nothing stored for it
    back = table.get(ino)
    assert back.offset == 1234 and back.state.name == "orders-0"
    table.forget(ino, 1)
    assert table.get(ino).offset == 1234


def test_discard_gives_back_references(tree):
    table = InodeTable(tree)
    ino, _ = table.register(tree.resolve("orders-0/records.jsonl"), count=1)
    table.discard_if_unused(ino, taken=1)
    assert table.get(ino) is None


def test_the_tables_shrink_once_the_kernel_forgets_what_a_walk_looked_up(tree):
    """review24 R24-5: `ls -lR` has the kernel remember every name it met; once it forgets them (memory
    pressure, drop_caches) the table's memory goes too (a dict never shrinks when emptied: 344 of the 576
    bytes a name took stayed after all were forgotten)."""
    import sys
    import tracemalloc

    from kafkafs.fs.tree.key_nodes import KeyRecordFile
    from kafkafs.fs.tree.nodes import Key

    table = InodeTable(tree)
    parent = tree.resolve("orders-0/by-key")
    n = 20_000
    names = [f"k-{i:05d}" for i in range(n)]
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        inos = []
        for name in names:
            node = KeyRecordFile(tree.partitions, Key("by-key-record", "orders-0", name), parent, name.encode())
            ino = table.register(node, count=1).ino
            table.attrs_replying(ino)
            table.attrs_given(ino, 0.1)
            inos.append(ino)
        held = tracemalloc.get_traced_memory()[0] - start
        for ino in inos[:-10]:
            table.forget(ino, 1)
        left = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert len(table) == 11  # the root and the ten still remembered
    assert all(table.get(ino) is not None for ino in inos[-10:])
    # what is left is the list of numbers kept here (~36 bytes each), not the table's
    assert left < held // 5, (held, left)
    assert sys.getsizeof(table._nodes) < 100_000 and sys.getsizeof(table._inos) < 100_000  # 20,000: ~600 KB
