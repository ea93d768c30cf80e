"""The compaction that test_compaction_crash.py kills: ``python compaction_crasher.py LOGDIR K`` runs
``clean_logdir`` with ``os.replace``/``os.rename``/``os.fsync``/``os.unlink`` counted, and exits at once
(``os._exit``, no clean-up, like a kill) just before the K-th of them. K = 0 counts them and prints
``steps N``."""

from __future__ import annotations

import os
import sys

from kafkafs.storage.cleaner import clean_logdir
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir

#: A compacted topic in small segments (several groups are merged, several rounds with a small map).
SETTINGS = Settings(
    {"segment.bytes": 2048, "log.cleaner.dedupe.buffer.size": 24 * 64},
    {"kv": {"cleanup.policy": "compact", "delete.retention.ms": 0}},
)
NOW = 10**13


def main(directory: str, kill_at: int) -> None:
    calls = [0]

    def counted(fn):
        def wrapper(*args, **kwargs):
            calls[0] += 1
            if calls[0] == kill_at:
                os._exit(17)
            return fn(*args, **kwargs)

        return wrapper

    logdir = LogDir(directory, SETTINGS, writable=True)
    logdir.log("kv-0")  # opened (and recovered) before counting starts
    for name in ("replace", "rename", "fsync", "unlink"):
        setattr(os, name, counted(getattr(os, name)))
    clean_logdir(logdir, now_ms=NOW)
    logdir.close()
    print(f"steps {calls[0]}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
