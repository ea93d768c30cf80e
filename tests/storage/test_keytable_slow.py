"""Issue 22's "done when", at full size (slow: run once, `-m slow`): on a partition of 10^7 mixed records
over 10^6 keys (bench/keyed.py: UTF-8, binary, empty and huge keys, keyless records, tombstones),

- the table (and the mount's ``table.jsonl``, read through the tree) equals what `kafkafs clean` keeps,
  minus tombstones (read back with kafka-python);
- the latest record and every record of 10,000 random keys equal a brute-force scan with kafka-python.

    KEYS_RECORDS=10000000 KEYS_KEYS=1000000 pytest -m slow tests/storage/test_keytable_slow.py -s
    KEYS_WORK=DIR ...    (reuses DIR/logs, e.g. what `bench/keys.py --work DIR` built; copies are made
                          under DIR and removed)
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import time
from pathlib import Path

import pytest

from kafkafs.storage.cleaner import clean_logdir
from kafkafs.storage.config import Settings
from kafkafs.storage.keyindex import KeyIndexStore
from kafkafs.storage.keytable import PartitionKeys
from kafkafs.storage.logdir import LogDir

from .keylogs import table_offsets

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.keyed import TOPIC, build, key_bytes  # noqa: E402

pytestmark = pytest.mark.slow

RECORDS = int(os.environ.get("KEYS_RECORDS", "10000000"))
KEYS = int(os.environ.get("KEYS_KEYS", "1000000"))
SAMPLE = int(os.environ.get("KEYS_SAMPLE", "10000"))


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    """The partition: built here, or (``KEYS_WORK``) the one bench/keys.py built there and keeps
    (bench/keyed.py: the same records for the same counts)."""
    kept = os.environ.get("KEYS_WORK")
    work = Path(kept) if kept else tmp_path_factory.mktemp("keys-slow")
    if not (work / "logs" / f"{TOPIC}-0").is_dir():
        started = time.monotonic()
        build(work / "logs", RECORDS, KEYS, segment_bytes=128 * 1024 * 1024)
        print(f"\nbuilt {RECORDS} records over {KEYS} keys in {time.monotonic() - started:.0f} s", flush=True)
    yield work
    shutil.rmtree(work / "cache-slow", ignore_errors=True)
    if not kept:
        shutil.rmtree(work, ignore_errors=True)


def _kafka_python_records(directory: Path):
    """(offset, key, value, is_control) of every record, read with kafka-python (not kafkafs)."""
    from kafka.record.memory_records import MemoryRecords

    for name in sorted(os.listdir(directory)):
        if not name.endswith(".log"):
            continue
        records = MemoryRecords((directory / name).read_bytes())
        while (batch := records.next_batch()) is not None:
            assert batch.validate_crc()
            control = batch.is_control_batch
            for r in batch:
                yield r.offset, r.key, r.value, control


def _table_jsonl_offsets(big: Path) -> list[int]:
    """The offsets of the lines of the mount's ``table.jsonl`` (the tree, without FUSE), read as a reader
    of the file reads it: in 1 MiB pieces through one open handle."""
    import orjson

    from kafkafs.fs.tree.root import Tree
    from kafkafs.fs.views.layoutcache import LayoutCache

    tree = Tree(LogDir(big / "logs"), cache=LayoutCache(big / "cache-slow"))
    try:
        handle = tree.resolve(f"{TOPIC}-0/table.jsonl").open(False)
        offsets, rest, position = [], b"", 0
        try:
            while data := handle.read(position, 1 << 20):
                position += len(data)
                lines = (rest + data).split(b"\n")
                rest = lines.pop()
                offsets.extend(orjson.loads(line)["offset"] for line in lines)
        finally:
            handle.release()
        assert rest == b"", "table.jsonl ends with a whole line"
        return offsets
    finally:
        tree.close()


def test_table_equals_what_clean_keeps(big):
    started = time.monotonic()
    with LogDir(big / "logs") as logdir:
        with PartitionKeys(logdir.log(f"{TOPIC}-0"), KeyIndexStore(big / "cache-slow")).table() as table:
            kept = table_offsets(table)
    print(f"table: {len(kept)} records in {time.monotonic() - started:.0f} s (indexes built)", flush=True)
    started = time.monotonic()
    assert _table_jsonl_offsets(big) == kept  # the mount's file is the table
    print(f"table.jsonl through the tree: the same {len(kept)} offsets in {time.monotonic() - started:.0f} s",
          flush=True)
    shutil.rmtree(big / "copy", ignore_errors=True)
    shutil.copytree(big / "logs", big / "copy", ignore=shutil.ignore_patterns(".lock"))
    started = time.monotonic()
    settings = Settings({}, {TOPIC: {"cleanup.policy": "compact", "min.compaction.lag.ms": 0}})
    with LogDir(big / "copy", settings, writable=True) as logdir:
        clean_logdir(logdir, now_ms=time.time_ns() // 1_000_000)
    print(f"clean: {time.monotonic() - started:.0f} s", flush=True)
    cleaned = [offset for offset, _k, value, control in _kafka_python_records(big / "copy" / f"{TOPIC}-0")
               if not control and value is not None]
    shutil.rmtree(big / "copy")
    assert kept == cleaned


def test_by_key_equals_a_brute_force_scan(big):
    rng = random.Random(22)
    sample = {key_bytes(k) for k in rng.sample(range(KEYS), SAMPLE)}
    sample |= {b"", key_bytes(1), key_bytes(5), key_bytes(105)}  # empty, binary, huge
    history: dict[bytes, list[tuple[int, bytes | None]]] = {k: [] for k in sample}
    started = time.monotonic()
    for offset, key, value, control in _kafka_python_records(big / "logs" / f"{TOPIC}-0"):
        if not control and key is not None and key in history:
            history[key].append((offset, value))
    print(f"brute force: {time.monotonic() - started:.0f} s", flush=True)
    assert any(len(key) > 240 for key in sample) and any(h and h[-1][1] is None for h in history.values())
    started = time.monotonic()
    with LogDir(big / "logs") as logdir:
        keys = PartitionKeys(logdir.log(f"{TOPIC}-0"), KeyIndexStore(big / "cache-slow"))
        for key, records in history.items():
            latest = keys.latest(key)
            assert (latest.offset if latest else None) == (records[-1][0] if records else None), key
            assert [r.offset for r in keys.history(key)] == [o for o, _v in records], key
    print(f"{len(history)} keys looked up in {time.monotonic() - started:.0f} s", flush=True)
    # the mount's by-key/ files (the tree, without a kernel) for a thousand of them
    import orjson

    from kafkafs.format.keynames import key_name
    from kafkafs.fs.tree.root import Tree
    from kafkafs.fs.views.layoutcache import LayoutCache

    started = time.monotonic()
    tree = Tree(LogDir(big / "logs"), cache=LayoutCache(big / "cache-slow"))
    try:
        for key in sorted(history)[:1000]:
            records = history[key]
            if not records:
                continue
            name = key_name(key)
            latest = orjson.loads(tree.read_file(f"{TOPIC}-0/by-key/{name}.json"))
            assert latest["offset"] == records[-1][0], key
            lines = tree.read_file(f"{TOPIC}-0/by-key/{name}.jsonl").splitlines()
            assert [orjson.loads(line)["offset"] for line in lines] == [o for o, _v in records], key
    finally:
        tree.close()
    print(f"1000 keys through the tree in {time.monotonic() - started:.0f} s", flush=True)
