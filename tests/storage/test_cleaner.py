"""Retention and compaction (``kafkafs clean``): what goes, what stays, and that the result is a log
a broker (here: kafka-python's reader) accepts."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

from kafka.record.memory_records import MemoryRecords

from kafkafs.format.batch import encode_batch, encode_control_batch
from kafkafs.storage.cleaner import apply_retention, clean_logdir, compact
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir

from .helpers import as_history


def _fill(log, n, *, key=lambda i: None, value=lambda i: b"v%d" % i, ts=lambda i: 1000 + i):
    with as_history(log):  # keyless records on compacted topics, made-up future times
        for i in range(n):
            log.append_records([(ts(i), key(i), value(i), ())])


def _kv(segment_bytes: int) -> Settings:
    """Topic ``kv`` compacted, in segments of ``segment_bytes`` (100,000: the cleaner merges them)."""
    return Settings({"segment.bytes": segment_bytes}, {"kv": {"cleanup.policy": "compact"}})


def _small_kv(path, keys: int) -> None:
    """``kv-0`` in segments of 300 bytes: 60 records of ``keys`` keys (``k<i % keys>``)."""
    with LogDir(path, _kv(300), writable=True) as logdir:
        _fill(logdir.create_partition("kv", 0), 60, key=lambda i: b"k%d" % (i % keys))


def _rolls_unseen(path) -> None:
    """60 more records of ``kv-0`` (keys k0..k29, values ``w<i>``): segments roll that a reader opened
    before never saw."""
    with LogDir(path, _kv(300), writable=True) as logdir:
        _fill(logdir.log("kv-0"), 60, key=lambda i: b"k%d" % (i % 30), value=lambda i: b"w%d" % i)


@contextlib.contextmanager
def _inside_each_swap(monkeypatch, ro, look: Callable[[], None]) -> Iterator[list[list[str]]]:
    """While open, each time a compaction's swap is under way (the old segments renamed away, the merged
    one still ``.swap``), the names in ``ro``'s folder go to the list it gives, then ``look()`` runs."""
    from kafkafs.storage.segment_files import SegmentFiles

    inside: list[list[str]] = []
    change_suffix = SegmentFiles.change_suffix

    def look_inside_the_swap(segment, suffix: str) -> None:
        if suffix == "" and segment.log_path.name.endswith(".swap"):  # old ones gone, the new one not in place
            inside.append(sorted(os.listdir(ro.dir)))
            look()
        change_suffix(segment, suffix)

    monkeypatch.setattr(SegmentFiles, "change_suffix", look_inside_the_swap)
    try:
        yield inside
    finally:
        monkeypatch.undo()


def _kafka_python_offsets(directory) -> list[int]:
    offsets = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(".log"):
            records = MemoryRecords((directory / name).read_bytes())
            while (batch := records.next_batch()) is not None:
                assert batch.validate_crc()
                offsets.extend(r.offset for r in batch)
    return offsets


def test_dry_run_changes_nothing(tmp_path):
    settings = Settings({"segment.bytes": 300, "retention.ms": 1})
    with LogDir(tmp_path, settings, writable=True) as logdir:
        log = logdir.create_partition("t", 0)
        _fill(log, 30)
        before = sorted(os.listdir(tmp_path / "t-0"))
        lines = clean_logdir(logdir, dry_run=True, now_ms=10**13)
        assert lines and all("would" in line for line in lines)
        assert sorted(os.listdir(tmp_path / "t-0")) == before
        assert log.log_start_offset == 0


def _txn(pid, key, value, ts=1000):
    return encode_batch([(ts, key, value, ())], transactional=True, producer_id=pid, producer_epoch=0, base_sequence=0)


def _marker(kind, pid, ts=1000):
    return encode_control_batch(kind, producer_id=pid, producer_epoch=0, timestamp=ts)


