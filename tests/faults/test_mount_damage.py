"""Reads through a read-only mount over damaged directories: EIO or ENOENT for what the damage hides,
never a traceback in the daemon's log, never a hang, never a dead daemon."""

from __future__ import annotations

import struct

from kafkafs.format.batch import encode_batch

from . import fuzz


def test_offsets_past_a_long_are_damage_not_a_traceback(mounted, tmp_path):
    logdir = tmp_path / "logs"
    part = logdir / "big-0"
    part.mkdir(parents=True)
    first = encode_batch([(1_763_700_000_000, None, b"a", ())])
    second = bytearray(encode_batch([(1_763_700_000_001, None, b"b", ()), (1_763_700_000_002, None, b"c", ())]))
    struct.pack_into(">q", second, 0, 2**63 - 1)  # the base offset is outside the CRC
    (part / "00000000000000000000.log").write_bytes(first + bytes(second))
    m = mounted(logdir)
    m.allow_errors = True
    read, problems = fuzz.read_everything(m.path, timeout=30)
    assert read > 5 and not problems, problems
    assert "Traceback" not in m.log() and "unexpected error" not in m.log(), m.log()


def test_segment_names_past_a_long_are_not_segments(mounted, tmp_path):
    logdir = tmp_path / "logs"
    part = logdir / "big-0"
    part.mkdir(parents=True)
    batch = encode_batch([(1_763_700_000_000, None, b"a", ())])
    (part / "00000000000000000000.log").write_bytes(batch)
    (part / "99999999999999999999.log").write_bytes(batch)
    (part / "09223372036854775807.index").write_bytes(b"")
    m = mounted(logdir)
    m.allow_errors = True
    read, problems = fuzz.read_everything(m.path, timeout=30)
    assert read > 5 and not problems, problems
    assert "Traceback" not in m.log() and "unexpected error" not in m.log(), m.log()
    assert (m / "big-0" / "records.jsonl").read_bytes().count(b"\n") == 1
