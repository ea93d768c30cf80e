"""R15-7: a valid batch (its CRC holds) whose records inflate past 64 MiB is valid data, not damage.

Kafka stores and serves such a batch (``max.message.bytes`` bounds the compressed batch: an 80 MiB
record of zeros is 2.6 KB of zstd). kafkafs does not inflate it (memory stays bounded: a bomb and a real
80 MiB record are the same case), and says so: ``verify`` notes it and exits 0, ``recover`` keeps it and
cuts nothing, ``consume`` prints every record before and after it, one line on stderr for the offsets it
does not show, and exits 1 (the work did not show everything, SPEC §4), on every one of its ways to read;
a mount fails only the reads that need its records (EIO) and logs it as too large to inflate.
"""

from __future__ import annotations

import errno
import io
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest

from kafkafs import consume_merge
from kafkafs.consume import consume, parse_offset_spec
from kafkafs.format.batch import Codec, encode_batch
from kafkafs.format.recordfilter import RecordFilter
from kafkafs.storage.logdir import LogDir
from tests.faults.conftest import cli
from tests.fs.conftest import ROOT

T = 1_763_700_000_000
BIG = 80 << 20
NOTE = "offsets 3..3 of big-0 not shown: a batch inflates past 64 MiB"


@pytest.fixture(scope="module")
def big_batch() -> bytes:
    """One record of 80 MiB of zeros at offset 3, zstd (2.6 KB): what Kafka 4.4 accepts and serves."""
    return encode_batch([(T + 3, b"big", bytes(BIG), ())], base_offset=3, compression=Codec.ZSTD)


def _big_partition(folder: Path, big: bytes) -> Path:
    """big-0: offsets 0..2 (keys a0..a2), the big batch (3), 4..5 (keys b0, b1); returns its .log."""
    folder.mkdir(parents=True)
    log = folder / "00000000000000000000.log"
    log.write_bytes(encode_batch([(T + i, b"a%d" % i, b"before-%d" % i, ()) for i in range(3)], base_offset=0)
                    + big + encode_batch([(T + 4 + i, b"b%d" % i, b"after-%d" % i, ()) for i in range(2)], base_offset=4))
    return log


@pytest.fixture
def logs(tmp_path, big_batch) -> Path:
    """big-0 (above) and big-1: offsets 0..3 at T + 2*i (interleaved with big-0 by timestamp)."""
    path = tmp_path / "logs"
    _big_partition(path / "big-0", big_batch)
    (path / "big-1").mkdir()
    (path / "big-1" / "00000000000000000000.log").write_bytes(
        b"".join(encode_batch([(T + 2 * i, b"c", b"p1-%d" % i, ())], base_offset=i) for i in range(4)))
    return path


def _offsets(out: bytes, partition: int = 0) -> list[int]:
    rows = [orjson.loads(line) for line in out.splitlines()]
    return [r["offset"] for r in rows if r["partition"] == partition]


def test_verify_notes_it_and_finds_nothing_wrong(logs):
    done = cli("verify", str(logs))
    assert done.returncode == 0, done.stdout.decode()
    text = done.stdout.decode()
    assert "big-0: 1 segment(s), 6 records, offsets 0..5: OK" in text, text
    assert ("  note: 00000000000000000000.log position 112: offsets 3..3: batch inflates past 64 MiB; its records "
            "are not decoded (valid data)") in text.splitlines(), text


def test_recover_keeps_it_and_cuts_nothing(logs):
    log = logs / "big-0" / "00000000000000000000.log"
    before = log.read_bytes()
    done = cli("recover", str(logs))
    assert done.returncode == 0, (done.stdout.decode(), done.stderr.decode())
    assert log.read_bytes() == before
    assert b"kept" not in done.stdout and b"damage" not in done.stdout + done.stderr, done.stdout.decode()


def test_consume_prints_the_records_around_it_and_says_the_rest(logs):
    done = cli("consume", str(logs), "big-0")
    assert done.returncode == 1, done.stderr.decode()
    assert _offsets(done.stdout) == [0, 1, 2, 4, 5]
    assert done.stderr.decode().splitlines() == [f"kafkafs: {NOTE}"]


