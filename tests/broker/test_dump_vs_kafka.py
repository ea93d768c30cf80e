"""``kafkafs dump`` against the real ``kafka-dump-log`` (SPEC §4, §9): every file of a broker's log
directory (data partitions of every codec, transactions with aborts, a LogAppendTime topic,
``__consumer_offsets``, ``__transaction_state``, ``__cluster_metadata`` with its ``.checkpoint``
snapshots; ``.log``, ``.index``, ``.timeindex``, ``.txnindex``, ``.snapshot``, the checkpoint and
metadata files) dumped by both with each of Kafka's flag sets; stdout and stderr equal line for line.

Where Kafka stops with a stack trace, kafkafs's documented deviation stands: those files are listed in
``DEVIATIONS`` by name, and the test checks that Kafka still stops there (so a list that is no longer
needed fails).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .harness import Broker, Kafka, kafkafs
from .workloads import CODECS, SMALL_SEGMENTS, commit_group_offsets, produce_mix, produce_transactions

# the flag sets: Kafka's flags alone and in the combinations its documentation names
FLAG_SETS: list[tuple[str, ...]] = [
    (),
    ("--deep-iteration",),
    ("--print-data-log",),
    ("--deep-iteration", "--print-data-log", "--skip-record-metadata"),
    ("--verify-index-only",),
    ("--index-sanity-check",),
    ("--max-bytes", "3000"),
    ("--max-bytes", "3000", "--deep-iteration"),
]

# decoder flags, each on the topic it decodes (kafka-dump-log applies it to whatever it is given)
DECODERS = [
    ("--offsets-decoder", "__consumer_offsets"),
    ("--transaction-log-decoder", "__transaction_state"),
    ("--cluster-metadata-decoder", "__cluster_metadata"),
]

# where Kafka stops with a stack trace and kafkafs prints one line instead (README, "dump"): the end
# of the file's path -> the flag that makes Kafka stop; each is checked to still make Kafka stop, and
# kafkafs's line to be Kafka's exception message
DEVIATIONS: dict[str, str] = {
    # the KRaft log's active time index is preallocated and never trimmed while it is active: Kafka's
    # TimeIndex.sanityCheck throws CorruptIndexException ("... the last timestamp is 0 which is less
    # than the first timestamp ...")
    "__cluster_metadata-0/00000000000000000000.timeindex": "--index-sanity-check",
}


MALFORMED_UTF8 = ["edae55", "eda080", "e08080", "e0a0", "f0808080", "f4908080", "f5808080", "c080", "c2",
                  "f09f98", "f09f9841", "80ff", "e18041", "f09f", "ff", "c3a9", "e29c93", "f09f9880"]

_STACK = re.compile(r"^\s+at [\w$.<>]+\(.*\)$|^Exception in thread|^Caused by: ")


@pytest.fixture(scope="module")
def broker_dir(kafka: Kafka, tmp_path_factory) -> Path:
    """One broker's log directory with everything a broker writes, stopped cleanly."""
    from .harness import new_workdir

    broker = Broker(kafka, new_workdir(tmp_path_factory.mktemp("dump")), config={
        "metadata.log.max.snapshot.interval.ms": 2000,
        "metadata.log.max.record.bytes.between.snapshots": 1,
    })
    try:
        broker.start()
        for codec in CODECS:
            broker.create_topic(f"c-{codec}", configs=SMALL_SEGMENTS)
            produce_mix(broker, f"c-{codec}", 600, codec=codec, idempotent=codec in ("gzip", "zstd"))
        broker.create_topic("txn", partitions=2, configs=SMALL_SEGMENTS)
        produce_transactions(broker, "txn", 12, 20, partitions=2, codec="lz4")
        broker.create_topic("lat", configs={**SMALL_SEGMENTS, "message.timestamp.type": "LogAppendTime"})
        produce_mix(broker, "lat", 300, codec="snappy")
        # keys and values that are not UTF-8: kafka-dump-log prints them as Java decodes them
        broker.create_topic("bytes")
        producer = broker.producer()
        for i, h in enumerate(MALFORMED_UTF8):
            producer.send("bytes", key=bytes.fromhex(h), value=bytes.fromhex(h) + b"tail", headers=[(f"h{i}", b"")])
        producer.flush()
        commit_group_offsets(broker, ["c-none", "txn"])
        import time

        time.sleep(3)  # a metadata snapshot (.checkpoint) after the last records
        assert broker.stop() == 0
    finally:
        broker.close()
    return broker.log_dir


