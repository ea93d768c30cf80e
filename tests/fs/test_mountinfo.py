"""The mount table as kafkafs reads it (kafkafs umount, the daemon's own look at its mount)."""

from __future__ import annotations

import os

from kafkafs.fs.mountinfo import find_mount, mount_path, unescape


def test_unescape_reads_the_kernels_octal_escapes() -> None:
    assert unescape(r"/mnt/a\040b\011c\012d\134e") == "/mnt/a b\tc\nd\\e"
    assert unescape("/mnt/\u00e9t\u00e9") == "/mnt/\u00e9t\u00e9"


def test_find_mount_names_the_mount_on_top_and_nothing_elsewhere(tmp_path) -> None:
    proc = find_mount("/proc")
    assert proc is not None and proc.fstype == "proc" and proc.path == "/proc"
    assert ("rw" in proc.options) != ("ro" in proc.options)
    assert find_mount(str(tmp_path / "nothing-mounted-here")) is None


def test_mount_path_resolves_the_folders_not_the_mount_point(tmp_path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    os.symlink("/proc", tmp_path / "real" / "mnt")
    assert mount_path(str(tmp_path / "link" / "mnt")) == str(tmp_path.resolve() / "real" / "mnt")
