"""Real mounts, real tools: ls, cat, grep, jq, stat, tail -f, cp -r, echo >> append, mkdir."""

from __future__ import annotations

import errno
import json
import mmap
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkafs.errors import KafkafsError
from kafkafs.format.jsonview import ProducerRecord
from kafkafs.fs.mount import mount
from kafkafs.storage.logdir import LogDir

from .conftest import BASE_TS, ROOT, SMALL_SEGMENTS, expected_jsonl
from .tree.test_root import corrupt_one_batch

pytestmark = pytest.mark.fuse

if not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None:
    pytest.skip("FUSE is not available", allow_module_level=True)


def run(*cmd: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, check=check, timeout=60, **kw)


def cat(path: Path) -> bytes:
    return run("cat", str(path)).stdout


def jq_ok(path: Path) -> None:
    if shutil.which("jq"):
        run("jq", "-e", ".", str(path))
    else:
        run(sys.executable, "-m", "json.tool", "--json-lines", str(path))


# ---------------------------------------------------------------------------------------------- reading


def test_ls_every_folder(ro_mount):
    out = run("ls", "-la", str(ro_mount.path)).stdout.decode()
    for name in ("orders-0", "events-3", "empty-0"):
        assert name in out
    for part in ("orders-0", "events-3", "empty-0"):
        for sub in ("", "by-offset", "by-time", "segments"):
            run("ls", "-la", str(ro_mount / part / sub))
        assert sorted(os.listdir(ro_mount / part)) == sorted(
            ["records.jsonl", "by-offset", "by-time", "segments", "partition.json", "by-key", "table.jsonl",
             "transactions.json"]
        )
    listed = run("sh", "-c", f"ls {ro_mount / 'orders-0/by-offset'} | wc -l").stdout
    assert int(listed) == 1500


def test_every_folder_lists_dot_and_dot_dot(ro_mount):
    for folder in (ro_mount.path, ro_mount / "orders-0", ro_mount / "orders-0/by-offset", ro_mount / "orders-0/segments"):
        names = run("ls", "-a", str(folder)).stdout.decode().split()
        assert names[:2] == [".", ".."], folder
        assert names.count(".") == 1 and names.count("..") == 1
    by_offset = run("sh", "-c", f"ls -a {ro_mount / 'orders-0/by-offset'} | wc -l").stdout
    assert int(by_offset) == 1502
    inode = run("stat", "-c", "%i", str(ro_mount / "orders-0")).stdout.strip()
    dot = run("sh", "-c", f"ls -ai {ro_mount / 'orders-0'} | awk '$2 == \".\" {{print $1}}'").stdout.strip()
    assert dot == inode


def test_cat_matches_the_engine(ro_mount, built_logdir):
    for name in ("orders-0", "events-3", "empty-0"):
        assert cat(ro_mount / name / "records.jsonl") == expected_jsonl(built_logdir, name)
    assert cat(ro_mount / "orders-0/by-offset/17-444.jsonl") == expected_jsonl(
        built_logdir, "orders-0", 17, 444
    )
    record = json.loads(cat(ro_mount / "orders-0/by-offset/123.json"))
    assert record["offset"] == 123 and record["timestamp"] == BASE_TS + 1230
    lines = cat(ro_mount / f"orders-0/by-time/{BASE_TS + 100}..{BASE_TS + 200}.jsonl").splitlines()
    assert [json.loads(line)["offset"] for line in lines] == list(range(10, 20))
    assert json.loads(cat(ro_mount / "orders-0/by-time/2025-11-21T04:40:00.055Z.json"))["offset"] == 6
    assert (ro_mount / "orders-0/segments").is_dir()
    for seg in sorted((built_logdir / "orders-0").glob("*.log")):
        assert cat(ro_mount / "orders-0/segments" / seg.name) == seg.read_bytes()


def test_missing_names_are_enoent(ro_mount):
    for name in (
        "orders-0/by-offset/1500.json",
        "orders-0/by-offset/9-3.jsonl",
        "orders-0/nope",
        "nope-0",
        "orders-0/by-time/someday.json",
        "orders-0/segments/00000000000000000000.foo",
    ):
        with pytest.raises(FileNotFoundError):
            os.stat(ro_mount / name)