def _files(log_dir: Path, topic: str | None = None) -> list[Path]:
    out = []
    for part in sorted(p for p in log_dir.iterdir() if p.is_dir()):
        if topic is not None and not part.name.startswith(topic + "-"):
            continue
        out += sorted(p for p in part.iterdir() if p.is_file())
    if topic is None:
        out += sorted(p for p in log_dir.iterdir() if p.is_file())
    return out


def _sections(stdout: str) -> dict[str, list[str]]:
    """stdout split at each ``Dumping FILE`` line."""
    out: dict[str, list[str]] = {}
    current = ""
    for line in stdout.splitlines():
        if line.startswith("Dumping "):
            current = line[len("Dumping "):]
        out.setdefault(current, []).append(line)
    return out


def _compare(kafka: Kafka, files: list[Path], flags: tuple[str, ...]) -> tuple[int, list[str], list[str]]:
    """Dump ``files`` with both; returns (lines compared, differences, files where Kafka stopped)."""
    compared = 0
    diffs: list[str] = []
    stopped: list[str] = []
    todo = list(files)
    while todo:
        theirs = kafka.dump_log(*todo, *flags)
        ours_files = todo
        stack = [ln for ln in theirs.stderr.splitlines() if _STACK.search(ln)]
        if stack:
            # Kafka stopped at the last file it began; that one is a deviation, the rest run again
            begun = [ln[len("Dumping "):] for ln in theirs.stdout.splitlines() if ln.startswith("Dumping ")]
            at = begun[-1] if begun else str(todo[0])
            stopped.append(at)
            index = [str(p) for p in todo].index(at)
            ours_files = todo[:index]
            rest = todo[index + 1:]
            their_out = theirs.stdout.splitlines()
            their_out = their_out[: len(their_out) - len(_sections(theirs.stdout).get(at, []))]
            their_err = [ln for ln in theirs.stderr.splitlines() if not _STACK.search(ln)]
            their_err = [ln for ln in their_err if at not in ln]  # the exception's own message line
        else:
            rest = []
            their_out = theirs.stdout.splitlines()
            their_err = theirs.stderr.splitlines()
        if ours_files:
            ours = kafkafs("dump", "--files", ",".join(map(str, ours_files)), *flags)
            assert "Traceback" not in ours.stderr, ours.stderr
            our_out, our_err = ours.stdout.splitlines(), ours.stderr.splitlines()
            if not stack:
                assert ours.returncode == theirs.returncode, (flags, ours.returncode, theirs.returncode, ours.stderr[-2000:])
        else:
            our_out, our_err = [], []
        compared += max(len(their_out), len(our_out)) + max(len(their_err), len(our_err))
        a, b = _sections("\n".join(their_out)), _sections("\n".join(our_out))
        for name in sorted(set(a) | set(b)):
            ta, tb = a.get(name, []), b.get(name, [])
            if ta != tb:
                first = next((i for i, (x, y) in enumerate(zip(ta, tb, strict=False)) if x != y), min(len(ta), len(tb)))
                diffs.append(
                    f"{' '.join(flags) or '(no flags)'} {name}: line {first}: kafka {ta[first:first + 1]} "
                    f"kafkafs {tb[first:first + 1]} ({len(ta)} vs {len(tb)} lines)"
                )
        if their_err != our_err:
            first = next((i for i, (x, y) in enumerate(zip(their_err, our_err, strict=False)) if x != y),
                         min(len(their_err), len(our_err)))
            diffs.append(f"{' '.join(flags) or '(no flags)'} stderr line {first}: kafka {their_err[first:first + 3]} "
                         f"kafkafs {our_err[first:first + 3]} ({len(their_err)} vs {len(our_err)} lines)")
        todo = rest
    return compared, diffs, stopped


