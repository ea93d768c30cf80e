"""``stat`` of ``table.jsonl`` works while a batch it needs is damaged or unreadable (review15 R15-12):
it answered EIO, so ``ls -l`` of the partition folder exited 1 although only reading the table needs the
bad bytes (SPEC §3: damage is local; it fails only the reads that need its bytes). Now its stat says
size 0 (kept by the kernel for no time), its open fails with EIO, the damage is logged, and every other
file of the folder lists, stats and reads as before."""

from __future__ import annotations

import errno
import subprocess

import pytest

from tests.faults.test_disk_errors import _build


def _lists_and_table_fails(part, log: str) -> None:
    done = subprocess.run(["ls", "-l", str(part)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "table.jsonl" in done.stdout
    assert (part / "table.jsonl").stat().st_size == 0
    with pytest.raises(OSError) as err:
        (part / "table.jsonl").read_bytes()
    assert err.value.errno == errno.EIO
    assert (part / "records.jsonl").stat().st_size > 0
    assert (part / "partition.json").read_bytes()
    assert "Traceback" not in log and "not writable" not in log, log


def test_a_segment_the_disk_will_not_read(tmp_path, eio_layer, mounted):
    logdir, bases = _build(tmp_path / "logs")
    layer = eio_layer(logdir)
    layer.fail({"name": f"disk-0/{bases[1]:020d}.log", "from": 3000, "op": "read"})
    m = mounted(layer.path, "--cache-dir", str(tmp_path / "cache"))
    m.allow_errors = True
    _lists_and_table_fails(m / "disk-0", m.log())
    assert f"cannot read {layer.path}/disk-0/{bases[1]:020d}.log" in m.log()


def test_a_batch_that_fails_its_crc(tmp_path, mounted):
    logdir, bases = _build(tmp_path / "logs")
    seg = logdir / "disk-0" / f"{bases[1]:020d}.log"
    data = bytearray(seg.read_bytes())
    second = 12 + int.from_bytes(data[8:12], "big")
    data[second + 70] ^= 0xFF  # in the second batch's records: its CRC no longer holds
    seg.write_bytes(bytes(data))
    m = mounted(logdir, "--cache-dir", str(tmp_path / "cache"))
    m.allow_errors = True
    _lists_and_table_fails(m / "disk-0", m.log())
    assert f"corrupt batch in {seg}" in m.log(), m.log()