def test_a_live_reader_stops_listing_segments_renamed_deleted(tmp_path):
    from kafkafs.storage.log import Log

    settings = Settings({"segment.bytes": 300, "retention.bytes": 0, "retention.ms": -1})
    with LogDir(tmp_path, settings, writable=True) as logdir:
        log = logdir.create_partition("t", 0)
        _fill(log, 30)
        with Log.open(tmp_path / "t-0") as reader:
            assert len(reader.segments) == len(log.segments) > 1
            apply_retention(log, now_ms=10**13)
            reader.refresh()
            assert reader.segments.bases() == log.segments.bases()
            assert reader.log_start_offset == log.log_start_offset
            assert [n for n in os.listdir(tmp_path / "t-0") if n.endswith(".log.deleted")]


def test_the_background_cleaner_compacts_the_dirtiest_log_and_stops(tmp_path):
    import time

    from kafkafs.storage.cleaner import LogCleaner

    settings = Settings(
        {"segment.bytes": 1024, "log.cleaner.backoff.ms": 10, "log.initial.task.delay.ms": 0,
         "log.retention.check.interval.ms": 100,
         "retention.bytes": 2048, "retention.ms": -1},
        {"kv": {"cleanup.policy": "compact"}},
    )
    with LogDir(tmp_path, settings, writable=True) as logdir:
        kv = logdir.create_partition("kv", 0)
        ev = logdir.create_partition("ev", 0)
        cleaner = LogCleaner(logdir)
        cleaner.start()
        try:
            for i in range(600):
                kv.append_records([(1000 + i, b"k%d" % (i % 10), b"v%d" % i, ())])
                ev.append_records([(1000 + i, None, b"e%d" % i, ())])
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and (kv.size_in_bytes() > 4096 or ev.size_in_bytes() > 4096):
                time.sleep(0.05)
        finally:
            cleaner.stop()
        assert cleaner.errors == 0
        assert kv.size_in_bytes() <= 4096 and ev.size_in_bytes() <= 4096
        assert logdir.cleaner_offsets()[("kv", 0)] > 0
        kept = {}
        for _offset, _ts, key, value, _h in kv.records():
            kept[key] = value
        assert kept == {b"k%d" % k: b"v%d" % (590 + k) for k in range(10)}
        assert [r[3] for r in ev.records()][-1] == b"e599"
    assert not [n for n in os.listdir(tmp_path / "kv-0") if n.endswith((".cleaned", ".swap"))]


def test_clean_reports_progress_on_long_runs(tmp_path):
    import io

    settings = _kv(1000)
    with LogDir(tmp_path, settings, writable=True) as logdir:
        log = logdir.create_partition("kv", 0)
        _fill(log, 200, key=lambda i: b"k%d" % (i % 4))
        quiet, chatty = io.StringIO(), io.StringIO()
        clean_logdir(logdir, now_ms=10**13, dry_run=True, progress=quiet)  # shorter than a second
        assert quiet.getvalue() == ""
        clean_logdir(logdir, now_ms=10**13, progress=chatty, progress_interval=0)
    lines = chatty.getvalue().splitlines()
    assert lines and lines[-1].startswith("clean: 1/1 partition(s), ")
    assert "MiB read" in lines[-1] and "MiB reclaimed" in lines[-1]


def test_a_reader_iterating_across_a_swap_sees_each_offset_once_in_order(tmp_path):
    settings = _kv(300)
    with LogDir(tmp_path, settings, writable=True) as logdir:
        log = logdir.create_partition("kv", 0)
        _fill(log, 60, key=lambda i: b"k%d" % (i % 4))
        active_base = log.active_segment.base_offset
        reader = log.batches(0)
        first = next(reader)[1].header
        assert compact(log, now_ms=10**13)  # merges the sealed segments under the reader
        offsets = [first.base_offset] + [view.header.base_offset for _seg, view in reader]
        assert offsets == sorted(set(offsets))
        assert [o for o in offsets if o >= active_base] == list(range(active_base, 60))


def test_a_swap_is_refused_when_retention_removed_a_segment_meanwhile(tmp_path):
    from kafkafs.storage.segment import LogSegment

    settings = Settings({"segment.bytes": 300})
    with LogDir(tmp_path, settings, writable=True) as logdir:
        log = logdir.create_partition("t", 0)
        _fill(log, 30)
        first = next(iter(log.segments.values()))
        cleaned = LogSegment(log.dir, first.base_offset, log.config, writable=True, suffix=".cleaned")
        log.delete_segments([first], "retention")
        assert log.replace_segments(cleaned, [first]) is False
        assert not [n for n in os.listdir(tmp_path / "t-0") if n.endswith((".cleaned", ".swap"))]