@pytest.mark.parametrize("flags", FLAG_SETS, ids=lambda f: " ".join(f) or "no-flags")
def test_dump_equals_kafka_dump_log(kafka, broker_dir, flags, record_property):
    files = _files(broker_dir)
    compared, diffs, stopped = _compare(kafka, files, flags)
    record_property("lines_compared", compared)
    print(f"{' '.join(flags) or '(no flags)'}: {len(files)} files, {compared} lines compared, Kafka stopped at {stopped}")
    expected = sorted(str(broker_dir / tail) for tail, flag in DEVIATIONS.items() if flag in flags)
    assert sorted(stopped) == expected, "Kafka stopped with a stack trace at files not listed in DEVIATIONS"
    for path in stopped:
        theirs = kafka.dump_log(Path(path), *flags)
        message = next(ln for ln in theirs.stderr.splitlines() if ln.startswith("Exception in thread"))
        ours = kafkafs("dump", path, *flags)
        # 'Exception in thread "main" org.apache...CorruptIndexException: MESSAGE' -> 'kafkafs: MESSAGE'
        assert ours.stderr.splitlines() == ["kafkafs: " + message.split("Exception: ", 1)[1]], (message, ours.stderr)
    assert not diffs, "\n".join(diffs[:20]) + f"\n({len(diffs)} differences)"


@pytest.mark.parametrize("flag, topic", DECODERS)
def test_dump_with_decoders_equals_kafka_dump_log(kafka, broker_dir, flag, topic, record_property):
    files = [p for p in _files(broker_dir, topic) if p.suffix in (".log", ".checkpoint")]
    assert files, f"no {topic} files"
    compared, diffs, stopped = _compare(kafka, files, (flag,))
    record_property("lines_compared", compared)
    print(f"{flag}: {len(files)} files, {compared} lines compared, Kafka stopped at {stopped}")
    assert not stopped
    assert not diffs, "\n".join(diffs[:20]) + f"\n({len(diffs)} differences)"


def test_a_producer_without_batch_metadata_dumps_as_kafka_dumps_it(kafka: Kafka, tmp_path):
    """review6 F2: a snapshot entry with no batch (lastOffset -1: a producer whose epoch a timed-out
    transaction's abort bumped) ends at ``lastTimestamp: T``; kafkafs printed a space after it."""
    from tests.kafka_layout import write_producer_snapshot

    snapshot = tmp_path / "00000000000000000003.snapshot"
    snapshot.write_bytes(write_producer_snapshot([
        (1000, 1, -1, -1, 0, 1795734862077, 0, -1),  # no batch metadata
        (1001, 0, 4, 2, 4, 1795734862099, 3, 0),  # a batch, a transaction open from offset 0
    ]))
    theirs = kafka.dump_log(snapshot)
    proc = kafkafs("dump", str(snapshot))
    assert proc.stdout.splitlines() == theirs.stdout.splitlines() and proc.stderr == theirs.stderr
    assert theirs.stdout.splitlines()[1].endswith("lastTimestamp: 1795734862077")


