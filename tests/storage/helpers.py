"""Shared helpers for the storage tests: configs, batches, segment files written directly, a model of
Kafka's index rule, kafka-python as an independent reader, and another process holding a log
directory's lock."""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kafkafs.format.batch import DecodedBatch, encode_batch
from kafkafs.format.jsonview import ProducerRecord
from kafkafs.storage.config import LONG_MAX, LogConfig
from kafkafs.storage.log import Log

Row = tuple[int, bytes | None, bytes | None, tuple]

ROOT = Path(__file__).resolve().parents[2]

_HOLD = (
    "import sys, time\n"
    "from kafkafs.storage.logdir import LogDir\n"
    "ld = LogDir(sys.argv[1], writable=True)\n"
    "print('held', flush=True)\n"
    "time.sleep(120)\n"
)


@contextmanager
def lock_held(logdir: Path, script_dir: Path, *args: str) -> Iterator[int]:
    """Another process (``python SCRIPT_DIR/hold.py LOGDIR ARGS``, a writer's stand-in) holds
    ``logdir``'s lock until the block ends (then it is killed); yields its pid."""
    script = script_dir / "hold.py"
    script.write_text(_HOLD)
    proc = subprocess.Popen([sys.executable, str(script), str(logdir), *args], stdout=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"held\n"
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


@contextmanager
def as_history(log: Log) -> Iterator[Log]:
    """While inside, ``log`` takes what a broker once took, that an append today refuses (Kafka's
    LogValidator, storage/append_rules.py): records without a key (as before its topic was altered to
    ``cleanup.policy=compact``; the cleaner then drops them) and timestamps far from today's clock
    (``message.timestamp.after.max.ms`` unbounded: the made-up times of a test's history)."""
    saved = log.config
    log.config = dataclasses.replace(saved, cleanup_policy="delete", message_timestamp_after_max_ms=LONG_MAX)
    try:
        yield log
    finally:
        log.config = saved


class Clock:
    """A settable millisecond clock for ``Log(clock=...)``."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def sleep(self, ms: int) -> None:
        self.now += ms


@contextmanager
def size_reads_fail(segment: Any) -> Iterator[None]:
    """While inside: reading ``segment``'s ``.log`` size (a refresh's stat) fails with EIO; other files' work."""
    import errno

    from kafkafs.storage.records import FileRecords

    real = FileRecords.stat_size

    def failing(records: FileRecords) -> int:
        if records is segment.records:
            raise OSError(errno.EIO, "Input/output error")
        return real(records)

    FileRecords.stat_size = failing  # type: ignore[method-assign]
    try:
        yield
    finally:
        FileRecords.stat_size = real  # type: ignore[method-assign]


def read_offset(log: Log, offset: int) -> tuple[DecodedBatch, int] | None:
    """The decoded batch holding ``offset`` and the record's index in it (through :meth:`Log.locate`),
    or None when the offset is not in the log."""
    view = log.locate(offset)
    if view is None:
        return None
    batch = view.decode()
    offsets = batch.offsets
    i = bisect.bisect_left(offsets, offset)
    return (batch, i) if i < len(offsets) and offsets[i] == offset else None


def record(value: bytes = b"v" * 100, ts: int | None = None, key: bytes | None = None) -> ProducerRecord:
    """A producer record of ``value`` (100 bytes by default), no headers."""
    return ProducerRecord(ts, key, value, ())


def segment_bases(log: Log) -> list[int]:
    return log.segments.bases()


def config(**settings: Any) -> LogConfig:
    """``config(segment_bytes=100)`` -> a LogConfig with ``segment.bytes=100``."""
    return LogConfig.from_mapping({k.replace("_", "."): v for k, v in settings.items()})


def rows(values: Iterable[bytes], ts: int = 1000, key: bytes | None = None) -> list[Row]:
    return [(ts, key, v, ()) for v in values]


def batch(
    values: Sequence[bytes] | int = 1,
    *,
    base_offset: int = 0,
    ts: int = 1000,
    ts_step: int = 0,
    size: int = 10,
    **kwargs: Any,
) -> bytes:
    """One v2 batch: ``values`` or that many values of ``size`` bytes, timestamps ``ts + i*ts_step``."""
    if isinstance(values, int):
        values = [bytes([65 + i % 26]) * size for i in range(values)]
    records = [(ts + i * ts_step, None, v, ()) for i, v in enumerate(values)]
    return encode_batch(records, base_offset=base_offset, **kwargs)


def write_segment(directory: Path, base_offset: int, batches: Iterable[bytes]) -> Path:
    """Write a ``.log`` directly (no indexes), as a broker whose index files were lost would leave it."""
    path = directory / f"{base_offset:020d}.log"
    with open(path, "wb") as f:
        for data in batches:
            f.write(data)
    return path


