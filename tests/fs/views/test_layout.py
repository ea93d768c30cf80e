"""Layouts: where each rendered byte of a view comes from (segments, growth, a truncated log); ranges' in
test_ranges.py."""

from __future__ import annotations

import json

import pytest

from kafkafs.errors import NotFound
from kafkafs.format.batch import encode_batch
from kafkafs.format.jsonview import ProducerRecord
from kafkafs.fs.tree.root import Tree
from kafkafs.fs.views.layout import GROUP_BYTES
from kafkafs.storage.logdir import LogDir

from ..conftest import BASE_TS, SMALL_SEGMENTS, expected_jsonl, tree_of, write_segment


def test_layout_is_compact(tree):
    state = tree.partitions.state("orders-0")
    comp = state.composition()
    segments = list(state.log.segments)
    pieces = sum(p.pieces for p in comp.parts)
    assert pieces <= sum(s.size // GROUP_BYTES + 1 for s in segments)
    assert sum(p.layout.memory() for p in comp.parts) == pieces * 40


def test_one_record_batches(tmp_path):
    """Memory follows the segment's bytes, not its batch count; and the bytes are the same."""
    rows = [encode_batch([(BASE_TS + i, b"k", b'{"n":%d}' % i, ())], base_offset=i) for i in range(3000)]
    write_segment(tmp_path / "tiny-0", 0, rows)
    t = Tree(LogDir(tmp_path))
    try:
        data = t.read_file("tiny-0/records.jsonl", chunk=4096)
        assert data == expected_jsonl(tmp_path, "tiny-0")
        comp = t.partitions.state("tiny-0").composition()
        assert sum(p.pieces for p in comp.parts) <= len(b"".join(rows)) // GROUP_BYTES + 1
        assert t.read_file("tiny-0/by-offset/17-2500.jsonl") == expected_jsonl(tmp_path, "tiny-0", 17, 2500)
        assert json.loads(t.read_file("tiny-0/by-offset/2999.json"))["value"] == {"n": 2999}
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
        t.partitions.state("events-3").refresh(force=True)
        after = t.read_file("events-3/records.jsonl")
        assert after == expected_jsonl(logdir_copy, "events-3") != before
        # the whole batch 0..4 was cut (Kafka truncates whole batches); offsets 0 and 1 hold new records
        assert json.loads(t.read_file("events-3/by-offset/0.json"))["value"] == "rewritten"
        with pytest.raises(NotFound):
            t.resolve("events-3/by-offset/4.json")
    finally:
        t.close()
