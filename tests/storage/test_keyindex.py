"""The key index store: built once, kept in the cache folder under the segment's key, never served stale,
rebuilt when damaged (SPEC §3: the same rules as the size cache)."""

from __future__ import annotations

import errno
import logging
import os

import pytest

from kafkafs.errors import describe_os_error
from kafkafs.format.batch import read_batch_header
from kafkafs.storage import keyfile
from kafkafs.storage.keyindex import KeyIndexStore
from kafkafs.storage.keytable import PartitionKeys
from kafkafs.storage.log import Log

from .test_keytable import _check_all, _log


def _entry(tmp_path) -> list:
    return sorted((tmp_path / "cache").glob("*.keys"))


def test_without_a_cache_folder_indexes_live_in_temporary_files(tmp_path):
    log, model = _log(tmp_path, seed=3, batches=150)
    store = KeyIndexStore(None)
    _check_all(PartitionKeys(log, store), model)
    assert store.built == len(log.segments) - 1
    assert not (tmp_path / "cache").exists()
    store.close()
    log.close()


def test_a_changed_segment_is_never_served_from_its_old_index(tmp_path):
    log, model = _log(tmp_path, seed=6, batches=100)
    store = KeyIndexStore(tmp_path / "cache")
    _check_all(PartitionKeys(log, store), model)
    before = {p.name: p.read_bytes() for p in _entry(tmp_path)}
    log.close()
    # rewrite a sealed segment in place (same inode), keeping its mtime: the ctime and size still tell.
    # Cut at a batch boundary near the middle: a cut inside a batch of a sealed segment is damage
    first = tmp_path / "t-0" / "00000000000000000000.log"
    st = first.stat()
    data = first.read_bytes()
    cut = 0
    while cut < len(data) // 2:
        cut = read_batch_header(data, cut).end
    with open(first, "r+b") as f:
        f.truncate(cut)
    os.utime(first, ns=(st.st_atime_ns, st.st_mtime_ns))
    reader = Log.open(tmp_path / "t-0")
    store2 = KeyIndexStore(tmp_path / "cache")
    keys = PartitionKeys(reader, store2)
    assert store2.get(reader.segments.first(), "t", 0, build=False) is None  # stale: not served
    with keys.table():
        pass
    assert store2.built >= 1
    after = {p.name: p.read_bytes() for p in _entry(tmp_path)}
    assert after != before
    reader.close()


@pytest.mark.parametrize("where", ["head", "data", "crc table"])
def test_a_damaged_index_is_rebuilt(tmp_path, where):
    log, model = _log(tmp_path, seed=8, batches=100)
    _check_all(PartitionKeys(log, KeyIndexStore(tmp_path / "cache")), model)
    path = max(_entry(tmp_path), key=lambda p: p.stat().st_size)
    data = bytearray(path.read_bytes())
    at = {"head": 40, "data": keyfile.HEAD_SIZE + 100, "crc table": len(data) - 40}[where]
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    store = KeyIndexStore(tmp_path / "cache")
    _check_all(PartitionKeys(log, store), model)
    assert store.built >= 1
    log.close()


def test_damage_found_while_reading_an_open_index_rebuilds_it(tmp_path):
    log, model = _log(tmp_path, seed=9, batches=100)
    store = KeyIndexStore(tmp_path / "cache")
    keys = PartitionKeys(log, store)
    _check_all(keys, model)
    for path in _entry(tmp_path):  # damage every block after the indexes were opened and checked
        data = bytearray(path.read_bytes())
        for at in range(keyfile.HEAD_SIZE, len(data) - 4 * 8 - 32, keyfile.BLOCK):
            data[at] ^= 0xFF
        with open(path, "r+b") as f:  # in place: the open descriptors see it
            f.write(data)
    built = store.built
    _check_all(keys, model)
    assert store.built > built
    log.close()


def test_a_cache_folder_that_cannot_be_written_warns_once_and_serves(tmp_path, caplog):
    log, model = _log(tmp_path, seed=13, batches=100)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    store = KeyIndexStore(blocker / "cache")  # below a file: cannot be made
    with caplog.at_level(logging.WARNING):
        _check_all(PartitionKeys(log, store), model)
    assert caplog.text.count("is not writable") == 1
    assert store.built == len(log.segments) - 1
    log.close()


def test_a_segment_the_disk_will_not_read_is_said_as_such_not_as_an_unwritable_cache(tmp_path, caplog):
    """review15 R15-11: an EIO reading a segment of LOGDIR was warned as "the key index cache ... is not
    writable (Input/output error)": the error names the segment and the read error, the cache says nothing
    (its own failure keeps its own message: the test above)."""
    log, _model = _log(tmp_path, seed=16, batches=100)
    segment = log.segments.first()
    cache = tmp_path / "cache"
    store = KeyIndexStore(cache)

    def fail(position, size):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    segment.read_at = fail  # a disk that will not give the segment's bytes
    with caplog.at_level(logging.WARNING), pytest.raises(OSError) as err:
        store.get(segment, "t", 0)
    assert "not writable" not in caplog.text
    assert err.value.errno == errno.EIO
    assert err.value.filename == str(segment.log_path)
    assert describe_os_error(err.value) == f"cannot read {segment.log_path}: input/output error"
    assert not [p for p in cache.iterdir() if p.name.startswith(".tmp-")]  # nothing left behind
    del segment.read_at
    assert store.get(segment, "t", 0) is not None  # the disk healed: built and kept in the cache
    assert list(cache.glob("*.keys"))
    log.close()