def test_grep_count(ro_mount):
    out = run("grep", "-c", '"topic":"orders"', str(ro_mount / "orders-0/records.jsonl")).stdout
    assert int(out) == 1500
    out = run("grep", "-c", '"value":{"order":', str(ro_mount / "orders-0/records.jsonl")).stdout
    assert int(out) == sum(1 for i in range(1500) if i % 7 >= 3)


def test_jq_accepts_every_file(ro_mount):
    for name in ("orders-0", "events-3", "empty-0"):
        jq_ok(ro_mount / name / "records.jsonl")
        jq_ok(ro_mount / name / "partition.json")
    for name in os.listdir(ro_mount / "events-3/by-offset"):
        jq_ok(ro_mount / "events-3/by-offset" / name)
    for offset in range(0, 1500, 97):
        jq_ok(ro_mount / f"orders-0/by-offset/{offset}.json")
    jq_ok(ro_mount / "orders-0/by-offset/0-1499.jsonl")
    jq_ok(ro_mount / f"orders-0/by-time/{BASE_TS}..{BASE_TS + 10**6}.jsonl")


def test_stat_sizes_equal_bytes_read(ro_mount):
    paths = [
        ro_mount / p
        for p in (
            "orders-0/records.jsonl",
            "orders-0/partition.json",
            "events-3/records.jsonl",
            "orders-0/by-offset/3-77.jsonl",
            f"orders-0/by-time/{BASE_TS}..{BASE_TS + 999}.jsonl",
        )
    ]
    paths += [ro_mount / "orders-0/by-offset" / f"{i}.json" for i in range(0, 1500, 50)]
    paths += sorted((ro_mount / "orders-0/segments").iterdir())
    for path in paths:
        size = int(run("stat", "-c", "%s", str(path)).stdout)
        assert size == len(cat(path)), path
    out = run("tail", "-n", "2", str(ro_mount / "orders-0/records.jsonl")).stdout.splitlines()
    assert [json.loads(line)["offset"] for line in out] == [1498, 1499]


def test_record_file_mtime_is_the_record_timestamp(ro_mount):
    st = os.stat(ro_mount / "orders-0/by-offset/42.json")
    assert st.st_mtime_ns == (BASE_TS + 420) * 1_000_000


def test_cp_r_of_a_partition(ro_mount, tmp_path, built_logdir):
    target = tmp_path / "copy"
    run("cp", "-r", str(ro_mount / "events-3"), str(target))
    assert (target / "records.jsonl").read_bytes() == expected_jsonl(built_logdir, "events-3")
    assert sorted(os.listdir(target / "by-offset")) == sorted(f"{i}.json" for i in range(5))
    assert json.loads((target / "partition.json").read_text())["logEndOffset"] == 5


def test_read_only_mount_refuses_every_write(ro_mount):
    attempts = [
        lambda: open(ro_mount / "orders-0/records.jsonl", "ab"),
        lambda: open(ro_mount / "orders-0/new-file", "wb"),
        lambda: open(ro_mount / "orders-0/append", "ab"),
        lambda: os.mkdir(ro_mount / "new-0"),
        lambda: os.unlink(ro_mount / "orders-0/partition.json"),
        lambda: os.rmdir(ro_mount / "empty-0"),
        lambda: os.rename(ro_mount / "orders-0/records.jsonl", ro_mount / "orders-0/x"),
        lambda: os.chmod(ro_mount / "orders-0/records.jsonl", 0o666),
        lambda: os.truncate(ro_mount / "orders-0/records.jsonl", 0),
        lambda: os.symlink("x", ro_mount / "orders-0/link"),
    ]
    for attempt in attempts:
        with pytest.raises(OSError) as info:
            attempt()
        assert info.value.errno == errno.EROFS, info.value


# ---------------------------------------------------------------------------------------------- live


