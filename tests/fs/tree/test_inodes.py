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
