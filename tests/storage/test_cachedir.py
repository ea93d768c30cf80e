"""The cache folder: where it is, and never inside the log directory."""

from __future__ import annotations

import os

import pytest

from kafkafs.errors import InvalidInput
from kafkafs.storage.cachedir import check_outside, default_cache_dir, file_key


def test_default_cache_dir_follows_systemd_then_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("CACHE_DIRECTORY", f"{tmp_path}/a:{tmp_path}/b")
    assert default_cache_dir() == tmp_path / "a"
    monkeypatch.delenv("CACHE_DIRECTORY")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "kafkafs"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / ".cache" / "kafkafs"


def test_a_cache_inside_the_log_directory_is_refused(tmp_path):
    (tmp_path / "logs").mkdir()
    with pytest.raises(InvalidInput):
        check_outside(tmp_path / "logs" / "cache", tmp_path / "logs")
    with pytest.raises(InvalidInput):
        check_outside(tmp_path / "logs", tmp_path / "logs")
    assert check_outside(tmp_path / "cache", tmp_path / "logs") == tmp_path / "cache"


def test_file_key_names_the_file_as_it_is_now(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    key = file_key(os.stat(path))
    assert key.size == 3 and key.ino == os.stat(path).st_ino
    path.write_bytes(b"abcd")
    assert file_key(os.stat(path)) != key


def test_an_entry_is_written_whole_or_not_at_all(tmp_path):
    from kafkafs.storage.cachedir import write_entry

    path = write_entry(tmp_path / "cache", "a.keys", lambda f: f.write(b"one"))
    assert path.read_bytes() == b"one"

    def fails(f):
        f.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        write_entry(tmp_path / "cache", "a.keys", fails)
    assert path.read_bytes() == b"one"  # the old entry stays, and no temporary file is left
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["a.keys"]