def test_tail_f_sees_a_record_from_another_process(mounted, logdir_copy):
    m = mounted(logdir_copy)
    records = m / "events-3/records.jsonl"
    tail = subprocess.Popen(["tail", "-n", "1", "-f", str(records)], stdout=subprocess.PIPE)
    try:
        assert json.loads(tail.stdout.readline())["offset"] == 4
        writer = (
            "import sys\n"
            "from kafkafs.storage.logdir import LogDir\n"
            "from kafkafs.format.jsonview import ProducerRecord\n"
            "with LogDir(sys.argv[1], writable=True) as d:\n"
            "    record = ProducerRecord(None, None, b'from another process', ())\n"
            "    d.log('events-3').append_records([record], flush=True)\n"
        )
        lags = []
        for _ in range(2):
            subprocess.run([sys.executable, "-c", writer, str(logdir_copy)], check=True, cwd=ROOT, timeout=30)
            appended = time.monotonic()
            line = tail.stdout.readline()
            lags.append(time.monotonic() - appended)
            assert json.loads(line)["value"] == "from another process"
        # GNU tail polls a FUSE file once a second; the mount itself notices within ~0.3 s
        print("tail -f lags", lags)
        assert max(lags) < 1.5, lags
    finally:
        tail.kill()
        tail.wait()
    assert int(run("grep", "-c", "", str(records)).stdout) == 7


def test_new_records_show_in_stat_within_a_second(mounted, logdir_copy):
    m = mounted(logdir_copy)
    path = m / "orders-0/records.jsonl"
    before = os.stat(path).st_size
    with LogDir(logdir_copy, SMALL_SEGMENTS, writable=True) as d:
        d.log("orders-0").append_records([ProducerRecord(None, b"k", b"v", ())], flush=True)
    start = time.monotonic()
    while os.stat(path).st_size == before:
        assert time.monotonic() - start < 1.0
        time.sleep(0.02)
    assert cat(path) == expected_jsonl(logdir_copy, "orders-0")
    assert json.loads(cat(m / "orders-0/by-offset/1500.json"))["value"] == "v"


# ---------------------------------------------------------------------------------------------- writing


def decode_with_kafka_python(log_dir: Path) -> list[tuple[int, bytes | None, bytes | None]]:
    from kafka.record.memory_records import MemoryRecords

    out = []
    for segment in sorted(log_dir.glob("*.log")):
        records = MemoryRecords(segment.read_bytes())
        while records.has_next():
            batch = records.next_batch()
            assert batch.validate_crc()
            for record in batch:
                out.append((record.offset, record.key, record.value))
    return out


def test_append_through_the_mount(mounted, logdir_copy):
    m = mounted(logdir_copy, "--rw")
    append = m / "events-3/append"
    run("sh", "-c", f"echo hello >> {append}")
    run("sh", "-c", f'printf \'%s\\n\' \'{{"key": "k1", "value": {{"n": 1}}}}\' plain >> {append}')
    fd = os.open(append, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, b"one\ntwo\npart")
        os.write(fd, b'ial\n{"value": {"$base64": "AP8="}, "headers": [{"key": "h", "value": null}]}\n')
        with pytest.raises(OSError) as info:
            os.write(fd, b"fine\n{not json\n")
        assert info.value.errno == errno.EINVAL
        os.write(fd, b"tail without newline")
        os.fsync(fd)
    finally:
        os.close(fd)
    decoded = decode_with_kafka_python(logdir_copy / "events-3")
    values = [v for _o, _k, v in decoded[5:]]
    assert values == [
        b"hello",
        b'{"n":1}',
        b"plain",
        b"one",
        b"two",
        b"partial",
        b"\x00\xff",
        b"tail without newline",
    ]
    assert [o for o, _k, _v in decoded] == list(range(13))
    assert decoded[6][1] == b"k1"
    lines = cat(m / "events-3/records.jsonl").splitlines()
    assert len(lines) == 13 and json.loads(lines[6])["value"] == {"n": 1}
    assert json.loads(cat(m / "events-3/by-offset/11.json"))["value"] == {"$base64": "AP8="}


def test_rw_mount_refuses_other_changes(mounted, logdir_copy):
    m = mounted(logdir_copy, "--rw")
    attempts = [
        lambda: open(m / "orders-0/records.jsonl", "ab"),
        lambda: open(m / "orders-0/new-file", "wb"),
        lambda: os.unlink(m / "orders-0/partition.json"),
        lambda: os.rename(m / "orders-0/records.jsonl", m / "orders-0/x"),
        lambda: os.mkdir(m / "orders-0/sub"),
        lambda: open(m / "orders-0/segments/00000000000000000000.log", "r+b"),
    ]
    for attempt in attempts:
        with pytest.raises(OSError) as info:
            attempt()
        assert info.value.errno in (errno.EACCES, errno.EPERM), info.value


