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
# read a piece at a time (R15-7 step 2): the record is held, but its line (six bytes a zero) is not written
NOTE = ("offsets 3..3 of big-0 not shown: a record whose JSON line is 503316612 bytes, past the 256 MiB kafkafs "
        "writes of one line")


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


def test_verify_checks_its_records_in_pieces_and_finds_nothing_wrong(logs):
    """Its records are decoded a piece at a time (R15-7 step 2): checked as any batch's, no note."""
    done = cli("verify", str(logs))
    assert done.returncode == 0, done.stdout.decode()
    text = done.stdout.decode()
    assert "big-0: 1 segment(s), 6 records, offsets 0..5: OK" in text, text
    assert "inflates past" not in text and "not decoded" not in text, text


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
    """The key indexes stop at the batch (its keys are not known); a read of a key goes on after it, through
    the batch read a piece at a time: its record (key ``big``) is not the key asked for, so nothing is said."""
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
        assert (_offsets(out), said) == (offsets, []), key


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


def test_dump_prints_its_records_decoded_in_pieces(logs, tmp_path):
    """``dump --deep-iteration`` decodes such a batch's records a run at a time (R15-7 step 2): every record
    line, as Kafka's tool prints them (a record past the 128 MiB held of one: the bomb test below)."""
    log = logs / "big-0" / "00000000000000000000.log"
    done = cli("dump", "--deep-iteration", "--files", str(log))
    assert (done.returncode, done.stderr.decode()) == (0, "")
    lines = done.stdout.decode().splitlines()
    assert [line.split(" lastOffset")[0] for line in lines if line.startswith("baseOffset")] == [
        "baseOffset: 0", "baseOffset: 3", "baseOffset: 4"]
    assert [line.split(" CreateTime")[0] for line in lines if line.startswith("|")] == [
        f"| offset: {o}" for o in range(6)]
    assert f"| offset: 3 CreateTime: {T + 3} keySize: 3 valueSize: {BIG} " in done.stdout.decode()
    many = _many_partition(tmp_path / "many" / "big-0", "lz4") / "big-0" / "00000000000000000000.log"
    done = cli("dump", "--deep-iteration", "--files", str(many))
    assert (done.returncode, done.stderr.decode()) == (0, "")
    assert [int(line.split()[2]) for line in done.stdout.decode().splitlines() if line.startswith("|")] == ALL
    assert "Non-consecutive" not in done.stdout.decode()


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


def _keyed(folder: Path, big: bytes, *, sealed: bool) -> None:
    """big-0 as :func:`_big_partition` makes it, then key b1 again at 6: in a later batch of the same segment
    (``sealed``: one more segment follows it, so its key index file is made)."""
    log = _big_partition(folder, big)
    after = encode_batch([(T + 6, b"b1", b"latest", ())], base_offset=6)
    if sealed:
        (folder / "00000000000000000007.log").write_bytes(encode_batch([(T + 7, b"z", b"next", ())], base_offset=7))
    with open(log, "ab") as f:
        f.write(after)


@pytest.mark.parametrize("where", ["active", "active-indexed", "sealed"])
def test_a_keys_latest_record_after_it_is_known_and_what_needs_its_records_fails(tmp_path, big_batch, where,
                                                                                    monkeypatch):
    """review19 R19-2: whatever the batch holds is older than a record after it, so the latest record of a
    key with one there is known (a scan of the active segment, the temporary index of a large one, a key
    index of a sealed one: each goes on past the batch); a key whose latest record may be in it, its
    history and the table still fail, as it."""
    from kafkafs.errors import UninflatableBatch
    from kafkafs.storage import keytable
    from kafkafs.storage.keyindex import KeyIndexStore
    from kafkafs.storage.keytable import PartitionKeys

    sealed = where == "sealed"
    if where == "active-indexed":
        monkeypatch.setattr(keytable, "ACTIVE_INDEX_FROM", 1)  # what it holds is indexed, the rest scanned
    _keyed(tmp_path / "logs" / "big-0", big_batch, sealed=sealed)
    with LogDir(tmp_path / "logs") as logdir:
        keys = PartitionKeys(logdir.log("big-0"), KeyIndexStore(tmp_path / "cache"))
        for key, offset in ((b"b1", 6), (b"b0", 4)):
            found = keys.latest(key)
            assert found is not None and found.offset == offset, key
        for ask in (lambda: keys.latest(b"a1"), lambda: keys.latest(b"nowhere"), lambda: keys.history(b"b1"),
                    lambda: keys.table()):
            with pytest.raises(UninflatableBatch):
                ask()
        history, damage = keys.history_to_damage(b"a1")
        assert [r.offset for r in history] == [1] and isinstance(damage, UninflatableBatch)
        assert [r.offset for r in keys.history_to_damage(b"b1")[0]] == []  # the records before the batch only
    if sealed:
        assert list((tmp_path / "cache").glob("*.keys"))