def test_retention_runs_on_its_own_schedule_not_the_cleaners_backoff(tmp_path):
    """Issue 20, defect 6: with nothing to compact the thread slept log.cleaner.backoff.ms (here 60 s)
    between passes, so retention ran every 60 s whatever log.retention.check.interval.ms said (0.2 s)."""
    import time

    from kafkafs.storage.cleaner import LogCleaner

    settings = Settings({"segment.bytes": 300, "log.cleaner.backoff.ms": 60_000, "log.initial.task.delay.ms": 0,
                         "log.retention.check.interval.ms": 200, "retention.ms": 60_000})
    clock = [2_000_000_000_000]
    with LogDir(tmp_path, settings, writable=True) as logdir:
        ev = logdir.create_partition("ev", 0)
        _fill(ev, 40, ts=lambda i: clock[0] + i)
        segments = len(ev.segments)
        assert segments > 3
        cleaner = LogCleaner(logdir, clock=lambda: clock[0])
        cleaner.start()
        try:
            time.sleep(0.5)  # the first pass: nothing is old yet, nothing to compact (backoff 60 s)
            assert len(ev.segments) == segments
            clock[0] += 10**9  # the records are now past retention.ms
            deadline = time.monotonic() + 20  # a loaded machine; the backoff alone would be 60 s
            while time.monotonic() < deadline and len(ev.segments) == segments:
                time.sleep(0.05)
            assert len(ev.segments) < segments, "retention did not run within 20 s of its 0.2 s interval"
            assert cleaner.idle_wait() <= 0.2
        finally:
            cleaner.stop()
        assert cleaner.errors == 0


def test_a_dry_run_predicts_what_the_real_run_does_with_compact_and_delete(tmp_path):
    """review7 R8: with cleanup.policy compact,delete the dry run listed the retention deletions AND a
    compaction of the same segments; the real run deletes them first and compacts what is left."""
    import shutil

    settings = Settings({"segment.bytes": 300, "cleanup.policy": "compact,delete", "min.cleanable.dirty.ratio": 0.01})
    (tmp_path / "a").mkdir()
    with LogDir(tmp_path / "a", settings, writable=True) as logdir:
        log = logdir.create_partition("t", 0)
        _fill(log, 40, key=lambda i: b"k%d" % (i % 3), ts=lambda i: 1000 if i < 20 else 10**13)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    retention = Settings({"segment.bytes": 300, "cleanup.policy": "compact,delete", "min.cleanable.dirty.ratio": 0.01,
                          "retention.ms": 10**12})
    with LogDir(tmp_path / "a", retention) as logdir:
        predicted = clean_logdir(logdir, dry_run=True, now_ms=10**13 + 5)
    with LogDir(tmp_path / "b", retention, writable=True) as logdir:
        done = clean_logdir(logdir, now_ms=10**13 + 5)
    assert any("would delete" in line for line in predicted) and any("compact" in line for line in done)
    assert [line.replace("would delete", "deleted").replace("would compact", "compacted") for line in predicted] == done


