"""fs/tree/partitions: what every node asks for its partition: states opened on first use and numbered
for the mount's lifetime, generations of records.jsonl, listeners, the values mode checked."""

from __future__ import annotations

import pytest

from kafkafs.errors import InvalidInput, NotFound
from kafkafs.fs.tree.partitions import Partitions
from kafkafs.storage.logdir import LogDir


def test_states_are_opened_once_and_numbered_for_good(built_logdir):
    partitions = Partitions(LogDir(built_logdir))
    try:
        assert partitions.number("events-3") == 0 and partitions.number("orders-0") == 1
        state = partitions.state("orders-0")
        assert partitions.state("orders-0") is state and state.index == 1
        assert partitions.by_number(1) is state and partitions.by_number(0) is None  # events-3 not open
        assert partitions.open_states() == [state]
        generations = partitions.records_generations("orders-0")
        assert partitions.records_generations("orders-0") is generations and generations.state is state
        with pytest.raises(NotFound):
            partitions.state("nosuch-0")
    finally:
        partitions.close()


@pytest.mark.allow_warnings("a listener that fails is logged, and the append stands")
def test_listeners_hear_of_every_state_and_of_appends(logdir_copy):
    partitions = Partitions(LogDir(logdir_copy, writable=True), rw=True)
    try:
        early = partitions.state("events-3")
        changed: list[str] = []
        partitions.add_listener(lambda s: changed.append(s.name))
        later = partitions.state("orders-0")  # opened after: hears too
        appended: list[tuple[str, int | None]] = []
        partitions.add_append_listener(lambda s, base: appended.append((s.name, base)))
        partitions.add_append_listener(lambda s, base: 1 / 0)  # a failing listener fails nothing
        for state in (early, later):
            state.log.append_records([(1_763_700_000_000, None, b"x", ())])
            partitions.appended(state, None)
        assert changed == ["events-3", "orders-0"]
        assert appended == [("events-3", None), ("orders-0", None)]
        assert partitions.records_mtime_ns(later) >= partitions.mount_ns - 10**10
    finally:
        partitions.close()


def test_a_bad_values_mode_is_refused(built_logdir):
    with LogDir(built_logdir) as logdir, pytest.raises(InvalidInput):
        Partitions(logdir, mode="hex")


def test_records_looked_up_in_a_row_are_held_as_one_run(built_logdir):
    """review24 R24-5: each by-offset/ name looked up was kept as its own entry (~165 bytes) until the
    partition's next lookup, so a walk of every partition left them all; offsets in a row are one run."""
    import tracemalloc

    from kafkafs.fs.tree.inodes import record_ino

    partitions = Partitions(LogDir(built_logdir))
    try:
        partitions.load_schemas()  # (the mode is auto: the records looked up are followed)
        n = 50_000
        inos = [record_ino(1, offset) for offset in range(n)]
        tracemalloc.start()
        try:
            start = tracemalloc.get_traced_memory()[0]
            for ino in inos:
                partitions.record_looked_up("orders-0", ino, 60.0)
            used = tracemalloc.get_traced_memory()[0] - start
        finally:
            tracemalloc.stop()
        assert used < 10_000, used  # was ~8 MB
        assert partitions.records_held("orders-0") == inos
        partitions.record_looked_up("orders-0", record_ino(1, 7), 60.0)  # again, and one apart
        partitions.record_looked_up("orders-0", record_ino(1, n + 10), 60.0)
        assert partitions.records_held("orders-0") == [*inos, record_ino(1, n + 10)]
        partitions.record_looked_up("orders-0", record_ino(1, 3), -5.0)  # (already held until later)
        assert len(partitions.records_held("orders-0")) == n + 1
        assert partitions.records_held("events-3") == []
    finally:
        partitions.close()
