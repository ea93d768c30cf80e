"""A topic as a table through a real mount, with real tools (ls, cat, stat): by-key/ for every kind of
key (UTF-8 with /, %, a leading . or $; binary; empty; huge, named by digest; tombstoned), table.jsonl,
transactions.json, groups/ and transactions/ (SPEC §3)."""

from __future__ import annotations

import os
import random
import subprocess

import orjson

from kafkafs.format.keynames import key_name
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir

from ..storage.groupslogs import classic_group, commit_key, commit_value
from ..storage.keylogs import brute, fill
from ..storage.test_txnstate import build


def _cat(path) -> bytes:
    return subprocess.run(["cat", str(path)], capture_output=True, check=True).stdout


def _offsets(data: bytes) -> list[int]:
    return [orjson.loads(line)["offset"] for line in data.splitlines()]


def test_keys_groups_and_transactions_through_a_mount(tmp_path, mounted):
    logs = build(tmp_path)
    with LogDir(logs, Settings({"segment.bytes": 6000}), writable=True) as logdir:
        model = fill(logdir.create_partition("kv", 0), random.Random(8), 300, keys=300)
        logdir.create_partition("__consumer_offsets", 0).append_records(
            [(1, *classic_group("g", 1, [("m", "c", {"kv": [0]})]), ()), (1, commit_key("g", "kv", 0), commit_value(3), ())])
    latest, history, table = brute(model)
    kinds = {"binary": lambda k: not k.isascii(), "empty": lambda k: k == b"", "huge": lambda k: len(k) > 240,
             "escaped": lambda k: b"/" in k or k.startswith(b"."), "tombstoned": lambda k: latest[k].value is None}
    assert all(any(pick(k) for k in latest) for pick in kinds.values())
    m = mounted(logs, "--cache-dir", str(tmp_path / "cache"))
    kv = m / "kv-0"
    listed = subprocess.run(["ls", str(kv / "by-key")], capture_output=True, check=True, text=True).stdout.split()
    assert sorted(listed) == sorted(f"{key_name(k)}.json" for k in latest)
    for key, rec in latest.items():
        name = key_name(key)
        data = _cat(kv / "by-key" / f"{name}.json")
        assert orjson.loads(data)["offset"] == rec.offset and os.stat(kv / "by-key" / f"{name}.json").st_size == len(data)
        assert (orjson.loads(data)["value"] is None) == (rec.value is None)
        assert _offsets(_cat(kv / "by-key" / f"{name}.jsonl")) == history[key]
    data = _cat(kv / "table.jsonl")
    assert _offsets(data) == table and os.stat(kv / "table.jsonl").st_size == len(data)
    assert not os.path.exists(kv / "by-key" / "nope.json")
    assert orjson.loads(_cat(m / "t-0" / "transactions.json"))["lastStableOffset"] == 7
    assert orjson.loads(_cat(m / "groups" / "g.json"))["offsets"][0]["offset"] == 3
    assert sorted(os.listdir(m / "transactions")) == ["app-3.json", "app-4.json", "app-6.json", "app-7.json"]
    assert list((tmp_path / "cache").glob("*.keys"))  # the key indexes live in the cache folder