def test_a_read_only_log_listed_just_before_a_swap_keeps_no_segment_the_swap_removed(tmp_path, monkeypatch):
    """review8 R8-2 (HIGH): a reader (a read-only mount) beside a compaction of another process (a broker's
    cleaner, ``kafkafs clean``) listed the folder just before the swap, then found the merged segment
    swapped in at the first base: the segments it replaced, renamed away before the new file took its
    name (Kafka's replaceSegments order), stayed in the reader's list above it, and the new segment's
    last batch ran past the next one's base: "corrupt batch ... offsets run past the next batch's base"
    logged for a healthy segment, and EIO, until a later look."""
    from kafkafs.storage import local_log

    _small_kv(tmp_path, 4)
    settings = _kv(100_000)  # the cleaner merges
    with LogDir(tmp_path, settings) as reading:
        ro = reading.log("kv-0")
        before = [view.header.base_offset for _seg, view in ro.batches(0)]  # every segment opened
        listed = local_log.regular_files_in_order(ro.dir, local_log.log_file_base_offset, set(ro.segments.bases()))
        with LogDir(tmp_path, settings, writable=True) as logdir:
            assert compact(logdir.log("kv-0"), now_ms=10**13)  # merges the sealed segments
            swapped = logdir.log("kv-0").segments.first()
            expected = [view.header.base_offset for _seg, view in logdir.log("kv-0").batches(0)]
        assert swapped is not None and len(expected) < len(before)
        gone = [name for name in listed if not (ro.dir / name).exists()]
        assert gone, "the swap renamed segments above the first away"
        # the listing taken just before the swap, the look for swapped files just after it
        monkeypatch.setattr(local_log, "regular_files_in_order", lambda *_args: listed)
        ro.refresh()
        assert [view.header.base_offset for _seg, view in ro.batches(0)] == expected
        assert ro.segments.bases() == sorted(int(n[:20]) for n in os.listdir(ro.dir) if n.endswith(".log"))


def test_a_read_only_log_that_looks_inside_a_swap_keeps_the_records_the_swap_keeps(tmp_path, monkeypatch):
    """review8 R8-8 (HIGH): a reader (a read-only mount) beside another process's compaction that looked
    at the folder inside the swap (the old segments renamed ``.deleted``, the merged one still ``.swap``:
    Kafka's replaceSegments order, kafkafs's too) dropped every sealed segment and raised the log start
    to the active one's base, for good: by-offset/<N>.json and by-key/<k>.json of records the compaction
    kept (a key's latest) answered ENOENT until newer records took their place."""
    _small_kv(tmp_path, 30)
    settings = _kv(100_000)  # the cleaner merges
    with LogDir(tmp_path, settings) as reading:
        ro = reading.log("kv-0")
        assert [view.header.base_offset for _seg, view in ro.batches(0)] == list(range(60))
        with _inside_each_swap(monkeypatch, ro, ro.refresh) as inside, \
                LogDir(tmp_path, settings, writable=True) as logdir:
            assert compact(logdir.log("kv-0"), now_ms=10**13)
            expected = [view.header.base_offset for _seg, view in logdir.log("kv-0").batches(0)]
        assert inside and "00000000000000000000.log" not in inside[0] and "00000000000000000000.log.swap" in inside[0]
        ro.refresh()
        assert ro.log_start_offset == 0
        assert [view.header.base_offset for _seg, view in ro.batches(0)] == expected
        assert all(ro.locate(offset) is not None for offset in expected)


def test_a_read_only_follower_never_skips_records_a_swap_under_way_holds(tmp_path, monkeypatch):
    """review8 R8-4 (tail -f beside a broker whose cleaner takes each segment soon after it rolls): a reader
    looked at the folder inside a swap that merged segments rolled since its last look (their files
    renamed ``.deleted``, the merged one still ``.swap``) and took the new active segment above them: a
    follower read on from there, past the records the merged segment keeps, and never went back for them
    (in a mount: "... appeared below what an open reader has read"). Segments above a swap under way are
    taken with it, at the next look: the follower reads every record the compaction kept."""
    _small_kv(tmp_path, 30)
    with LogDir(tmp_path, _kv(300)) as reading:
        ro = reading.log("kv-0")
        followed = [view.header.base_offset for _seg, view in ro.batches(0)]
        assert followed == list(range(60))

        def follow() -> None:
            ro.refresh()
            for _seg, view in ro.batches(followed[-1] + 1):
                followed.append(view.header.base_offset)

        _rolls_unseen(tmp_path)
        with _inside_each_swap(monkeypatch, ro, follow) as inside, \
                LogDir(tmp_path, _kv(100_000), writable=True) as logdir:
            assert compact(logdir.log("kv-0"), now_ms=10**13)
            kept = [view.header.base_offset for _seg, view in logdir.log("kv-0").batches(60)]
        assert inside and "00000000000000000000.log.swap" in inside[0]
        follow()
        assert followed[60:] == kept


