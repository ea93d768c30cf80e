"""Key indexes and the queries over them, against a brute-force reading of the same records
(tests/storage/keylogs.py) and against what `clean` keeps."""

from __future__ import annotations

import os
import random
import shutil
import sys

import pytest

from kafkafs.errors import CorruptRecordError, SegmentClosedError
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
    with pytest.raises(CorruptRecordError) as raised:
        keys.table()
    # the batch's own error (its file and position), as every reader says it: the mount logs it once
    assert raised.value.file == str(first) and raised.value.position is not None
    assert "CRC mismatch" in raised.value.reason and str(first) not in raised.value.reason
    assert not caplog.text  # the storage layer says nothing itself
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


@pytest.mark.parametrize("fixture", ["kafka-logs-a", "kafka-logs-b", "kafka-logs-c"])
def test_table_equals_what_clean_keeps_on_the_fixtures(fixtures_dir, tmp_path, fixture):
    """The broker-written fixtures: each compacted partition's table (read where it is) equals what
    `clean` keeps of a copy, minus tombstones and control records, once every record is sealed (the
    copy is rolled first: the cleaner never cleans the active segment)."""
    shutil.copytree(fixtures_dir / fixture, tmp_path / "copy", ignore=shutil.ignore_patterns(".lock"))
    settings = Settings({"cleanup.policy": "compact", "min.compaction.lag.ms": 0})
    tables = {}
    with LogDir(fixtures_dir / fixture, settings) as logdir:
        store = KeyIndexStore(tmp_path / "cache")
        for name in logdir.partition_names():
            log = logdir.log(name)
            if log.config.compact:
                with PartitionKeys(log, store).table() as t:
                    tables[name] = table_offsets(t)
    # a: the group's records all end in tombstones; b: no record has a key; c: a live group
    assert any(tables.values()) == (fixture == "kafka-logs-c")
    with LogDir(tmp_path / "copy", settings, writable=True) as logdir:
        for name in tables:
            log = logdir.log(name)
            if log.log_end_offset > log.active_segment.base_offset:
                log.roll()
            compact(log, now_ms=10**13)
            kept = [r[0] for b in log.read() if not b.header.is_control for r in b if r[3] is not None]
            assert kept == tables[name], name


def test_a_large_active_segment_is_indexed_and_only_its_new_bytes_scanned(tmp_path, monkeypatch):
    monkeypatch.setattr(keytable, "ACTIVE_INDEX_FROM", 2000)
    monkeypatch.setattr(keytable, "ACTIVE_REINDEX_BYTES", 6000)
    log = open_log(tmp_path / "t-0", config(segment_bytes=10**7))  # one segment: the active one
    model = fill(log, random.Random(17), 100, decide_all=True)  # each fill's transactions end in it
    keys = PartitionKeys(log, KeyIndexStore(tmp_path / "cache"))
    _check_all(keys, model)
    first = keys._active
    assert first is not None and first[1] > 2000
    more = fill(log, random.Random(18), 20, decide_all=True)  # appended past what the index holds: scanned
    model.records += more.records
    for pid, ranges in more.aborted_pids.items():
        model.aborted_pids.setdefault(pid, []).extend(ranges)
    _check_all(keys, model)
    assert keys._active is first or keys._active[1] > first[1]
    for _ in range(5):  # far past it: indexed again
        more = fill(log, random.Random(19), 40, txn=False)
        model.records += more.records
    _check_all(keys, model)
    assert keys._active[1] > first[1]
    log.close()


def _scanned_bytes(monkeypatch) -> list[int]:
    """The bytes of segments the key lookups scan from here on (each scan's span)."""
    spans: list[int] = []
    real = keytable.scan_entries

    def counting(segment, size, record_filter=None, start=0, **kwargs):
        spans.append(size - start)
        return real(segment, size, record_filter, start, **kwargs)

    monkeypatch.setattr(keytable, "scan_entries", counting)
    return spans


