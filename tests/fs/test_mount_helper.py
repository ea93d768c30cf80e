"""mount.kafkafs: mount(8)'s helper convention in, a ``kafkafs mount`` command line out."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkafs.fs import mount_helper
from kafkafs.fs.mount_helper import (
    EXIT_SYSTEM,
    EXIT_USAGE,
    UsageError,
    main,
    parse,
    privileged_command,
    split_options,
    translate,
)

ROOT = Path(__file__).resolve().parents[2]
WRAPPER = ROOT / "systemd" / "mount.kafkafs"
LOG, MNT = "/var/lib/kafka/data", "/mnt/kafka"


def test_fstab_line_read_only() -> None:
    # /var/lib/kafka/data  /mnt/kafka  fuse.kafkafs  ro,allow_other,_netdev  0 0
    argv = [LOG, MNT, "-o", "ro,allow_other,_netdev", "-t", "fuse.kafkafs"]
    assert translate(argv) == ["mount", "-o", "allow_other", LOG, MNT]


def test_no_options_at_all() -> None:
    assert translate([LOG, MNT]) == ["mount", LOG, MNT]


def test_rw_is_what_mount8_always_sends_so_it_stays_read_only() -> None:
    # `mount -t fuse.kafkafs LOGDIR MNT` and an fstab `defaults` both reach the helper as "-o rw".
    assert translate([LOG, MNT, "-o", "rw"]) == ["mount", LOG, MNT]
    assert translate([LOG, MNT, "-o", "defaults"]) == ["mount", LOG, MNT]


def test_writable_asks_for_rw() -> None:
    assert translate([LOG, MNT, "-o", "rw,writable,allow_other"]) == [
        "mount",
        "--rw",
        "-o",
        "allow_other",
        LOG,
        MNT,
    ]


def test_kafkafs_options_become_flags() -> None:
    argv = [LOG, MNT, "-o", "values=string,config=/etc/kafkafs/a.toml,set=segment.bytes=1048576,set=x=y"]
    assert translate(argv) == [
        "mount",
        "--values",
        "string",
        "--config",
        "/etc/kafkafs/a.toml",
        "--set",
        "segment.bytes=1048576",
        "--set",
        "x=y",
        LOG,
        MNT,
    ]


def test_size_cache_and_list_limit_options() -> None:
    argv = [LOG, MNT, "-o", "cache_dir=/var/cache/kafkafs,list_limit=5000"]
    assert translate(argv) == ["mount", "--cache-dir", "/var/cache/kafkafs", "--list-limit", "5000", LOG, MNT]
    assert translate([LOG, MNT, "-o", "cache_dir="]) == ["mount", "--cache-dir", "", LOG, MNT]  # off


def test_foreground_option_is_not_mount8s_fake_flag() -> None:
    assert translate([LOG, MNT, "-o", "foreground"]) == ["mount", "-f", LOG, MNT]
    request = parse([LOG, MNT, "-f"])
    assert request.fake and translate([LOG, MNT, "-f"]) == ["mount", LOG, MNT]


def test_fuse_options_pass_through_in_order() -> None:
    argv = [LOG, MNT, "-o", "noatime,allow_other,default_permissions,fsname=kafka,max_read=131072"]
    assert translate(argv) == [
        "mount",
        "-o",
        "noatime,allow_other,default_permissions,fsname=kafka,max_read=131072",
        LOG,
        MNT,
    ]


def test_userspace_only_options_are_dropped() -> None:
    opts = "_netdev,nofail,auto,noauto,user,users,nouser,owner,group,user=alice,comment=x,x-systemd.automount"
    assert translate([LOG, MNT, "-o", opts]) == ["mount", LOG, MNT]


def test_flags_anywhere_combined_and_attached() -> None:
    assert translate(["-nv", LOG, "-sofuse_opt", MNT, "-t", "fuse.kafkafs", "-o", "ro"]) == [
        "mount",
        "-o",
        "fuse_opt",
        LOG,
        MNT,
    ]
    request = parse(["-nv", LOG, MNT])
    assert request.verbose and not request.fake


def test_repeated_o_accumulates() -> None:
    assert translate([LOG, MNT, "-o", "allow_other", "-o", "values=base64"]) == [
        "mount",
        "--values",
        "base64",
        "-o",
        "allow_other",
        LOG,
        MNT,
    ]


def test_relative_paths_are_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert translate(["data", "mnt"]) == ["mount", str(tmp_path / "data"), str(tmp_path / "mnt")]


def test_dev_fd_mountpoint_from_mount_fuse3() -> None:
    # The second, unprivileged turn: mount.fuse3 has mounted and passes the open /dev/fuse.
    argv = [
        LOG,
        "/dev/fd/3",
        "-o",
        "ro,allow_other,foreground,subtype=kafkafs,fsname=/var/lib/kafka/data,dev,suid",
    ]
    assert translate(argv) == [
        "mount",
        "-f",
        "-o",
        "allow_other,subtype=kafkafs,fsname=/var/lib/kafka/data,dev,suid",
        LOG,
        "/dev/fd/3",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", []),
        ("a,,b,", ["a", "b"]),
        ('config="/etc/kafka fs/a,b.toml",ro', ["config=/etc/kafka fs/a,b.toml", "ro"]),
    ],
)
def test_split_options(text: str, expected: list[str]) -> None:
    assert split_options(text) == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "missing LOGDIR and MOUNTPOINT"),
        ([LOG], "missing MOUNTPOINT"),
        ([LOG, MNT, "extra"], "unexpected argument 'extra'"),
        ([LOG, ""], "must not be empty"),
        ([LOG, MNT, "-o"], "option -o needs an argument"),
        ([LOG, MNT, "-x"], "unknown option -x"),
        ([LOG, MNT, "--rw"], "unknown option --rw"),
        ([LOG, MNT, "-N", "/proc/1/ns/mnt"], "-N"),
        ([LOG, MNT, "-o", "values=json"], "values=json: expected one of auto, string, base64"),
        ([LOG, MNT, "-o", "values"], "malformed option 'values'"),
        ([LOG, MNT, "-o", "writable=yes"], "malformed option 'writable=yes'"),
        ([LOG, MNT, "-o", "config="], "config= needs a file name"),
        ([LOG, MNT, "-o", "set=segment.bytes"], "expected set=KEY=VALUE"),
        ([LOG, MNT, "-o", "ro,writable"], "contradict"),
        ([LOG, MNT, "-o", "list_limit=many"], "list_limit=many: expected a number"),
        ([LOG, MNT, "-o", 'config="/a'], "unbalanced double quote"),
    ],
)
def test_bad_input(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        translate(argv)


def test_privileged_command_runs_the_helper_again_through_mount_fuse3() -> None:
    request = parse([LOG, MNT, "-o", "ro,allow_other,drop_privileges,setuid=kafkafs,foreground"])
    assert request.privileged
    helper = "/usr/sbin/mount.fuse.kafkafs"
    assert privileged_command(request, "/sbin/mount.fuse3", helper) == [
        "/sbin/mount.fuse3",
        LOG,
        MNT,
        "-t",
        helper,
        "-o",
        "ro,allow_other,drop_privileges,setuid=kafkafs,foreground,nosuid,nodev,default_permissions,subtype=kafkafs,"
        "fsname=/var/lib/kafka/data",
    ]


def test_privileged_command_keeps_explicit_choices() -> None:
    request = parse([LOG, MNT, "-o", "drop_privileges,suid,nodev,subtype=kfs,fsname=k"])
    command = privileged_command(request, "/sbin/mount.fuse3", "/h")
    assert command[-1] == "drop_privileges,suid,nodev,subtype=kfs,fsname=k,ro,default_permissions"
    # a mount as `kafkafs mount` makes it: read-only unless writable (mount(8)'s rw is only its default)
    request = parse([LOG, MNT, "-o", "rw,drop_privileges,writable,default_permissions"])
    assert privileged_command(request, "/sbin/mount.fuse3", "/h")[-1] == (
        "drop_privileges,writable,default_permissions,nosuid,nodev,subtype=kafkafs,fsname=/var/lib/kafka/data"
    )


def test_privileged_command_rejects_what_mount_fuse3_would_mangle() -> None:
    request = parse([LOG, MNT, "-o", 'drop_privileges,config="/etc/a,b.toml"'])
    with pytest.raises(UsageError, match="comma"):
        privileged_command(request, "/sbin/mount.fuse3", "/h")
    with pytest.raises(UsageError, match="values=xml"):
        privileged_command(parse([LOG, MNT, "-o", "drop_privileges,values=xml"]), "/sbin/mount.fuse3", "/h")


def test_the_second_turn_is_not_privileged() -> None:
    # mount.fuse3 strips drop_privileges and setuid= before running the helper again: no loop.
    assert not parse([LOG, "/dev/fd/3", "-o", "allow_other,nosuid,nodev,dev,suid"]).privileged


# main(): exit codes and messages, without exec'ing anything (fake mode) or with a stand-in kafkafs.


@pytest.fixture
def fake_kafkafs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    program = tmp_path / "kafkafs"
    program.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    program.chmod(0o755)
    monkeypatch.setenv("KAFKAFS", str(program))
    return program


def test_main_missing_arguments_is_one_line_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["/usr/sbin/mount.fuse.kafkafs", LOG]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("mount.fuse.kafkafs: missing MOUNTPOINT (usage: mount.kafkafs LOGDIR MOUNTPOINT")


def test_main_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mount.kafkafs", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: mount.kafkafs")


def test_main_fake_prints_and_does_not_run(fake_kafkafs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["/sbin/mount.kafkafs", LOG, MNT, "-f", "-o", "rw,writable"]) == 0
    assert capsys.readouterr().err == f"mount.kafkafs: {fake_kafkafs} mount --rw {LOG} {MNT}\n"


def test_main_fake_privileged(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mount_helper, "find_mount_fuse3", lambda: "/sbin/mount.fuse3")
    assert main(["/usr/sbin/mount.fuse.kafkafs", LOG, MNT, "-fo", "drop_privileges"]) == 0
    err = capsys.readouterr().err
    assert "/sbin/mount.fuse3 /var/lib/kafka/data /mnt/kafka -t /usr/sbin/mount.fuse.kafkafs -o " in err


def test_main_kafkafs_not_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KAFKAFS", str(tmp_path / "absent"))
    assert main(["mount.kafkafs", LOG, MNT]) == EXIT_SYSTEM
    assert "cannot find the kafkafs program" in capsys.readouterr().err


def test_find_kafkafs_next_to_the_helper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KAFKAFS", raising=False)
    monkeypatch.setenv("PATH", "")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "kafkafs").write_text("#!/bin/sh\n")
    (bindir / "kafkafs").chmod(0o755)
    (bindir / "mount.kafkafs").write_text("#!/bin/sh\n")
    sbin = tmp_path / "sbin"
    sbin.mkdir()
    (sbin / "mount.fuse.kafkafs").symlink_to(bindir / "mount.kafkafs")
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    assert mount_helper.find_kafkafs(str(sbin / "mount.fuse.kafkafs")) == str(bindir / "kafkafs")
    assert mount_helper.find_kafkafs(str(tmp_path / "elsewhere" / "mount.kafkafs")) is None


def _run_wrapper(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "KAFKAFS_PYTHON": sys.executable, **env}
    return subprocess.run(
        [str(WRAPPER), *args], env=full_env, capture_output=True, text=True, timeout=30, check=False
    )


def test_wrapper_execs_kafkafs(fake_kafkafs: Path) -> None:
    result = _run_wrapper(LOG, MNT, "-o", "ro,allow_other,values=base64,_netdev", env={})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["mount", "--values", "base64", "-o", "allow_other", LOG, MNT]


def test_wrapper_bad_usage_exit_1(fake_kafkafs: Path) -> None:
    result = _run_wrapper(env={})
    assert result.returncode == EXIT_USAGE
    assert result.stderr.startswith("mount.kafkafs: missing LOGDIR and MOUNTPOINT")
    assert result.stdout == ""


def test_wrapper_without_kafkafs_importable(tmp_path: Path) -> None:
    # A Python without site-packages stands in for a python3 that kafkafs was not installed for; the
    # current directory holds a kafkafs package that must not be picked up (mount runs as root).
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    (tmp_path / "kafkafs").mkdir()
    (tmp_path / "kafkafs" / "__init__.py").write_text("raise SystemExit('imported from the cwd')\n")
    result = subprocess.run(
        [str(WRAPPER), LOG, MNT],
        env={**os.environ, "KAFKAFS_PYTHON": str(python)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == EXIT_SYSTEM
    assert "cannot import kafkafs" in result.stderr
    assert result.stderr.count("\n") == 1


# The drop_privileges round trip, for real: mount.fuse3 mounts, drops every capability, runs the helper
# again on /dev/fd/N, and a stand-in for `kafkafs mount` serves the mount through pyfuse3.

FAKE_DAEMON = """\
import errno, stat, sys
import pyfuse3, trio