def _read(logs: Path, names: list[str], spec: str = "beginning", **kw) -> tuple[bytes, list[str]]:
    out, said = io.BytesIO(), []
    with LogDir(logs) as logdir:
        consume(logdir, names, out, spec=parse_offset_spec(spec),
                on_damage=lambda exc: said.append(exc.not_shown()), **kw)
    return out.getvalue(), said


# every way consume reads (consume._way_to_read): spans/chunks, -c (batch by batch), the kernel's merge of
# a topic, e@TS (the merge, one partition), --grep across partitions (heapq.merge of the plain readers)
WAYS = {
    "chunks": (["big-0"], {}, [0, 1, 2, 4, 5]),
    "count": (["big-0"], {"count": 4}, [0, 1, 2, 4]),
    "merge": (["big-0", "big-1"], {}, [0, 1, 2, 4, 5]),
    "stop-ts": (["big-0"], {"stop_ts": T + 5}, [0, 1, 2, 4]),
    "grep-lines": (["big-0", "big-1"], {"grep": re.compile("before|after|p1")}, [0, 1, 2, 4, 5]),
}


@pytest.mark.parametrize("way", WAYS)
def test_every_way_of_consume_goes_on_past_it(logs, way):
    names, kw, offsets = WAYS[way]
    out, said = _read(logs, names, **kw)
    assert _offsets(out) == offsets
    assert said == [NOTE]
    if len(names) == 2:
        assert _offsets(out, 1) == [0, 1, 2, 3]


def test_a_start_by_time_that_falls_in_it_starts_there(logs):
    """Its records' timestamps are not known: a start by time that its header's largest timestamp reaches
    starts at the batch, which is said, and goes on after it."""
    assert _read(logs, ["big-0"], f"s@{T + 3}") == _read(logs, ["big-0"], "3")
    out, said = _read(logs, ["big-0"], f"s@{T + 3}")
    assert (_offsets(out), said) == ([4, 5], [NOTE])


def test_the_plain_reader_goes_on_past_it(logs, monkeypatch):
    monkeypatch.setattr(consume_merge, "available", lambda: False)  # no kernel merge: heapq.merge of lines
    out, said = _read(logs, ["big-0", "big-1"])
    assert (_offsets(out), _offsets(out, 1), said) == ([0, 1, 2, 4, 5], [0, 1, 2, 3], [NOTE])


def test_a_key_read_through_the_key_indexes_goes_on_past_it(tmp_path, big_batch, caplog):
    """The key indexes stop at the batch (its keys are not known); a read of a key goes on after it."""
    from kafkafs.fs.views.prefill import index_logdir
    from kafkafs.storage.keyindex import KeyIndexStore

    logs = tmp_path / "logs"
    _big_partition(logs / "big-0", big_batch)  # sealed: a key index file is made for it
    (logs / "big-0" / "00000000000000000006.log").write_bytes(encode_batch([(T + 6, b"b1", b"later", ())], base_offset=6))
    index_logdir(logs, cache_dir=tmp_path / "cache", keys=True, out=None)
    assert list((tmp_path / "cache").glob("*.keys"))
    assert "(offsets 3..3) is too large to inflate" in caplog.text
    store = KeyIndexStore(tmp_path / "cache")
    for key, offsets in ((b"b1", [5, 6]), (b"a1", [1])):
        out, said = _read(logs, ["big-0"], record_filter=RecordFilter(key=key), keys_store=store)
        assert (_offsets(out), said) == (offsets, [NOTE]), key


def test_index_says_it_is_too_large_to_inflate_not_damage(logs, tmp_path):
    done = cli("index", "--keys", "--cache-dir", str(tmp_path / "cache"), str(logs))
    assert done.returncode == 1  # the views cannot show its records: said
    said = done.stderr.decode()
    assert "(offsets 3..3) is too large to inflate" in said and "damage found" not in said, said
    assert "kafkafs: 1 batch(es) too large to inflate (said above; valid data, no damage)" in said, said


