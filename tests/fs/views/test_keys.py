"""by-key/ and table.jsonl as views: what a name stands for, the latest record, every record, the table
and the key names, against a brute-force reading of the records (tests/storage/keylogs.py)."""

from __future__ import annotations

import random

import orjson
import pytest

from kafkafs.format.keynames import key_name
from kafkafs.fs.views.keys import KeyViews
from kafkafs.fs.views.partition import PartitionState
from kafkafs.storage.config import Settings
from kafkafs.storage.keyindex import KeyIndexStore
from kafkafs.storage.logdir import LogDir

from ...storage.keylogs import brute, fill


@pytest.fixture
def views(tmp_path):
    (tmp_path / "logs").mkdir()
    logdir = LogDir(tmp_path / "logs", Settings({"segment.bytes": 5000}), writable=True)
    log = logdir.create_partition("kv", 0)
    model = fill(log, random.Random(9), 250, keys=60)
    state = PartitionState("kv-0", 0, log, "auto")
    yield KeyViews(state, KeyIndexStore(tmp_path / "cache")), model, log
    logdir.close()


def _offsets(data: bytes) -> list[int]:
    return [orjson.loads(line)["offset"] for line in data.splitlines()]


def test_every_key_resolves_to_its_latest_and_its_history(views):
    keys, model, _log = views
    latest, history, _table = brute(model)
    for key, rec in latest.items():
        assert keys.key_of(key_name(key)) == key
        found = keys.latest(key)
        obj = orjson.loads(found.data)
        assert obj["offset"] == rec.offset and found.data.endswith(b"}\n") and b"\n  " in found.data
        stream = keys.history(key)
        assert _offsets(stream.read(0, stream.total)) == history[key]
    assert keys.latest(b"absent") is None and keys.history(b"absent") is None
    assert keys.key_of("%2f") is None


def test_the_table_and_the_key_names(views):
    keys, model, log = views
    latest, _history, table = brute(model)
    stream = keys.table()
    assert _offsets(stream.read(0, stream.total)) == table
    assert keys.table() is stream  # nothing changed: the same table
    assert keys.count() == len(latest)
    assert sorted(keys.names()) == sorted(key_name(k) for k in latest)
    log.append_records([(1, b"fresh", b"v", ())])
    again = keys.table()
    assert again is not stream and _offsets(again.read(0, again.total))[-1] == log.log_end_offset - 1
    assert keys.count() == len(latest) + 1


@pytest.mark.parametrize("where", ["mid-segment", "in-the-active-segment"])
def test_records_below_the_log_start_offset_are_in_no_view(tmp_path, where):
    # review7 R1: after kafka-delete-records (the log start offset moved inside a segment) table.jsonl,
    # the key names and <key>.jsonl still served the deleted records, while records.jsonl and
    # <key>.json started at the log start
    import dataclasses

    from ...storage.keylogs import Rec

    (tmp_path / "logs").mkdir()
    logdir = LogDir(tmp_path / "logs", Settings({"segment.bytes": 5000}), writable=True)
    log = logdir.create_partition("kv", 0)
    early = [(1000 + i, b"early-%d" % i, b"v" * 50, ()) for i in range(60)]  # keys met only here
    log.append_records(early)
    model = fill(log, random.Random(9), 250, keys=60)
    model.records[:0] = [Rec(i, key, value) for i, (_ts, key, value, _h) in enumerate(early)]
    keys = KeyViews(PartitionState("kv-0", 0, log, "auto"), KeyIndexStore(tmp_path / "cache"))
    segments = list(log.segments)
    assert len(segments) > 3
    start = 30 if where == "mid-segment" else segments[-1].base_offset + 1
    log.log_start_offset = start
    kept = dataclasses.replace(model, records=[r for r in model.records if r.offset >= start])
    latest, history, table = brute(kept)
    all_latest, _all_history, _all_table = brute(model)
    gone = set(all_latest) - set(latest)
    assert gone  # keys whose every record lies below the start
    stream = keys.table()
    assert _offsets(stream.read(0, stream.total)) == table
    assert keys.count() == len(latest)
    assert sorted(keys.names()) == sorted(key_name(k) for k in latest)
    for key in all_latest:
        found = keys.latest(key)
        if key in gone:
            assert found is None and keys.history(key) is None
            continue
        assert orjson.loads(found.data)["offset"] == latest[key].offset
        got = keys.history(key)
        assert _offsets(got.read(0, got.total)) == history[key]
    logdir.close()