def test_a_null_value_under_the_remote_log_metadata_decoder_is_said_as_kafka_says_it(kafka: Kafka, fixtures_dir):
    """review6 F3: tombstones (null values) under ``--remote-log-metadata-decoder``: Kafka 4.4's parser
    hands the null value on and prints the NullPointerException's message (Java 17's helpful text);
    kafkafs printed the serde's "Error while reading frame version"."""
    segment = fixtures_dir / "kafka-logs-a" / "__consumer_offsets-12" / "00000000000000000862.log"
    theirs = kafka.dump_log(segment, "--remote-log-metadata-decoder")
    proc = kafkafs("dump", "--remote-log-metadata-decoder", str(segment))
    assert proc.stdout.splitlines() == theirs.stdout.splitlines()
    assert "valueSize: -1" in theirs.stdout and "is null" in theirs.stdout


@pytest.mark.parametrize("name", ["00000000000000000000.log.deleted", "00000000000000000000.log.swap",
                                  "00000000000000000000.log.cleaned", "00000000000000000000.index.deleted",
                                  "00000000000000000003.snapshot.deleted", "notes.txt", "no-suffix"])
def test_a_file_of_no_kind_alone_is_ignored_as_kafka_ignores_it(kafka: Kafka, fixtures_dir, tmp_path, name):
    """review6 F7: a single file dump does not know (a deletion's or a compaction's leftover, any other
    name): kafka-dump-log prints "Dumping FILE", "Ignoring unknown file FILE" on stderr, exit 0; kafkafs
    exited 2 ("not a file of a partition folder") and printed no "Dumping" line."""
    segment = fixtures_dir / "kafka-logs-a" / "__consumer_offsets-12" / "00000000000000000000.log"
    (tmp_path / name).write_bytes(segment.read_bytes())
    path = f"{tmp_path}//{name}"  # Java's File collapses the doubled slash, in both lines
    theirs = kafka.dump_log("--files", path)
    for args in ((path,), ("--files", path)):
        proc = kafkafs("dump", *args)
        assert (proc.returncode, proc.stdout, proc.stderr) == (theirs.returncode, theirs.stdout, theirs.stderr)
    assert theirs.returncode == 0 and theirs.stderr == f"Ignoring unknown file {tmp_path}/{name}\n"


def test_files_sharing_a_hashmap_bucket_are_reported_in_kafkas_order(kafka: Kafka, tmp_path):
    """review7 R5: DumpLogSegments fills its maps of findings with computeIfAbsent, which links a new
    file at the head of its HashMap bucket (and grows the table on the call after the threshold):
    kafkafs reported files sharing a bucket in the order dumped. Segments with gaps (one finding each
    with --deep-iteration), paths chosen so that several share a bucket, 13 files (the table stays at
    16 buckets) and 20 (it grows); then 9 sharing one bucket of 16, where HashMap's treeifyBin doubles the
    small table (kafkafs's order was wrong there, seen with --basetemp=/tmp/pytest-of-root/pytest-1383)."""
    from kafkafs.dump.scala import java_string_hash
    from tests.storage.helpers import batch

    def bucket_of(path: Path) -> int:  # of 16, as HashMap spreads String.hashCode
        h = java_string_hash(str(path)) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & 15

    names, buckets = [], {}
    i = 0
    while len(names) < 20:  # 4 in one bucket of 16 (0), the rest anywhere
        path = tmp_path / f"t{i}-0" / "00000000000000000000.log"
        i += 1
        bucket = bucket_of(path)
        if bucket == 0 and buckets.get(0, 0) >= 4 or bucket != 0 and len(names) - buckets.get(0, 0) >= 16:
            continue
        buckets[bucket] = buckets.get(bucket, 0) + 1
        path.parent.mkdir()
        path.write_bytes(batch(1, base_offset=0) + batch(1, base_offset=5))
        names.append(path)
    # 9 in one bucket of 16: the 8th key into a bucket calls treeifyBin, which doubles a table of fewer than
    # 64 buckets (paths alike enough do this; seen with a basetemp whose t0..t9 shared bucket 15); at most 4
    # alike in their low 6 bits, so no bucket of 64 becomes a tree
    crowded, of64 = [], {}
    while len(crowded) < 9:
        path = tmp_path / f"t{i}-0" / "00000000000000000000.log"
        i += 1
        h = java_string_hash(str(path)) & 0xFFFFFFFF
        low6 = (h ^ (h >> 16)) & 63
        if low6 & 15 or of64.get(low6, 0) >= 4:
            continue
        of64[low6] = of64.get(low6, 0) + 1
        path.parent.mkdir()
        path.write_bytes(batch(1, base_offset=0) + batch(1, base_offset=5))
        crowded.append(path)
    for files in (names[:13], names, crowded, crowded + names[:4]):
        theirs = kafka.dump_log(*files, "--deep-iteration")
        proc = kafkafs("dump", "--deep-iteration", "--files", ",".join(map(str, files)))
        assert proc.stdout == theirs.stdout
        assert proc.stderr.splitlines() == theirs.stderr.splitlines()
        assert theirs.stderr.count("Non-consecutive offsets in ") == len(files)