def test_a_run_of_lookups_scans_a_small_active_segment_a_few_times_not_once_a_key(tmp_path, monkeypatch):
    """review24 R24-5: `ls -l by-key/` looks every name up, and each lookup scanned the whole active
    segment (no index below 16 MB): 11 ms a name on a 470 KB segment under load, a 16 MB scan a name on a
    broker's. Lookups that have scanned it twice over get it indexed; only what follows is scanned."""
    log = open_log(tmp_path / "t-0", config(segment_bytes=10**7))  # one segment: the active one
    model = fill(log, random.Random(21), 200, decide_all=True)
    keys = PartitionKeys(log, KeyIndexStore(tmp_path / "cache"))
    size = log.active_segment.size
    spans = _scanned_bytes(monkeypatch)
    latest, _history, _table = brute(model)
    assert len(latest) > 100
    for key, rec in latest.items():
        got = keys.latest(key)
        assert got is not None and got.offset == rec.offset, key
    assert sum(spans) <= 3 * size, (sum(spans) / size, len(latest))
    more = fill(log, random.Random(22), 5, txn=False)  # appended after the index: scanned, and found
    for rec in more.records:
        if rec.key is not None:
            assert keys.latest(rec.key).offset == max(r.offset for r in more.records if r.key == rec.key)
    log.close()


def test_the_lookups_after_a_table_use_its_index_of_the_active_segment(tmp_path, monkeypatch):
    """The listing of by-key/ makes a table (an index of the whole active segment): the lookups of the
    names listed that follow scan nothing of it."""
    log = open_log(tmp_path / "t-0", config(segment_bytes=10**7))
    model = fill(log, random.Random(23), 100, decide_all=True)
    keys = PartitionKeys(log, KeyIndexStore(tmp_path / "cache"))
    with keys.table(tombstones=True) as t:
        assert t.keys
    spans = _scanned_bytes(monkeypatch)
    latest, _history, _table = brute(model)
    for key, rec in latest.items():
        assert keys.latest(key).offset == rec.offset, key
    assert sum(spans) == 0, spans[:5]
    with keys.table() as t:  # made again from the same index
        assert table_offsets(t) == _table
    log.close()


def test_a_copy_without_its_index_files_leaves_aborted_transactions_out(tmp_path):
    """A broker directory copied without its index files (as fixture b): by-key and table.jsonl take the
    aborted transactions a broker's recovery finds, not none (they served aborted records as committed)."""
    log, model = _log(tmp_path, seed=5)
    assert model.aborted_pids and list((tmp_path / "t-0").glob("*.txnindex"))
    log.close()
    for path in (tmp_path / "t-0").iterdir():
        if path.suffix in (".index", ".timeindex", ".txnindex"):
            path.unlink()
    copy = open_log(tmp_path / "t-0", config(segment_bytes=6000), writable=False)
    _check_all(PartitionKeys(copy, KeyIndexStore(tmp_path / "cache")), model)
    copy.close()


@pytest.mark.parametrize(("magic", "codec"), [(0, "GZIP"), (1, "GZIP"), (1, "LZ4")])
def test_keys_in_a_legacy_wrapper_of_a_sealed_segment_are_found(tmp_path, magic, codec):
    # review16 R16-3: a magic 0/1 compressed wrapper's header carries its LAST inner offset, and the
    # index's confirmation took the inner records below it for records of no batch: by-key/ served
    # an older record of the key (or none), though table.jsonl and consume --key were right
    from kafkafs.format.compression import Codec
    from tests.format.test_legacy import broker_like, message

    codec = Codec[codec]
    part = tmp_path / "t-0"
    part.mkdir()
    ts = 1_700_000_000_000
    (part / "00000000000000000000.log").write_bytes(
        message(0, magic, 0, ts, b"K", b"old")
        + broker_like(magic, codec, [(ts + 1, b"K", b"new"), (ts + 2, b"X", b"x")], base_offset=1)
        + broker_like(magic, codec, [(ts + 3, b"A", b"a0"), (ts + 4, b"B", b"b0")], base_offset=3)
    )
    (part / "00000000000000000005.log").write_bytes(b"")  # the active segment: 0 is sealed (indexed)
    with LogDir(tmp_path, Settings()) as logdir:
        keys = PartitionKeys(logdir.log("t-0"), KeyIndexStore(tmp_path / "cache"))
        latest = {k: keys.latest(k) for k in (b"K", b"X", b"A", b"B")}
        assert {k: r.offset for k, r in latest.items() if r is not None} == {b"K": 1, b"X": 2, b"A": 3, b"B": 4}
        assert [r.offset for r in keys.history(b"K")] == [0, 1]
        assert [r.offset for r in keys.history(b"A")] == [3]
        with keys.table() as t:
            assert table_offsets(t) == [1, 2, 3, 4]