def test_mkdir_makes_a_partition(mounted, logdir_copy):
    m = mounted(logdir_copy, "--rw")
    os.mkdir(m / "payments-2")
    assert (logdir_copy / "payments-2").is_dir()
    assert "payments-2" in os.listdir(m.path)
    run("sh", "-c", f"echo first >> {m / 'payments-2/append'}")
    assert json.loads(cat(m / "payments-2/by-offset/0.json"))["value"] == "first"
    for bad in ("no-partition-number", "bad name-0", "x" * 250 + "-0"):
        with pytest.raises(OSError) as info:
            os.mkdir(m / bad)
        assert info.value.errno == errno.EINVAL, bad
    with pytest.raises(FileExistsError):
        os.mkdir(m / "orders-0")


def test_mkdir_refuses_a_topic_the_metadata_log_does_not_name(mounted, fixtures_dir, tmp_path):
    """review22 R22-2: on a --rw mount of a KRaft broker's directory, mkdir of a partition of a topic its
    metadata log does not name is EPERM, said in produce's one line, nothing made (before: rc 0, the
    folder made, its append then EACCES). A partition the metadata lacks of a topic it names: made."""
    logs = tmp_path / "logs"
    shutil.copytree(fixtures_dir / "kafka-logs-c", logs,
                    ignore=lambda d, names: [n for n in names if n.startswith("__consumer_offsets-")])
    for p in [logs, *logs.rglob("*")]:
        p.chmod(p.stat().st_mode | 0o200)
    m = mounted(logs, "--rw")
    m.allow_errors = True  # the refusal is logged as a warning
    with pytest.raises(OSError) as info:
        os.mkdir(m / "newtopic-0")
    assert info.value.errno == errno.EPERM
    assert not (logs / "newtopic-0").exists() and "newtopic-0" not in os.listdir(m.path)
    os.mkdir(m / "TestTopicPatient-3")
    assert (logs / "TestTopicPatient-3").is_dir()
    m.stop()
    said = [line for line in m.log().splitlines() if "newtopic-0: refused: " in line]
    assert len(said) == 1 and "topic newtopic is not in the cluster's metadata" in said[0], m.log()
    assert "a stray as Kafka sees it; no record is appended by guessed settings" in said[0]


def test_rw_mount_refuses_appends_to_kafkas_internal_topics(mounted, logdir_copy):
    # a broker refuses client writes to its internal topics; the append file and mkdir did not. Their
    # partitions have no append file (it was listed, and its writes failed with EPERM)
    with LogDir(logdir_copy, SMALL_SEGMENTS, writable=True) as d:
        d.create_partition("__cluster_metadata", 0)
    m = mounted(logdir_copy, "--rw")
    m.allow_errors = True  # the refusal is logged as a warning
    assert "append" in os.listdir(m / "events-3")
    assert "append" not in os.listdir(m / "__cluster_metadata-0")
    with pytest.raises(OSError) as info:
        os.stat(m / "__cluster_metadata-0/append")
    assert info.value.errno == errno.ENOENT
    proc = run("sh", "-c", f"echo hello >> {m / '__cluster_metadata-0/append'}", check=False)
    assert proc.returncode != 0
    with pytest.raises(OSError) as info:
        open(m / "__cluster_metadata-0/append", "ab", buffering=0)  # noqa: SIM115 - it does not open
    assert info.value.errno in (errno.EACCES, errno.EPERM)  # no file is made there (SPEC §3)
    for name in ("__consumer_offsets-0", "__transaction_state-1"):
        with pytest.raises(OSError) as info:
            os.mkdir(m / name)
        assert info.value.errno == errno.EPERM, name
        assert not (logdir_copy / name).exists()
    assert cat(m / "__cluster_metadata-0/records.jsonl") == b""
    m.stop()
    assert "__consumer_offsets is a Kafka internal topic" in m.log()  # the mkdir
    with LogDir(logdir_copy) as d:
        assert d.log("__cluster_metadata-0").log_end_offset == 0


