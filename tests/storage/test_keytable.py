"""Key indexes and the queries over them, against a brute-force reading of the same records
(tests/storage/keylogs.py) and against what `clean` keeps."""

from __future__ import annotations

import random
import shutil

import pytest

from kafkafs.errors import CorruptRecordError
from kafkafs.storage import keytable
from kafkafs.storage.cleaner import compact
from kafkafs.storage.config import Settings
from kafkafs.storage.keyindex import KeyIndexStore
from kafkafs.storage.keytable import PartitionKeys
from kafkafs.storage.log import Log
from kafkafs.storage.logdir import LogDir

from .helpers import config, open_log
from .keylogs import brute, fill, table_offsets


def _log(tmp_path, seed=1, batches=300, **kwargs):
    log = open_log(tmp_path / "t-0", config(segment_bytes=6000))
    model = fill(log, random.Random(seed), batches, **kwargs)
    return log, model


def _check_all(keys: PartitionKeys, model):
    latest, history, table = brute(model)
    for key, rec in latest.items():
        got = keys.latest(key)
        assert got is not None and got.offset == rec.offset, key
        assert [r.offset for r in keys.history(key)] == history[key], key
    assert keys.latest(b"no such key") is None
    assert keys.history(b"no such key") == []
    with keys.table() as t:
        assert table_offsets(t) == table
        assert t.kept == len(table)
        assert t.keys == len(latest)
    assert keys.count_keys() == len(latest)


def test_queries_equal_brute_force(tmp_path):
    log, model = _log(tmp_path)
    assert len(log.segments) > 5
    store = KeyIndexStore(tmp_path / "cache")
    _check_all(PartitionKeys(log, store), model)
    assert store.built == len(log.segments) - 1
    # a second reader loads the indexes from the cache folder
    again = KeyIndexStore(tmp_path / "cache")
    _check_all(PartitionKeys(log, again), model)
    assert again.built == 0 and again.loaded == len(log.segments) - 1
    log.close()


def test_open_transactions_count_until_they_abort(tmp_path):
    log, model = _log(tmp_path, seed=7, batches=200)
    keys = PartitionKeys(log, KeyIndexStore(tmp_path / "cache"))
    _check_all(keys, model)
    # deciding the open transactions changes what counts: sealed indexes stay, the .txnindex decides
    from .keylogs import _marker

    for pid in sorted(model.open):
        _marker(log, model, pid, "ABORT")
    _check_all(keys, model)
    log.close()


def test_table_by_groups_and_ranges_equals_one_pass(tmp_path, monkeypatch):
    log, model = _log(tmp_path, seed=5, batches=300)
    monkeypatch.setattr(keytable, "BITMAP_BUDGET", 40)
    monkeypatch.setattr(keytable, "RANGE_ENTRIES", 16)
    keys = PartitionKeys(log, KeyIndexStore(tmp_path / "cache"))
    with keys.table() as t:
        assert len(t._groups) > 2
        assert table_offsets(t) == brute(model)[2]
    log.close()


def _entry(tmp_path) -> list:
    return sorted((tmp_path / "cache").glob("*.keys"))


def test_damage_in_a_segment_fails_only_what_depends_on_it(tmp_path, caplog):
    log, model = _log(tmp_path, seed=10, batches=200, txn=False)
    log.close()
    first = tmp_path / "t-0" / "00000000000000000000.log"
    data = bytearray(first.read_bytes())
    data[len(data) // 2] ^= 0xFF
    first.write_bytes(bytes(data))
    reader = Log.open(tmp_path / "t-0")
    keys = PartitionKeys(reader, KeyIndexStore(tmp_path / "cache"))
    latest, _history, _table = brute(model)
    second_base = list(reader.segments)[1].base_offset
    newer = [k for k, r in latest.items() if r.offset >= second_base]
    older = [k for k, r in latest.items() if r.offset < second_base]
    assert newer and older
    for key in newer:  # answered by a segment after the damage
        assert keys.latest(key).offset == latest[key].offset
    for key in older:
        with pytest.raises(CorruptRecordError):
            keys.latest(key)
    with pytest.raises(CorruptRecordError):
        keys.history(newer[0])
    with pytest.raises(CorruptRecordError):
        keys.table()
    assert "the key index stops at damage" in caplog.text and "CRC mismatch" in caplog.text
    reader.close()


def test_long_keys_resolve_from_their_digest(tmp_path):
    log, model = _log(tmp_path, seed=11, batches=300)
    keys = PartitionKeys(log, KeyIndexStore(tmp_path / "cache"))
    import hashlib

    longs = {r.key for r in model.records if r.key is not None and len(r.key) > 240}
    assert longs
    for key in longs:
        assert keys.key_for_digest(hashlib.sha256(key).digest()) == key
    assert keys.key_for_digest(hashlib.sha256(b"key-1").digest()) is None
    log.close()


def test_table_equals_what_clean_keeps_minus_tombstones(tmp_path):
    settings = Settings({"segment.bytes": 5000}, {"kv": {"cleanup.policy": "compact", "min.compaction.lag.ms": 0}})
    (tmp_path / "logs").mkdir()
    with LogDir(tmp_path / "logs", settings, writable=True) as logdir:
        log = logdir.create_partition("kv", 0)
        model = fill(log, random.Random(12), 400, decide_all=True)
        log.roll()  # everything sealed: the cleaner never touches the active segment
        log.append_records([(1000, b"after", b"roll", ())])
        model_after = brute(model)[2] + [log.log_end_offset - 1]
        shutil.copytree(tmp_path / "logs", tmp_path / "copy", ignore=shutil.ignore_patterns(".lock"))
        with PartitionKeys(log, KeyIndexStore(tmp_path / "cache")).table() as t:
            table = table_offsets(t)
        assert table == model_after
    with LogDir(tmp_path / "copy", settings, writable=True) as logdir:
        log = logdir.log("kv-0")
        compact(log, now_ms=10**13)
        kept = [(r[0], r[3]) for batch in log.read() if not batch.header.is_control for r in batch]
    assert table == [offset for offset, value in kept if value is not None]
