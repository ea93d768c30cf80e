"""Layouts: where each rendered byte of a view comes from (segments, ranges, growth, a truncated log)."""

from __future__ import annotations

import json

import orjson
import pytest

from kafkafs.format.batch import encode_batch
from kafkafs.format.jsonview import ProducerRecord
from kafkafs.fs.handles import NotFound
from kafkafs.fs.layout import GROUP_BYTES
from kafkafs.fs.tree import Tree
from kafkafs.storage.logdir import LogDir

from .conftest import BASE_TS, SMALL_SEGMENTS, expected_jsonl, late_log, tree_of, write_segment


def test_layout_is_compact(tree):
    state = tree.state("orders-0")
    comp = state.composition()
    segments = list(state.log.segments)
    pieces = sum(p.count for p in comp.parts)
    assert pieces <= sum(s.size // GROUP_BYTES + 1 for s in segments)
    assert sum(p.pieces.memory() for p in comp.parts) == pieces * 40


def test_one_record_batches(tmp_path):
    """Memory follows the segment's bytes, not its batch count; and the bytes are the same."""
    rows = [encode_batch([(BASE_TS + i, b"k", b'{"n":%d}' % i, ())], base_offset=i) for i in range(3000)]
    write_segment(tmp_path / "tiny-0", 0, rows)
    t = Tree(LogDir(tmp_path))
    try:
        data = t.read_file("tiny-0/records.jsonl", chunk=4096)
        assert data == expected_jsonl(tmp_path, "tiny-0")
        comp = t.state("tiny-0").composition()
        assert sum(p.count for p in comp.parts) <= len(b"".join(rows)) // GROUP_BYTES + 1
        assert t.read_file("tiny-0/by-offset/17-2500.jsonl") == expected_jsonl(tmp_path, "tiny-0", 17, 2500)
        assert json.loads(t.read_file("tiny-0/by-offset/2999.json"))["value"] == {"n": 2999}
    finally:
        t.close()


def test_growing_range_continues_where_it_stopped(logdir_copy):
    t = tree_of(logdir_copy, rw=True)
    try:
        growing = t.resolve("events-3/by-offset/2-400.jsonl")
        time_range = t.resolve(f"events-3/by-time/{BASE_TS + 1}..{BASE_TS + 10**6}.jsonl")
        assert growing.attr().size and time_range.attr().size
        handle = t.resolve("events-3/append").open(True)
        for i in range(30):
            handle.write(0, b"".join(b"more %d %d\n" % (i, j) for j in range(7)))
            if i % 4 == 0:
                t.resolve("events-3/records.jsonl").attr()  # lay out the active segment meanwhile
                growing.attr()
                time_range.attr()
        handle.flush()
        assert t.read_file("events-3/by-offset/2-400.jsonl") == expected_jsonl(
            logdir_copy, "events-3", 2, 400
        )
        assert growing.attr().size == len(expected_jsonl(logdir_copy, "events-3", 2, 400))
        lines = t.read_file(f"events-3/by-time/{BASE_TS + 1}..{BASE_TS + 10**6}.jsonl").splitlines()
        assert [json.loads(line)["offset"] for line in lines] == [1, 2, 3, 4]
        # newer records arrived, but a time range never ends: a late record (CreateTime) still joins it
        assert time_range.volatile()
        size = time_range.attr().size
        handle.write(0, b'{"value": "late", "timestamp": %d}\n' % (BASE_TS + 3))
        end = t.state("events-3").log.log_end_offset
        assert time_range.attr().size > size
        lines = t.read_file(f"events-3/by-time/{BASE_TS + 1}..{BASE_TS + 10**6}.jsonl").splitlines()
        assert [json.loads(line)["offset"] for line in lines] == [1, 2, 3, 4, end - 1]
        assert time_range.attr().size == len(b"".join(line + b"\n" for line in lines))
    finally:
        t.close()


def test_a_time_range_skips_what_cannot_hold_its_records(tmp_path, monkeypatch):
    """Sealed segments whose largest timestamp is below the range, and v2 batches whose header says
    the same, are not decoded."""
    from kafkafs.storage.records import BatchView

    records = late_log(tmp_path)
    decoded = []
    real = BatchView.decode

    def counting(self, *args, **kwargs):
        decoded.append(self.header.base_offset)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(BatchView, "decode", counting)
    t = Tree(LogDir(tmp_path))
    try:
        ts1, ts2 = BASE_TS + 100_000, BASE_TS + 100_500
        data = t.read_file(f"late-0/by-time/{ts1}..{ts2}.jsonl")
        want = [r.offset for r in records if ts1 <= r.timestamp < ts2]
        assert [orjson.loads(line)["offset"] for line in data.splitlines()] == want
        old_blocks = {r.offset // 6 * 6 for r in records if r.timestamp < BASE_TS + 100_000}
        assert not old_blocks & set(decoded)
    finally:
        t.close()


def test_a_truncated_log_is_laid_out_afresh(logdir_copy):
    t = tree_of(logdir_copy)
    try:
        before = t.read_file("events-3/records.jsonl")
        assert json.loads(t.read_file("events-3/by-offset/0.json"))["value"] == "event 0"
        with LogDir(logdir_copy, SMALL_SEGMENTS, writable=True) as d:
            log = d.log("events-3")
            log.truncate_to(3)
            log.append_records([ProducerRecord(None, None, b"rewritten", ())] * 2)
        t.state("events-3").refresh(force=True)
        after = t.read_file("events-3/records.jsonl")
        assert after == expected_jsonl(logdir_copy, "events-3") != before
        # the whole batch 0..4 was cut (Kafka truncates whole batches); offsets 0 and 1 hold new records
        assert json.loads(t.read_file("events-3/by-offset/0.json"))["value"] == "rewritten"
        with pytest.raises(NotFound):
            t.resolve("events-3/by-offset/4.json")
    finally:
        t.close()
