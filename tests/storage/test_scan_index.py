"""A read-only segment without its index files (as in kafka-logs-b, where the broker's preallocated
indexes were not kept) is looked up through an in-memory sparse index, not a scan from position 0."""

from __future__ import annotations

import os
import struct

import pytest

from kafkafs.errors import CorruptRecordError
from kafkafs.format.batchheader import read_batch_header
from kafkafs.storage.config import Settings
from kafkafs.storage.log import Log
from kafkafs.storage.logdir import LogDir

from .helpers import read_offset


def _build(tmp_path, n=3000):
    with LogDir(tmp_path, Settings({"segment.bytes": 10**9}), writable=True) as logdir:
        log = logdir.create_partition("t", 0)
        for i in range(0, n, 10):
            log.append_records([(1_000_000 + (i + j) * 10, b"k", b"x" * 90, ()) for j in range(10)])
    directory = tmp_path / "t-0"
    for name in os.listdir(directory):
        if name.endswith((".index", ".timeindex")):
            os.unlink(directory / name)
    return directory


def test_offsets_and_times_resolve_without_index_files(tmp_path):
    directory = _build(tmp_path)
    log = Log.open(directory, writable=False)
    segment = log.active_segment
    assert segment.offset_index.entries == 0
    for offset in (0, 1, 9, 10, 1234, 2999):
        batch, i = read_offset(log, offset)
        assert batch.offsets[i] == offset
    assert segment.position_of(2999) > 0  # the scan starts near the target, not at 0
    index = segment._scan_index
    assert index is not None and len(index.positions) > 10
    assert log.offset_for_timestamp(1_000_000 + 1234 * 10) == (1234, 1_000_000 + 1234 * 10)
    assert log.offset_for_timestamp(1_000_000 + 1234 * 10 - 5) == (1234, 1_000_000 + 1234 * 10)
    assert log.offset_for_timestamp(10**12) is None
    assert sorted(os.listdir(directory)) == ["00000000000000000000.log"] or all(
        not n.endswith((".index", ".timeindex")) for n in os.listdir(directory)
    )


def test_the_scan_index_follows_a_growing_file(tmp_path):
    directory = _build(tmp_path, 1000)
    reader = Log.open(directory, writable=False)
    assert read_offset(reader, 999)[0].offsets[-1] == 999
    with LogDir(tmp_path, writable=True) as logdir:
        writer = logdir.log("t-0")
        writer.append_records([(2_000_000 + j, None, b"y" * 90, ()) for j in range(500)])
    for name in os.listdir(directory):
        if name.endswith((".index", ".timeindex")):
            os.unlink(directory / name)
    reader.refresh()
    batch, i = read_offset(reader, 1400)
    assert batch.offsets[i] == 1400 and batch.values[i] == b"y" * 90


def test_a_time_lookup_passes_over_no_damaged_batch_by_its_max_timestamp(tmp_path):
    """review27 R27-5: the in-memory index's skip by time is read from the batches' maxTimestamp (inside the
    CRC); a batch whose damaged maxTimestamp says it is older was passed over and a later record answered.
    A lookup whose start passes over a batch whose CRC fails now meets its damage (as with the index files)."""
    directory = _build(tmp_path)
    path = directory / "00000000000000000000.log"
    buf = bytearray(path.read_bytes())
    pos = 0
    while (h := read_batch_header(buf, pos)).base_offset != 1200:
        pos = h.end
    buf[pos + 35 : pos + 43] = struct.pack(">q", 1_000_000)  # offsets 1200..1209 claim to be older than 1200's
    path.write_bytes(bytes(buf))
    log = Log.open(directory, writable=False)
    for ts in (1_000_000 + 1205 * 10, 1_000_000 + 1200 * 10, 1_000_000 + 2500 * 10):
        for _ in range(2):  # (the second lookup too: the check's result is kept)
            with pytest.raises(CorruptRecordError) as exc:
                log.offset_for_timestamp(ts)  # before: (1210, ...) / (2500, ...)
            assert exc.value.position == pos and "CRC mismatch" in str(exc.value)
    assert log.offset_for_timestamp(1_000_000 + 1100 * 10) == (1100, 1_000_000 + 1100 * 10)  # before the damage
    assert log.offset_for_timestamp(1_000_000 + 1199 * 10 - 5) == (1199, 1_000_000 + 1199 * 10)
