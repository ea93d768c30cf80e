"""Long-lived worker threads for the blocking half of each FUSE request.

``trio.to_thread.run_sync`` does the same job, but its bookkeeping costs about 270 µs a call on a small
VM, where handing a call to a waiting thread through a queue and waking the loop with
``TrioToken.run_sync_soon`` costs about 40 µs; a by-offset lookup makes one such trip, a
``records.jsonl`` read one per 128 KiB or more. The loop never blocks: it queues the call and sleeps
until a worker reschedules it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import outcome
import trio

__all__ = ["WorkerPool"]

T = TypeVar("T")


class WorkerPool:
    def __init__(self, threads: int = 16, name: str = "kafkafs-worker") -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(threads)
        ]
        self._started = False
        self._lock = threading.Lock()

    def _start(self) -> None:
        with self._lock:
            if not self._started:
                for thread in self._threads:
                    thread.start()
                self._started = True

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            fn, args, token, task = item
            result = outcome.capture(fn, *args)
            try:
                token.run_sync_soon(trio.lowlevel.reschedule, task, result)
            except trio.RunFinishedError:
                pass  # the loop is gone (shutdown): nobody waits for this result

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` in a worker thread; the calling task sleeps until it returns."""
        if not self._started:
            self._start()
        await trio.lowlevel.checkpoint_if_cancelled()
        task = trio.lowlevel.current_task()
        self._queue.put((fn, args, trio.lowlevel.current_trio_token(), task))

        def abort(_raise_cancel) -> trio.lowlevel.Abort:
            return trio.lowlevel.Abort.FAILED  # a running call cannot be interrupted: wait for it

        result = await trio.lowlevel.wait_task_rescheduled(abort)
        return result

    def stop(self) -> None:
        if self._started:
            for _ in self._threads:
                self._queue.put(None)
