"""What a read-only log shows of another process's compaction swap, at every step of it and after a crash
in it (review8 R8-8's remnant): Kafka's ``replaceSegments`` renames the merged segment ``.cleaned`` ->
``.swap`` (its ``.log`` first, then its indexes), renames every segment it replaces ``.deleted``, then the
``.swap`` to its plain name; a broker's recovery completes a ``.swap`` whose base is below every ``.cleaned``
file's and deletes the segments in its offset range, and deletes the other ``.swap`` files. A reader shows
what the broker serves: the old segments until the swap is valid, the merged one from then on, never the
two at once and never neither."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator

from kafkafs.storage import names
from kafkafs.storage.cleaner import compact
from kafkafs.storage.config import Settings
from kafkafs.storage.index import AbstractIndex
from kafkafs.storage.log import Log
from kafkafs.storage.logdir import LogDir
from kafkafs.storage.records import FileRecords

from .helpers import as_history

ROLLING = Settings({"segment.bytes": 300}, {"kv": {"cleanup.policy": "compact"}})
MERGING = Settings({"segment.bytes": 100_000}, {"kv": {"cleanup.policy": "compact"}})  # the cleaner merges


def _fill(log, n: int, tag: bytes, keys: int = 30) -> None:
    with as_history(log):  # keyless records on compacted topics, made-up future times
        for i in range(n):
            log.append_records([(1000 + i, b"k%d" % (i % keys), tag + b"%d" % i, ())])


def _records(log) -> list[tuple[int, bytes | None]]:
    return [(r[0], r[3]) for r in log.records()]


@contextlib.contextmanager
def _read_only_kv(path) -> Iterator[Log]:
    """``kv-0`` of 60 records in small segments, and a read-only log of it that has read them all."""
    with LogDir(path, ROLLING, writable=True) as logdir:
        _fill(logdir.create_partition("kv", 0), 60, b"v")
    with LogDir(path, ROLLING) as reading:
        ro = reading.log("kv-0")
        assert len(_records(ro)) == 60
        yield ro


def test_a_read_only_log_shows_every_record_a_swap_keeps_at_every_step_of_it(tmp_path, monkeypatch):
    """The reader knew 60 records; 60 more rolled (segments it never saw), then the compaction merged every
    sealed segment, those too. Looked at after each rename of the swap, the reader shows either the log
    before the compaction (the swap not yet committed) or the compacted one, whole: before, the records
    rolled and merged since its last look were in no segment it took, inside the swap window (the
    replaced segments renamed ``.deleted``, the merged one still ``.swap``): by-offset/ ENOENT, by-key/ an
    older record (1 of 11,668 reads beside Kafka 4.4, fix13's live10.py)."""
    with _read_only_kv(tmp_path) as ro:
        with LogDir(tmp_path, ROLLING, writable=True) as logdir:
            _fill(logdir.log("kv-0"), 60, b"w")
        with LogDir(tmp_path, ROLLING) as other:
            before = _records(other.log("kv-0"))
        looks: list[tuple[list[str], list[tuple[int, bytes | None]]]] = []

        def look() -> None:
            listed = sorted(os.listdir(ro.dir))
            ro.refresh()
            looks.append((listed, _records(ro)))

        _renames(monkeypatch, look)
        with LogDir(tmp_path, MERGING, writable=True) as logdir:
            assert compact(logdir.log("kv-0"), now_ms=10**13)
            monkeypatch.undo()
            after = _records(logdir.log("kv-0"))
        assert len(after) < len(before)
        inside = [i for i, (listed, _) in enumerate(looks)
                  if "00000000000000000000.log.swap" in listed and "00000000000000000000.log" not in listed]
        assert inside, "no look fell inside the swap window"
        for listed, seen in looks:
            assert seen in (before, after), (listed, [o for o, _ in seen])
        for i in inside:
            assert looks[i][1] == after
        look()
        assert looks[-1][1] == after
        assert all(ro.locate(offset) is not None for offset, _ in after)


def _renames(monkeypatch, on_rename) -> None:
    """Call ``on_rename()`` after every rename of a segment's file (its ``.log``, each index)."""
    file_rename, index_rename = FileRecords.rename, AbstractIndex.rename

    def renamed_file(self, path):
        file_rename(self, path)
        on_rename()

    def renamed_index(self, path):
        index_rename(self, path)
        on_rename()

    monkeypatch.setattr(FileRecords, "rename", renamed_file)
    monkeypatch.setattr(AbstractIndex, "rename", renamed_index)


def _crash_copies_of_a_compaction(tmp_path, monkeypatch, when: Callable[[list[str]], bool] = lambda listed: True):
    """A partition compacted with its log directory copied aside after each rename of the swap (those
    whose partition folder's listing ``when`` takes): (records before, records after, the copies)."""
    work = tmp_path / "w"
    work.mkdir()
    with LogDir(work, ROLLING, writable=True) as logdir:
        _fill(logdir.create_partition("kv", 0), 24, b"v", 6)
    with LogDir(work, ROLLING) as other:
        before = _records(other.log("kv-0"))
    crashes: list = []

    def crash_here() -> None:
        if when(os.listdir(work / "kv-0")):
            crashes.append(tmp_path / f"crash{len(crashes)}")
            shutil.copytree(work, crashes[-1], ignore=shutil.ignore_patterns(".lock"))

    _renames(monkeypatch, crash_here)
    with LogDir(work, MERGING, writable=True) as logdir:
        assert compact(logdir.log("kv-0"), now_ms=10**13)
        monkeypatch.undo()
        after = _records(logdir.log("kv-0"))
    return before, after, crashes


def test_a_read_only_log_of_a_folder_left_inside_a_swap_shows_what_kafkas_recovery_keeps(tmp_path, monkeypatch):
    """A crash at every step of a swap (the log directory copied aside after each rename): a read-only open
    (and its refresh) shows what a broker's recovery (kafkafs's recovery, its copy here) makes of the
    folder: the old segments while the swap was not committed (an index still ``.cleaned``), the merged
    segment once it was, never both and never a gap. Before, the merged segment was ignored: a folder
    left with the first replaced segment renamed ``.deleted`` read from the second one on."""
    before, after, crashes = _crash_copies_of_a_compaction(tmp_path, monkeypatch)
    assert len(crashes) > 8 and len(after) < len(before)
    shown_swap = 0
    for step, crashed in enumerate(crashes):
        listed = sorted(os.listdir(crashed / "kv-0"))
        with LogDir(crashed, MERGING) as reading:
            ro = reading.log("kv-0")
            opened = _records(ro)
            ro.refresh()
            refreshed = _records(ro)
        with LogDir(crashed, MERGING, writable=True) as logdir:
            kafka_like = _records(logdir.log("kv-0"))  # recovery completes or rolls back the swap
        assert kafka_like in (before, after), (step, listed)
        assert opened == kafka_like, (step, listed)
        assert refreshed == kafka_like, (step, listed)
        shown_swap += any(n.endswith(names.LOG + names.SWAP) for n in listed) and kafka_like == after
    assert shown_swap >= 3


def test_a_listing_that_misses_a_segment_renamed_meanwhile_does_not_drop_it(tmp_path, monkeypatch):
    """A listing is no snapshot: one that runs while the ``.swap`` takes its plain name may show neither
    name. The reader looks at the names of a known segment the listing lacks before it lets it go:
    dropped, the log start rose past the merged segment for good (its records gone from by-offset/)."""
    from kafkafs.storage import local_log

    with _read_only_kv(tmp_path) as ro:
        with LogDir(tmp_path, MERGING, writable=True) as logdir:
            assert compact(logdir.log("kv-0"), now_ms=10**13)
            after = _records(logdir.log("kv-0"))
        listing = local_log.regular_files_in_order
        missed = names.segment_file_name(0, names.LOG)

        def listed_while_renaming(*args):
            return [name for name in listing(*args) if name != missed]

        monkeypatch.setattr(local_log, "regular_files_in_order", listed_while_renaming)
        ro.refresh()
        monkeypatch.undo()
        assert ro.log_start_offset == 0
        assert _records(ro) == after


def test_a_read_only_open_lists_its_folder_once_and_takes_a_committed_swap_from_that_listing(tmp_path, monkeypatch):
    """A folder left inside a committed swap (the merged segment ``.swap``, a replaced one ``.deleted``),
    settled: a read-only open lists it once, the swap taken from that listing (it listed it twice, once
    for the segments and once for the swaps: ~14% of a partition's open, issue 25), and shows what
    Kafka's recovery keeps."""

    def committed(listed: list[str]) -> bool:  # the merged segment .swap, a replaced one .deleted
        return any(n.endswith(names.LOG + names.SWAP) for n in listed) and any(n.endswith(names.DELETED) for n in listed)

    _before, after, crashes = _crash_copies_of_a_compaction(tmp_path, monkeypatch, committed)
    assert crashes
    crashed = crashes[0]
    folder = crashed / "kv-0"
    old = os.stat(folder).st_mtime - 3600
    os.utime(folder, (old, old))  # settled: a folder changed just now is listed again (recovery._list)
    listings: list[str] = []
    scandir = os.scandir

    def counted(path=".", *args):
        listings.append(os.fspath(path))
        return scandir(path, *args)

    with LogDir(crashed, MERGING) as reading:
        monkeypatch.setattr(os, "scandir", counted)
        ro = reading.log("kv-0")
        monkeypatch.undo()
        assert listings.count(os.fspath(folder)) == 1, listings
        assert _records(ro) == after
