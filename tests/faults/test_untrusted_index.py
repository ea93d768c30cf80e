"""A sealed segment's index that does not say what its ``.log`` holds is not trusted (review15 R15-4, HIGH;
SPEC §1 "a corrupt index is rebuilt from the .log", §4 offsets "never skipped silently").

Entries moved 448 offsets down (still strictly increasing and in range: Kafka's sanity check passes, and
``verify`` reports them) made ``consume --from-offset 1000 -c 1`` print offset 1350 with exit 0, and
``by-offset/1000.json`` ENOENT; positions moved off the batch starts made a lookup read a torn batch in an
intact ``.log`` (consume exit 1, by-offset EIO); a time index 5 s early, or all low, answered by-time with
records 400 offsets late. A lookup now checks the entry it starts from against the batch it reads there
(the batch ends at the entry's offset; a time entry's batch holds its timestamp and no batch before it
reaches the target), and on a mismatch the segment's lookups scan its ``.log`` instead (logged once).
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from kafkafs.format.jsonview import ProducerRecord
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir
from tests.faults.conftest import cli

T0 = 1_795_700_000_000
N = 2000


def build_partition(path: Path) -> list[int]:
    """``t-0`` under the log directory ``path``: 2,000 records (timestamps T0 + 10 n) in batches of 50, an
    index entry per batch, a sealed first segment of over 1,000 records; its segments' base offsets."""
    with LogDir(path, Settings({"segment.bytes": 30000, "index.interval.bytes": 200}), writable=True) as d:
        log = d.create_partition("t", 0)
        for i in range(0, N, 50):
            log.append_records([ProducerRecord(T0 + 10 * n, b"k%d" % n, b"v%d" % n, ()) for n in range(i, i + 50)])
        bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 2 and bases[1] > 1000, bases
    return bases


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """``t-0`` of :func:`build_partition`."""
    path = tmp_path_factory.mktemp("badidx") / "logs"
    path.mkdir()
    build_partition(path)
    return path


IDX, TIDX = "t-0/00000000000000000000.index", "t-0/00000000000000000000.timeindex"


def index_entries(logdir: Path) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The first segment's offset index entries (relative offset, position) and time index entries
    (timestamp, relative offset), read with struct from Kafka's documented layout."""
    return (list(struct.iter_unpack(">II", (logdir / IDX).read_bytes())),
            list(struct.iter_unpack(">qI", (logdir / TIDX).read_bytes())))


def _damaged(base: Path, tmp: Path, case: str) -> Path:
    logdir = tmp / case
    shutil.copytree(base, logdir)
    ie, te = index_entries(logdir)
    if case == "offsets-early":
        k = min(448, ie[0][0] - 1)
        (logdir / IDX).write_bytes(b"".join(struct.pack(">II", o - k, p) for o, p in ie))
    elif case == "append-wide":  # Kafka before 3.7: a follower's append of several batches, one entry naming its last offset
        (logdir / IDX).write_bytes(b"".join(struct.pack(">II", o + 30, p) for o, p in ie))
    elif case == "misaligned":
        (logdir / IDX).write_bytes(b"".join(struct.pack(">II", o, p + 7) for o, p in ie))
    elif case == "ts-early":
        (logdir / TIDX).write_bytes(b"".join(struct.pack(">qI", t - 5000, o) for t, o in te))
    elif case == "ts-small":
        (logdir / TIDX).write_bytes(b"".join(struct.pack(">qI", T0 - 10**6, o) for _t, o in te))
    return logdir


@pytest.mark.parametrize("case", ["offsets-early", "misaligned", "ts-early", "ts-small", "append-wide"])
def test_a_lookup_does_not_trust_an_index_the_log_contradicts(base, tmp_path, case, caplog):
    logdir = _damaged(base, tmp_path, case)
    with LogDir(logdir) as d:
        log = d.log("t-0")
        for n in (0, 49, 50, 500, 949, 950, 1000, 1234, 1500, 1849, 1850, 1999):
            view = log.locate(n)
            assert view is not None and view.header.base_offset <= n <= view.header.last_offset, (n, view)
            assert next(iter(log.records(n))).offset == n
        for n in (0, 400, 846, 1000, 1154, 1262, 1500, 1700, 1849, 1999):
            assert log.offset_for_timestamp(T0 + 10 * n - 5) == (n, T0 + 10 * n), n
    said = [r for r in caplog.records if "does not match the log" in r.getMessage()]
    if case == "append-wide":  # no lie: trusted, and right
        assert not said, said
        return
    assert len(said) == 1 and "00000000000000000000" in said[0].getMessage(), [r.getMessage() for r in said]


def test_consume_reads_from_the_offset_and_time_asked_despite_a_lying_index(base, tmp_path):
    logdir = _damaged(base, tmp_path, "offsets-early")
    proc = cli("consume", str(logdir), "t-0", "--from-offset", "1000", "-c", "1")
    assert proc.returncode == 0 and json.loads(proc.stdout)["offset"] == 1000, proc
    logdir = _damaged(base, tmp_path, "misaligned")
    proc = cli("consume", str(logdir), "t-0", "--from-offset", "949", "-c", "1")
    assert proc.returncode == 0 and json.loads(proc.stdout)["offset"] == 949, proc
    logdir = _damaged(base, tmp_path, "ts-early")
    proc = cli("consume", str(logdir), "t-0", "-o", f"s@{T0 + 12620}", "-c", "1")
    assert proc.returncode == 0 and json.loads(proc.stdout)["offset"] == 1262, proc


def test_the_mount_answers_by_offset_and_by_time_despite_a_lying_index(base, tmp_path, mounted):
    logdir = _damaged(base, tmp_path, "offsets-early")
    m = mounted(logdir)
    m.allow_errors = True
    part = m / "t-0"
    assert json.loads((part / "by-offset" / "1000.json").read_bytes())["offset"] == 1000
    assert json.loads((part / "by-time" / f"{T0 + 15000}.json").read_bytes())["offset"] == 1500
    got = [json.loads(line)["offset"] for line in (part / "by-offset" / "990-1010.jsonl").read_bytes().splitlines()]
    assert got == list(range(990, 1011))
    assert "Traceback" not in m.log()
