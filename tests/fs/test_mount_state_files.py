"""A real read-only mount of the broker's log directory lists and serves every file byte-identically:
the log directory's own files at the top, every file of each partition folder in ``segments/``, and
``partition.json`` carries what the checkpoints and state files say (SPEC §3)."""

from __future__ import annotations

import filecmp
import json
import os


def test_broker_files_through_the_mount(mounted, fixtures_dir):
    logs = fixtures_dir / "kafka-logs-a"
    m = mounted(logs)
    top = set(os.listdir(m.path))
    files = {n for n in os.listdir(logs) if (logs / n).is_file()}
    assert files <= top and {n for n in top - files if not (logs / n).is_dir()} == {"groups"}  # __consumer_offsets
    for name in files:
        assert filecmp.cmp(logs / name, m / name, shallow=False), name
        assert os.stat(m / name).st_size == os.stat(logs / name).st_size
    with open(m / "meta.properties", "rb") as f:
        assert f.read() == (logs / "meta.properties").read_bytes()
    for part in sorted(p.name for p in logs.iterdir() if p.is_dir()):
        listed = sorted(os.listdir(m / part / "segments"))
        assert listed == sorted(os.listdir(logs / part)), part
        for name in listed:
            assert filecmp.cmp(logs / part / name, m / part / "segments" / name, shallow=False), (part, name)
    info = json.loads((m / "__consumer_offsets-12" / "partition.json").read_bytes())
    assert info["topicId"] == "f64BRmo_QQOpNWuZOGjZrA"
    assert (info["leaderEpoch"], info["highWatermark"], info["recoveryPoint"]) == (0, 869, 869)
    try:
        fd = os.open(m / "replication-offset-checkpoint", os.O_WRONLY)
    except OSError as exc:
        assert exc.errno in (13, 30)  # EACCES or EROFS
    else:
        os.close(fd)
        raise AssertionError("a top file opened for writing")
