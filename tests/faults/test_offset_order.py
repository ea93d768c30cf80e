"""Offsets out of order are damage in every reader (issue 20, defect 4; SPEC §4 and §3).

The base offset of a batch is outside its CRC. With the low half of one batch's base offset set to
``7f ff ff ff``, ``consume`` printed 250 of 300 records and exited 0 with no word, the mount served all
300 with offsets jumping to 2147483647 and back, and only ``verify`` said something. Two neighbouring
batches whose offsets overlap (the second starts below the end of the first) are both damage: the bytes
cannot say which one lies. ``consume`` says so on stderr and exits 1, the mount answers EIO for the
bytes that need them and serves the rest, ``verify`` names both. ``recover`` keeps them, as Kafka's
recovery does (review11 R11-9), and cuts only where Kafka's does: here, from the first of the two, whose
offsets do not fit its segment.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kafkafs.format.batch import read_batch_header
from kafkafs.format.jsonview import ProducerRecord
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir
from tests.faults.conftest import PAGE, read_pages
from tests.fs.conftest import ROOT

BASE_TS = 1_763_700_000_000


def _build(path: Path, segment_bytes: int | None = None, keyed: bool = False) -> Path:
    """Offsets 0..299 in 30 batches; ``keyed``: record N has key ``kN`` and header ``h`` = N % 2."""
    settings = {"segment.bytes": segment_bytes} if segment_bytes else {}
    path.mkdir(parents=True)
    with LogDir(path, Settings(settings), writable=True) as d:
        log = d.create_partition("t", 0)
        for b in range(30):
            log.append_records([ProducerRecord(BASE_TS + n, b"k%d" % n if keyed else None, b'{"n":%d}' % n,
                                               (("h", b"%d" % (n % 2)),) if keyed else ())
                                for n in range(b * 10, b * 10 + 10)])
    return path


def _batch_positions(segment: Path) -> list[tuple[int, int, int]]:
    """(position, base offset, last offset) of every batch of a segment."""
    buf = segment.read_bytes()
    out, pos = [], 0
    while pos < len(buf):
        h = read_batch_header(buf, pos)
        out.append((pos, h.base_offset, h.last_offset))
        pos = h.end
    return out


def _set_base(segment: Path, position: int, base: int | None = None, low_half: bytes | None = None) -> None:
    buf = bytearray(segment.read_bytes())
    if low_half is not None:
        buf[position + 4 : position + 8] = low_half
    else:
        buf[position : position + 8] = base.to_bytes(8, "big")
    segment.write_bytes(bytes(buf))


def _kafkafs(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "kafkafs", *args], env=env, capture_output=True, timeout=120)


SEGMENT = "t-0/00000000000000000000.log"


@pytest.fixture
def jumped(tmp_path) -> tuple[Path, int, int]:
    """Batch 25 of 30 (offsets 250..259) with its base offset's low half set to 7fffffff: it claims
    2147483647..2147483656, and batch 26 (260..269) starts below its end. (logdir, its position, 26's)."""
    logdir = _build(tmp_path / "logs")
    positions = _batch_positions(logdir / SEGMENT)
    _set_base(logdir / SEGMENT, positions[25][0], low_half=b"\x7f\xff\xff\xff")
    return logdir, positions[25][0], positions[26][0]


def _offsets(out: bytes) -> list[int]:
    return [json.loads(line)["offset"] for line in out.splitlines()]


def test_consume_says_offsets_out_of_order_and_exits_1(jumped):
    logdir, bad, _after = jumped
    for args in ((), ("-c", "1000"), ("--no-interleave",), ("-o", "s@0"), ("--values", "string")):
        done = _kafkafs("consume", str(logdir), "t-0", *args)
        assert done.returncode == 1, (args, done.stderr)
        assert f"position {bad}: offsets run past the next batch's base (2147483656, then 260)" in done.stderr.decode()
        assert _offsets(done.stdout) == list(range(250)), args  # what comes before, in order; nothing past it
    done = _kafkafs("consume", str(logdir), "t")  # the whole topic
    assert done.returncode == 1 and _offsets(done.stdout) == list(range(250))


FILTERS = (  # consume's filters (the key scan, the span walk with a filter, the rendered lines' grep)
    (("--key", "k100"), [100]),
    (("--key", "k100", "-c", "5"), [100]),
    (("--key", "k100", "--grep", "n"), [100]),
    (("--header", "h=1"), list(range(1, 250, 2))),
    (("--key", "k101", "--header", "h=1"), [101]),
    (("--grep", '"n":1[0-9][0-9]}'), list(range(100, 200))),
)


@pytest.mark.parametrize(("args", "offsets"), FILTERS, ids=[" ".join(args) for args, _offsets in FILTERS])
def test_a_filtered_consume_prints_what_comes_before_and_names_the_same_batch(tmp_path, args, offsets):
    """``consume --key`` scanned with its own, weaker order rule: on the jumped log it printed nothing
    and blamed batch 26 ("offsets go backwards"), although offset 100 comes before the damage."""
    logdir = _build(tmp_path / "logs", keyed=True)
    positions = _batch_positions(logdir / SEGMENT)
    _set_base(logdir / SEGMENT, positions[25][0], low_half=b"\x7f\xff\xff\xff")
    plain = _kafkafs("consume", str(logdir), "t-0")
    said = f"position {positions[25][0]}: offsets run past the next batch's base (2147483656, then 260)"
    assert plain.returncode == 1 and said in plain.stderr.decode()
    cache = tmp_path / "cache"
    cache.mkdir()  # with a cache folder, --key takes the key indexes, or scans a segment without one
    done = _kafkafs("consume", str(logdir), "t-0", "--cache-dir", str(cache), *args)
    assert done.returncode == 1, done.stderr
    assert done.stderr.decode().strip().endswith(said), done.stderr
    assert _offsets(done.stdout) == offsets


def test_a_key_past_the_next_segments_base_is_damage_to_consume_key(tmp_path):
    logdir = _build(tmp_path / "logs", segment_bytes=2000, keyed=True)
    segments = sorted((logdir / "t-0").glob("*.log"))
    last = _batch_positions(segments[0])[-1]
    _set_base(segments[0], last[0], base=last[1] + 5)  # now ends 5 past the next segment's base
    cache = tmp_path / "cache"
    cache.mkdir()
    said = f"position {last[0]}: offsets run past the next batch's base ({last[2] + 5}, then "
    for args in ((), ("--key", "k0")):
        done = _kafkafs("consume", str(logdir), "t-0", "--cache-dir", str(cache), *args)
        assert done.returncode == 1, args
        assert said in done.stderr.decode(), args
        assert _offsets(done.stdout)[:1] == [0], args
    # with the key indexes built: the index of the first segment stops at that batch (it served the
    # batch's records at their wrong offsets, exit 0, when its last batch was not judged against the
    # next segment's base)
    assert _kafkafs("index", str(logdir), "--keys", "--cache-dir", str(cache)).returncode == 1
    assert list(cache.glob("*.keys"))
    for key, offsets in ((f"k{last[1]}", []), ("k0", [0])):
        done = _kafkafs("consume", str(logdir), "t-0", "--cache-dir", str(cache), "--key", key)
        assert done.returncode == 1 and said in done.stderr.decode(), (key, done.stderr)
        assert _offsets(done.stdout) == offsets, key


def test_offsets_that_go_down_are_damage_too(tmp_path):
    logdir = _build(tmp_path / "logs")
    positions = _batch_positions(logdir / SEGMENT)
    _set_base(logdir / SEGMENT, positions[26][0], base=5)  # 260..269 claims 5..14
    done = _kafkafs("consume", str(logdir), "t-0")
    assert done.returncode == 1
    assert f"position {positions[25][0]}: offsets run past the next batch's base (259, then 5)" in done.stderr.decode()
    assert _offsets(done.stdout) == list(range(250))
    out = _kafkafs("verify", str(logdir))
    assert out.returncode == 1
    text = out.stdout.decode()
    assert f"position {positions[25][0]}: offsets run past the next batch's base (259, then 5)" in text
    assert f"position {positions[26][0]}: offsets go backwards (5 after 259)" in text
    assert "2 problem(s)" in text


def test_recover_keeps_offsets_that_go_down_as_kafkas_recovery_does(tmp_path):
    """review11 R11-9 (SPEC §9): Kafka's recovery checks no batch's offsets against its neighbours' (only
    sizes, CRCs, offsets that fit the segment and the index entries it rebuilds), so a broker keeps and
    serves the batch and every one after it. ``recover`` cut there (exit 1, 50 records lost); now it keeps
    them, says so (exit 1: what verify says), and verify and consume still call them damage."""
    logdir = _build(tmp_path / "logs")
    positions = _batch_positions(logdir / SEGMENT)
    _set_base(logdir / SEGMENT, positions[26][0], base=5)  # 260..269 claims 5..14
    before = (logdir / SEGMENT).read_bytes()
    for _round in range(2):  # the second recover finds the same damage, kept again
        done = _kafkafs("recover", str(logdir))
        assert done.returncode == 1, done.stderr
        out = done.stdout.decode()
        assert "t-0: kept 2 batch(es) whose records do not decode or whose offsets do not follow, as Kafka's recovery " \
            "keeps them" in out, out
        assert f"position {positions[26][0]}: offsets go backwards (5 after 259)" in out and "truncated" not in out
        assert (logdir / SEGMENT).read_bytes() == before
    done = _kafkafs("verify", str(logdir))
    assert done.returncode == 1 and f"position {positions[26][0]}: offsets go backwards (5 after 259)" in done.stdout.decode()
    done = _kafkafs("consume", str(logdir), "t-0")
    assert done.returncode == 1 and "offsets run past the next batch's base (259, then 5)" in done.stderr.decode()
    assert _offsets(done.stdout) == list(range(250))


def test_verify_names_both_batches_and_recover_cuts_from_the_first(jumped):
    logdir, bad, after = jumped
    done = _kafkafs("verify", str(logdir))
    assert done.returncode == 1
    text = done.stdout.decode()
    assert f"position {bad}: offsets run past the next batch's base (2147483656, then 260)" in text
    assert f"position {after}: offsets go backwards (260 after 2147483656)" in text
    assert "2 problem(s)" in text  # the batches after them follow 260..269: no cascade
    done = _kafkafs("recover", str(logdir))
    assert done.returncode == 1
    assert f"position {bad}: offsets run past" in done.stderr.decode()
    assert _kafkafs("verify", str(logdir)).returncode == 0
    done = _kafkafs("consume", str(logdir), "t-0")
    assert done.returncode == 0 and _offsets(done.stdout) == list(range(250))


def test_the_last_batch_of_a_segment_past_the_next_segments_base(tmp_path):
    logdir = _build(tmp_path / "logs", segment_bytes=2000)
    segments = sorted((logdir / "t-0").glob("*.log"))
    assert len(segments) > 2
    last = _batch_positions(segments[0])[-1]
    next_base = int(segments[1].name.split(".")[0])
    _set_base(segments[0], last[0], base=last[1] + 5)  # now ends 5 past the next segment's base
    done = _kafkafs("consume", str(logdir), "t-0")
    assert done.returncode == 1
    assert f"offsets run past the next batch's base ({last[2] + 5}, then {next_base})" in done.stderr.decode()
    assert _offsets(done.stdout) == list(range(last[1]))
    text = _kafkafs("verify", str(logdir)).stdout.decode()
    assert f"{segments[0].name} position {last[0]}: offsets run past the next batch's base" in text


def test_the_mount_answers_eio_for_the_damaged_batches_and_serves_the_rest(jumped, mounted):
    logdir, _bad, _after = jumped
    m = mounted(logdir)
    m.allow_errors = True
    records = m / "t-0" / "records.jsonl"
    with pytest.raises(OSError) as exc:
        records.read_bytes()
    assert exc.value.errno == errno.EIO
    # everything before the damage reads, line for line what consume prints: page by page, without the
    # kernel's read-ahead (a read request that touches a damaged batch's bytes fails whole)
    expected = _kafkafs("consume", str(logdir), "t-0").stdout
    assert len(expected.splitlines()) == 250
    good = len(expected) // PAGE * PAGE
    assert good >= 4 * PAGE
    assert read_pages(records, 0, good) == expected[:good]
    with pytest.raises(OSError) as exc:
        read_pages(records, good, PAGE)
    assert exc.value.errno == errno.EIO
    # the records after the two damaged batches are there, in order (the bytes past the bad pieces)
    size = records.stat().st_size
    tail = read_pages(records, size - size % PAGE, size % PAGE)
    tail_offsets = _offsets(tail[tail.index(b"\n") + 1 :])
    assert tail_offsets == list(range(300 - len(tail_offsets), 300)) and tail_offsets[0] > 270
    assert json.loads((m / "t-0" / "by-offset" / "100.json").read_bytes())["offset"] == 100
    assert _offsets((m / "t-0" / "by-offset" / "0-249.jsonl").read_bytes()) == list(range(250))
    for name in ("255.json", "2147483650.json", "250-259.jsonl"):
        try:
            data = (m / "t-0" / "by-offset" / name).read_bytes()
        except OSError as e:
            assert e.errno in (errno.EIO, errno.ENOENT), name
        else:
            assert all(o < 250 or 270 <= o < 300 for o in _offsets(data)) and b"2147483" not in data, name
    assert "offsets run past the next batch's base" in m.log()
    assert "Traceback" not in m.log()


def test_recover_of_a_copy_agrees_with_what_the_mount_serves(jumped, tmp_path, mounted):
    logdir, _bad, _after = jumped
    copy = tmp_path / "copy"
    shutil.copytree(logdir, copy)
    assert _kafkafs("recover", str(copy)).returncode == 1
    m = mounted(copy)
    assert _offsets((m / "t-0" / "records.jsonl").read_bytes()) == list(range(250))
