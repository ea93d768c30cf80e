"""PartitionState: one partition of the mount (the size of ``records.jsonl``, ranges per segment),
against the engine's own rendering."""

from __future__ import annotations

from ..conftest import expected_jsonl


def test_records_size(tree, built_logdir):
    state = tree.partitions.state("orders-0")
    assert state.composition().total == len(expected_jsonl(built_logdir, "orders-0"))
    assert state.cached_composition() is state.composition()  # known now: nothing rendered again


def test_listed_records_and_segment_ranges(tree):
    state = tree.partitions.state("orders-0")
    log = state.log
    assert state.listed_records() == log.log_end_offset - log.log_start_offset
    ranges = list(state.segment_ranges(0))
    assert [r.first for r in ranges] == log.segments.bases()
    assert ranges[-1].last == log.log_end_offset - 1
    assert all(a.last + 1 == b.first for a, b in zip(ranges, ranges[1:], strict=False))
    assert [r.first for r in state.segment_ranges(ranges[2].first)] == [r.first for r in ranges[2:]]
