"""A segment's ``.txnindex`` file (TransactionIndex): created with its first entry, ordered, truncated,
renamed, deleted, checked; links never followed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kafkafs.errors import CorruptRecordError, InvalidInput
from kafkafs.format.txnindex import AbortedTxn
from kafkafs.storage.txnindex import TransactionIndex


def test_transaction_index_file(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000010.txnindex"
    index = TransactionIndex(path, 10)
    assert index.entries() == [] and not index.exists()
    index.reset()
    index.truncate_to(0)
    assert not index.exists()  # nothing creates the file but an entry
    index.append(AbortedTxn(1, 3, 10, 11))
    index.append(AbortedTxn(2, 5, 12, 13))
    with pytest.raises(InvalidInput, match="does not follow"):
        index.append(AbortedTxn(3, 5, 12, 13))
    index.flush()
    assert TransactionIndex(path, 10).entries() == [AbortedTxn(1, 3, 10, 11), AbortedTxn(2, 5, 12, 13)]
    index.truncate_to(12)
    assert index.entries() == [AbortedTxn(1, 3, 10, 11)]
    index.append(AbortedTxn(2, 5, 12, 13))
    with open(path, "ab") as f:
        f.write(b"torn")
    with pytest.raises(CorruptRecordError, match="whole number"):
        index.sanity_check()
    fresh = TransactionIndex(path, 10)
    fresh.append(AbortedTxn(4, 13, 14, 15))  # the torn tail is cut before the new entry
    assert fresh.entries()[-1] == AbortedTxn(4, 13, 14, 15) and path.stat().st_size == 3 * 34
    fresh.sanity_check()
    with pytest.raises(CorruptRecordError, match="below the segment's base offset"):
        TransactionIndex(path, 11).sanity_check()
    fresh.rename(tmp_path / "x.deleted")
    assert fresh.exists() and not path.exists()
    assert fresh.delete() and not fresh.delete()


def test_a_link_is_never_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_bytes(b"")
    path = tmp_path / "00000000000000000010.txnindex"
    os.symlink(target, path)
    index = TransactionIndex(path, 10)
    assert index.entries() == []  # read as if there were none
    with pytest.raises(Exception):  # noqa: B017 - the write is refused, whatever the error says
        index.append(AbortedTxn(1, 3, 10, 11))
    assert target.read_bytes() == b""


@pytest.mark.parametrize("in_place", [False, True])
def test_a_replaced_segment_without_index_is_replayed_again(tmp_path: Path, in_place: bool) -> None:
    """A segment without its offset index file has its aborted transactions replayed from its markers,
    and the replay is kept; a segment replaced by one of the same size (a marker ABORT -> COMMIT: same
    bytes long) must be replayed again, not answered from the earlier file's replay (flake64)."""
    from kafkafs.format.batch import encode_batch, encode_control_batch

    from .helpers import open_log

    directory = tmp_path / "t-0"
    directory.mkdir()
    log_file = directory / "00000000000000000000.log"

    def write(kind: str) -> None:
        data = encode_batch([(1, b"k", b"v", ())], producer_id=7, producer_epoch=0, transactional=True)
        data += encode_control_batch(kind, producer_id=7, producer_epoch=0, timestamp=1, base_offset=1)
        if in_place:  # the same file (inode) rewritten
            with open(log_file, "r+b" if log_file.exists() else "wb") as f:
                f.write(data)
            os.utime(log_file, ns=(1, 1))  # its times put back as they were (review27 R27-7)
        else:  # a new file renamed over it
            (directory / "new").write_bytes(data)
            os.replace(directory / "new", log_file)

    def aborted() -> list[AbortedTxn]:
        log = open_log(directory, writable=False)
        try:
            assert not (directory / "00000000000000000000.index").exists()
            return log.aborted_transactions(0, 2)
        finally:
            log.close()

    write("ABORT")
    assert aborted() == [AbortedTxn(7, 0, 1, 2)]
    write("COMMIT")
    assert aborted() == []