def test_a_mount_serves_a_keys_latest_record_after_it(tmp_path, big_batch, mounted):
    """review19 R19-2 through the mount: by-key/<key>.json of a key with a record after the batch (in the
    same segment) is served; what needs the batch's records (a key whose latest may be in it, a key's
    history, the table, the listing) stays EIO."""
    from tests.format.test_legacy import message, wrapper

    logs = tmp_path / "logs"
    _keyed(logs / "big-0", big_batch, sealed=False)
    legacy = logs / "legacy-0"  # a magic 1 gzip wrapper of one 80 MiB message at 3, then a1 at 4
    legacy.mkdir()
    (legacy / "00000000000000000000.log").write_bytes(
        b"".join(message(i, 1, 0, 1000 + i, b"k%d" % i, b"v%d" % i) for i in range(3))
        + wrapper(1, Codec.GZIP, message(0, 1, 0, 2000, b"w", bytes(BIG)), 3, 2000)
        + message(4, 1, 0, 3000, b"a1", b"after"))
    m = mounted(logs)
    m.allow_errors = True  # the batches are logged (ERROR: the reads that need them fail)
    by_key = m / "big-0" / "by-key"
    assert orjson.loads((by_key / "b1.json").read_bytes())["value"] == "latest"
    assert (by_key / "b1.json").stat().st_size == len((by_key / "b1.json").read_bytes())
    assert orjson.loads((m / "legacy-0" / "by-key" / "a1.json").read_bytes())["offset"] == 4
    for path in (by_key / "a1.json", by_key / "b1.jsonl", m / "big-0" / "table.jsonl",
                 m / "legacy-0" / "by-key" / "k1.json"):
        with pytest.raises(OSError) as info:
            path.read_bytes()
        assert info.value.errno == errno.EIO, path
    with pytest.raises(OSError) as info:
        os.listdir(by_key)
    assert info.value.errno == errno.EIO
    with pytest.raises(OSError):
        (m / "legacy-0" / "records.jsonl").read_bytes()
    # review19 R19-3: the wrapper's offsets as verify and consume say them (its header holds only its last)
    log = m.log()
    assert "00000000000000000000.log at position 114 (offsets 3..3) is too large to inflate" in log, log
    assert "?.." not in log, log


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


# ---------------------------------------------------------------------------------------------------------
# R15-7 step 2: such a batch read a piece at a time. Batches built from Kafka's documented layout with the
# codec libraries themselves (tests/kafka_batch.py), zstd without a content size as Kafka's producers write it.

MANY = 4400  # records of 16 KiB: 70 MB inflated, past the 64 MiB held at once
VALUE = b'{"pad":"' + b"p" * 16_374 + b'"}'


def _many_partition(folder: Path, codec: str, inner: bytes | None = None, count: int = MANY) -> Path:
    """big-0: offsets 0..2, the big batch (3..count+2), then two more; returns the folder's parent."""
    from tests.kafka_batch import batch, record

    if inner is None:
        inner = batch(3, T + 3, count, (b"".join(record(i, i, b"m%d" % i, VALUE) for i in range(j, min(j + 200, count)))
                                        for j in range(0, count, 200)), codec)
    _big_partition(folder, inner)
    log = folder / "00000000000000000000.log"
    data = log.read_bytes()  # _big_partition's batch after the big one starts at offset 4: renumbered
    tail = encode_batch([(T + 4 + count + i, b"b%d" % i, b"after-%d" % i, ()) for i in range(2)], base_offset=count + 3)
    log.write_bytes(data[: data.index(inner) + len(inner)] + tail)
    return folder.parent


