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
