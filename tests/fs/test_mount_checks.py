"""What mount checks before mounting (no FUSE needed): the -o options, the mount point, the log directory."""

from __future__ import annotations

import pytest

from kafkafs.errors import MountError, MountPathError
from kafkafs.fs.mount_checks import check_logdir, check_mountpoint, fuse_option_set


def test_fuse_options():
    options, rw, values = fuse_option_set(False, ["allow_other,noatime", "values=base64"])
    assert {"ro", "allow_other", "noatime", "fsname=kafkafs", "subtype=kafkafs"} <= options
    assert rw is False and values == "base64"
    options, rw, _ = fuse_option_set(True, ["rw", "defaults"])
    assert rw is True and "ro" not in options and "rw" not in options and "defaults" not in options
    options, rw, _ = fuse_option_set(True, ["ro"])
    assert rw is False and "ro" in options
    # the mount is named after the log directory, unless the user names it
    options, _, _ = fuse_option_set(False, [], "/var/lib/kafka/data")
    assert {"fsname=/var/lib/kafka/data", "subtype=kafkafs"} <= options
    options, _, _ = fuse_option_set(False, ["fsname=mine,subtype=kfs"], "/var/lib/kafka/data")
    assert {"fsname=mine", "subtype=kfs"} <= options
    assert not {"fsname=/var/lib/kafka/data", "subtype=kafkafs"} & options
    options, _, _ = fuse_option_set(False, [], "/data/a,b\\c")
    assert "fsname=/data/a\\,b\\\\c" in options  # libfuse splits at commas; a backslash escapes
    options, _, _ = fuse_option_set(False, [], "/data/kafka-\u00e9t\u00e9")
    assert "fsname=kafkafs" in options  # pyfuse3 passes options as ASCII


@pytest.mark.parametrize(
    "check, missing", [(check_mountpoint, "no such mount point"), (check_logdir, "no such log directory")]
)
def test_a_path_must_be_a_folder(tmp_path, check, missing):
    assert check(str(tmp_path)) == str(tmp_path)
    with pytest.raises(MountPathError, match=missing):
        check(str(tmp_path / "missing"))
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(MountPathError, match="not a directory"):
        check(str(tmp_path / "file"))


def test_a_mount_point_must_be_empty(tmp_path):
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(MountPathError, match="not empty"):
        check_mountpoint(str(tmp_path))


def test_a_wrong_path_is_a_usage_error_and_a_busy_one_is_not():
    from kafkafs.errors import UsageError

    assert issubclass(MountPathError, UsageError) and issubclass(MountPathError, MountError)
    assert not issubclass(MountError, UsageError)


def test_a_schemas_path_that_is_not_a_folder_is_a_usage_error(tmp_path):
    """--schemas DIR that is no folder: exit 2 from mount as from consume (SPEC §4, §8); no FUSE needed,
    the check comes before mounting."""
    import os
    import subprocess
    import sys

    from .conftest import ROOT

    logdir, mnt = tmp_path / "logs", tmp_path / "mnt"
    (logdir / "t-0").mkdir(parents=True)
    mnt.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for command in ("mount", "consume"):
        args = [str(logdir), str(mnt)] if command == "mount" else [str(logdir), "t-0"]
        done = subprocess.run(
            [sys.executable, "-m", "kafkafs.cli", command, "--schemas", str(tmp_path / "missing"), *args],
            capture_output=True, text=True, env=env, cwd=ROOT, timeout=60,
        )
        assert done.returncode == 2, (command, done)
        assert done.stderr.count("\n") == 1 and "--schemas" in done.stderr, done.stderr
    assert not os.path.ismount(mnt)


def test_a_dev_fd_mount_point_is_an_open_dev_fuse(tmp_path):
    """``/dev/fd/N`` (what ``mount.fuse3 -o drop_privileges`` hands the daemon, review12 R12-4) is taken
    as it is when N is an open /dev/fuse, not refused as 'not a directory'; anything else is exit 2."""
    import os

    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse")
    fd = os.open("/dev/fuse", os.O_RDWR)
    try:
        assert check_mountpoint(f"/dev/fd/{fd}") == f"/dev/fd/{fd}"
    finally:
        os.close(fd)
    with pytest.raises(MountPathError, match="no such open file descriptor"):
        check_mountpoint(f"/dev/fd/{fd}")
    (tmp_path / "file").write_bytes(b"x")
    fd = os.open(tmp_path / "file", os.O_RDONLY)
    try:
        with pytest.raises(MountPathError, match="not an open /dev/fuse"):
            check_mountpoint(f"/dev/fd/{fd}")
    finally:
        os.close(fd)
