"""A disk error in an index file is local too (issue 20; SPEC §3 "Damage and disk errors are local").

Indexes were memory-mapped on every read path. A page of a mapped file that the disk cannot read is not
an error a program can catch: the access kills the process with SIGBUS. So one bad sector in one
``.index`` took the whole read-only mount down (every partition, every reader) at the first lookup that
touched that page (seen: the daemon died of signal 7 and the lookup got ECONNABORTED). A read-only index
is now read with ``pread`` when it opens: an error there is an ``OSError``, and an index only says where
to start reading the log, so that segment's lookups read its log from the start instead (the right
answer, slower); it is logged once, ``verify`` reports the file, and the daemon lives on.

The bad stretch is in the middle of the index (pages the open's entry count never reads), with the layer's
read-ahead off so that only the pages a lookup needs are asked for.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kafkafs.format.jsonview import ProducerRecord
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir
from tests.fs.conftest import ROOT, expected_jsonl

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="setting the layer's read-ahead needs root")

BASE_TS = 1_763_700_000_000


def _build(path: Path) -> tuple[Path, list[int]]:
    """``big-0``: a first segment whose offset index holds ~2,000 entries (16 KB: four pages), then a
    small second one; ``other-0`` beside it."""
    path.mkdir(parents=True)
    with LogDir(path, Settings({"segment.bytes": 180_000, "index.interval.bytes": 1}), writable=True) as d:
        log = d.create_partition("big", 0)
        for i in range(2600):
            log.append_records([ProducerRecord(BASE_TS + i, None, b"r%05d" % i, ())])
        d.create_partition("other", 0).append_records([ProducerRecord(BASE_TS, None, b"fine", ())])
        bases = [s.base_offset for s in log.segments]
    return path, bases


def test_an_unreadable_index_page_fails_its_segments_lookups_not_the_daemon(tmp_path, eio_layer, mounted):
    logdir, bases = _build(tmp_path / "logs")
    index = logdir / "big-0" / f"{bases[0]:020d}.index"
    assert len(bases) >= 2 and index.stat().st_size >= 4 * 4096, (bases, index.stat().st_size)
    entries = index.stat().st_size // 8
    layer = eio_layer(logdir)
    layer.no_read_ahead()
    # the third page of the first segment's offset index cannot be read
    layer.fail({"name": f"big-0/{bases[0]:020d}.index", "from": 8192, "to": 12288, "op": "read"})
    m = mounted(layer.path)
    m.allow_errors = True
    part = m / "big-0"
    # a lookup whose binary search lands in the bad page (an offset past the warm tail's first slot): the
    # index is only where to start reading, so the segment's log is read from its start instead
    target = int(entries * 0.7)
    try:
        got = json.loads((part / "by-offset" / f"{target}.json").read_bytes())
    except OSError as exc:
        got = exc
    assert m.proc.poll() is None, f"the daemon died (exit {m.proc.wait(5)}): {m.log()[-2000:]}"
    assert not isinstance(got, OSError) and got["offset"] == target, got
    assert layer.hits(), "the bad page was never asked for: the test proves nothing"
    # everything else answers: the other segment's records, the other partition, the segment files
    last = bases[-1]
    assert json.loads((part / "by-offset" / f"{last}.json").read_bytes())["offset"] == last
    assert (m / "other-0" / "records.jsonl").read_bytes() == expected_jsonl(logdir, "other-0")
    assert (part / "records.jsonl").read_bytes() == expected_jsonl(logdir, "big-0")
    assert [json.loads(line)["offset"] for line in (part / "by-offset" / f"{target - 5}-{target + 5}.jsonl")
            .read_bytes().splitlines()] == list(range(target - 5, target + 6))
    json.loads((part / "partition.json").read_bytes())
    assert m.proc.poll() is None
    said = [line for line in m.log().splitlines() if "cannot read" in line]
    assert len(said) == 1 and f"{bases[0]:020d}.index" in said[0], said
    assert "Traceback" not in m.log()
    # verify reports the file the disk cannot read (exit 1), without a traceback
    done = subprocess.run([sys.executable, "-m", "kafkafs.cli", "verify", str(layer.path)], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 1 and f"{bases[0]:020d}.index" in done.stdout + done.stderr, done
    assert "Traceback" not in done.stderr
    # the disk heals: the lookup answers
    layer.fail()
    m.stop()
    m2 = mounted(layer.path)
    assert json.loads((m2 / "big-0" / "by-offset" / f"{target}.json").read_bytes())["offset"] == target