@pytest.fixture(scope="module")
def many_logs(tmp_path_factory) -> Path:
    """big-0 with MANY records in one zstd batch (3..MANY+2), and big-1 (4 records interleaved)."""
    path = tmp_path_factory.mktemp("many") / "logs"
    _many_partition(path / "big-0", "zstd")
    (path / "big-1").mkdir()
    (path / "big-1" / "00000000000000000000.log").write_bytes(
        b"".join(encode_batch([(T + 2 * i, b"c", b"p1-%d" % i, ())], base_offset=i) for i in range(4)))
    return path


ALL = list(range(MANY + 5))


@pytest.mark.parametrize("codec", ["gzip", "lz4", "snappy", "zstd"])
def test_consume_prints_every_record_of_a_batch_past_64_mib(tmp_path, codec):
    logs = _many_partition(tmp_path / "logs" / "big-0", codec)
    done = cli("consume", str(logs), "big-0")
    assert (done.returncode, done.stderr.decode()) == (0, "")
    rows = [orjson.loads(line) for line in done.stdout.splitlines()]
    assert [r["offset"] for r in rows] == ALL
    inner = rows[3 : MANY + 3]
    assert [(r["key"], r["timestamp"]) for r in inner] == [(f"m{i}", T + 3 + i) for i in range(MANY)]
    assert all(r["value"] == orjson.loads(VALUE) for r in inner)


# every way consume reads, as WAYS above, through the batch read in pieces
MANY_WAYS = {
    "chunks": (["big-0"], {}, ALL),
    "count": (["big-0"], {"count": 100}, ALL[:100]),
    "merge": (["big-0", "big-1"], {}, ALL),
    "stop-ts": (["big-0"], {"stop_ts": T + 3 + 2000}, ALL[:3 + 2000]),
    "grep-lines": (["big-0", "big-1"], {"grep": re.compile('"m1[0-9]*"|before|after|p1')},
                   [0, 1, 2] + [o for o in range(3, MANY + 3) if str(o - 3).startswith("1")] + [MANY + 3, MANY + 4]),
}


@pytest.mark.parametrize("way", MANY_WAYS)
def test_every_way_of_consume_reads_it_in_pieces(many_logs, way):
    names, kw, offsets = MANY_WAYS[way]
    out, said = _read(many_logs, names, **kw)
    assert (_offsets(out), said) == (offsets, [])
    if len(names) == 2:
        assert _offsets(out, 1) == [0, 1, 2, 3]


def test_a_start_inside_it_and_a_key_filter(many_logs, monkeypatch):
    out, said = _read(many_logs, ["big-0"], "4000")
    assert (_offsets(out), said) == (ALL[4000:], [])
    out, said = _read(many_logs, ["big-0"], f"s@{T + 3 + 1500}")  # found among its records, as offsetsForTimes
    assert (_offsets(out), said) == (ALL[1503:], [])
    out, said = _read(many_logs, ["big-0"], record_filter=RecordFilter(key=b"m77"))
    assert (_offsets(out), said) == ([80], [])
    monkeypatch.setattr(consume_merge, "available", lambda: False)  # no kernel merge: heapq.merge of lines
    out, said = _read(many_logs, ["big-0", "big-1"])
    assert (_offsets(out), _offsets(out, 1), said) == (ALL, [0, 1, 2, 3], [])


