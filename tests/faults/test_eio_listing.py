"""A sealed segment the disk will not give (EIO) is never left out of ``by-offset/``'s listing (review11
R11-7): with the FIRST segment unreadable, the listing held only the other segments' names (500 of 600 in
review11's repro) although the directory's count and ``partition.json`` held them all; now the unreadable
segment's offsets are listed up to the next segment's base, and reading them answers EIO (SPEC §3: a segment
that cannot be read fails only the reads that need its bytes)."""

from __future__ import annotations

import errno
import json
import os

import pytest

from tests.faults.test_disk_errors import _build


def test_an_unreadable_first_segment_stays_listed_and_reads_eio(tmp_path, eio_layer, mounted):
    logdir, bases = _build(tmp_path / "logs")
    assert len(bases) >= 4
    layer = eio_layer(logdir)
    layer.fail({"name": f"disk-0/{bases[0]:020d}.log", "from": 100, "to": 200, "op": "read"})
    m = mounted(layer.path)
    m.allow_errors = True
    part = m / "disk-0"
    names = sorted(int(name.removesuffix(".json")) for name in os.listdir(part / "by-offset"))
    assert names == list(range(400))
    for n in (0, 5):  # in the batches whose bytes the disk will not give
        with pytest.raises(OSError) as err:
            (part / "by-offset" / f"{n}.json").read_bytes()
        assert err.value.errno == errno.EIO
    for n in (bases[1] - 1, bases[1], 399):  # the first segment's last batch reads (the index finds it)
        assert json.loads((part / "by-offset" / f"{n}.json").read_bytes())["offset"] == n
    assert "Traceback" not in m.log()
