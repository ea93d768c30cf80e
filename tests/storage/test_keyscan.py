"""Scanning segments for key entries and building index files in bounded memory."""

from __future__ import annotations

import random

import pytest

from kafkafs.format.keyindex import ENTRY
from kafkafs.format.recordfilter import RecordFilter
from kafkafs.storage import keyscan
from kafkafs.storage.keyindex import KeyIndexStore
from kafkafs.storage.keyscan import ScanDamage, Scanned, scan_entries
from kafkafs.storage.keytable import PartitionKeys
from kafkafs.storage.log import Log

from .helpers import config, open_log
from .keylogs import counted, fill
from .test_keytable import _check_all, _log


def test_spilled_builds_equal_in_memory_builds(tmp_path, monkeypatch):
    log, model = _log(tmp_path, seed=4, batches=300)
    big = log.segments.first()
    whole = tmp_path / "whole.keys"
    with open(whole, "w+b") as f:
        keyscan.build_key_index(big, f, ["k"], size=big.size)
    monkeypatch.setattr(keyscan, "RUN_BYTES", 24 * 7)
    monkeypatch.setattr(keyscan, "LONG_RUN", 2)
    spilled = tmp_path / "spilled.keys"
    with open(spilled, "w+b") as f:
        keyscan.build_key_index(big, f, ["k"], size=big.size)
    assert whole.read_bytes() == spilled.read_bytes()
    _check_all(PartitionKeys(log, KeyIndexStore(tmp_path / "cache")), model)
    log.close()


def test_scans_give_every_counted_record_once(tmp_path):
    log = open_log(tmp_path / "t-0", config(segment_bytes=10**6, compression_type="gzip"))
    model = fill(log, random.Random(2), 120)
    segment = log.segments.first()
    rels = []
    for step in scan_entries(segment, segment.size):
        assert isinstance(step, Scanned)
        entries = step.got.entries
        rels.extend(ENTRY.unpack_from(entries, i)[2] for i in range(0, len(entries), ENTRY.size))
    # keyed data records, aborted ones included (aborts are decided by the queries)
    want = [r.offset for r in model.records if r.key is not None and not r.control]
    assert rels == want
    assert counted(model)
    only = [step for step in scan_entries(segment, segment.size, RecordFilter(key=b"key-5"))]
    found = [ENTRY.unpack_from(s.got.entries, i)[2] for s in only for i in range(0, len(s.got.entries), ENTRY.size)]
    assert found == [r.offset for r in model.records if r.key == b"key-5" and not r.control]
    log.close()


def test_a_scan_stops_at_damage_and_says_where(tmp_path, caplog):
    log = open_log(tmp_path / "t-0", config(segment_bytes=10**6))
    fill(log, random.Random(3), 50, txn=False)
    log.close()
    path = tmp_path / "t-0" / "00000000000000000000.log"
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0x55
    path.write_bytes(bytes(data))
    reader = Log.open(tmp_path / "t-0")
    steps = list(scan_entries(reader.segments.first(), reader.segments.first().size))
    assert isinstance(steps[-1], ScanDamage)
    assert all(isinstance(s, Scanned) for s in steps[:-1])
    assert steps[-1].position <= len(data) // 3
    reader.close()


@pytest.mark.parametrize("compressed", [False, True])
def test_offsets_out_of_order_are_damage(tmp_path, compressed):
    from tests import kafka_layout as kl

    from .helpers import write_segment

    attributes = 1 if compressed else 0
    first = kl.batch(0, [(b"a", b"1", ()), (b"b", b"2", ())], attributes=attributes)
    backwards = kl.batch(1, [(b"c", b"3", ())], attributes=attributes)  # starts inside the batch before
    (tmp_path / "t-0").mkdir()
    write_segment(tmp_path / "t-0", 0, [first, backwards, kl.batch(5, [(b"d", b"4", ())])])
    log = Log.open(tmp_path / "t-0")
    steps = list(scan_entries(log.segments.first(), log.segments.first().size))
    log.close()
    # two neighbours that overlap are both damage (storage/validation.py): a reader stops at the first,
    # as consume and verify say it
    assert isinstance(steps[-1], ScanDamage) and steps[-1].position == 0
    assert "position 0: offsets run past the next batch's base (1, then 1)" in str(steps[-1].error)
    assert steps[:-1] == []