@pytest.mark.slow
def test_a_legacy_wrapper_overlapping_the_entry_before_dumps_as_kafka_dumps_it(kafka: Kafka, tmp_path):
    """review6 F11 remainder: a gzip wrapper (magic 0 and 1) at offset 6 whose inner offsets 4, 5, 6 overlap
    the entry at 4 before it is damage to readers and verify; dump prints it as kafka-dump-log does (the
    inner offsets under the wrapper, "Non-consecutive offsets ... 4 is followed by 4" on stderr, exit 0)."""
    from tests.format.test_legacy import overlapping_wrapper_segment

    files = []
    for magic in (0, 1):
        path = tmp_path / f"old{magic}-0" / "00000000000000000000.log"
        path.parent.mkdir()
        path.write_bytes(overlapping_wrapper_segment(magic))
        files.append(path)
    theirs = kafka.dump_log(*files, "--deep-iteration")
    proc = kafkafs("dump", "--deep-iteration", "--files", ",".join(map(str, files)))
    assert (proc.returncode, proc.stdout, proc.stderr.splitlines()) == (
        theirs.returncode, theirs.stdout, theirs.stderr.splitlines())
    assert theirs.stdout.count("| offset: 4 ") == 4 and theirs.stderr.count("  4 is followed by 4") == 2


def test_strings_that_are_not_utf8_decode_as_kafka_decodes_them(kafka: Kafka, tmp_path):
    """review14 R14-3: coordinator records whose strings are not UTF-8 (a commit's metadata, a group's
    name): kafka-dump-log --offsets-decoder reads them as Java's new String(bytes, UTF_8) does (each
    malformed sequence one U+FFFD, Java's rule for its length), kafkafs said "Error ... skipping"."""
    import struct

    from kafkafs.format.batch import encode_batch
    from tests.cli.test_dump import JAVA_UTF8

    def raw(s: bytes) -> bytes:
        return struct.pack(">h", len(s)) + s

    cases = [*JAVA_UTF8, "616bff", "e282", "e282ac", "f888808080", "41e2", "fe41ff"]
    records = []
    for i, h in enumerate(cases):
        group = b"g" if i % 3 else b"g" + bytes.fromhex(h)
        key = struct.pack(">h", 1) + raw(group) + raw(b"t") + struct.pack(">i", i)
        value = struct.pack(">hqi", 3, 5, -1) + raw(bytes.fromhex(h)) + struct.pack(">q", 1_700_000_000_000)
        records.append((1_700_000_000_000, key, value, ()))
    segment = tmp_path / "__consumer_offsets-0" / "00000000000000000000.log"
    segment.parent.mkdir()
    segment.write_bytes(encode_batch(records[:10]) + encode_batch(records[10:], base_offset=10))
    theirs = kafka.dump_log(segment, "--offsets-decoder")
    ours = kafkafs("dump", "--offsets-decoder", "--files", str(segment))
    assert theirs.stdout.count("\ufffd") >= len(cases) and "Error" not in theirs.stdout
    assert ours.stdout == theirs.stdout