def test_consume_follow_keeps_following_past_it(logs, big_batch):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "kafkafs", "consume", "--follow", str(logs), "big-0"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    watchdog = threading.Timer(60, proc.kill)  # a read that never comes fails the test, never hangs it
    watchdog.start()
    try:
        assert proc.stdout is not None and proc.stderr is not None
        lines = [proc.stdout.readline() for _ in range(5)]
        assert _offsets(b"".join(lines)) == [0, 1, 2, 4, 5]
        assert proc.stderr.readline().decode() == f"kafkafs: {NOTE}\n"
        with open(logs / "big-0" / "00000000000000000000.log", "ab") as log:  # as a broker appends
            log.write(encode_batch([(T + 9, b"z", b"appended", ())], base_offset=6))
        start = time.monotonic()
        assert _offsets(proc.stdout.readline()) == [6]
        assert time.monotonic() - start < 10
        assert proc.poll() is None  # still following
    finally:
        watchdog.cancel()
        proc.kill()
        proc.wait(timeout=10)


def test_dump_prints_its_batch_line_and_says_its_records_are_not_shown(logs):
    log = logs / "big-0" / "00000000000000000000.log"
    done = cli("dump", "--deep-iteration", "--files", str(log))
    assert done.returncode == 1  # not every record shown: said
    lines = done.stdout.decode().splitlines()
    assert [line.split(" lastOffset")[0] for line in lines if line.startswith("baseOffset")] == [
        "baseOffset: 0", "baseOffset: 3", "baseOffset: 4"]
    assert [line.split(" CreateTime")[0] for line in lines if line.startswith("|")] == [
        f"| offset: {o}" for o in (0, 1, 2, 4, 5)]
    assert done.stderr.decode().splitlines() == [
        f"kafkafs: {log}: position 112: offsets 3..3: records not shown: the batch inflates past 64 MiB"]


def test_a_mount_fails_only_the_reads_that_need_its_records(logs, mounted):
    m = mounted(logs)
    m.allow_errors = True  # the batch is logged (an ERROR: reads of it fail)
    records = m / "big-0" / "records.jsonl"
    size = records.stat().st_size
    fd = os.open(records, os.O_RDONLY)
    try:
        head = os.pread(fd, 300, 0)
        assert _offsets(head[: head.rindex(b"\n") + 1]) == [0, 1]
        with pytest.raises(OSError) as info:
            os.pread(fd, 100, 1000)  # inside the batch's place
        assert info.value.errno == errno.EIO
        tail = os.pread(fd, 150, size - 150)
        assert tail.endswith(b'"after-1","headers":[]}\n')
    finally:
        os.close(fd)
    assert orjson.loads((m / "big-0" / "by-offset" / "4.json").read_bytes())["value"] == "after-0"
    with pytest.raises(OSError) as info:
        (m / "big-0" / "by-offset" / "3.json").read_bytes()
    assert info.value.errno == errno.EIO
    assert (m / "big-1" / "records.jsonl").read_bytes().count(b"\n") == 4
    log = m.log()
    assert "(offsets 3..3) is too large to inflate: zstd data inflates past 67108864 bytes" in log, log
    assert "corrupt" not in log


def test_a_compaction_that_needs_its_records_says_why_it_stops_without_calling_it_damage(tmp_path, big_batch):
    logs = tmp_path / "logs"
    _big_partition(logs / "big-0", big_batch)  # sealed by the segment after it: compaction reads its keys
    (logs / "big-0" / "00000000000000000006.log").write_bytes(encode_batch([(T + 6, b"b1", b"later", ())], base_offset=6))
    done = cli("clean", "--dry-run", "--set", "cleanup.policy=compact", "--set", "min.cleanable.dirty.ratio=0",
               str(logs))
    assert done.returncode == 1
    said = done.stdout.decode() + done.stderr.decode()
    assert ("big-0: not compacted: a batch is too large to inflate (valid data, not damage;" in said
            and "damaged data" not in said), said


def _two_compacted(root: Path, big: bytes) -> Path:
    """a-0 and z-0, compacted: offsets 0..2 key k, at 3 the big batch (a-0) or one more k (z-0), 4..5 key k,
    sealed segment 0 and active segment 6: z-0 has 5 superseded records (review19 R19-1 / R19-10)."""
    def dup(base: int, n: int) -> bytes:
        return encode_batch([(T + base + i, b"k", b"v%d" % (base + i), ()) for i in range(n)], base_offset=base)
    for name in ("a-0", "z-0"):
        (root / name).mkdir(parents=True)
        (root / name / "00000000000000000000.log").write_bytes(
            dup(0, 3) + (big if name == "a-0" else dup(3, 1)) + dup(4, 2))
        (root / name / "00000000000000000006.log").write_bytes(dup(6, 3))
    return root


