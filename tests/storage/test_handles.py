"""The descriptor budget: segments give their files back, safely, while readers are using them."""

from __future__ import annotations

import gc
import os
import resource
from pathlib import Path

from kafkafs.format.jsonview import ProducerRecord
from kafkafs.storage.handles import (
    FileHandle,
    HandleBudget,
    default_budget_limit,
    raise_open_file_limit,
    release_all,
)
from kafkafs.storage.log import Log

from .helpers import config, open_log


def fd_target(fd: int) -> str | None:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except FileNotFoundError:
        return None


def many_segments(directory: Path, n: int = 12) -> None:
    log = open_log(directory, config(segment_bytes=400, index_interval_bytes=50))
    for i in range(n * 6):
        log.append_records([ProducerRecord(1000 + i, None, b"%04d" % i * 10, ())])
    log.close()


def test_a_file_handle_closes_when_the_last_reference_goes(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x")
    handle = FileHandle(os.open(path, os.O_RDONLY))
    fd = handle.fd
    assert fd_target(fd) == str(path)
    del handle
    gc.collect()
    assert fd_target(fd) != str(path)


def test_released_segments_reopen_and_a_reader_in_progress_is_not_disturbed(tmp_path: Path) -> None:
    many_segments(tmp_path / "t-0")
    budget = HandleBudget(limit=2)
    log = Log.open(tmp_path / "t-0", budget=budget)
    assert len(log.segments) >= 10
    first = log.segments.first()  # type: ignore[index]
    reader = first.batches()
    view = next(reader)
    fd = reader.gi_frame.f_locals["fd"]  # type: ignore[union-attr]
    assert fd_target(fd) == str(first.log_path)
    for segment in list(log.segments)[1:]:  # reading them pushes the first one out
        assert segment.find(segment.base_offset) is not None
    assert first not in budget and first._records._handle is None
    assert fd_target(fd) == str(first.log_path)  # still open: the suspended reader holds it
    rest = [v.header.base_offset for v in reader]
    assert [view.header.base_offset, *rest] == [v.header.base_offset for v in first.batches()]
    del reader, view
    gc.collect()
    assert len(budget) <= 2
    assert [r.offset for r in log.records()] == list(range(log.log_end_offset))
    log.close()
    assert len(budget) == 0


def test_the_active_segment_of_a_writer_gives_its_files_back_and_opens_them_again(tmp_path: Path) -> None:
    """review24 R24-6: a writable log's active segment is released like any other (before: pinned, so a
    writer holding thousands of partitions kept three descriptors each outside the budget); its next
    append opens the files again and the indexes go on from the entries in the file."""
    many_segments(tmp_path / "t-0")
    budget = HandleBudget(limit=1)
    log = Log.open(tmp_path / "t-0", config(segment_bytes=400), writable=True, clean_shutdown=True, budget=budget)
    active = log.active_segment
    assert active is not None and not active.pinned
    log.append_records([ProducerRecord(5000, None, b"a", ())])
    for segment in list(log.segments)[:-1]:
        segment.find(segment.base_offset)
    assert active not in budget and active._records._handle is None
    end = log.log_end_offset
    entries = active.offset_index.entries
    for i in range(30):  # appends (and index entries) after the release
        log.append_records([ProducerRecord(5001 + i, None, b"b" * 40, ())])
        if log.active_segment is active:
            budget.release_all()
    assert log.log_end_offset == end + 30
    assert [r.offset for r in log.records()] == list(range(log.log_end_offset))
    assert active.offset_index.entries >= entries
    log.close()
    again = Log.open(tmp_path / "t-0", config(segment_bytes=400), writable=False)
    assert [r.offset for r in again.records()] == list(range(end + 30))
    for segment in again.segments:
        segment.offset_index.sanity_check()
    again.close()


def test_the_open_file_limit_is_raised_to_the_hard_limit() -> None:
    before, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    soft = raise_open_file_limit()
    now, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert soft == now >= before
    assert now == min(hard, 1 << 20) or hard == resource.RLIM_INFINITY
    assert raise_open_file_limit() == soft  # once
    # descriptors: the limit less a quarter of it (at least 64, at most 256) for everything else
    assert default_budget_limit(4096) == 4096 - 256
    assert default_budget_limit(1024) == 1024 - 256
    assert default_budget_limit(256) == 256 - 64
    assert default_budget_limit(100) == 100 - 64
    assert default_budget_limit(40) == 16


class _Owner:
    def __init__(self, pinned: bool = False) -> None:
        self.pinned = pinned
        self.released = 0

    def release_handles(self) -> None:
        self.released += 1


def test_the_budget_counts_descriptors_and_gives_them_all_back_when_none_is_free() -> None:
    budget = HandleBudget(limit=4)
    writer, reader, index, pinned = _Owner(), _Owner(), _Owner(), _Owner(pinned=True)
    budget.opened(writer, 3)  # a writable segment: its .log and two index maps
    budget.opened(reader, 1)
    assert budget.held == 4 and writer.released == 0
    budget.opened(index, 1)  # over: the oldest gives its 3 back
    assert writer.released == 1 and writer not in budget and budget.held == 2
    budget.opened(pinned, 1)
    gone = _Owner()
    budget.opened(gone, 1)
    del gone  # held weakly: a dropped owner keeps nothing alive
    gc.collect()
    assert release_all() >= 2
    assert (reader.released, index.released) == (1, 1) and pinned.released == 0
    assert pinned in budget and budget.held == 1 and len(budget) == 1


def test_owners_that_are_gone_leave_no_entry_behind() -> None:
    # review15 R15-5: under a high limit (the mount raises the open file limit) nothing was over it,
    # so the entry of every segment or key index ever opened stayed: memory grew with segments seen
    budget = HandleBudget(limit=1_000_000)
    kept = _Owner()
    budget.opened(kept, 1)
    owners = [_Owner() for _ in range(500)]
    for owner in owners:
        budget.opened(owner, 2)
    del owners, owner  # their segments left the log
    gc.collect()
    budget.opened(_Owner(), 1)
    assert len(budget) <= 2 and kept in budget
    assert budget.held <= 2
