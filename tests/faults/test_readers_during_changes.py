"""Readers while the log changes under them (issue 9): a read-only mount and a read-only engine read a
partition while another writer appends, rolls segments, deletes old ones by retention and swaps in
compacted ones. Every read answers (no hang), no EIO (nothing is damaged), no traceback in the daemon,
and every view it returns is a valid prefix: JSON lines with offsets that only go up.

The default run takes ``KAFKAFS_CHANGES_SECONDS`` (8) seconds (hundreds of cleans: a clean every 400
records); the slow one five minutes (``KAFKAFS_CHANGES_SLOW_SECONDS``)."""

from __future__ import annotations

import errno
import json
import os
import threading
import time

import pytest

from kafkafs.errors import SegmentClosedError
from kafkafs.format.jsonview import ProducerRecord
from kafkafs.storage.cleaner import clean_logdir
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir

SETTINGS = Settings({"segment.bytes": 8192, "index.interval.bytes": 512, "file.delete.delay.ms": 0,
                     "retention.bytes": 40_000, "cleanup.policy": "compact,delete",
                     "min.cleanable.dirty.ratio": 0.0})
SECONDS = float(os.environ.get("KAFKAFS_CHANGES_SECONDS", "8"))
SLOW_SECONDS = float(os.environ.get("KAFKAFS_CHANGES_SLOW_SECONDS", "300"))


def _writer(logdir, stop: threading.Event, counts: dict) -> None:
    n = 0
    with LogDir(logdir, SETTINGS, writable=True) as d:
        log = d.log("live-0") if "live-0" in d.partition_names() else d.create_partition("live", 0)
        while not stop.is_set():
            records = [ProducerRecord(1_763_700_000_000 + n + i, b"k%d" % ((n + i) % 17), b'{"n":%d}' % (n + i), ())
                       for i in range(20)]
            log.append_records(records, flush=(n % 200 == 0))
            n += 20
            if n % 400 == 0:
                clean_logdir(d)  # retention deletes, compaction swaps
                counts["cleans"] += 1
        counts["appended"] = n
        counts["segments"] = len(list(log.segments))


def _check_jsonl(data: bytes, problems: list[str], where: str) -> int:
    last = -1
    lines = data.split(b"\n")
    for line in lines[:-1]:  # a view read while growing may end anywhere after its last newline
        record = json.loads(line)
        if record["offset"] <= last:
            problems.append(f"{where}: offset {record['offset']} after {last}")
        last = record["offset"]
    return len(lines) - 1


def test_readers_while_segments_roll_retention_deletes_and_compaction_swaps(mounted, tmp_path):
    _readers_during_changes(mounted, tmp_path, SECONDS)


@pytest.mark.slow
def test_readers_during_changes_for_minutes(mounted, tmp_path):
    _readers_during_changes(mounted, tmp_path, SLOW_SECONDS)


def _readers_during_changes(mounted, tmp_path, seconds: float) -> None:
    logdir = tmp_path / "logs"
    logdir.mkdir()
    with LogDir(logdir, SETTINGS, writable=True) as d:
        d.create_partition("live", 0).append_records([ProducerRecord(1_763_700_000_000, b"k", b"first", ())])
    m = mounted(logdir)
    stop = threading.Event()
    counts = {"cleans": 0, "reads": 0, "lines": 0}
    problems: list[str] = []
    writer = threading.Thread(target=_writer, args=(logdir, stop, counts))
    writer.start()

    def mount_reader(kind: str) -> None:
        part = m / "live-0"
        while not stop.is_set():
            try:
                if kind == "records":
                    counts["lines"] += _check_jsonl((part / "records.jsonl").read_bytes(), problems, "records.jsonl")
                elif kind == "json":
                    json.loads((part / "partition.json").read_bytes())
                else:
                    for name in sorted((part / "segments").iterdir()):
                        name.read_bytes()
                    listed = sorted((part / "by-offset").iterdir())
                    for entry in listed[:2] + listed[-2:]:
                        data = entry.read_bytes()
                        if entry.suffix == ".jsonl":
                            _check_jsonl(data, problems, entry.name)
                counts["reads"] += 1
            except FileNotFoundError:
                pass  # a segment deleted between the listing and the read
            except OSError as exc:
                if exc.errno == errno.ESTALE:  # a read that needed a segment retention removed meanwhile
                    counts["stale"] = counts.get("stale", 0) + 1
                    continue
                problems.append(f"{kind}: {exc!r}")
                if exc.errno != errno.ENOENT:
                    return

    def engine_reader() -> None:
        with LogDir(logdir, SETTINGS) as d:
            log = d.log("live-0")
            while not stop.is_set():
                log.refresh()
                last = -1
                try:
                    for batch in log.read():
                        for offset in batch.offsets:
                            if offset <= last:
                                problems.append(f"engine: offset {offset} after {last}")
                            last = offset
                except (FileNotFoundError, SegmentClosedError):
                    counts["stale"] = counts.get("stale", 0) + 1
                counts["reads"] += 1

    readers = [threading.Thread(target=mount_reader, args=(k,), daemon=True) for k in ("records", "json", "files")]
    readers.append(threading.Thread(target=engine_reader, daemon=True))
    for t in readers:
        t.start()
    time.sleep(seconds)
    stop.set()
    writer.join(60)
    for t in readers:
        t.join(60)
        assert not t.is_alive(), "a reader hung"
    assert counts["cleans"] >= 3 and counts["reads"] > 20, counts
    assert not problems, problems[:10]
    assert m.proc.poll() is None and "Traceback" not in m.log()
    print("readers during changes:", counts)
