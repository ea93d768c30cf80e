"""A read-only mount beside another process's appends: a record's names resolve right after the append
that wrote it (SPEC §3 "Live"; issue 20: beside a broker, by-offset/N.json of an acknowledged offset
answered ENOENT). Seen failing before the lookups refreshed: 876 of the 900 names below did not
resolve, or the range lacked the record, right after the append (the mount's own refresh came later,
on the watcher's event)."""

from __future__ import annotations

import os

from kafkafs.format.jsonview import ProducerRecord
from kafkafs.storage.config import LogConfig
from kafkafs.storage.log import Log

TS = 1_763_700_000_000


def test_every_name_of_a_record_resolves_right_after_its_append(tmp_path, mounted):
    logs = tmp_path / "logs"
    (logs / "t-0").mkdir(parents=True)
    writer = Log.open(logs / "t-0", LogConfig.from_mapping({"segment.bytes": 16384}), writable=True,
                      clean_shutdown=True)
    try:
        writer.append_records([ProducerRecord(TS, None, b"first", ())])
        m = mounted(logs)
        part = m.path / "t-0"
        assert (part / "by-offset" / "0.json").exists()
        missing = []
        for i in range(1, 301):
            done = writer.append_records([ProducerRecord(TS + i, None, b"value %d" % i, ())])
            offset = done.last_offset
            for name in (f"by-offset/{offset}.json", f"by-time/{TS + i}.json"):
                if not os.path.exists(part / name):
                    missing.append(name)
            ranged = (part / "by-offset" / f"{offset}-{offset + 5}.jsonl").read_bytes()
            if b'"value %d"' % i not in ranged:
                missing.append(f"by-offset/{offset}-{offset + 5}.jsonl")
        assert not missing, f"{len(missing)} names did not resolve right after their append: {missing[:5]}"
        assert len(writer.segments) > 1  # rolls came in between
    finally:
        writer.close()
