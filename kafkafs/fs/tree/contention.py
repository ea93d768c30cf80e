"""Whether a long request may run on the FUSE loop itself: does the loop's thread get the CPU?

A large ``append`` write (2-3 ms of encoding for 1,000 JSON lines) costs less on the FUSE loop than
through a worker thread while the mount gets the CPU it asks for: no hand-off to a sleeping worker and
no wake-up of the loop when it is done, two cross-CPU wake-ups fewer per write (0.2-0.5 ms). Beside
other busy processes at equal priority it is the other way round: the loop's one thread, busy again at
every write, loses the CPU mid-write far more often than the workers do. Measured on 2 cores with 1,000
writes of 230 KB: on the loop they waited 1-2% of their time for the CPU when the mount had it (its
session at nice -15) and took 22-27% less time than through workers (medians of 4 rounds, three runs);
at equal priority beside other busy processes (load 7-10) they waited 30-48% of their time (workers
10-20%) and took up to twice as long.

:class:`Contention` follows the large writes done on the loop: the share of each one's wall time in
which the thread did not run (wall time less the thread's CPU time: waiting for a CPU or for the GIL),
averaged over the last few. Once that passes :data:`BUSY_ABOVE`, large writes go to the workers for a
while (:data:`BACKOFF` seconds, doubled at each new trip up to :data:`MAX_BACKOFF`), then a few are
tried on the loop again. Work at a low priority (``nice 19``) takes little from the mount and does not
count; other processes that compete for the CPUs do.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["Contention", "BUSY_ABOVE", "WEIGHT", "BACKOFF", "MAX_BACKOFF"]

#: Large writes leave the loop once they waited this share of their time, on average.
BUSY_ABOVE = 0.2
#: The weight of the newest write in that average (about the last 16 writes count: one write that lost
#: the CPU once does not send the next ones away; beside busy processes, 30-48% waited, it takes ~8).
WEIGHT = 1 / 16
#: Seconds large writes then go to the workers before the loop is tried again; doubled at each trip
#: that follows, up to MAX_BACKOFF, and back to BACKOFF after SETTLED writes on the loop in a row.
BACKOFF = 1.0
MAX_BACKOFF = 8.0
SETTLED = 64


class Contention:
    """:meth:`on_loop`: whether the next large write may run on the loop; :meth:`timed` measures one that
    does. Starts on the loop.

    Threads: for the FUSE loop's thread (both methods); a stray call from another thread can at worst
    lose an update of the average."""

    def __init__(
        self,
        *,
        busy_above: float = BUSY_ABOVE,
        weight: float = WEIGHT,
        backoff: float = BACKOFF,
        max_backoff: float = MAX_BACKOFF,
        clock: Callable[[], float] = time.monotonic,
        thread_clock: Callable[[], float] = time.thread_time,
    ) -> None:
        self.busy_above = busy_above
        self.weight = weight
        self.first_backoff = backoff
        self.max_backoff = max_backoff
        self.clock = clock
        self.thread_clock = thread_clock
        #: the average share of a large write's time the loop's thread waited, since it last went back there
        self.waited = 0.0
        #: how often large writes left the loop
        self.trips = 0
        self._backoff = backoff
        self._until: float | None = None  # large writes go to the workers until then
        self._settled = 0

    def on_loop(self) -> bool:
        if self._until is None:
            return True
        if self.clock() < self._until:
            return False
        self._until = None
        self.waited = 0.0
        return True

    @contextmanager
    def timed(self) -> Iterator[None]:
        """Measure the block, one large write on the loop; a block that raises is not counted (a write
        that was not done, or refused at once)."""
        start, cpu = self.clock(), self.thread_clock()
        yield
        now = self.clock()
        took = now - start
        if took <= 0:
            return
        waited = min(1.0, max(0.0, took - (self.thread_clock() - cpu)) / took)
        self.waited += self.weight * (waited - self.waited)
        if self.waited > self.busy_above:
            self.trips += 1
            self._until = now + self._backoff
            self._backoff = min(2 * self._backoff, self.max_backoff)
            self._settled = 0
        else:
            self._settled += 1
            if self._settled >= SETTLED:
                self._backoff = self.first_backoff