def test_read_after_append_on_the_same_mount(mounted, logdir_copy):
    """Once write() or close() of append returned, this mount's records.jsonl, growing ranges and
    partition.json show the new record: never a cached size or page from before."""
    m = mounted(logdir_copy, "--rw")
    part = m / "events-3"
    records, growing, info = (
        part / "records.jsonl",
        part / "by-offset/3-1000000.jsonl",
        part / "partition.json",
    )
    for path in (records, growing, info):
        cat(path)  # the kernel now holds their sizes and pages
    stale = []

    def check(i: int, how: str) -> None:
        size = os.stat(records).st_size
        data = records.read_bytes()
        last = json.loads(data.splitlines()[-1])
        tail = json.loads(growing.read_bytes().splitlines()[-1])
        end = json.loads(info.read_bytes())["logEndOffset"]
        if (last["value"], tail["value"], len(data), end) != (
            f"{how} {i}",
            f"{how} {i}",
            size,
            last["offset"] + 1,
        ):
            stale.append((how, i, last["value"], tail["value"], len(data), size, end))

    for i in range(50):
        fd = os.open(part / "append", os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, b"closed %d\n" % i)
        finally:
            os.close(fd)
        check(i, "closed")
    fd = os.open(part / "append", os.O_WRONLY | os.O_APPEND)
    try:
        for i in range(50):
            os.write(fd, b"open %d\n" % i)  # no close: the write() itself has returned
            check(i, "open")
    finally:
        os.close(fd)
    for i in range(20):
        out = run("sh", "-c", f'echo "shell {i}" >> "{part}/append"; tail -n 1 "{records}"').stdout
        if json.loads(out)["value"] != f"shell {i}":
            stale.append(("shell", i, out))
    assert not stale, stale


def test_fsync_on_append_keeps_the_partial_line(mounted, logdir_copy):
    m = mounted(logdir_copy, "--rw")
    fd = os.open(m / "events-3/append", os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, b"abc")
        os.fsync(fd)
        os.write(fd, b"def\nghi")
        os.fsync(fd)
        # a child's copy of fd closed at its exit would not end "ghi" either (test_mount_append_close)
        last = (m / "events-3/records.jsonl").read_bytes().splitlines()[-1]
        assert json.loads(last)["value"] == "abcdef"
    finally:
        os.close(fd)
    values = [json.loads(line)["value"] for line in cat(m / "events-3/records.jsonl").splitlines()[5:]]
    assert values == ["abcdef", "ghi"]


def test_a_line_too_large_appends_nothing(mounted, logdir_copy, tmp_path):
    """One write() of a 2,000,000-byte line reaches the mount in ~1 MiB pieces; the record is too
    large, so nothing of it is appended: not by close(), not when a buffered writer retries."""
    config = tmp_path / "kafkafs.toml"
    config.write_text('"max.message.bytes" = 1500000\n')  # so that the first piece alone would fit
    m = mounted(logdir_copy, "--rw", "--config", str(config))
    append, records = m / "events-3/append", m / "events-3/records.jsonl"
    line = b"x" * 2_000_000 + b"\n"
    fd = os.open(append, os.O_WRONLY | os.O_APPEND)
    try:
        try:
            written = os.write(fd, line)
            assert written < len(line)  # the kernel reports the pieces before the failed one
        except OSError as exc:
            assert exc.errno == errno.EFBIG
    finally:
        os.close(fd)
    with pytest.raises(OSError) as info:
        with open(append, "ab") as f:  # buffered: retries the rest of a short write, gets the error
            f.write(line)
    assert info.value.errno == errno.EFBIG
    # a line longer than any record can be fails as soon as it is: cat says so and stops
    result = run("sh", "-c", f'cat >> "{append}"', input=b"y" * 3_000_000 + b"\n", check=False)
    assert result.returncode != 0 and b"File too large" in result.stderr
    fd = os.open(append, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, b"small\n")
    finally:
        os.close(fd)
    values = [json.loads(line)["value"] for line in cat(records).splitlines()]
    assert values[5:] == ["small"]


#: The largest write request FUSE passes here: 256 pages (libfuse 3's buffer; the kernel's max_pages_limit).
REQUEST = 256 * 4096


def _in_page(data: bytes, offset: int) -> memoryview:
    """``data`` in memory that starts ``offset`` bytes into a page: the kernel cuts a write() to a
    direct-I/O file at the pages of the writer's buffer, at most :data:`REQUEST` bytes' worth a request."""
    area = mmap.mmap(-1, offset + len(data))
    area[offset:] = data
    return memoryview(area)[offset:]