args = sys.argv[1:]
fuse_options = set(args[args.index("-o") + 1].split(",")) if "-o" in args else set()
status = [line for line in open("/proc/self/status") if line.startswith(("CapEff", "NoNewPrivs"))]
DATA = ("".join(status) + " ".join(args) + "\\n").encode()


class Ops(pyfuse3.Operations):
    async def getattr(self, inode, ctx=None):
        entry = pyfuse3.EntryAttributes()
        entry.st_ino = inode
        if inode == pyfuse3.ROOT_INODE:
            entry.st_mode = stat.S_IFDIR | 0o755
        elif inode == 2:
            entry.st_mode, entry.st_size = stat.S_IFREG | 0o444, len(DATA)
        else:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return entry

    async def lookup(self, parent, name, ctx=None):
        if parent == pyfuse3.ROOT_INODE and name == b"status":
            return await self.getattr(2)
        raise pyfuse3.FUSEError(errno.ENOENT)

    async def open(self, inode, flags, ctx):
        return pyfuse3.FileInfo(fh=inode)

    async def read(self, fh, off, size):
        return DATA[off : off + size]


pyfuse3.init(Ops(), args[-1], fuse_options)
try:
    trio.run(pyfuse3.main)
finally:
    pyfuse3.close(unmount=False)
