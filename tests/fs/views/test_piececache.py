"""fs/views/piececache: PieceCache (small, bounded, shared by the threads serving one open file) and
the claims on pieces being rendered (a read that needs one waits, in a thread or on the FUSE loop)."""

from __future__ import annotations

import threading
import time

from kafkafs.fs.views.layout import Layout
from kafkafs.fs.views.piececache import (
    BLOCK_PIECES,
    KEPT,
    NOT_RENDERING,
    WILL_WAKE,
    Ahead,
    BufferPool,
    PieceCache,
)


def _layout(pieces: int) -> Layout:
    layout = Layout()
    for i in range(pieces):
        layout.add(0, i * 100, 100, 10, i)
    return layout


def test_piece_cache_drops_the_oldest_and_is_safe_across_threads():
    cache = PieceCache(capacity=3)
    for i in range(5):
        cache.put(i, b"%d" % i)
    assert [cache.get(i) for i in range(5)] == [None, None, b"2", b"3", b"4"]

    def churn(start: int) -> None:
        for i in range(start, start + 2000):
            cache.put(i, b"x")
            cache.get(i - 1)

    threads = [threading.Thread(target=churn, args=(k * 10_000,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cache._items) <= 3


def test_a_claimed_piece_is_waited_for_in_a_thread_and_on_the_loop_never_claimed_twice():
    layout = _layout(6)
    cache = PieceCache()
    assert cache.claim(layout, 1, 3) == 3
    assert cache.claim(layout, 2, 4) is None  # claimed by the first render
    assert cache.claim(layout, 0, 5) == 0  # stops before a claimed piece
    assert (layout, 2) in cache and not cache.has((layout, 2))
    woken: list[str] = []
    assert cache.wake_when_rendered((layout, 2), lambda: woken.append("loop")) == WILL_WAKE
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(cache.wait_rendered((layout, 3))))
    waiter.start()
    time.sleep(0.05)
    assert waiter.is_alive() and not woken  # both wait for the render
    for j in (1, 2, 3):
        cache.put((layout, j), b"%d" % j)
    cache.settle(layout, 1, 3)
    waiter.join(5)
    assert got == [b"3"] and woken == ["loop"]
    assert cache.wake_when_rendered((layout, 2), lambda: None) == KEPT
    # settled without being kept (the render failed): the waiter hears it, and nobody renders it now
    cache.settle(layout, 0, 0)
    assert cache.wait_rendered((layout, 0)) is None
    assert cache.wake_when_rendered((layout, 0), lambda: None) == NOT_RENDERING  # no reader followed yet


def test_spans_of_a_block_render_side_by_side_and_a_read_across_them_is_one_slice_once_both_are_done():
    layout = _layout(BLOCK_PIECES + 2)
    cache = PieceCache(capacity=1000)
    first = cache.block_for(layout, 0, 2)
    second = cache.block_for(layout, 3, 5)
    assert first is not None and second is not None
    block, at = first
    assert second[0] is block and at == 0 and second[1] == 30  # piece 3 at byte 30 of the block
    assert len(block.buffer) == 10 * BLOCK_PIECES
    assert cache.block_for(layout, BLOCK_PIECES - 1, BLOCK_PIECES) is None  # a span never leaves its block
    whole = memoryview(block.buffer)

    def render(lo: int, hi: int) -> None:
        whole[lo * 10 : (hi + 1) * 10] = b"".join(b"piece%04d\n" % j for j in range(lo, hi + 1))
        cache.rendered_into(block, lo, hi)
        for j in range(lo, hi + 1):
            cache.put((layout, j), whole[j * 10 : j * 10 + 10], j * 10)

    render(0, 2)
    assert cache.span_of(layout, 0, 2) == (block.buffer, 0)
    render(6, 8)  # a later span done first: pieces 3..5 between are not
    assert cache.span_of(layout, 1, 6) is None
    render(3, 5)
    assert cache.span_of(layout, 1, 6) == (block.buffer, 10)
    assert bytes(whole[15:65]) == b"".join(b"piece%04d\n" % j for j in range(1, 7))[5:55]


def test_spans_ahead_are_claimed_before_their_threads_start_and_a_closed_file_claims_no_more():
    layout = _layout(40)
    cache = PieceCache()
    started: list = []

    class Spans:
        def span_end(self, layout, i):
            return min(i + 3, len(layout) - 1)

        def start_prefill(self, ahead, cache, span):
            started.append(span)

    ahead = Ahead(layout, None, Spans())
    cache.follow(ahead, 0)  # the reader at piece 0: two spans ahead start at once, claimed already
    assert started == [(1, 4), (5, 8)] and (layout, 8) in cache
    assert cache.claim_ahead(ahead) == (9, 12)  # a prefill thread done with its span goes on
    cache.stop()  # the file was closed (`head`)
    assert cache.claim_ahead(ahead) is None


def test_a_run_rendered_whole_is_kept_beside_the_capacity_then_let_go_once_the_reader_is_past_it():
    """add_run: the pieces of a buffer rendered whole (a file rendered ahead of its open) are kept besides
    the usual capacity; a read across them is one slice of that buffer; once the reader is past them they
    are dropped oldest first, the capacity is the usual one again and the buffer is let go."""
    layout = _layout(12)
    cache = PieceCache(capacity=3)
    buffer = bytearray(b"".join(b"%02d" % i for i in range(6)))
    whole = memoryview(buffer)
    cache.add_run(buffer, 6)
    for i in range(5, -1, -1):
        cache.put((layout, i), whole[2 * i : 2 * i + 2], 2 * i)
    assert all(cache.has((layout, i)) for i in range(6)) and cache.capacity == 9
    found = cache.span_of(layout, 1, 4)  # a bytearray that is no block: one slice across 4 pieces
    assert found is not None and found[0] is buffer and found[1] == 2
    for i in range(6):
        cache.get((layout, i))  # the reader goes through them
    for i in range(6, 12):
        cache.put((layout, i), b"xx")
    assert cache.capacity == 3 and cache._runs == [] and cache._run_pieces == 0
    assert [i for i in range(12) if cache.has((layout, i))] == [9, 10, 11]


def test_a_pool_buffer_is_used_again_only_once_nothing_refers_to_it():
    """BufferPool (issue 25): a buffer taken is given again, resized in place, once no memoryview of it
    and no other reference is left; never while one is; one too large or too small for it is another
    buffer; beyond the pool's bytes a buffer is made and not kept."""
    mib = 1 << 20
    pool = BufferPool(max_bytes=8 * mib, step=mib)
    first = pool.take(3 * mib - 5)
    assert len(first) == 3 * mib - 5
    first_id = id(first)
    view = memoryview(first)[10:20]  # a kept piece, a reply being sent
    del first
    second = pool.take(3 * mib - 5)
    assert id(second) != first_id  # the first is still referred to
    del view
    third = pool.take(2 * mib)  # within the first's 3 MiB, at least half of it: the first, resized
    assert id(third) == first_id and len(third) == 2 * mib
    third[-1] = 7  # its own bytes, the size asked for
    assert pool.take(5 * mib) is not None and pool.reused == 1 and pool.made == 3
    held_before = list(pool._held)
    extra = pool.take(4 * mib)  # 3 + 3 + 5 MiB held in use: over 8 MiB, made and not kept
    assert len(extra) == 4 * mib and pool._held == held_before and pool.made == 4
    del second  # free now, but 3 MiB for 1/4 MiB: too large to give
    alone = pool.take(mib // 4)
    assert len(alone) == mib // 4 and pool.reused == 1 and pool.made == 5
