"""``consume``'s interleaving in the kernel (kafkafs/consume_merge.py, format/_kernel_merge.h) against the
heapq.merge of per-record tuples it replaces (``_Reader.lines``, the way without the kernel), byte for byte.

Partitions are written raw (a ``.log`` of batches; the engine indexes them) with timestamps from a small
range, so that they tie across partitions and fall back within one; some batches are LogAppendTime
(every record takes the batch's max timestamp), gzip, or of the kinds a span stops before (damage,
legacy magic, a cut-off tail, ...). Both ways must print the same bytes and fail, if they fail, with the
same message, for every start, stop timestamp (``e@TS``), count and values mode. Tiny pieces make the
merge stop for a partition's next lines everywhere.
"""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkafs import consume_merge
from kafkafs.consume import OffsetSpec, consume
from kafkafs.errors import KafkafsError
from kafkafs.format import kernel
from kafkafs.format.batch import Codec, encode_batch
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir
from tests.format.test_kernel_differential import span_batch

pytestmark = [pytest.mark.skipif(kernel.KERNEL is None, reason="the compiled kernel is not built"),
              pytest.mark.allow_warnings]  # the engine warns about the damage some logs hold


@st.composite
def partition_log(draw, odd: bool) -> bytes:
    out, base = bytearray(), 0
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["plain", "plain", "plain", "append_time", "gzip"] + (["odd"] if odd else [])))
        if kind == "odd":
            out += draw(span_batch(base))
            base += 5
            continue
        n = draw(st.integers(1, 6))
        stamps = draw(st.lists(st.integers(1000, 1012), min_size=n, max_size=n))
        records = [(ts, None if i % 3 == 0 else b"k%d" % i, b'{"i": %d}' % i, ()) for i, ts in enumerate(stamps)]
        out += encode_batch(
            records,
            base_offset=base,
            compression=Codec.GZIP if kind == "gzip" else Codec.NONE,
            log_append_time=draw(st.integers(1000, 1012)) if kind == "append_time" else None,
        )
        base += n + draw(st.integers(0, 2))
    if odd and draw(st.booleans()):
        out += draw(st.sampled_from([bytes(40), bytes(3), b"\x00" * 7 + b"\x01"]))
    return bytes(out)


def _run(path: Path, names: list[str], merged: bool, **kwargs) -> tuple[bytes, int | None, str | None]:
    out = io.BytesIO()
    saved = consume_merge.available
    if not merged:
        consume_merge.available = lambda: False
    logdir = LogDir(path)
    printed = error = None
    try:
        printed = consume(logdir, names, out, **kwargs)
    except KafkafsError as exc:
        error = f"{type(exc).__name__}: {exc}"
    finally:
        logdir.close()
        consume_merge.available = saved
    return out.getvalue(), printed, error


@pytest.fixture
def tiny_pieces():
    saved = consume_merge.AHEAD_BYTES, consume_merge._MIN_PIECE, consume_merge.OUT_BYTES
    consume_merge.AHEAD_BYTES, consume_merge._MIN_PIECE, consume_merge.OUT_BYTES = 300, 61, 50
    yield
    consume_merge.AHEAD_BYTES, consume_merge._MIN_PIECE, consume_merge.OUT_BYTES = saved


def _write(tmp: str, logs: list[bytes]) -> list[str]:
    names = []
    for p, raw in enumerate(logs):
        folder = Path(tmp) / f"t-{p}"
        folder.mkdir()
        (folder / "00000000000000000000.log").write_bytes(raw)
        names.append(folder.name)
    return names


@settings(max_examples=int(os.environ.get("KAFKAFS_MERGE_EXAMPLES", "80")), deadline=None,
          suppress_health_check=list(HealthCheck))
@given(st.booleans().flatmap(lambda odd: st.lists(partition_log(odd), min_size=1, max_size=5)),
       st.sampled_from([OffsetSpec("beginning"), OffsetSpec("offset", 3), OffsetSpec("tail", 4), OffsetSpec("time", 1006)]),
       st.one_of(st.none(), st.integers(1000, 1013)), st.one_of(st.none(), st.integers(1, 40)),
       st.booleans(), st.sampled_from(["auto", "string", "base64"]))
def test_merge_prints_what_heapq_printed(tiny_pieces, logs, start, stop_ts, count, interleave, mode):
    with tempfile.TemporaryDirectory() as tmp:
        names = _write(tmp, logs)
        kwargs = {"spec": start, "stop_ts": stop_ts, "count": count, "interleave": interleave, "mode": mode}
        assert _run(Path(tmp), names, True, **kwargs) == _run(Path(tmp), names, False, **kwargs)