def test_a_bomb_of_one_huge_record_is_said_with_memory_and_time_bounded(tmp_path):
    """One record of 136 MiB of zeros (a hand-made zstd frame of RLE blocks, 4 KB): past the 128 MiB held of
    one record: the records around it are printed, one line says it, exit 1; the process stays small."""
    from tests.kafka_batch import batch, zigzag, zstd_zeros_frame

    size = 136 << 20
    fields = b"\x00" + zigzag(0) + zigzag(0) + zigzag(4) + b"bomb" + zigzag(size)
    bomb = batch(3, T + 3, 1, iter(()), "zstd", compressed=zstd_zeros_frame(zigzag(len(fields) + size + 1) + fields,
                                                                             size + 1))
    assert len(bomb) < 10_000
    logs = _many_partition(tmp_path / "logs" / "big-0", "zstd", inner=bomb, count=1)
    # the peak of this process only (VmHWM; getrusage's ru_maxrss counts the forking parent's too)
    script = (f"import sys\nfrom kafkafs.cli import main\nsys.stdout = open({str(tmp_path / 'out')!r}, 'w')\n"
              f"rc = main(['consume', {str(logs)!r}, 'big-0'])\n"
              "peak = [line for line in open('/proc/self/status') if line.startswith('VmHWM:')][0].split()[1]\n"
              "print(rc, int(peak) // 1024, file=sys.stderr)\n")
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120, cwd=ROOT)
    took = time.monotonic() - start
    said = done.stderr.decode().splitlines()
    assert said[0] == (f"kafkafs: offsets 3..3 of big-0 not shown: a record of {size + 14} bytes, past the 128 MiB "
                       "kafkafs holds of one record"), said
    rc, peak_mib = map(int, said[1].split())
    assert rc == 1 and peak_mib < 200, said
    assert took < 60, took
    assert _offsets((tmp_path / "out").read_bytes()) == [0, 1, 2, 4, 5]
    log = logs / "big-0" / "00000000000000000000.log"
    dumped = cli("dump", "--deep-iteration", "--files", str(log))
    assert dumped.returncode == 1
    assert [line.split(" CreateTime")[0] for line in dumped.stdout.decode().splitlines() if line.startswith("|")] == [
        f"| offset: {o}" for o in (0, 1, 2, 4, 5)]
    assert dumped.stderr.decode().splitlines() == [
        f"kafkafs: {log}: position 112: offsets 3..3: record not shown: a record of {size + 14} bytes, past the "
        "128 MiB kafkafs holds of one record"]
    verified = cli("verify", str(logs))
    assert verified.returncode == 0 and "offsets 3..3: a record of" in verified.stdout.decode()


def test_verify_counts_the_records_of_a_batch_past_64_mib_and_finds_damage_in_them(tmp_path):
    """verify decodes such a batch's records a piece at a time: its records are counted (4,405), a record
    past the 128 MiB held of one is a note, and records that do not match the header's count (its CRC
    holding: a writer's bug) are damage, exit 1."""
    from tests.kafka_batch import batch, record

    logs = _many_partition(tmp_path / "ok" / "big-0", "gzip")
    done = cli("verify", str(logs))
    assert (done.returncode, done.stdout.decode().splitlines()[0]) == (
        0, f"big-0: 1 segment(s), {MANY + 5} records, offsets 0..{MANY + 4}: OK")
    assert "not decoded" not in done.stdout.decode()
    short = batch(3, T + 3, MANY + 1, (b"".join(record(i, i, b"m", VALUE) for i in range(j, j + 200))
                                       for j in range(0, MANY, 200)), "zstd", last_offset_delta=MANY - 1)
    logs = _many_partition(tmp_path / "bad" / "big-0", "zstd", inner=short)
    done = cli("verify", str(logs))
    assert done.returncode == 1, done.stdout.decode()
    assert f"the records end after {MANY} of {MANY + 1}" in done.stdout.decode(), done.stdout.decode()


def test_a_mount_reads_by_offset_inside_it(many_logs, mounted):
    """``by-offset/`` inside such a batch reads its runs up to the record (R15-7 step 2); ``records.jsonl``
    still fails there (EIO: its size needs every line's length) and the rest of it reads."""
    m = mounted(many_logs)
    m.allow_errors = True  # records.jsonl's read of the batch is logged
    got = orjson.loads((m / "big-0" / "by-offset" / "2003.json").read_bytes())
    assert (got["offset"], got["key"], got["timestamp"]) == (2003, "m2000", T + 3 + 2000)
    assert got["value"] == orjson.loads(VALUE)
    assert orjson.loads((m / "big-0" / "by-offset" / "2.json").read_bytes())["value"] == "before-2"
    assert not (m / "big-0" / "by-offset" / f"{MANY + 5}.json").exists()


