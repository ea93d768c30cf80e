"""fs/views/piececache: PieceCache (small, bounded, shared by the threads serving one open file) and
the claims on pieces being rendered (a read that needs one waits, in a thread or on the FUSE loop)."""

from __future__ import annotations

import threading
import time

from kafkafs.fs.views.layout import Layout
from kafkafs.fs.views.piececache import KEPT, NOT_RENDERING, WILL_WAKE, PieceCache


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
