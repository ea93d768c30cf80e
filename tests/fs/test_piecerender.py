"""PieceRenderer: reads render a span ahead once, then are answered from memory."""

from __future__ import annotations

from .conftest import expected_jsonl, tree_of


class _Prefills:
    """Stands in for piecerender's prefill threads: a task waits here until the test runs it. On a busy
    machine a prefill thread may run late, after the reader has rendered that span itself and moved on
    past it (the span is then rendered again, as the first version of this test saw under load); the
    test decides instead when the prefill runs: as soon as each read returns, a machine that keeps up."""

    def __init__(self) -> None:
        self.tasks: list = []

    def submit(self, fn, *args) -> None:
        self.tasks.append((fn, args))

    def run(self) -> int:
        ran = 0
        while self.tasks:
            fn, args = self.tasks.pop(0)
            fn(*args)
            ran += 1
        return ran


def _render_ahead_setup(monkeypatch, read_ahead: int) -> _Prefills:
    """Small pieces and spans; prefills held in a :class:`_Prefills` the test runs when it chooses."""
    from kafkafs.fs import layout, piecerender

    monkeypatch.setattr(layout, "GROUP_BYTES", 1024)  # several pieces a segment
    monkeypatch.setattr(piecerender, "READ_AHEAD_BYTES", read_ahead)
    prefills = _Prefills()
    monkeypatch.setattr(piecerender, "_submit", prefills.submit)
    return prefills


def _count_renders(state, monkeypatch) -> list:
    """(segment, position, size) of every render of the partition's log, in order."""
    calls = []
    render_raw = state.renderer.render_raw

    def counted(segment, position, size, flt):
        calls.append((segment.base_offset, position, size))
        return render_raw(segment, position, size, flt)

    monkeypatch.setattr(state.renderer, "render_raw", counted)  # this partition's only
    return calls


def test_reads_render_ahead_once_and_then_answer_from_memory(built_logdir, monkeypatch):
    """A read that needs an unrendered piece renders the span after it in one pass (each batch once);
    the reads that follow are answered by ``read_view_now`` without rendering anything, the next span
    having been rendered ahead: only the first read of each segment renders (prefills stop at the end
    of a segment)."""
    from kafkafs.fs.caches import PieceCache

    prefills = _render_ahead_setup(monkeypatch, 8 * 1024)
    tree = tree_of(built_logdir)
    try:
        state = tree.state("orders-0")
        calls = _count_renders(state, monkeypatch)
        view = state.view_for(None)
        cache = PieceCache()
        want = expected_jsonl(built_logdir, "orders-0")
        out, now, rendering_reads, prefilled = b"", 0, 0, 0
        while len(out) < len(want):
            data = state.read_view_now(view, len(out), 1000, cache) if out else None
            if data is None:
                data = state.read_view(view, len(out), 1000, cache)
                rendering_reads += 1
            else:
                now += 1
            out += data
            prefilled += prefills.run()
        assert out == want and now > len(calls)
        assert len(set(calls)) == len(calls)  # no byte of log rendered twice
        assert max(size for _base, _pos, size in calls) > 4 * 1024  # spans of several pieces
        assert rendering_reads == len(view.parts) > 1  # one a segment: the rest rendered ahead
        assert prefilled == len(calls) - rendering_reads > 0
    finally:
        tree.close()


def test_a_late_prefill_renders_nothing_the_reader_already_rendered(built_logdir, monkeypatch):
    """A prefill thread that runs only after the reader has rendered its span itself and moved past it
    (a busy machine) renders nothing again, even once the cache has let that span go."""
    from kafkafs.fs.caches import PieceCache

    prefills = _render_ahead_setup(monkeypatch, 4 * 1024)
    tree = tree_of(built_logdir)
    try:
        state = tree.state("orders-0")
        calls = _count_renders(state, monkeypatch)
        view = state.view_for(None)
        cache = PieceCache(capacity=8)  # about two spans: they fall out of the cache soon after they are read
        want = expected_jsonl(built_logdir, "orders-0")
        out, late, by_reads = b"", 0, 0
        while len(out) < len(want):  # the prefills run only every few reads: late, as on a busy machine
            before = len(calls)
            out += state.read_view(view, len(out), 1000, cache)
            by_reads += len(calls) - before
            if len(prefills.tasks) >= 4:  # three spans late: the first one's bytes are gone by then
                late += prefills.run()
        assert out == want and late > 3
        assert len(set(calls)) == len(calls)  # no span rendered twice: a late prefill found it done
        assert len(calls) - by_reads < late  # and most prefills, being late, rendered nothing
    finally:
        tree.close()


def test_the_next_span_is_rendered_ahead_paced_by_the_reader(built_logdir, monkeypatch):
    """After a read renders a span, the next one is rendered on a prefill thread; the one after it only
    once a read reaches the span before it."""
    import time

    from kafkafs.fs import layout, piecerender
    from kafkafs.fs.caches import PieceCache

    monkeypatch.setattr(layout, "GROUP_BYTES", 512)
    monkeypatch.setattr(piecerender, "READ_AHEAD_BYTES", 2048)
    tree = tree_of(built_logdir)
    try:
        state = tree.state("orders-0")
        view = state.view_for(None)
        pieces = view.parts[0].pieces
        cache = PieceCache(capacity=1000)
        first_end = state._pieces._span_end(pieces, 0)
        second_end = state._pieces._span_end(pieces, first_end + 1)
        assert second_end + 1 < len(pieces)

        def rendered(i: int) -> bool:
            deadline = time.monotonic() + 5
            while cache.get((pieces, i)) is None and time.monotonic() < deadline:
                time.sleep(0.01)
            return cache.get((pieces, i)) is not None

        state.read_view(view, 0, 10, cache)
        assert rendered(first_end + 1)  # the next span, ahead of the reader
        time.sleep(0.1)
        assert cache.get((pieces, second_end + 1)) is None  # not two spans ahead
        at = pieces.start(first_end + 1)
        assert state.read_view_now(view, at, 10, cache) is not None  # the reader enters the second span
        assert rendered(second_end + 1)
        want = expected_jsonl(built_logdir, "orders-0")
        assert state.read_view_now(view, at, 5000, cache) == want[at : at + 5000]
    finally:
        tree.close()