@pytest.mark.parametrize("dry_run", [False, True])
def test_clean_leaves_that_partition_as_it_is_and_compacts_the_others(tmp_path, big_batch, dry_run):
    """review19 R19-1: the partition is not compacted (one line, valid data), the other one is; exit 1
    as for a partition refused for damage."""
    path = _two_compacted(tmp_path / "logs", big_batch)
    before = (path / "a-0" / "00000000000000000000.log").read_bytes()
    done = cli("clean", *(["--dry-run"] if dry_run else []), "--set", "cleanup.policy=compact", str(path))
    out = done.stdout.decode()
    assert done.returncode == 1, (out, done.stderr.decode())
    assert "Traceback" not in done.stderr.decode()
    verb = "would compact" if dry_run else "compacted"
    assert f"z-0: {verb} 00000000000000000000.log: 5 superseded record(s) removed" in out, out
    said = [line for line in out.splitlines() if line.startswith("a-0:")]
    assert len(said) == 1 and "not compacted: a batch is too large to inflate (valid data, not damage" in said[0], out
    assert (path / "a-0" / "00000000000000000000.log").read_bytes() == before


def test_the_mounts_cleaner_says_it_once_and_compacts_the_others(tmp_path, big_batch, caplog):
    """review19 R19-10: the background cleaner (``mount --rw --clean``) logs the partition once, with no
    traceback, and goes on to compact the others."""
    from kafkafs.storage.cleaner import LogCleaner
    from kafkafs.storage.config import Settings

    path = _two_compacted(tmp_path / "logs", big_batch)
    settings = Settings({"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01, "log.cleaner.backoff.ms": 0})
    with LogDir(path, settings, writable=True) as logdir:
        cleaner = LogCleaner(logdir)
        for _ in range(6):
            cleaner.run_once()
        assert cleaner.errors == 0
        z = logdir.log("z-0")
        assert [r[0] for r in z.records()] == [5, 6, 7, 8]
    said = [r for r in caplog.records if "a-0" in r.getMessage()]
    assert len(said) == 1 and "too large to inflate" in said[0].getMessage(), [r.getMessage() for r in said]
    assert not [r for r in caplog.records if r.exc_info]


def test_verify_counts_a_legacy_wrapper_it_does_not_inflate_as_at_least_one(tmp_path):
    """review19 R19-4: a magic 1 gzip wrapper of one 80 MiB message (offset 3) between 0..2 and 4..5: its
    header carries no record count, so verify counted none of it ("5 records" for offsets 0..5); it
    counts its one sure message now and says "at least". So does --shallow, which inflates no wrapper
    (a small one of three messages here)."""
    from tests.format.test_legacy import message, wrapper

    def partition(name: str, inner: bytes, last: int) -> None:
        (tmp_path / name).mkdir()
        firsts = b"".join(message(i, 1, 0, 1000 + i, b"k%d" % i, b"v%d" % i) for i in range(3))
        after = b"".join(message(last + 1 + i, 1, 0, 3000 + i, b"a%d" % i, b"after%d" % i) for i in range(2))
        (tmp_path / name / "00000000000000000000.log").write_bytes(
            firsts + wrapper(1, Codec.GZIP, inner, last, 2000) + after)

    partition("legacy-0", message(0, 1, 0, 2000, b"w", bytes(BIG)), 3)
    partition("small-0", b"".join(message(i, 1, 0, 2000, b"w%d" % i, b"x") for i in range(3)), 5)
    deep = cli("verify", str(tmp_path))
    assert deep.returncode == 0, deep.stdout
    lines = deep.stdout.decode().splitlines()
    assert "legacy-0: 1 segment(s), at least 6 records, offsets 0..5: OK" in lines, lines
    assert "small-0: 1 segment(s), 8 records, offsets 0..7: OK" in lines, lines  # inflated: counted exactly
    shallow = cli("verify", "--shallow", str(tmp_path))
    assert shallow.returncode == 0, shallow.stdout
    lines = shallow.stdout.decode().splitlines()
    assert "legacy-0: 1 segment(s), at least 6 records, offsets 0..5: OK" in lines, lines
    assert "small-0: 1 segment(s), at least 6 records, offsets 0..7: OK" in lines, lines