def _let_go_while_keyed(monkeypatch, segment, files=None, reuse=None):
    """Retention lets ``segment`` go (its ``close_handlers``, as a read-only log's refresh does) just after
    the key index store took its ``.log`` descriptor to key its index (review26 R26-4); ``files``: then
    does this to its ``.log`` (``"deleted"``: renamed as a broker's retention does, ``"gone"``: removed).
    ``reuse``: a file then opened at once (another open of the mount), which takes the lowest descriptor
    number free."""
    from kafkafs.storage.records import FileRecords

    real_handle, real_fstat = FileRecords.handle, os.fstat
    records = segment.records
    target: list[int] = []
    taken: list[int] = []

    def handle(self):
        got = real_handle(self)
        if self is records and not target and sys._getframe(1).f_code.co_name == "get":
            target.append(got.fd)
            segment.close_handlers()  # the descriptor closes once no one holds it
            path = segment.log_path
            if files == "deleted":
                os.rename(path, f"{path}.deleted")
            elif files == "gone":
                os.unlink(path)
        return got

    def fstat(fd):
        if reuse is not None and target and fd == target[0] and not taken:
            while True:  # the lowest number free goes to the next open
                taken.append(os.open(reuse, os.O_RDONLY))
                if taken[-1] >= target[0]:
                    break
        return real_fstat(fd)

    monkeypatch.setattr(FileRecords, "handle", handle)
    monkeypatch.setattr(os, "fstat", fstat)
    return target, taken


@pytest.mark.parametrize("files", ["deleted", "gone"])
def test_a_segment_let_go_while_its_index_is_keyed_never_fails_with_a_bad_descriptor(tmp_path, monkeypatch, files):
    """review26 R26-4: ``KeyIndexStore.get`` read the ``.log`` descriptor off a handle it did not hold, so
    a segment retention let go at that moment had its descriptor closed before the ``fstat``: the table's
    read failed with EBADF (no errno a read of ``table.jsonl`` may give). Now, as when the segment went a
    moment earlier, the table is made from the segment while its file is on disk (renamed ``.deleted``),
    and once it is gone the segment is closed under the reader (SegmentClosedError: ESTALE)."""
    log, model = _log(tmp_path, seed=21, batches=100)
    log.close()
    reader = Log.open(tmp_path / "t-0")
    target, _taken = _let_go_while_keyed(monkeypatch, reader.segments.first(), files)
    keys = PartitionKeys(reader, KeyIndexStore(tmp_path / "cache"))  # an empty cache: the index is built
    if files == "deleted":
        with keys.table() as t:
            assert table_offsets(t) == brute(model)[2]
    else:
        with pytest.raises(SegmentClosedError):
            keys.table()
    assert target
    monkeypatch.undo()
    reader.close()


def test_a_descriptor_number_reused_while_an_index_is_keyed_never_serves_another_segments_index(tmp_path, monkeypatch):
    """review26 R26-4, the same race when another open takes the closed descriptor's number before the
    ``fstat``: the store keyed the segment by another file (the next segment's) and served that file's
    index from the cache for it (a wrong table). The descriptor is held: the segment's own index, loaded
    from the cache, and the table goes on with the segment still on disk."""
    log, model = _log(tmp_path, seed=22, batches=100)
    log.close()
    reader = Log.open(tmp_path / "t-0")
    _check_all(PartitionKeys(reader, KeyIndexStore(tmp_path / "cache")), model)  # every index in the cache
    reader.close()
    reader = Log.open(tmp_path / "t-0")
    segments = list(reader.segments)
    target, taken = _let_go_while_keyed(monkeypatch, segments[0], reuse=segments[1].log_path)
    keys = PartitionKeys(reader, KeyIndexStore(tmp_path / "cache"))
    try:
        with keys.table() as t:
            got = table_offsets(t)
    finally:
        for fd in taken:
            os.close(fd)
    monkeypatch.undo()
    assert target and taken
    assert got == brute(model)[2]
    reader.close()
