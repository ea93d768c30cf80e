"""The nodes of a topic as a table, through the tree (no kernel): by-key/, table.jsonl,
transactions.json, groups/ and transactions/ (SPEC §3)."""

from __future__ import annotations

import random

import orjson
import pytest

from kafkafs.errors import NotFound
from kafkafs.format.keynames import key_name
from kafkafs.fs.tree.root import Tree
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir

from ...storage.groupslogs import classic_group, commit_key, commit_value
from ...storage.keylogs import brute, fill
from ...storage.test_txnstate import build


@pytest.fixture
def logs(tmp_path):
    logs = build(tmp_path)  # t-0 (transactions), __transaction_state-0
    with LogDir(logs, Settings({"segment.bytes": 5000}), writable=True) as logdir:
        model = fill(logdir.create_partition("kv", 0), random.Random(5), 150, keys=30)
        logdir.create_partition("__consumer_offsets", 0).append_records(
            [(1, *classic_group("grp/1", 2, [("m", "c", {"kv": [0]})]), ()), (1, commit_key("grp/1", "kv", 0),
                                                                           commit_value(3), ())])
    return logs, model


def _tree(logs, list_limit=100_000):
    return Tree(LogDir(logs), list_limit=list_limit)


def test_by_key_names_and_files(logs):
    path, model = logs
    latest, history, table = brute(model)
    tree = _tree(path)
    try:
        assert {"by-key", "table.jsonl", "transactions.json"} <= set(tree.listdir("kv-0"))
        listed = tree.listdir("kv-0/by-key")
        assert sorted(listed) == sorted(f"{key_name(k)}.json" for k in latest)
        for key, rec in latest.items():
            data = tree.read_file(f"kv-0/by-key/{key_name(key)}.json")
            assert orjson.loads(data)["offset"] == rec.offset
            assert tree.resolve(f"kv-0/by-key/{key_name(key)}.json").attr().size == len(data)
            lines = tree.read_file(f"kv-0/by-key/{key_name(key)}.jsonl").splitlines()
            assert [orjson.loads(line)["offset"] for line in lines] == history[key]
        for name in ("absent.json", "absent.jsonl", "x.txt", "%2f.json", ".json"):
            with pytest.raises(NotFound):
                tree.resolve(f"kv-0/by-key/{name}")
        data = tree.read_file("kv-0/table.jsonl")
        assert [orjson.loads(line)["offset"] for line in data.splitlines()] == table
        assert tree.resolve("kv-0/table.jsonl").attr().size == len(data)
    finally:
        tree.close()


def test_by_key_is_not_listed_past_the_list_limit(logs):
    path, model = logs
    tree = _tree(path, list_limit=5)
    try:
        assert tree.listdir("kv-0/by-key") == []
        key = next(iter(brute(model)[0]))
        assert tree.read_file(f"kv-0/by-key/{key_name(key)}.json")  # names still resolve
    finally:
        tree.close()


def test_groups_and_transactions_at_the_top(logs):
    path, _model = logs
    tree = _tree(path)
    try:
        assert {"groups", "transactions"} <= set(tree.listdir(""))
        assert tree.listdir("groups") == ["grp%2F1.json"]
        group = orjson.loads(tree.read_file("groups/grp%2F1.json"))
        end = tree.partitions.state("kv-0").log.log_end_offset
        assert group["group"] == "grp/1" and group["offsets"][0]["lag"] == end - 3
        assert sorted(tree.listdir("transactions")) == ["app-3.json", "app-4.json", "app-6.json", "app-7.json"]
        assert orjson.loads(tree.read_file("transactions/app-4.json"))["state"] == "CompleteCommit"
        view = orjson.loads(tree.read_file("t-0/transactions.json"))
        assert view["lastStableOffset"] == 7 and [t["hanging"] for t in view["open"]].count(True) == 4
        for name in ("groups/nope.json", "groups/grp/1.json", "transactions/app-3", "groups/grp%2f1.json"):
            with pytest.raises(NotFound):
                tree.resolve(name)
    finally:
        tree.close()


def test_no_groups_folder_without_the_topic(tmp_path):
    (tmp_path / "logs").mkdir()
    with LogDir(tmp_path / "logs", writable=True) as logdir:
        logdir.create_partition("a", 0)
    tree = _tree(tmp_path / "logs")
    try:
        assert "groups" not in tree.listdir("") and "transactions" not in tree.listdir("")
        with pytest.raises(NotFound):
            tree.resolve("groups")
    finally:
        tree.close()


def test_a_by_key_listing_gives_each_name_the_size_its_stat_gives(logs):
    """review24 R24-5: by-key/ listed every name with size 0 and timeout 0, so `ls -l` looked each name
    up (a scan of the active segment each: 11 ms a name); the listing renders the latest records once more
    and gives each name its size, with the timeout a lookup gives (the broker fixtures have no keyed
    records outside Kafka's internal topics: kv's transactions, tombstones and keys are the case)."""
    path = logs[0]
    tree = _tree(path)
    try:
        sized = unsized = 0
        for folder in sorted(p.name for p in path.iterdir() if p.is_dir() and "-" in p.name):
            try:
                node = tree.resolve(f"{folder}/by-key")
            except NotFound:
                continue
            listed = list(node.listing(0))
            assert [(i, n) for i, n, _t, _a in listed] == [(i, n.encode()) for i, n, _t in node.entries(0)]
            for _next_id, name, target, attr in listed:
                if attr.timeout == 0:  # a decoder's topic (Kafka's internal ones here): asked at the stat
                    assert folder.startswith("__"), (folder, name)
                    unsized += 1
                    continue
                looked_up = node.lookup(name.decode())
                assert target.key == looked_up.key
                assert attr == looked_up.attr(), (folder, name)
                sized += 1
        assert sized >= 30 and unsized, (sized, unsized)
    finally:
        tree.close()


def test_by_key_names_of_a_watched_partition_are_kept_long(logs):
    """review24 R24-5: `du` and `find -size` read a folder whole before they stat its names, so by-key/'s
    sizes given with the listing (0.1 s) had expired and every name was looked up again; in a watched
    partition they are kept as records.jsonl's are (an event drops them: the Invalidator)."""
    from kafkafs.fs.tree.nodes import VOLATILE_TIMEOUT, WATCHED_TIMEOUT

    path, _model = logs
    tree = _tree(path)
    try:
        node = tree.resolve("kv-0/by-key")
        name = next(n for _i, n, _t, a in node.listing(0) if a.timeout).decode()
        state = tree.partitions.state("kv-0")
        state.watched = True  # (as the mount's watcher marks a partition it took)
        assert {a.timeout for _i, _n, _t, a in node.listing(0)} == {WATCHED_TIMEOUT}
        assert node.lookup(name).attr().timeout == WATCHED_TIMEOUT
        state.watched = False  # polled
        assert {a.timeout for _i, _n, _t, a in node.listing(0)} == {VOLATILE_TIMEOUT}
        assert node.lookup(name).attr().timeout == VOLATILE_TIMEOUT
    finally:
        tree.close()