def test_a_segment_a_read_only_log_takes_just_before_a_swap_that_merges_it_is_dropped(tmp_path, monkeypatch):
    """A reader's refresh took a segment rolled since its last look, then another process's compaction
    merged it away (its file renamed ``.deleted``) before the refresh looked for swapped-in files: the
    merged segment was put in and the one it replaced kept (R8-2's drop only went through the segments
    known before that look), its base cut the merged one's last batch short: "corrupt batch ... offsets
    run past the next batch's base" and EIO beside a broker's cleaner (review8's live4.py)."""
    from kafkafs.storage.local_log import LocalLog

    _small_kv(tmp_path, 30)
    merging = _kv(100_000)
    with LogDir(tmp_path, _kv(300)) as reading:
        ro = reading.log("kv-0")
        known = set(ro.segments.bases())
        _rolls_unseen(tmp_path)
        replaced_segments = LocalLog._replaced_segments
        taken: list[int] = []

        def swap_first(log, *args):
            taken.extend(set(log.segments.bases()) - known)
            with LogDir(tmp_path, merging, writable=True) as logdir:
                assert compact(logdir.log("kv-0"), now_ms=10**13)
            return replaced_segments(log, *args)

        monkeypatch.setattr(LocalLog, "_replaced_segments", swap_first)
        ro.refresh()
        monkeypatch.undo()
        assert taken  # the refresh took segments the compaction then merged away
        with LogDir(tmp_path, merging) as logdir:
            expected = [view.header.base_offset for _seg, view in logdir.log("kv-0").batches(0)]
        assert [view.header.base_offset for _seg, view in ro.batches(0)] == expected


def test_a_cleaner_pass_out_of_descriptors_is_one_line_and_tried_again_later(tmp_path, monkeypatch, caplog) -> None:
    """review24 R24-6: a pass that fails EMFILE (listing the log directory) was logged with a traceback and
    tried again at once, thousands of times a second; now: one line, no traceback, a retry a second later."""
    import errno
    import logging
    import time

    from kafkafs.storage import cleaner as cleaner_module
    from kafkafs.storage.cleaner import LogCleaner

    settings = Settings({"log.cleaner.backoff.ms": 10, "log.initial.task.delay.ms": 0,
                         "log.retention.check.interval.ms": 10})
    released: list[int] = []
    monkeypatch.setattr(cleaner_module, "release_all", lambda: released.append(1) or 0)
    with LogDir(tmp_path, settings, writable=True) as logdir:
        logdir.create_partition("ev", 0)
        cleaner = LogCleaner(logdir)

        def no_fd(**_kw: object) -> list[str]:
            raise OSError(errno.EMFILE, "Too many open files", str(tmp_path))

        with monkeypatch.context() as patch, caplog.at_level(logging.INFO, logger="kafkafs.cleaner"):
            patch.setattr(logdir, "partition_names", no_fd)
            cleaner.start()
            time.sleep(0.5)
            cleaner.stop()
    failed = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert cleaner.errors == 1 and released == [1], (cleaner.errors, released)
    assert len(failed) == 1 and failed[0].exc_info is None, [r.getMessage() for r in failed]
    assert "no file descriptor free" in failed[0].getMessage()


def test_a_retention_pass_stops_between_partitions_when_the_cleaner_is_stopped(tmp_path) -> None:
    """Unmounting 2,000 partitions (review24 R24-6's directory): the retention pass went on over every
    partition after stop() (it waits 30 s), so the mount closed the logs under it: 'index is closed'
    with a traceback. Now the pass stops at the next partition."""
    import pytest

    from kafkafs.storage.cleaner import CleanerStopped, LogCleaner

    with LogDir(tmp_path, Settings({"retention.ms": 1000}), writable=True) as logdir:
        for p in range(3):
            logdir.create_partition("ev", p).append_records([(1000, None, b"v", ())])
        cleaner = LogCleaner(logdir)
        logs = cleaner._logs()
        cleaner._logs = lambda: (cleaner._stop.set(), logs)[1]  # type: ignore[method-assign]  # stopped once listed
        with pytest.raises(CleanerStopped):
            cleaner._retention()
        assert cleaner.segments_deleted == 0
