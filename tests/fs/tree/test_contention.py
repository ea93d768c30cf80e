"""kafkafs.fs.tree.contention: large writes leave the FUSE loop while its thread waits for the CPU, and come
back after a while (clocks are stand-ins: each write says how long it took and how much CPU it had)."""

from __future__ import annotations

from kafkafs.fs.tree.contention import SETTLED, Contention


class _Clocks:
    def __init__(self) -> None:
        self.wall = 100.0
        self.cpu = 5.0


def _write(c: Contention, clocks: _Clocks, took: float, ran: float) -> None:
    assert c.on_loop()
    with c.timed():
        clocks.wall += took
        clocks.cpu += ran


def _contention(clocks: _Clocks) -> Contention:
    return Contention(busy_above=0.15, weight=0.25, backoff=1.0, max_backoff=4.0,
                      clock=lambda: clocks.wall, thread_clock=lambda: clocks.cpu)


def test_writes_that_get_the_cpu_stay_on_the_loop():
    clocks = _Clocks()
    c = _contention(clocks)
    for _ in range(500):
        _write(c, clocks, 0.003, 0.00297)  # 1% waited
    _write(c, clocks, 0.006, 0.003)  # one write preempted once: 50% waited, the average stays below
    assert c.on_loop() and c.trips == 0 and c.waited < 0.15


def test_writes_that_wait_leave_the_loop_for_a_while_longer_each_time():
    clocks = _Clocks()
    c = _contention(clocks)
    _write(c, clocks, 0.006, 0.003)
    _write(c, clocks, 0.006, 0.003)  # 0.125, then 0.22: too much
    assert c.trips == 1 and not c.on_loop()
    clocks.wall += 0.9
    assert not c.on_loop()
    clocks.wall += 0.2  # after 1 s: tried again, the average forgotten
    assert c.on_loop() and c.waited == 0.0
    for backoff in (2.0, 4.0, 4.0):  # doubled at each trip, up to max_backoff
        _write(c, clocks, 0.006, 0.003)
        _write(c, clocks, 0.006, 0.003)
        assert not c.on_loop()
        clocks.wall += backoff - 0.1
        assert not c.on_loop()
        clocks.wall += 0.2
        assert c.on_loop()
    for _ in range(SETTLED):  # writes that get the CPU again: the next trip waits 1 s only
        _write(c, clocks, 0.003, 0.003)
    _write(c, clocks, 0.006, 0.0)
    assert not c.on_loop()
    clocks.wall += 1.1
    assert c.on_loop()


def test_a_write_that_raises_is_not_counted():
    clocks = _Clocks()
    c = _contention(clocks)
    for _ in range(3):
        try:
            with c.timed():
                clocks.wall += 0.01
                raise ValueError
        except ValueError:
            pass
    assert c.waited == 0.0 and c.on_loop()
