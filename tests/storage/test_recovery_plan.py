"""What a writable load may cut (kafkafs.storage.recovery_plan): a torn tail, never whole batches unasked."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkafs.errors import NeedsRecovery
from kafkafs.storage.log import Log
from kafkafs.storage.recovery_plan import recovery_cut, writer_refusal
from tests.storage.helpers import open_log, record


def _segment_with_tail(directory: Path, tail: bytes) -> tuple[Log, int]:
    log = open_log(directory)
    log.append_records([record()] * 3)
    log.append_records([record()] * 3)
    log.close()
    path = sorted(directory.glob("*.log"))[-1]
    good = path.stat().st_size
    with open(path, "ab") as f:
        f.write(tail)
    return Log.open(directory), good


@pytest.mark.allow_warnings("recovery says what it cuts")
@pytest.mark.parametrize("tail, torn", [
    (bytes(300), True),  # zeros, as a file system leaves a file extended but not written
    ((0).to_bytes(8, "big") + (5000).to_bytes(4, "big") + bytes(40), True),  # a batch shorter than its header says
    (b"\x01" * 7, True),  # fewer bytes than a batch's size field
    (b"\xff" * 40, False),  # a length of -1: garbage, not a write in progress
])
def test_a_torn_tail_is_told_from_whole_garbage(tmp_path, tail, torn):
    reader, good = _segment_with_tail(tmp_path / "t-0", tail)
    segment = reader.segments.last()
    assert recovery_cut(segment) is not None and recovery_cut(segment)[0] == good
    assert recovery_cut(segment)[2] is torn
    refusal = writer_refusal(reader.dir, reader.segments, None, False)
    assert (refusal is None) is torn
    reader.close()
    if not torn:
        with pytest.raises(NeedsRecovery):
            open_log(tmp_path / "t-0", clean=False)
    assert (tmp_path / "t-0" / "00000000000000000000.log").stat().st_size == good + len(tail)
    if torn:
        open_log(tmp_path / "t-0", clean=False).close()  # any writer cuts a torn tail
        assert (tmp_path / "t-0" / "00000000000000000000.log").stat().st_size == good


def test_a_whole_log_cuts_nothing(tmp_path):
    reader, _good = _segment_with_tail(tmp_path / "t-0", b"")
    assert recovery_cut(reader.segments.last()) is None
    assert writer_refusal(reader.dir, reader.segments, None, False) is None
    reader.close()
