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


def test_reads_render_ahead_once_and_then_answer_from_memory(built_logdir, monkeypatch):
    """A read that needs an unrendered piece renders the span after it in one pass (each batch once);
    the reads that follow are answered by ``read_view_now`` without rendering anything."""
    from kafkafs.fs import layout, partition
    from kafkafs.fs.caches import PieceCache
    from kafkafs.fs.layout import Renderer

    monkeypatch.setattr(layout, "GROUP_BYTES", 1024)  # several pieces a segment
    monkeypatch.setattr(partition, "READ_AHEAD_BYTES", 8 * 1024)
    tree = tree_of(built_logdir)
    try:
        state = tree.state("orders-0")
        calls = []
        render_raw = Renderer.render_raw

        def counted(self, segment, position, size, flt):
            calls.append((segment.base_offset, position, size))
            return render_raw(self, segment, position, size, flt)

        monkeypatch.setattr(Renderer, "render_raw", counted)
        view = state.view_for(None)
        cache = PieceCache()
        want = expected_jsonl(built_logdir, "orders-0")
        out, now = b"", 0
        while len(out) < len(want):
            data = state.read_view_now(view, len(out), 1000, cache) if out else None
            if data is None:
                data = state.read_view(view, len(out), 1000, cache)
            else:
                now += 1
            out += data
        assert out == want and now > len(calls)
        assert len(set(calls)) == len(calls)  # no byte of log rendered twice
        assert max(size for _base, _pos, size in calls) > 4 * 1024  # spans of several pieces
        assert state.current_view(view) is view and state.current_view(None) is None
    finally:
        tree.close()
