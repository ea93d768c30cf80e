"""PieceRenderer: reads render a span ahead once, then are answered from memory."""

from __future__ import annotations

from .conftest import expected_jsonl, tree_of


def test_reads_render_ahead_once_and_then_answer_from_memory(built_logdir, monkeypatch):
    """A read that needs an unrendered piece renders the span after it in one pass (each batch once);
    the reads that follow are answered by ``read_view_now`` without rendering anything."""
    from kafkafs.fs import layout, piecerender
    from kafkafs.fs.caches import PieceCache
    from kafkafs.fs.layout import Renderer

    monkeypatch.setattr(layout, "GROUP_BYTES", 1024)  # several pieces a segment
    monkeypatch.setattr(piecerender, "READ_AHEAD_BYTES", 8 * 1024)
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
    finally:
        tree.close()
