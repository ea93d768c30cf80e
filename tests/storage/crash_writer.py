"""The writer that test_crash.py kills: appends with flush=True and reports each durable append.

Usage: ``python crash_writer.py LOGDIR SEED``. Prints ``ready <log end offset>`` once the partition is
open, then ``<first> <last>`` for every append that returned durable, until it is killed. Every value
starts with ``<offset>:`` so that a checker can tell a record in the wrong place.
"""

from __future__ import annotations

import random
import sys

from kafkafs.format.jsonview import ProducerRecord
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir

TOPIC = "crash"
#: Small segments and indexes, so that kills land in rolls of every kind too.
SETTINGS = {"segment.bytes": 16384, "index.interval.bytes": 512, "segment.index.bytes": 160}


def value(offset: int, rng: random.Random) -> bytes:
    size = rng.choice([0, 10, 100, 300, 3000])
    return b"%d:" % offset + rng.randbytes(size)


def main(directory: str, seed: int) -> None:
    rng = random.Random(seed)
    logdir = LogDir(directory, Settings(SETTINGS), writable=True)
    name = f"{TOPIC}-0"
    log = logdir.log(name) if name in logdir.partition_names() else logdir.create_partition(TOPIC, 0)
    out = sys.stdout
    out.write(f"ready {log.log_end_offset}\n")
    out.flush()
    while True:
        start = log.log_end_offset
        n = rng.choice([1, 1, 2, 5, 17])
        records = [ProducerRecord(None, None, value(start + i, rng), ()) for i in range(n)]
        result = log.append_records(records, flush=True)
        if not result.durable or result.first_offset != start:
            raise SystemExit(f"append {result} was not durable at {start}")
        out.write(f"{result.first_offset} {result.last_offset}\n")
        out.flush()
        if rng.random() < 0.05:
            logdir.write_checkpoints()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
