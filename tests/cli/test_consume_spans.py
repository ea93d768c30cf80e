"""``consume``'s span path (kafkafs/consume_spans.py) against its batch-by-batch path, byte for byte.

Logs are written raw (a ``.log`` file of batches, no index: the engine rebuilds one), from the
differential tests' strategies: good batches, real compressed ones, and every kind of batch a span
stops before (compressed flags, legacy or unknown magic, CRC mismatch, damaged records, records
below their base offset, bad lengths, zeros, offsets that fall back, a cut-off tail). Both paths must
print the same bytes and fail, if they fail, with the same message. Small reads and pieces make the
chunk and piece boundaries fall everywhere.
"""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkafs import consume as consume_module
from kafkafs import consume_spans
from kafkafs.consume import OffsetSpec, consume
from kafkafs.errors import KafkafsError
from kafkafs.format import kernel
from kafkafs.format.batch import Codec, encode_batch
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir
from tests.format.test_kernel_differential import span_batch

pytestmark = [pytest.mark.skipif(kernel.KERNEL is None, reason="the compiled kernel is not built"),
              pytest.mark.allow_warnings]  # the engine warns about the damage these logs hold


@st.composite
def raw_log(draw) -> bytes:
    out, base = bytearray(), 0
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["plain", "plain", "plain", "gzip", "odd"]))
        if kind == "odd":
            out += draw(span_batch(base))
            base += 5
            continue
        n = draw(st.integers(0, 6))
        records = [(1000 + i, None if i % 3 == 0 else b"k%d" % i, b'{"i": %d}' % i, ()) for i in range(n)]
        codec = Codec.GZIP if kind == "gzip" else Codec.NONE
        out += encode_batch(records, base_offset=base, compression=codec) if n else b""
        base += n + draw(st.integers(0, 2))
    if draw(st.booleans()):
        out += draw(st.sampled_from([bytes(40), bytes(3), b"\x00" * 7 + b"\x01"]))
    return bytes(out)


def _run(path: Path, spans: bool, start: OffsetSpec, mode: str = "auto") -> tuple[bytes, str | None]:
    out = io.BytesIO()
    saved = consume_module.spannable
    if not spans:
        consume_module.spannable = lambda mode, decoder: False
    logdir = LogDir(path)
    try:
        consume(logdir, ["t-0"], out, spec=start, mode=mode)
        error = None
    except KafkafsError as exc:
        error = f"{type(exc).__name__}: {exc}"
    finally:
        logdir.close()
        consume_module.spannable = saved
    return out.getvalue(), error


@settings(max_examples=int(os.environ.get("KAFKAFS_SPAN_EXAMPLES", "60")), deadline=None, suppress_health_check=list(HealthCheck))
@given(raw_log(), st.sampled_from([OffsetSpec("beginning"), OffsetSpec("offset", 3), OffsetSpec("tail", 4)]),
       st.integers(61, 400), st.integers(1, 300), st.sampled_from(["auto", "string", "base64"]))
def test_spans_print_what_batches_print(raw, start, read_bytes, piece_bytes, mode):
    saved = consume_spans.READ_BYTES, consume_spans.PIECE_BYTES
    consume_spans.READ_BYTES, consume_spans.PIECE_BYTES = read_bytes, piece_bytes
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "t-0"
            folder.mkdir()
            (folder / "00000000000000000000.log").write_bytes(raw)
            assert _run(Path(tmp), True, start, mode) == _run(Path(tmp), False, start, mode)
    finally:
        consume_spans.READ_BYTES, consume_spans.PIECE_BYTES = saved


def _segmented(tmp_path: Path) -> list[Path]:
    """Partition t-0 of 60 records in three segments or more, written by the engine: its ``.log`` files."""
    with LogDir(tmp_path, Settings({"segment.bytes": 2000}), writable=True) as d:
        log = d.create_partition("t", 0)
        for i in range(60):
            log.append_records([(1000 + i, b"k", b'{"n": %d, "s": "%s"}' % (i, b"x" * i), ())])
    logs = sorted((tmp_path / "t-0").glob("*.log"))
    assert len(logs) >= 3
    return logs


def test_spans_across_segments_and_damage(tmp_path):
    """Several segments written by the engine, then a CRC spoiled in the middle of the second: the
    records before it print, then the same damage message as batch by batch."""
    logs = _segmented(tmp_path)
    whole = _run(tmp_path, True, OffsetSpec("beginning"))
    assert whole == _run(tmp_path, False, OffsetSpec("beginning")) and whole[1] is None
    assert whole[0].count(b"\n") == 60
    data = bytearray(logs[1].read_bytes())
    data[len(data) // 2] ^= 0x20
    logs[1].write_bytes(data)
    spans, batches = _run(tmp_path, True, OffsetSpec("beginning")), _run(tmp_path, False, OffsetSpec("beginning"))
    assert spans == batches
    assert spans[1] is not None and "CRC" in spans[1] and 0 < spans[0].count(b"\n") < 60


def test_a_torn_end_of_a_sealed_segment_is_damage_through_spans(tmp_path):
    """A sealed segment cut inside its last batch: the records before the cut print, then the same
    damage as batch by batch (a torn batch, never a quiet gap before the next segment)."""
    logs = _segmented(tmp_path)
    os.truncate(logs[1], logs[1].stat().st_size - 7)
    spans, batches = _run(tmp_path, True, OffsetSpec("beginning")), _run(tmp_path, False, OffsetSpec("beginning"))
    assert spans == batches
    assert spans[1] is not None and "after the last whole batch of a sealed segment" in spans[1]
    assert 0 < spans[0].count(b"\n") < 60


def test_follow_prints_records_appended_later(tmp_path):
    """``consume --follow`` through spans: the records there at the start, then those appended while
    it waits (two appends), each once, in order."""
    import subprocess
    import sys

    import orjson

    with LogDir(tmp_path, writable=True) as d:
        d.create_partition("t", 0).append_records([(1000 + i, None, b"a%d" % i, ()) for i in range(300)])
    proc = subprocess.Popen([sys.executable, "-m", "kafkafs.cli", "consume", str(tmp_path), "t-0", "--follow"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    import threading

    watchdog = threading.Timer(60, proc.kill)  # a reader that never gets its lines fails, not hangs
    watchdog.start()
    try:
        lines = [proc.stdout.readline() for _ in range(300)]
        for round_ in range(2):
            with LogDir(tmp_path, writable=True) as d:
                d.log("t-0").append_records([(2000 + i, None, b"b%d-%d" % (round_, i), ()) for i in range(150)])
            lines += [proc.stdout.readline() for _ in range(150)]
    finally:
        watchdog.cancel()
        proc.terminate()
        proc.wait(timeout=30)
    values = [orjson.loads(line)["value"] for line in lines]
    assert values == [f"a{i}" for i in range(300)] + [f"b{r}-{i}" for r in range(2) for i in range(150)]
    assert [orjson.loads(line)["offset"] for line in lines] == list(range(600))
