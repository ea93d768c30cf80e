"""``kafkafs demo DIR``: a small, realistic log directory to try kafkafs on.

Written through the storage engine, so the result is exactly what kafkafs (and a broker) writes:
``orders-0`` and ``orders-1`` (keyed JSON orders with headers, several segments), ``sensors-0`` (lz4
batches of readings, LogAppendTime), ``payments-0`` (a transaction committed and one aborted, with
their markers) and ``images-0`` (binary values). Timestamps are fixed, so the demo is the same every
time: the orders span 2026-11-21 from 10:00 UTC, one record every 7 seconds.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

from .errors import InvalidInput, describe_os_error, doing, tag_os_error
from .format.batch import Codec, encode_batch, encode_control_batch
from .format.jsonview import format_timestamp
from .storage.config import Settings
from .storage.dirlock import check_not_locked
from .storage.logdir import LogDir

__all__ = ["build_demo", "DEMO_START_MS"]

DEMO_START_MS = 1_795_255_200_000  # 2026-11-21T10:00:00Z
_MARKER = ".kafkafs-demo"
#: The partition folders the demo writes: all that ``--force`` removes.
DEMO_PARTITIONS = ("orders-0", "orders-1", "sensors-0", "payments-0", "images-0")


def _create(target: Path) -> None:
    """The empty demo folder and its marker. A folder that cannot be made here (no parent, not a folder,
    not writable) is a path the command does not take: InvalidInput, exit 2 (SPEC §4); a disk failing
    later, while the partitions are written, stays an OSError (exit 1)."""
    parent = target.absolute().parent
    if not target.exists() and not parent.is_dir():
        raise InvalidInput(f"{target}: its parent folder {parent} does not exist")
    try:
        target.mkdir(exist_ok=True)
        (target / _MARKER).write_text("written by kafkafs demo\n")
    except OSError as exc:
        raise InvalidInput(describe_os_error(tag_os_error(exc, "create {path}"))) from None


def _remove_demo_partitions(target: Path) -> list[str]:
    """Remove the partition folders an earlier demo wrote in ``target`` (what it appended to since
    with them), never anything else: a folder the demo did not write stays (review23 R23-8: a partition
    a user put there was deleted). Returns the folders kept. A writer holding ``.lock`` stops it first."""
    check_not_locked(target)
    kept = sorted(
        entry.name for entry in os.scandir(target)
        if entry.is_dir(follow_symlinks=False) and entry.name not in DEMO_PARTITIONS
    )
    for name in DEMO_PARTITIONS:
        path = target / name
        with doing("remove {path}", path):
            if path.is_symlink() or (path.exists() and not path.is_dir()):
                path.unlink()  # a link: the entry goes, never what it names
            elif path.exists():
                shutil.rmtree(path)
    return kept


def build_demo(target: Path, *, force: bool = False) -> str:
    """Write the demo log directory at ``target``; return a short summary."""
    if target.exists() and not target.is_dir():
        raise InvalidInput(f"{target} exists and is not a folder; choose an empty or new folder")
    if target.exists() and any(target.iterdir()):
        if not (target / _MARKER).exists():
            raise InvalidInput(f"{target} exists and is not an earlier demo; choose an empty or new folder")
        if not force:
            raise InvalidInput(f"{target} already holds a demo (use --force to write it again)")
        kept = _remove_demo_partitions(target)
    else:
        kept = []
    _create(target)
    settings = Settings(
        {"segment.bytes": 64 * 1024, "retention.ms": -1},
        {"sensors": {"message.timestamp.type": "LogAppendTime", "compression.type": "lz4"}},
    )
    rng = random.Random(42)
    clock_now = [DEMO_START_MS]
    with LogDir(target, settings, writable=True) as logdir:
        customers = [f"c-{n:04d}" for n in range(1, 41)]
        for partition in (0, 1):
            log = logdir.create_partition("orders", partition)
            ts = DEMO_START_MS + partition * 3000
            for _batch in range(60):
                records = []
                for _ in range(rng.randint(5, 20)):
                    customer = rng.choice(customers)
                    value = (
                        b'{"order":%d,"customer":"%s","items":%d,"amount":%d.%02d,"currency":"EUR","status":"%s"}'
                        % (
                            rng.randrange(10**6),
                            customer.encode(),
                            rng.randint(1, 5),
                            rng.randrange(5, 500),
                            rng.randrange(100),
                            rng.choice([b"created", b"paid", b"shipped"]),
                        )
                    )
                    headers: tuple[tuple[str, bytes], ...] = (("source", b"web" if rng.random() < 0.7 else b"app"),)
                    if rng.random() < 0.2:
                        headers += (("trace", b"%016x" % rng.getrandbits(64)),)
                    records.append((ts, customer.encode(), value, headers))
                    ts += 7000
                log.append_records(records)
            log.flush()
        sensors = logdir.create_partition("sensors", 0)
        sensors.clock = lambda: clock_now[0]
        for minute in range(30):
            clock_now[0] = DEMO_START_MS + minute * 60_000
            rows = [
                (None, b"sensor-%d" % s, b'{"celsius":%.1f,"humidity":%d}' % (18 + rng.random() * 6, rng.randint(30, 60)), ())
                for s in range(1, 6)
            ]
            sensors.append_records(rows)
        sensors.flush()
        payments = logdir.create_partition("payments", 0)
        t = DEMO_START_MS
        for pid, outcome in ((1001, "COMMIT"), (1002, "ABORT"), (1003, "COMMIT")):
            txn = encode_batch(
                [(t + i, b"acct-%d" % (pid + i), b'{"cents":%d}' % rng.randrange(100, 100000), ()) for i in range(3)],
                transactional=True,
                producer_id=pid,
                producer_epoch=0,
                base_sequence=0,
            )
            marker = encode_control_batch(outcome, producer_id=pid, producer_epoch=0, timestamp=t + 10)
            payments.append_batches(txn)
            payments.append_batches(marker)
            t += 60_000
        payments.flush()
        images = logdir.create_partition("images", 0)
        images.append_records(
            [(DEMO_START_MS + i * 1000, b"thumb-%d.png" % i, b"\x89PNG\r\n\x1a\n" + bytes(rng.getrandbits(8) for _ in range(24)), ())
             for i in range(5)],
            flush=True,
        )
        summary = []
        for log in logdir:
            if log.name not in DEMO_PARTITIONS:
                continue
            summary.append(
                f"  {log.name:<12} offsets {log.log_start_offset}..{log.log_end_offset - 1}, "
                f"{len(log.segments)} segment(s)"
            )
    _ = Codec
    if kept:
        summary.append(f"  kept, not the demo's: {', '.join(kept)}")
    return (
        f"wrote a demo log directory to {target}\n" + "\n".join(summary)
        + f"\n  orders start at {format_timestamp(DEMO_START_MS)}"
    )
