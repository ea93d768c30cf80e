"""The key index file: what it holds, how it is checked when opened and when each block is read."""

from __future__ import annotations

import fcntl
import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kafkafs.format.keyindex import ENTRY, key_hash
from kafkafs.storage import keyfile
from kafkafs.storage.handles import HandleBudget
from kafkafs.storage.keyfile import DamagedIndex, SegmentKeyIndex
from kafkafs.storage.keyscan import build_key_index

from .helpers import config, open_log
from .keylogs import fill


@pytest.fixture
def built(tmp_path):
    log = open_log(tmp_path / "t-0", config(segment_bytes=10**6))
    model = fill(log, random.Random(21), 200)
    segment = log.segments.first()
    path = tmp_path / "seg.keys"
    with open(path, "w+b") as f:
        head = build_key_index(segment, f, ["the key"], size=segment.size)
    yield path, head, model
    log.close()


def test_an_index_answers_for_every_key(built):
    path, head, model = built
    with open(path, "rb") as f:
        index = SegmentKeyIndex.open(f, ["the key"], path)
        assert index.entries == head["entries"] == sum(1 for r in model.records if r.key is not None and not r.control)
        for key in {r.key for r in model.records if r.key is not None}:
            want = [(r.offset, r.value is None) for r in model.records if r.key == key and not r.control]
            got = [(rel, bool(flags & 1)) for rel, flags in index.find(*key_hash(key))]
            assert got == want
        assert index.find(*key_hash(b"absent")) == []
        txns = index.transactional_batches()
        assert txns == sorted(txns) and len(txns) == head["txns"] > 0
        # slices by prefix cover every entry once, in order
        for bits in (0, 1, index.bits, index.bits + 3):
            joined = b"".join(index.slice(p, bits) for p in range(1 << bits))
            assert joined == index.entry_bytes(0, index.entries)
        rows = [ENTRY.unpack_from(joined, i) for i in range(0, len(joined), ENTRY.size)]
        assert rows == sorted(rows)


def test_another_key_is_refused(built):
    path, _head, _model = built
    with open(path, "rb") as f, pytest.raises(DamagedIndex, match="stale"):
        SegmentKeyIndex.open(f, ["another key"], path)


@pytest.mark.parametrize("change", ["truncate", "head", "table", "digest", "append"])
def test_a_damaged_file_is_refused_when_opened(built, change):
    path, _head, _model = built
    data = bytearray(path.read_bytes())
    if change == "truncate":
        data = data[:-10]
    elif change == "append":
        data += b"x"
    elif change == "head":
        data[30] ^= 1
    elif change == "table":
        data[-40] ^= 1
    else:
        data[-1] ^= 1
    path.write_bytes(bytes(data))
    with open(path, "rb") as f, pytest.raises(DamagedIndex):
        SegmentKeyIndex.open(f, ["the key"], path)


def test_a_damaged_block_is_found_when_it_is_read(built):
    path, _head, model = built
    with open(path, "rb") as f:
        index = SegmentKeyIndex.open(f, ["the key"], path)
        with open(path, "r+b") as w:
            w.seek(keyfile.HEAD_SIZE + 5)
            w.write(b"\xff")
        with pytest.raises(DamagedIndex) as caught:
            index.entry_bytes(0, index.entries)
        assert caught.value.index is index


def test_an_index_gives_its_descriptor_back_and_opens_its_file_again(built):
    """The handle budget (review11 R11-1): an index's descriptor is given back like a segment's and
    opened again by its path at the next read; a file replaced since is not read (DamagedIndex)."""
    path, _head, _model = built
    budget = HandleBudget(limit=1)
    fd = os.open(path, os.O_RDONLY)
    index = SegmentKeyIndex.open(fd, ["the key"], path, budget=budget)
    assert index in budget
    entries = index.entry_bytes(0, index.entries)
    budget.opened(_Other(), 1)  # another owner pushes it out: its descriptor closes
    assert index not in budget and index._handle is None
    assert not os.path.exists(f"/proc/self/fd/{fd}") or os.readlink(f"/proc/self/fd/{fd}") != str(path)
    assert index.entry_bytes(0, index.entries) == entries and index in budget  # opened again
    index.release_handles()
    shutil.copy(path, path.with_suffix(".new"))
    os.replace(path.with_suffix(".new"), path)  # the same bytes, another file
    with pytest.raises(DamagedIndex) as caught:
        index.entry_bytes(0, index.entries)
    assert caught.value.index is index
    index.close()
    assert index not in budget