def test_the_store_keeps_a_bounded_number_of_indexes_open(tmp_path):
    log, model = _log(tmp_path, seed=14, batches=200)
    store = KeyIndexStore(tmp_path / "cache", max_open=2)
    _check_all(PartitionKeys(log, store), model)
    assert len(store._open) == 2
    assert len(os.listdir(tmp_path / "cache")) == len(log.segments) - 1
    store.close()
    log.close()


def test_a_reader_of_a_copy_reuses_nothing_of_another_file(tmp_path):
    import shutil

    log, model = _log(tmp_path, seed=15, batches=100)
    store = KeyIndexStore(tmp_path / "cache")
    _check_all(PartitionKeys(log, store), model)
    log.close()
    shutil.copytree(tmp_path / "t-0", tmp_path / "copy" / "t-0")
    copy = Log.open(tmp_path / "copy" / "t-0")
    again = KeyIndexStore(tmp_path / "cache")
    _check_all(PartitionKeys(copy, again), model)
    assert again.loaded == 0 and again.built == len(copy.segments) - 1  # other inodes: other entries
    copy.close()


def _segment_named(log, entry_name: str):
    """The sealed segment of ``log`` whose key index entry is ``entry_name``."""
    from kafkafs.storage.cachedir import file_key
    from kafkafs.storage.keyindex import index_stem

    for segment in log.segments:
        if f"{index_stem(file_key(os.stat(segment.log_path)), 't', 0)}.keys" == entry_name:
            return segment
    raise AssertionError(entry_name)


def test_a_segment_deleted_while_its_index_is_built_is_no_cache_fault(tmp_path, caplog, monkeypatch):
    """review26 R26-2: beside a live broker's retention, a segment renamed .deleted while its index was
    built had its new entry discarded (segment_gone) before the store opened it: ENOENT, warned as "the key
    index cache ... is not writable (No such file or directory)" (failed before, seen), the one warning of
    the mount spent. Now the index built is served, nothing is warned, and a real cache fault later is
    still said."""
    from kafkafs.storage import keyindex

    log, model = _log(tmp_path, seed=17, batches=100)
    cache = tmp_path / "cache"
    store = KeyIndexStore(cache)
    real = keyindex.write_entry
    discarded = []

    def racing(directory, name, write):
        path = real(directory, name, write)
        if not discarded:  # the broker renames the segment; the mount's refresh lets its entry go
            segment = _segment_named(log, name)
            st = os.stat(segment.log_path)
            deleted = segment.log_path.with_name(segment.log_path.name + ".deleted")
            os.rename(segment.log_path, deleted)
            store.segment_gone(st.st_dev, st.st_ino, "t", 0)
            discarded.append(path.exists())
            os.rename(deleted, segment.log_path)  # back, for the rest of the test's reads by name (a new
            # ctime: its index is built again, under the same name)
        return path

    monkeypatch.setattr(keyindex, "write_entry", racing)
    with caplog.at_level(logging.WARNING):
        _check_all(PartitionKeys(log, store), model)
    assert discarded == [False]  # the race happened: the entry went before the store could open it
    assert "not writable" not in caplog.text, caplog.text
    assert store.built == len(log.segments)  # each sealed segment, and the renamed one again
    assert len(_entry(tmp_path)) == len(log.segments) - 1
    log.close()

    def refused(directory, name, write):  # now the cache folder itself fails
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(directory / ".tmp-x.keys"))

    import shutil

    shutil.copytree(tmp_path / "t-0", tmp_path / "copy" / "t-0")  # other inodes: built again
    copy = Log.open(tmp_path / "copy" / "t-0")
    monkeypatch.setattr(keyindex, "write_entry", refused)
    with caplog.at_level(logging.WARNING):
        _check_all(PartitionKeys(copy, store), model)
    assert caplog.text.count(f"the key index cache {cache} is not writable (Permission denied)") == 1, caplog.text
    copy.close()


def test_a_segment_gone_under_its_new_name_mid_build_is_no_cache_fault(tmp_path, caplog):
    """review26 R26-2: an OS error naming the segment under another name (.deleted, as a broker's retention
    renames it) is the segment's, not the cache's: raised to the reader, nothing warned (failed before, seen)."""
    log, _model = _log(tmp_path, seed=18, batches=100)
    segment = log.segments.first()
    store = KeyIndexStore(tmp_path / "cache")
    gone = f"{segment.log_path}.deleted"

    def vanished(position, size):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), gone)

    segment.read_at = vanished
    with caplog.at_level(logging.WARNING), pytest.raises(FileNotFoundError) as err:
        store.get(segment, "t", 0)
    assert err.value.filename == gone
    assert "not writable" not in caplog.text, caplog.text
    del segment.read_at
    assert store.get(segment, "t", 0) is not None and list((tmp_path / "cache").glob("*.keys"))
    log.close()