def test_recover_checks_its_records_as_verify_does(tmp_path):
    """recover decodes such a batch's records a run at a time, as verify does: a record count the records
    do not match (its CRC holding: a writer's bug) is kept and said, as for any batch; a whole batch, nothing."""
    from tests.kafka_batch import batch, record

    logs = _many_partition(tmp_path / "ok" / "big-0", "lz4")
    done = cli("recover", str(logs))
    assert done.returncode == 0 and b"kept" not in done.stdout, done.stdout.decode()
    short = batch(3, T + 3, MANY + 1, (b"".join(record(i, i, b"m", VALUE) for i in range(j, j + 200))
                                       for j in range(0, MANY, 200)), "gzip", last_offset_delta=MANY - 1)
    logs = _many_partition(tmp_path / "bad" / "big-0", "gzip", inner=short)
    before = (logs / "big-0" / "00000000000000000000.log").read_bytes()
    done = cli("recover", str(logs))
    said = done.stdout.decode() + done.stderr.decode()
    assert f"the records end after {MANY} of {MANY + 1}" in said, said
    assert (logs / "big-0" / "00000000000000000000.log").read_bytes() == before  # kept, as Kafka keeps it


def test_a_bomb_of_one_2_gib_record_costs_one_piece(tmp_path):
    """A batch of one record claiming 2 GiB of zeros (a hand-made zstd frame of RLE blocks, 64 KB): the
    batch's last record is past the 128 MiB held of one, so nothing after it needs it inflated: said at
    once (not 2 GiB of inflation), the records around it printed, exit 1."""
    from tests.kafka_batch import batch, zigzag, zstd_zeros_frame

    size = (2 << 30) - 64
    fields = b"\x00" + zigzag(0) + zigzag(0) + zigzag(4) + b"bomb" + zigzag(size)
    frame = zstd_zeros_frame(zigzag(len(fields) + size + 1) + fields, size + 1)  # the value, then 0 headers
    bomb = batch(3, T + 3, 1, iter(()), "zstd", compressed=frame)
    logs = _many_partition(tmp_path / "logs" / "big-0", "zstd", inner=bomb, count=1)
    start = time.monotonic()
    done = cli("consume", str(logs), "big-0")
    took = time.monotonic() - start
    assert done.returncode == 1 and _offsets(done.stdout) == [0, 1, 2, 4, 5]
    assert done.stderr.decode().splitlines() == [
        f"kafkafs: offsets 3..3 of big-0 not shown: a record of {size + 14} bytes, past the 128 MiB kafkafs holds "
        "of one record"]
    assert took < 20, took  # inflating 2 GiB would take longer than starting the command on a loaded machine


def test_an_lz4_frame_of_dependent_blocks_past_64_mib_is_not_shown_as_before(tmp_path):
    """Kafka writes LZ4 frames of independent blocks; one whose blocks depend on the ones before cannot be
    read a block at a time: not shown, said, read on after it (R15-7 step 1's way), never damage."""
    import lz4.frame

    from tests.kafka_batch import batch, record

    body = b"".join(record(i, i, b"m%d" % i, VALUE) for i in range(MANY))
    frame = lz4.frame.compress(body, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=True)
    linked = batch(3, T + 3, MANY, iter(()), "lz4", compressed=frame)
    logs = _many_partition(tmp_path / "logs" / "big-0", "lz4", inner=linked)
    done = cli("consume", str(logs), "big-0")
    assert done.returncode == 1 and _offsets(done.stdout) == [0, 1, 2, MANY + 3, MANY + 4]
    assert done.stderr.decode().splitlines() == [
        f"kafkafs: offsets 3..{MANY + 2} of big-0 not shown: a batch inflates past 64 MiB"]