def open_log(directory: Path, cfg: LogConfig | None = None, *, writable: bool = True, clean: bool = True,
             clock: Clock | None = None, **kwargs: Any) -> Log:
    directory.mkdir(parents=True, exist_ok=True)
    return Log.open(directory, cfg or config(), writable=writable, clean_shutdown=clean,
                    clock=clock or Clock(), **kwargs)


def headers_of(data: bytes) -> list[tuple[int, int, int, int, int]]:
    """``(position, base_offset, last_offset, size, max_timestamp)`` of each batch, read with struct."""
    out = []
    pos = 0
    while pos + 61 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        (delta,) = struct.unpack_from(">i", data, pos + 23)
        (max_ts,) = struct.unpack_from(">q", data, pos + 35)
        if pos + 12 + length > len(data):
            break
        out.append((pos, base, base + delta, 12 + length, max_ts))
        pos += 12 + length
    return out


def kafka_indexes(
    data: bytes, base_offset: int, interval: int, *, final: bool = True, closes: Iterable[int] = (),
    restarts: Iterable[int] = (),
) -> tuple[bytes, bytes]:
    """The ``.index`` and ``.timeindex`` bytes Kafka's ``LogSegment.recover`` builds for ``data``.

    An independent model of the rule (SPEC §1): before a batch, if more than ``interval`` bytes lie
    between the last entry's position (or 0) and the batch, the batch gets an entry (its last offset,
    its position) and the time index the largest timestamp so far with the last offset of the batch
    that first held it, if that timestamp is larger than the time index's last. ``final`` adds the entry
    written when the segment rolls; ``closes`` are the sizes the segment had when it was closed and
    reopened, each of which left such an entry too, and from each of which the byte count restarts
    at 0 (a reopened LogSegment starts ``bytesSinceLastIndexEntry`` at 0, in Kafka 3.9 and 4.x). It
    reproduces a real broker's files (test_fixtures_storage). ``restarts`` are the sizes the segment
    was truncated to: the count restarts there too (``truncateTo``), with no time index entry.
    """
    off = bytearray()
    tim = bytearray()
    last_entry = 0
    max_ts, max_off, last_time_ts = -1, base_offset, -1
    pending = sorted(closes)
    cuts = sorted(restarts)
    for pos, _base, last, _size, batch_max in headers_of(data):
        while cuts and cuts[0] <= pos:
            last_entry = max(last_entry, cuts.pop(0))
        while pending and pending[0] <= pos:
            last_entry = pending.pop(0)
            if max_ts > last_time_ts:
                tim += struct.pack(">qI", max_ts, max_off - base_offset)
                last_time_ts = max_ts
        if batch_max > max_ts:
            max_ts, max_off = batch_max, last
        if pos - last_entry > interval:
            off += struct.pack(">II", last - base_offset, pos)
            if max_ts > last_time_ts:
                tim += struct.pack(">qI", max_ts, max_off - base_offset)
                last_time_ts = max_ts
            last_entry = pos
    if final and max_ts > last_time_ts:
        tim += struct.pack(">qI", max_ts, max_off - base_offset)
    return bytes(off), bytes(tim)


def kafka_python_records(data: bytes) -> list[tuple[int, int, bytes | None, bytes | None, list]]:
    """Every record of a ``.log`` as kafka-python decodes it, each batch's CRC checked by it."""
    from kafka.record.memory_records import MemoryRecords

    out = []
    records = MemoryRecords(data)
    while records.has_next():
        b = records.next_batch()
        assert b.validate_crc(), f"kafka-python: CRC mismatch in the batch at offset {b.base_offset}"
        for r in b:
            out.append((r.offset, r.timestamp, r.key, r.value, list(r.headers)))
    assert records.valid_bytes() == len(data), "kafka-python: bytes after the last whole batch"
    return out


def writable_copy(src: Path, dst: Path) -> Path:
    """Copy a tree without its permissions (the fixtures are read-only), so a writable open can work."""
    dst.mkdir(parents=True, exist_ok=True)
    for entry in src.iterdir():
        if entry.is_dir():
            writable_copy(entry, dst / entry.name)
        else:
            shutil.copyfile(entry, dst / entry.name)
    return dst


def tree_fingerprint(root: Path) -> dict[str, tuple[int, int, str]]:
    """Name -> (size, mtime_ns, sha1) of every file under ``root``: to prove nothing was written."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames) + [""]:
            path = Path(dirpath) / name
            st = path.stat()
            digest = hashlib.sha1(path.read_bytes()).hexdigest() if name else ""
            out[str(path.relative_to(root))] = (st.st_size if name else 0, st.st_mtime_ns, digest)
    return out


def all_records(log: Log) -> list[tuple[int, int, bytes | None, bytes | None]]:
    return [(r.offset, r.timestamp, r.key, r.value) for r in log.records()]
