"""WorkerPool: blocking work runs off the trio loop."""

from __future__ import annotations

import threading
import time

import pytest
import trio

from kafkafs.fs.workers import WorkerPool


def test_worker_pool_runs_off_the_loop():
    """Calls block until the loop itself releases them: that only works if the loop keeps running."""
    pool = WorkerPool(threads=2)
    release = threading.Event()
    results = []

    async def main():
        loop_thread = threading.get_ident()

        async def one():
            results.append(await pool.run(lambda: (release.wait(5), threading.get_ident())[1]))

        start = time.monotonic()
        async with trio.open_nursery() as nursery:
            for _ in range(2):
                nursery.start_soon(one)
            await trio.sleep(0.01)  # the loop is alive while both calls block
            release.set()
        assert time.monotonic() - start < 4
        assert len(results) == 2 and loop_thread not in results
        with pytest.raises(ZeroDivisionError):
            await pool.run(lambda: 1 / 0)

    trio.run(main)
    pool.stop()
