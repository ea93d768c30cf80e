"""PartitionState: one partition of the mount (sizes of the views, one record by offset, ranges per
segment), against the engine's own rendering."""

from __future__ import annotations

from kafkafs.format.jsonview import render_record_pretty
from kafkafs.storage.logdir import LogDir

from .conftest import expected_jsonl, tree_of


def test_records_size_and_one_record_by_offset(built_logdir):
    tree = tree_of(built_logdir)
    try:
        state = tree.state("orders-0")
        assert state.records_size() == len(expected_jsonl(built_logdir, "orders-0"))
        found = state.record(777)
        with LogDir(built_logdir) as d:
            view = d.log("orders-0").locate(777)
            batch = view.decode()
            want = render_record_pretty("orders", 0, batch, batch.offsets.index(777))
        assert found is not None and found.data == want and found.timestamp == batch.timestamps[batch.offsets.index(777)]
        assert state.record(state.log.log_end_offset) is None and state.record(-1) is None
    finally:
        tree.close()


def test_listed_records_and_segment_ranges(built_logdir):
    tree = tree_of(built_logdir)
    try:
        state = tree.state("orders-0")
        log = state.log
        assert state.listed_records() == log.log_end_offset - log.log_start_offset
        ranges = list(state.segment_ranges(0))
        assert [r.first for r in ranges] == log.segments.bases()
        assert ranges[-1].last == log.log_end_offset - 1
        assert all(a.last + 1 == b.first for a, b in zip(ranges, ranges[1:], strict=False))
        assert [r.first for r in state.segment_ranges(ranges[2].first)] == [r.first for r in ranges[2:]]
    finally:
        tree.close()
