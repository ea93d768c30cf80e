"""R15-7 step 2 in the Spark source: a batch whose records inflate past 64 MiB (valid data: Kafka stores
and serves it) gives its rows, read a run of records at a time; it used to fail the read (onCorrupt=skip
skipped it). Scanned without Spark, with the kernel's columns and the reference's."""

from __future__ import annotations

import pytest

from kafkafs.format.batch import encode_batch
from kafkafs.spark.predicates import IntBounds, Predicates
from kafkafs.spark.scan import read_split
from tests.kafka_batch import batch, record

from .helpers import arrow_rows, plan, read_plan

T = 1_763_700_000_000
MANY = 4400
VALUE = b"v" * 16_000  # 70 MB inflated: past 64 MiB


@pytest.fixture(scope="module")
def big_logs(tmp_path_factory):
    path = tmp_path_factory.mktemp("big") / "logs"
    (path / "big-0").mkdir(parents=True)
    inner = batch(3, T + 3, MANY, (b"".join(record(i, i, b"m%d" % i, VALUE) for i in range(j, min(j + 200, MANY)))
                                   for j in range(0, MANY, 200)), "zstd")
    (path / "big-0" / "00000000000000000000.log").write_bytes(
        encode_batch([(T + i, b"a", b"before-%d" % i, ()) for i in range(3)], base_offset=0) + inner
        + encode_batch([(T + MANY + 3, b"b", b"after", ())], base_offset=MANY + 3))
    return path


@pytest.mark.parametrize("kernel", [True, False])
def test_the_rows_of_a_batch_past_64_mib(big_logs, kernel):
    p = plan(big_logs, batchRows=1000)
    rows = [r for s in p.splits for r in _rows(s, kernel)]
    assert [r[2] for r in rows] == list(range(MANY + 4))
    inner = rows[3 : MANY + 3]
    assert [(r[3], r[5]) for r in inner[:2]] == [(T + 3, b"m0"), (T + 4, b"m1")]
    assert all(r[6] == VALUE for r in inner)


def _rows(split, kernel: bool) -> list[tuple]:
    batches = list(read_split(split, kernel=kernel))
    assert max(b.num_rows for b in batches) <= 2000  # built as the columns fill, not one batch of all
    return arrow_rows(batches)


def test_offset_bounds_inside_it(big_logs):
    preds = Predicates(offset=IntBounds(lo=1000, hi=1010).tightened())
    assert [r[2] for r in read_plan(plan(big_logs, preds))] == list(range(1000, 1011))