def test_a_batch_whose_offsets_wrap_prints_as_before(tmp_path):
    """Crafted: a batch at base offset 2**63-1 whose last record's offset delta wraps past 64 bits (the
    span refuses it, a batch the old way): every record prints, as the per-record merge prints them
    (found by hypothesis)."""
    raw = bytes.fromhex(
        "7fffffffffffffff0000004d00000000029515e7df000000000000000000000000000000000000000000000000000000"
        "000000000000000000000000040c0000000101000c0000000101000c0000000101000c000002010100"
    )
    names = _write(str(tmp_path), [b"", raw])
    merged = _run(tmp_path, names, True, spec=OffsetSpec("beginning"))
    assert merged == _run(tmp_path, names, False, spec=OffsetSpec("beginning"))


def test_ties_go_by_partition_then_offset(tmp_path):
    """Equal timestamps across partitions print partition by partition; within a partition, records
    print in offset order even where their timestamps fall (heapq.merge's order, as before)."""
    with LogDir(tmp_path, writable=True) as d:
        d.create_partition("t", 0).append_records([(5, None, b"a0", ()), (3, None, b"a1", ()), (5, None, b"a2", ())])
        d.create_partition("t", 1).append_records([(5, None, b"b0", ()), (4, None, b"b1", ())])
    data, printed, error = _run(tmp_path, ["t-0", "t-1"], True, spec=OffsetSpec("beginning"))
    assert error is None and printed == 5
    assert [line.split(b'"value":"')[1][:2] for line in data.splitlines()] == [b"a0", b"a1", b"a2", b"b0", b"b1"]
    assert (data, printed, error) == _run(tmp_path, ["t-0", "t-1"], False, spec=OffsetSpec("beginning"))


def test_many_segments_and_damage(tmp_path, tiny_pieces):
    """Partitions over several segments, then a CRC spoiled in one: the same lines before the damage,
    and the same message, as the per-record merge."""
    with LogDir(tmp_path, Settings({"segment.bytes": 2000}), writable=True) as d:
        for p in range(3):
            log = d.create_partition("t", p)
            for i in range(60):
                log.append_records([(1000 + i * 3 + p % 2, b"k", b'{"n": %d, "s": "%s"}' % (i, b"x" * i), ())])
    names = ["t-0", "t-1", "t-2"]
    whole = _run(tmp_path, names, True, spec=OffsetSpec("beginning"))
    assert whole == _run(tmp_path, names, False, spec=OffsetSpec("beginning")) and whole[1] == 180
    logs = sorted((tmp_path / "t-1").glob("*.log"))
    data = bytearray(logs[1].read_bytes())
    data[len(data) // 2] ^= 0x20
    logs[1].write_bytes(data)
    merged, reference = _run(tmp_path, names, True, spec=OffsetSpec("beginning")), _run(tmp_path, names, False,
                                                                                       spec=OffsetSpec("beginning"))
    assert merged == reference
    assert merged[2] is not None and "CRC" in merged[2] and 0 < merged[0].count(b"\n") < 180


def test_merger_refuses_bad_input():
    merger = kernel.KERNEL.Merger([0, 1], None)
    with pytest.raises(ValueError):
        merger.load(0, b"ab\n", b"\x00" * 8, b"\x09" + b"\x00" * 7)  # a line end past the data
    with pytest.raises(ValueError):
        merger.load(0, b"ab\n", b"\x00" * 8, b"")  # arrays of different lengths
    with pytest.raises(IndexError):
        merger.load(2, b"", b"", b"")
    assert merger.run(10, 100) == (b"", 0, 0)  # nothing before stream 0 has lines or is finished
    merger.finish(0)
    merger.finish(1)
    assert merger.run(10, 100) == (b"", 0, -1)


@pytest.mark.parametrize("partitions", [7, 64])
@pytest.mark.parametrize("small", [False, True])
def test_a_topic_shaped_like_the_benchmark_prints_what_heapq_printed(tmp_path, partitions, small, request):
    """bench/many.py's shape, smaller: many partitions of mixed records (bench/records.py) whose
    timestamps run BASE+0.. in each, so they tie across partitions at every record (the heaviest
    interleaving: the merge switches partition at every line); default and tiny pieces. The kernel's
    merge against the per-record heapq.merge, byte for byte."""
    from bench.records import batches

    if small:
        request.getfixturevalue("tiny_pieces")
    logs = [b"".join(batches("mixed", 300, per_batch=25, seed=1000 + p)) for p in range(partitions)]
    names = _write(str(tmp_path), logs)
    merged = _run(tmp_path, names, True, spec=OffsetSpec("beginning"))
    assert merged[1] == 300 * partitions and merged[2] is None
    assert merged == _run(tmp_path, names, False, spec=OffsetSpec("beginning"))
    # a stop timestamp and a count cut the same lines
    kwargs = {"spec": OffsetSpec("offset", 40), "stop_ts": None, "count": 1000}
    assert _run(tmp_path, names, True, **kwargs) == _run(tmp_path, names, False, **kwargs)