"""


def _mount_entry(target: str) -> list[str] | None:
    with open("/proc/self/mountinfo") as mountinfo:
        for line in mountinfo:
            fields = line.split()
            if fields[4] == target:
                return fields
    return None


@pytest.mark.fuse
def test_drop_privileges_round_trip(tmp_path: Path) -> None:
    mount_fuse3 = mount_helper.find_mount_fuse3()
    if os.geteuid() != 0 or mount_fuse3 is None or not os.path.exists("/dev/fuse"):
        pytest.skip("needs root, /dev/fuse and libfuse's mount.fuse3")
    pytest.importorskip("pyfuse3")
    daemon = tmp_path / "kafkafs"
    daemon.write_text(f"#!{sys.executable}\n{FAKE_DAEMON}")
    daemon.chmod(0o755)
    logdir, mnt = tmp_path / "logdir", tmp_path / "mnt"
    logdir.mkdir()
    mnt.mkdir()
    env = {**os.environ, "KAFKAFS": str(daemon), "KAFKAFS_PYTHON": sys.executable}
    opts = "ro,drop_privileges,foreground,values=string"
    process = subprocess.Popen(
        [str(WRAPPER), str(logdir), str(mnt), "-o", opts], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        for _ in range(200):
            entry = _mount_entry(str(mnt))
            if entry is not None or process.poll() is not None:
                break
            time.sleep(0.05)
        assert entry is not None, process.communicate(timeout=5)[1]
        separator = entry.index("-")
        assert entry[separator + 1 : separator + 3] == ["fuse.kafkafs", str(logdir)]
        assert "ro" in entry[5].split(",") and "nosuid" in entry[5].split(",")
        status = (mnt / "status").read_text()
        assert "CapEff:\t0000000000000000" in status
        assert "NoNewPrivs:\t1" in status
        assert re.fullmatch(rf"mount -f --values string -o \S+ {logdir} /dev/fd/\d+", status.splitlines()[-1])
        subprocess.run(["umount", str(mnt)], check=True)
        assert process.wait(timeout=10) == 0
    finally:
        if _mount_entry(str(mnt)) is not None:
            subprocess.run(["umount", "-l", str(mnt)], check=False)
        if process.poll() is None:
            process.kill()
            process.wait()


def test_clean_asks_for_the_background_cleaner_and_needs_writable() -> None:
    assert translate([LOG, MNT, "-o", "writable,clean"]) == ["mount", "--rw", "--clean", LOG, MNT]
    with pytest.raises(UsageError, match="clean needs writable"):
        translate([LOG, MNT, "-o", "clean"])


def test_a_list_value_keeps_its_comma() -> None:
    """review9 R9-4: set=cleanup.policy=compact,delete was split at its comma (FUSE then failed on
    "unknown option delete"). mount(8) hands the helper libmount's double quotes and libfuse's
    backslash escape unchanged (util-linux 2.38, fstab and -o, checked): both keep a comma in a value,
    and the unescaped list is refused with the way to write it."""
    want = ["mount", "--set", "cleanup.policy=compact,delete", "-o", "allow_other", LOG, MNT]
    for text in ('set="cleanup.policy=compact,delete"', r"set=cleanup.policy=compact\,delete"):
        assert translate([LOG, MNT, "-o", f"allow_other,{text}"]) == want
    assert split_options(r'a\\b,c\"d,e\,f') == ["a\\b", 'c"d', "e,f"]
    with pytest.raises(UsageError, match=r'set="cleanup.policy=compact,delete"'):
        translate([LOG, MNT, "-o", "set=cleanup.policy=compact,delete"])
