"""R15-7 step 2: a batch whose records inflate past what is held at once, read a piece at a time
(kafkafs.format.bigbatch, compression.inflate_pieces). Batches are built here from Kafka's documented
layout with the codec libraries themselves (tests/kafka_batch.py), zstd without a content size as Kafka's
producers write it; what the pieces give is judged against the test's own records and the one-shot path."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import zlib

import pytest

from kafkafs.errors import CorruptRecordError, RecordNotShown
from kafkafs.format import bigbatch, kernel
from kafkafs.format.batch import Codec, read_batch_header
from kafkafs.format.compression import inflate_pieces
from kafkafs.format.jsonview import render_raw_jsonl
from tests.fs.conftest import ROOT
from tests.kafka_batch import CODECS, batch, record

T = 1_763_700_000_000


def _records(n: int) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]]:
    """Keys, values (JSON, text, bytes that are not UTF-8, null) and headers of every kind."""
    out = []
    for i in range(n):
        key = None if i % 11 == 0 else b"k%d" % (i % 17)
        value = (None if i % 13 == 0 else b'{"i":%d,"pad":"%s"}' % (i, b"x" * (i % 2000)) if i % 3 else
                 b"\xff\xfe" + bytes(i % 700) if i % 2 else b"text %d" % i)
        headers = [("h", b"v%d" % i)] if i % 5 == 0 else []
        out.append((key, value, headers))
    return out


def _batch(recs, codec: str, base: int = 100) -> bytes:
    return batch(base, T, len(recs), iter([record(i, i, k, v, h) for i, (k, v, h) in enumerate(recs)]), codec)


@pytest.mark.parametrize("codec", [c for c in CODECS if c != "none"])
def test_pieces_inflate_what_the_codec_library_inflates(codec):
    data = bytes(range(256)) * 4000 + bytes(3 << 20) + b"tail"
    raw = batch(0, T, 1, iter([data]), codec)
    section = memoryview(raw)[61:]
    pieces = list(inflate_pieces(Codec[codec.upper()], section, 64 << 10, 64 << 20))
    assert b"".join(pieces) == data
    assert max(map(len, pieces)) <= 64 << 10
    if codec == "gzip":
        assert b"".join(pieces) == zlib.decompress(bytes(section), 31)


@pytest.mark.parametrize("codec", [c for c in CODECS if c != "none"])
def test_pieces_render_the_records_as_the_one_shot_path_does(codec):
    recs = _records(1500)
    raw = _batch(recs, codec)
    for mode in ("auto", "string", "base64"):
        whole = render_raw_jsonl("t", 2, raw, mode)
        for what in (0, 3, 4):
            parts = list(bigbatch.render_in_pieces("t", 2, raw, mode, what, on_skip=None, piece=20000))
            assert len(parts) > 10  # many runs
            got = b"".join(p if what == 0 else p[0] for p in parts)
            assert got == whole, (mode, what)
    rows = [json.loads(line) for line in render_raw_jsonl("t", 2, raw, "auto").splitlines()]
    assert [r["offset"] for r in rows] == list(range(100, 1600))
    assert [r["timestamp"] for r in rows] == [T + i for i in range(1500)]
    assert [r["key"] for r in rows] == [None if k is None else k.decode() for k, _v, _h in recs]
    assert [r["headers"] for r in rows][:6] == [[{"key": "h", "value": "v0"}], [], [], [], [],
                                                [{"key": "h", "value": "v5"}]]


def test_pieces_keep_the_bounds_and_the_stop():
    raw = _batch(_records(1000), "zstd")
    got = b"".join(bigbatch.render_in_pieces("t", 0, raw, "auto", 0, on_skip=None, piece=5000, lo=350, hi=420))
    assert got == render_raw_jsonl("t", 0, raw, "auto", lo=350, hi=420)
    assert [json.loads(line)["offset"] for line in got.splitlines()] == list(range(350, 421))
    pieces = bigbatch.render_in_pieces("t", 0, raw, "auto", 0, on_skip=None, piece=5000, lo=150, stop_ts=T + 177)  # offset 277
    out = []
    while True:
        try:
            out.append(next(pieces))
        except StopIteration as end:
            stopped = end.value
            break
    assert stopped is True
    assert [json.loads(line)["offset"] for line in b"".join(out).splitlines()] == list(range(150, 277))


def test_without_the_kernel_the_same_lines(monkeypatch):
    raw = _batch(_records(400), "gzip")
    whole = render_raw_jsonl("t", 0, raw, "auto")
    monkeypatch.setattr(kernel, "KERNEL", None)
    assert b"".join(bigbatch.render_in_pieces("t", 0, raw, "auto", 0, on_skip=None, piece=9000)) == whole


def test_a_record_past_what_is_held_is_said_and_the_others_are_shown():
    recs = [(b"a", b"x" * 100, []), (b"big", b"z" * 50_000, []), (b"b", b"y" * 100, []), (b"big2", b"w" * 60_000, []),
            (b"c", b"v", [])]
    raw = _batch(recs, "zstd", base=7)
    said: list[RecordNotShown] = []
    out = b"".join(bigbatch.render_in_pieces("t", 0, raw, "auto", 0, on_skip=said.append, piece=1000,
                                             max_record=40_000))
    assert [json.loads(line)["offset"] for line in out.splitlines()] == [7, 9, 11]
    assert [(e.base_offset, e.next_offset) for e in said] == [(8, 9), (10, 11)]
    assert said[0].in_partition("t-0", 8).not_shown() == (
        "offsets 8..8 of t-0 not shown: a record of 50011 bytes, past the 40000 bytes kafkafs holds of one record")
    with pytest.raises(RecordNotShown):  # nobody told: raised, as a batch not inflated is
        list(bigbatch.render_in_pieces("t", 0, raw, "auto", 0, on_skip=None, piece=1000, max_record=40_000))
    # bounds that leave it out: nothing said
    assert list(bigbatch.render_in_pieces("t", 0, raw, "auto", 0, on_skip=None, max_record=40_000, lo=11))


def test_a_record_whose_line_is_past_what_is_written_is_said(monkeypatch):
    monkeypatch.setattr(bigbatch, "_MEASURE_FROM", 1000)
    recs = [(b"a", b"ok", []), (b"zeros", bytes(30_000), []), (b"b", b"ok", [])]  # a zero is six bytes: \u0000
    raw = _batch(recs, "gzip")
    said: list[RecordNotShown] = []
    out = b"".join(bigbatch.render_in_pieces("t", 0, raw, "auto", 0, on_skip=said.append, piece=1000,
                                             max_line=100_000))
    assert [json.loads(line)["offset"] for line in out.splitlines()] == [100, 102]
    assert said[0].base_offset == 101 and "JSON line is 180" in said[0].reason
    out = b"".join(bigbatch.render_in_pieces("t", 0, raw, "base64", 0, on_skip=said.append, piece=1000,
                                             max_line=100_000))
    assert len(out.splitlines()) == 3  # 40 KB of base64 fits


@pytest.mark.parametrize("damage", ["fewer", "more", "truncated"])
def test_damage_in_the_records_is_damage(damage):
    recs = [record(i, i, b"k", b"v" * 3000) for i in range(300)]
    count = {"fewer": 301, "more": 299}.get(damage, 300)
    raw = batch(0, T, count, iter(recs), "zstd", cut=50 if damage == "truncated" else 0)  # the CRC holds
    with pytest.raises(CorruptRecordError) as info:
        list(bigbatch.render_in_pieces("t", 0, raw, "auto", 0, on_skip=None, piece=10000))
    assert not isinstance(info.value, RecordNotShown) and info.value.position == 0


def test_memory_stays_bounded_while_a_batch_inflates_past_it(tmp_path):
    """A batch inflating to 150 MiB (9,600 records of 16 KiB, zstd without a content size) renders its
    160 MB of lines holding a piece and a record: the process's peak stays under 100 MiB."""
    value = b'{"pad":"' + b"p" * 16_000 + b'"}'
    raw = batch(0, T, 9600, (b"".join(record(i, i, b"k", value) for i in range(j, j + 100))
                             for j in range(0, 9600, 100)), "zstd")
    path = tmp_path / "batch.bin"
    path.write_bytes(raw)
    assert read_batch_header(raw, 0).record_count == 9600 and len(raw) < 1 << 20
    script = textwrap.dedent(f"""
        import sys
        from kafkafs.format.bigbatch import render_in_pieces
        raw = open({str(path)!r}, "rb").read()
        lines = n = 0
        for data, count in render_in_pieces("t", 0, raw, "auto", 3, on_skip=None):
            lines += len(data); n += count
        peak = [line for line in open("/proc/self/status") if line.startswith("VmHWM:")][0].split()[1]
        print(n, lines, int(peak) // 1024)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert done.returncode == 0, done.stderr
    n, lines, peak_mib = map(int, done.stdout.split())
    assert n == 9600 and lines > 150_000_000
    assert peak_mib < 100, peak_mib


def test_an_lz4_frame_of_dependent_blocks_is_not_read_in_pieces():
    """Kafka writes independent blocks; a frame whose blocks refer to the ones before cannot be read a block
    at a time: the batch is not shown (UninflatableBatch, as before R15-7 step 2), never called damage."""
    import lz4.frame

    from kafkafs.errors import UninflatableBatch

    data = b"abc" * 100_000
    frame = lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=True)
    with pytest.raises(UninflatableBatch):
        list(inflate_pieces(Codec.LZ4, frame, 64 << 10, 64 << 20))


def test_the_last_record_past_what_is_held_is_not_inflated(monkeypatch):
    """A batch whose last record claims 2 GiB of zeros (a hand-made zstd frame, 64 KB): said not shown after
    the first piece, its 2 GiB never inflated; one followed by another record is inflated and dropped."""
    from tests.kafka_batch import zigzag, zstd_zeros_frame

    inflated = [0]
    real = bigbatch.inflate_pieces

    def counted(*args):
        for part in real(*args):
            inflated[0] += len(part)
            yield part

    monkeypatch.setattr(bigbatch, "inflate_pieces", counted)
    size = (2 << 30) - 64
    fields = b"\x00" + zigzag(0) + zigzag(0) + zigzag(4) + b"bomb" + zigzag(size)
    raw = batch(0, T, 1, iter(()), "zstd", compressed=zstd_zeros_frame(zigzag(len(fields) + size + 1) + fields, size + 1))
    said: list[RecordNotShown] = []
    assert list(bigbatch.render_in_pieces("t", 0, raw, "auto", 0, on_skip=said.append)) == []
    assert [e.base_offset for e in said] == [0]
    assert inflated[0] <= 32 << 20, inflated[0]
    inflated[0] = 0
    followed = [record(0, 0, b"big", b"x" * 300_000), record(1, 1, b"small", b"y")]
    raw = _batch_raw(followed)
    out = b"".join(bigbatch.render_in_pieces("t", 0, raw, "auto", 0, on_skip=said.append, piece=4096,
                                             max_record=100_000))
    assert [json.loads(line)["offset"] for line in out.splitlines()] == [1]
    assert inflated[0] > 300_000  # read through to the record after it


def _batch_raw(records: list[bytes]) -> bytes:
    return batch(0, T, len(records), iter(records), "gzip")