class _Other:
    pinned = False

    def release_handles(self) -> None:
        pass


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


_MAKE_ONE = ("from kafkafs.storage.keyfile import temporary_index_file; import os, sys; f, p = temporary_index_file(); "
             "f.write(b'x'); f.flush(); print(p, flush=True); {end}")


def test_a_killed_process_leaves_no_private_folder_behind_the_next_one(tmp_path):
    """Temporary folders left (fix50): a process killed (SIGKILL: no atexit) left its empty or key-file
    folder kafkafs-keys-<pid>-* in the temporary folder for ever (80 of them in /tmp); the next process
    that makes its own folder removes it, and never a live process's."""
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": os.getcwd()}
    killed = subprocess.Popen([sys.executable, "-c", _MAKE_ONE.format(end="import time; time.sleep(60)")],
                              stdout=subprocess.PIPE, env=env)
    assert killed.stdout is not None
    left = Path(killed.stdout.readline().decode().strip()).parent
    live = subprocess.Popen([sys.executable, "-c", _MAKE_ONE.format(end="sys.stdin.read()")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert live.stdout is not None
    theirs = Path(live.stdout.readline().decode().strip()).parent
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert left.is_dir() and len(list(left.iterdir())) == 1  # what SIGKILL leaves
    done = subprocess.run([sys.executable, "-c", _MAKE_ONE.format(end="")], env=env, capture_output=True, check=True)
    mine = Path(done.stdout.decode().strip()).parent
    assert not left.exists()  # swept by the next process
    assert theirs.is_dir() and len(list(theirs.iterdir())) == 1  # a live process's: kept
    assert not mine.exists()  # its own: removed at its exit, as before
    assert live.stdin is not None
    live.stdin.close()
    live.wait()
    assert not theirs.exists()


def test_the_sweep_removes_only_what_it_is_sure_of(tmp_path):
    """Only this prefix, a dead pid, a folder (never a link followed), nothing but key files, no lock held."""
    dead = _dead_pid()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keys-a.keys").write_bytes(b"precious")

    def folder(name: str, *files: str) -> Path:
        path = tmp_path / name
        path.mkdir()
        for file in files:
            (path / file).write_bytes(b"k")
        return path

    folder(f"kafkafs-keys-{dead}-empty")
    folder(f"kafkafs-keys-{dead}-own", "keys-1.keys", "keys-2.keys")
    other = folder(f"kafkafs-keys-{dead}-other", "keys-1.keys", "notes.txt")
    linked = folder(f"kafkafs-keys-{dead}-linked")
    (linked / "keys-l.keys").symlink_to(elsewhere / "keys-a.keys")
    (tmp_path / f"kafkafs-keys-{dead}-link").symlink_to(elsewhere)
    alive = folder(f"kafkafs-keys-{os.getpid()}-alive")
    foreign = folder(f"other-keys-{dead}-x")
    held = folder(f"kafkafs-keys-{dead}-held")  # a live kafkafs of another pid namespace holds its lock
    fd = os.open(held, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        removed = keyfile.sweep_stale_folders(tmp_path)
    finally:
        os.close(fd)
    assert sorted(removed) == [f"kafkafs-keys-{dead}-empty", f"kafkafs-keys-{dead}-own"]
    assert all(p.is_dir() for p in (other, linked, alive, foreign, held))
    assert (tmp_path / f"kafkafs-keys-{dead}-link").is_symlink()
    assert (elsewhere / "keys-a.keys").read_bytes() == b"precious" and (other / "keys-1.keys").exists()
    assert keyfile.sweep_stale_folders(tmp_path) == [f"kafkafs-keys-{dead}-held"]  # its lock let go
