"""The Spark source does not trust an index that its ``.log`` contradicts, as the mount and ``consume`` do
not since review15 R15-4 (fix34's leftover): planning took positions from the offset and time indexes
unchecked, so a crafted sealed ``.index`` or ``.timeindex`` that passes Kafka's cheap sanity check gave
wrong rows (entries naming offsets 5 batches early: ``startingOffsets`` 1000 read from 1200; 5 batches
late: ``endingOffsets`` 1000 stopped at 750; a time index 5 s early: a timestamp filter lost 450 rows)
or a crash (positions 7 bytes off the batch starts: every narrowed or cut read failed with "bytes after
the last whole batch of a sealed segment" about an intact ``.log``). The plan now takes every position
through the engine's checked lookups (a mismatch: the segment's index is not trusted, logged once)."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from kafkafs.spark.predicates import NO_PREDICATES, IntBounds, Predicates
from tests.faults.test_untrusted_index import IDX, T0, TIDX, N, build_partition, index_entries

from .helpers import plan, read_plan


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """``t-0``: 2,000 records (timestamps T0 + 10 n) in batches of 50, an entry per batch, a sealed first
    segment of 1,850 (:func:`tests.faults.test_untrusted_index.build_partition`)."""
    path = tmp_path_factory.mktemp("badidx") / "logs"
    path.mkdir()
    assert build_partition(path)[1] > 1500
    return path


def _damaged(base: Path, tmp: Path, case: str) -> Path:
    """A copy of ``base`` whose first segment's index lies as ``case`` says (strictly increasing, in range:
    Kafka's sanity check passes)."""
    logdir = tmp / case
    shutil.copytree(base, logdir)
    ie, te = index_entries(logdir)
    n = len(ie)
    if case == "offsets-early":
        ie = [(ie[i - 5][0] if i >= 5 else i, p) for i, (_o, p) in enumerate(ie)]
    elif case == "offsets-late":
        ie = [(ie[i + 5][0] if i + 5 < n else ie[-1][0] + i + 6 - n, p) for i, (_o, p) in enumerate(ie)]
    elif case == "misaligned":
        ie = [(o, p + 7) for o, p in ie]
    elif case == "ts-early":
        te = [(t - 5000, o) for t, o in te]
    (logdir / IDX).write_bytes(b"".join(struct.pack(">II", o, p) for o, p in ie))
    (logdir / TIDX).write_bytes(b"".join(struct.pack(">qI", t, o) for t, o in te))
    return logdir


def _reads(logdir: Path) -> dict[str, list[int] | str]:
    """What each kind of narrowed or cut read gives: the offsets, or the error's name."""
    reads = {}
    for s in (1000, 1500):
        reads[f"startingOffsets {s}"] = (dict(startingOffsets=json.dumps({"t": {"0": s}})), NO_PREDICATES)
    for e in (300, 1000):
        reads[f"endingOffsets {e}"] = (dict(endingOffsets=json.dumps({"t": {"0": e}})), NO_PREDICATES)
    reads["startingTimestamp 1262"] = (dict(startingTimestamp=str(T0 + 12620 - 5)), NO_PREDICATES)
    for n in (300, 1500):
        reads[f"timestamp >= {n}"] = ({}, Predicates(timestamp=IntBounds(lo=(T0 + 10 * n - 5) * 1000)))
    reads["maxBytesPerPartition"] = (dict(maxBytesPerPartition="3000"), NO_PREDICATES)
    reads["minPartitions"] = (dict(minPartitions="20"), NO_PREDICATES)
    out: dict[str, list[int] | str] = {}
    for name, (options, preds) in reads.items():
        try:
            out[name] = [r[2] for r in read_plan(plan(logdir, preds, **options))]
        except Exception as exc:  # noqa: BLE001 - what the read did is the answer
            out[name] = type(exc).__name__
    return out


EXPECTED = {
    "startingOffsets 1000": list(range(1000, N)),
    "startingOffsets 1500": list(range(1500, N)),
    "endingOffsets 300": list(range(300)),
    "endingOffsets 1000": list(range(1000)),
    "startingTimestamp 1262": list(range(1262, N)),
    "timestamp >= 300": list(range(300, N)),
    "timestamp >= 1500": list(range(1500, N)),
    "maxBytesPerPartition": list(range(N)),
    "minPartitions": list(range(N)),
}


@pytest.mark.parametrize("case", ["offsets-early", "offsets-late", "misaligned", "ts-early"])
def test_a_plan_does_not_trust_an_index_the_log_contradicts(base, tmp_path, case, caplog):
    got = _reads(_damaged(base, tmp_path, case))
    wrong = {name: (rows if isinstance(rows, str) else f"{len(rows)} rows from {rows[:1]}")
             for name, rows in got.items() if rows != EXPECTED[name]}
    assert not wrong, wrong
    if case != "offsets-late":  # entries late name offsets a scan from there cannot miss: no damage to read
        assert "does not match the log" in caplog.text


def test_an_honest_index_still_narrows_the_reads(base, caplog):
    assert _reads(base) == EXPECTED
    assert "does not match the log" not in caplog.text
    p = plan(base, startingOffsets=json.dumps({"t": {"0": 1500}}), maxBytesPerPartition="3000")
    assert min(x.start for x in p.pieces if x.base_offset == 0) > 0 and len(p.pieces) > 2