def _lines(size: int, tag: bytes, last: bytes = b"") -> bytes:
    """Lines of 100 bytes (a shorter one to fill), then ``last``: exactly ``size`` bytes."""
    body = b"".join(b"%s %07d " % (tag, i) + b"p" * (90 - len(tag)) + b"\n" for i in range(size // 100 + 1))
    body = body[: size - len(last) - 100]
    body = body[: body.rfind(b"\n") + 1]
    fill = size - len(last) - len(body)
    return body + b"f" * (fill - 1) + b"\n" + last


def test_a_write_is_atomic_per_fuse_request(mounted, logdir_copy):
    """R15-1: the complete lines of a write() that FUSE passes as one request (up to 1 MiB less the
    buffer's offset in its page) are appended all or nothing. A larger write() comes as several requests,
    which the daemon cannot tell from separate writes: each is appended all or nothing, and a failing one
    ends the write() with a short count (its error, when it is the first): exactly the complete lines of
    the acknowledged bytes are appended, once, and the writer's retry of the rest fails the same way."""
    m = mounted(logdir_copy, "--rw")
    append, records = m / "events-3/append", m / "events-3/records.jsonl"
    seen = 5

    def appended() -> list[str]:
        nonlocal seen
        values = [json.loads(line)["value"] for line in cat(records).splitlines()]
        new, seen = values[seen:], len(values)
        return new

    def write(buf: memoryview) -> list:
        """What a writer that retries the rest of a short count (stdio, Python's files) gets."""
        out: list = []
        fd = os.open(append, os.O_WRONLY | os.O_APPEND)
        try:
            while buf:
                written = os.write(fd, buf)
                out.append(written)
                buf = buf[written:]
        except OSError as exc:
            out.append(errno.errorcode[exc.errno])
        finally:
            os.close(fd)
        return out

    bad = b"{not json\n"
    for offset, size in ((0, REQUEST), (4095, REQUEST - 4095)):  # one request: a bad last line fails it whole
        assert write(_in_page(_lines(size, b"one", bad), offset)) == ["EINVAL"]
        assert appended() == []
    data = _lines(2_000_000, b"two", bad)
    assert write(_in_page(data, 48)) == [REQUEST - 48, "EINVAL"]  # the kernel's count, then the retry's error
    acknowledged = data[: REQUEST - 48]
    assert appended() == acknowledged[: acknowledged.rfind(b"\n")].decode().split("\n")
    assert write(_in_page(b"after\n", 0)) == [6]  # the line cut by the failed request is not appended
    assert appended() == ["after"]
    data = _lines(2_500_000, b"good")  # three requests, lines cut between them: each appended once, in order
    assert write(_in_page(data, 48)) == [len(data)]
    assert appended() == data[:-1].decode().split("\n")
    # a line too long for a record fails the request where it becomes too long, with what came before it there
    big = b"small\n" + b"x" * (1100 * 1024) + b"\n"
    assert write(_in_page(big, 0)) == ["EFBIG"]
    assert appended() == []
    assert write(_in_page(big, 200)) == [REQUEST - 200, "EFBIG"]  # the first request held less than max.message.bytes
    assert appended() == ["small"]
    assert write(_in_page(b"after\n", 0)) == [6]
    assert appended() == ["after"]
    # a writev() counts the pages of each of its buffers: 300 small lines, each in a page of its own, come as
    # two requests (256 pages, then the rest): the first is appended, the second (with the bad line) fails
    area = mmap.mmap(-1, 300 * 4096)
    lines = [b"v %d\n" % i for i in range(299)] + [bad]
    for i, line in enumerate(lines):
        area[i * 4096 : i * 4096 + len(line)] = line
    fd = os.open(append, os.O_WRONLY | os.O_APPEND)
    try:
        written = os.writev(fd, [memoryview(area)[i * 4096 : i * 4096 + len(line)] for i, line in enumerate(lines)])
    finally:
        os.close(fd)
    assert written == len(b"".join(lines[:256]))
    assert appended() == [line[:-1].decode() for line in lines[:256]]


# ---------------------------------------------------------------------------------------------- damage


def test_a_corrupt_batch_gives_eio_for_that_range_only(mounted, logdir_copy):
    segment, position, first, last = corrupt_one_batch(logdir_copy)
    m = mounted(logdir_copy)
    m.allow_errors = True
    result = run("cat", str(m / "orders-0/records.jsonl"), check=False)
    assert result.returncode != 0 and b"Input/output error" in result.stderr
    bad = run("cat", str(m / f"orders-0/by-offset/{first - 2}-{last + 2}.jsonl"), check=False)
    assert bad.returncode != 0 and b"Input/output error" in bad.stderr
    with pytest.raises(OSError) as info:
        cat_bytes = (m / f"orders-0/by-offset/{first}.json").read_bytes()
        del cat_bytes
    assert info.value.errno == errno.EIO
    assert cat(m / f"orders-0/by-offset/0-{first - 1}.jsonl").count(b"\n") == first
    assert cat(m / f"orders-0/by-offset/{last + 1}-1499.jsonl").count(b"\n") == 1499 - last
    assert json.loads(cat(m / f"orders-0/by-offset/{last + 1}.json"))["offset"] == last + 1
    assert f"corrupt batch in {segment} at position {position}" in m.log()


# ---------------------------------------------------------------------------------------------- fixtures


@pytest.mark.parametrize("name", ["kafka-logs-a", "kafka-logs-b"])
def test_real_broker_directories(mounted, fixtures_dir, name):
    m = mounted(fixtures_dir / name)
    # the top also has LOGDIR's files, and groups/ or transactions/ where it holds those topics
    partitions = sorted(p for p in os.listdir(m.path) if os.path.isdir(m / p) and p not in ("groups", "transactions"))
    assert partitions and all("-" in p for p in partitions)
    total = 0
    for part in partitions:
        data = cat(m / part / "records.jsonl")
        assert len(data) == os.stat(m / part / "records.jsonl").st_size
        jq_ok(m / part / "records.jsonl")
        jq_ok(m / part / "partition.json")
        offsets = [json.loads(line)["offset"] for line in data.splitlines()]
        assert sorted(f"{o}.json" for o in offsets) == sorted(os.listdir(m / part / "by-offset"))
        for o in offsets[:50]:
            jq_ok(m / part / "by-offset" / f"{o}.json")
        total += len(offsets)
    assert total > 0


# ---------------------------------------------------------------------------------------------- lifecycle


def test_sigterm_unmounts_cleanly(mounted, built_logdir):
    m = mounted(built_logdir)
    m.proc.send_signal(signal.SIGTERM)
    assert m.proc.wait(timeout=10) == 0
    assert not os.path.ismount(m.path)


def _unmount_daemon(mnt: Path) -> None:
    """Unmount a daemonized mount at ``mnt``: ``fusermount3 -u``, waited for 5 s, then lazily."""
    subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
    deadline = time.monotonic() + 5
    while os.path.ismount(mnt) and time.monotonic() < deadline:
        time.sleep(0.05)
    if os.path.ismount(mnt):
        subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)


def test_daemon_mode_returns_once_mounted(tmp_path, built_logdir):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:
        result = subprocess.run(
            [sys.executable, "-m", "kafkafs", "mount", str(built_logdir), str(mnt)],
            capture_output=True,
            timeout=30,
            env=env,
            cwd=ROOT,
        )
        assert result.returncode == 0, result.stderr
        assert os.path.ismount(mnt)
        assert cat(mnt / "events-3/records.jsonl") == expected_jsonl(built_logdir, "events-3")
        again = subprocess.run(
            [sys.executable, "-m", "kafkafs", "mount", str(built_logdir), str(mnt)],
            capture_output=True,
            timeout=30,
            env=env,
            cwd=ROOT,
        )
        assert again.returncode == 1 and b"already mounted" in again.stderr
        assert b"Traceback" not in again.stderr
    finally:
        _unmount_daemon(mnt)
    assert not os.path.ismount(mnt)


def test_a_daemons_relative_paths_are_the_users(tmp_path, built_logdir):
    # review16 R16-5: a relative --cache-dir landed in /NAME (the daemon leaves its folder for /), and a
    # relative --schemas was "not a directory"
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    (tmp_path / "sch").mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    name = f"kafkafs-r16-5-{os.getpid()}"
    try:
        result = subprocess.run(
            [sys.executable, "-m", "kafkafs", "mount", "--cache-dir", name, "--schemas", "sch",
             str(built_logdir), str(mnt)],
            capture_output=True, timeout=30, env=env, cwd=tmp_path,
        )
        assert result.returncode == 0, result.stderr
        os.listdir(mnt / "events-3")
        assert (mnt / "events-3/records.jsonl").stat().st_size > 0  # sized: into the cache
    finally:
        _unmount_daemon(mnt)
        shutil.rmtree(f"/{name}", ignore_errors=True)
    assert (tmp_path / name).is_dir() and not os.path.exists(f"/{name}")


def test_user_mistakes_are_one_line_errors(tmp_path, built_logdir):
    (tmp_path / "full").mkdir()
    (tmp_path / "full/file").write_text("x")
    (tmp_path / "file").write_text("x")
    cases = [
        (built_logdir, tmp_path / "missing", "no such mount point"),
        (built_logdir, tmp_path / "full", "not empty"),
        (built_logdir, tmp_path / "file", "not a directory"),
        (tmp_path / "nothing", tmp_path, "no such log directory"),
    ]
    for logdir, mnt, message in cases:
        with pytest.raises(KafkafsError) as info:
            mount(str(logdir), str(mnt), foreground=True)
        assert message in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(KafkafsError, match="values"):
        mount(str(built_logdir), str(tmp_path / "full"), values="hex")


def _mountinfo(path: Path) -> tuple[str, str] | None:
    """(file system type, source) of the mount at ``path``, from /proc/self/mountinfo."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == str(path):
            after = fields[fields.index("-") + 1 :]
            return after[0], after[1].replace("\\040", " ")
    return None


def test_the_mount_is_named_after_its_log_directory(mounted, built_logdir, logdir_copy):
    m = mounted(built_logdir)
    assert _mountinfo(m.path) == ("fuse.kafkafs", str(built_logdir))
    df = run("df", str(m.path)).stdout.decode().splitlines()[-1]
    assert df.startswith(str(built_logdir))
    named = mounted(logdir_copy, "-o", "fsname=orders-archive")
    assert _mountinfo(named.path) == ("fuse.kafkafs", "orders-archive")


def test_a_dead_mount_is_named_as_such(mounted, built_logdir):
    """After kill -9 the kernel keeps a dead mount; stat() of its root may still answer from the cache
    for a second, but the message must be the one that says how to clear it."""
    m = mounted(built_logdir)
    m.allow_errors = True
    os.listdir(m.path)
    os.stat(m.path)  # the root's attributes are fresh in the kernel's cache
    m.proc.kill()
    m.proc.wait(timeout=10)
    with pytest.raises(KafkafsError) as info:
        mount(str(built_logdir), str(m.path), foreground=True)
    message = str(info.value)
    assert "dead mount" in message and f"fusermount3 -uz {m.path}" in message, message
    subprocess.run(["fusermount3", "-uz", str(m.path)], capture_output=True)


@pytest.mark.parametrize("foreground", [True, False])
@pytest.mark.parametrize(("option", "code", "said"), [
    ("bogusopt", 2, "unknown option"),  # libfuse does not know it: a usage error (SPEC §4)
    ("max_read=4096", 1, "maximum read size"),  # libfuse takes it, then its session refuses it as it starts
])
def test_a_bad_fuse_option_is_one_line(tmp_path, built_logdir, foreground, option, code, said):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    args = [sys.executable, "-m", "kafkafs", "mount", str(built_logdir), str(mnt), "-o", option]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:
        result = subprocess.run(
            args + (["-f"] if foreground else []), capture_output=True, timeout=30, env=env
        )
        mounted = os.path.ismount(mnt)
    finally:
        if os.path.ismount(mnt):
            subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)
    lines = result.stderr.decode().splitlines()
    assert result.returncode == code and len(lines) == 1 and not mounted, lines
    assert lines[0].startswith("kafkafs: error: ") and said in lines[0], lines


def test_rw_with_o_ro_says_it_mounts_read_only(mounted, logdir_copy):
    """``--rw -o ro``: the mount is read-only (``ro`` wins), and it says so instead of quietly dropping --rw."""
    m = mounted(logdir_copy, "--rw", "-o", "ro")
    with pytest.raises(OSError) as err:
        (m / "orders-0" / "append").write_text("x\n")
    assert err.value.errno in (errno.EROFS, errno.ENOENT)
    assert "-o ro overrides --rw: mounting read-only" in m.log()
