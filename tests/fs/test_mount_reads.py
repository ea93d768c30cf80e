"""The mount's reads: its read-ahead window is raised so that a sequential reader of ``records.jsonl``
gets 1 MiB requests (FUSE's max) instead of 128-256 KiB ones; each costs pyfuse3 about the same."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kafkafs.fs.mount import READ_AHEAD_KB


def test_a_mount_reads_ahead_a_mebibyte(mounted, logdir_copy):
    m = mounted(logdir_copy)
    dev = os.stat(m.path).st_dev
    setting = Path(f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb")
    if not os.access(setting, os.W_OK):
        pytest.skip("this user may not set a device's read-ahead")
    assert int(setting.read_text()) == READ_AHEAD_KB == 1024


def test_o_realtime_loop_runs_the_fuse_loop_before_the_daemons_other_threads(mounted, logdir_copy):
    # issue 25: the loop waited for a core 0.5-0.8 s of a 1.5-1.8 s first cat, the reader with it
    import resource

    from kafkafs.fs.mount import LOOP_PRIORITY

    if os.geteuid() != 0 and resource.getrlimit(resource.RLIMIT_RTPRIO)[0] < LOOP_PRIORITY:
        pytest.skip("this user may not take a real-time priority")
    m = mounted(logdir_copy, "-o", "realtime_loop")
    for name in os.listdir(m.path):  # the workers and the render threads start
        if (m.path / name / "records.jsonl").exists():
            (m.path / name / "records.jsonl").read_bytes()
    pid = m.proc.pid
    assert os.sched_getscheduler(pid) & ~os.SCHED_RESET_ON_FORK == os.SCHED_RR  # the main thread: the loop
    assert os.sched_getparam(pid).sched_priority == LOOP_PRIORITY
    others = [int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid]
    assert len(others) > 3
    policies = {}
    for tid in others:
        try:
            policies[tid] = os.sched_getscheduler(tid)
        except ProcessLookupError:  # a thread that ended meanwhile
            pass
    assert set(policies.values()) == {os.SCHED_OTHER}, policies


def test_by_default_the_fuse_loop_keeps_the_normal_policy(mounted, logdir_copy):
    m = mounted(logdir_copy)
    assert any((m.path / name / "records.jsonl").exists() for name in os.listdir(m.path))  # it serves
    assert os.sched_getscheduler(m.proc.pid) & ~os.SCHED_RESET_ON_FORK == os.SCHED_OTHER


_NO_ROOT_CACHE = """
import sys
from kafkafs.fs.tree import root

attr = root.Root.attr
root.Root.attr = lambda self: attr(self)._replace(timeout=0.0)  # the kernel keeps no attribute of the root
from kafkafs.cli import main

sys.exit(main(sys.argv[1:]))
"""


def _fuse_connection(mountpoint: Path) -> str | None:
    """The mount's FUSE connection number, from /proc/self/mountinfo (no stat of the mount itself)."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == str(mountpoint):
            return fields[2].split(":")[1]
    return None


def test_the_mount_never_stats_its_own_mountpoint_on_its_loop(logdir_copy, tmp_path):
    """Once mounted, the daemon sets the read-ahead of its device. It used to stat the mountpoint for
    the device number on the loop that answers the mount's requests: when the kernel no longer kept the
    root's attributes (after their timeout, on a loaded machine), that stat waited for the loop itself
    and the mount hung for good. Here the kernel never keeps them, so that stat always deadlocked. The
    test watches the daemon's log, never the mount, so that a hung mount cannot hang the test."""
    import subprocess
    import sys
    import time

    root_dir = Path(__file__).resolve().parents[2]
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", _NO_ROOT_CACHE, "mount", str(logdir_copy), str(mnt), "-f"],
                            cwd=root_dir, stderr=subprocess.PIPE, text=True)
    said = []
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 60
        os.set_blocking(proc.stderr.fileno(), False)
        while time.monotonic() < deadline and not any(" mounted " in line for line in said):
            line = proc.stderr.readline()
            if line:
                said.append(line)
            elif proc.poll() is not None:
                break
            else:
                time.sleep(0.05)
        assert any(" mounted " in line for line in said), said  # the loop got past the read-ahead step
        assert sorted(os.listdir(mnt))  # and answers
    finally:
        connection = _fuse_connection(mnt)
        if connection is not None and proc.poll() is None and not any(" mounted " in line for line in said):
            try:  # a hung mount: abort its connection so that nothing waits on it
                Path(f"/sys/fs/fuse/connections/{connection}/abort").write_text("1")
            except OSError:
                pass
        subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)


def test_cat_of_every_records_jsonl_in_glob_order(mounted, tmp_path):
    """``cat MNT/*/records.jsonl`` (the shell's glob: by name, t-10 before t-2): each next partition is
    opened, and its file's start rendered, while the one before is read (Partitions.reading_to_end);
    what cat prints is every partition's records, in that order, the first time as the second."""
    import subprocess

    from kafkafs.storage.logdir import LogDir

    from .conftest import SMALL_SEGMENTS, expected_jsonl, sample_records

    logdir = tmp_path / "logs"
    logdir.mkdir()
    with LogDir(logdir, SMALL_SEGMENTS, writable=True) as d:
        for p in (0, 1, 2, 3, 10):
            log = d.create_partition("t", p)
            for start in range(0, 200, 20):
                log.append_records(sample_records(start, 20, seed=p))
    m = mounted(logdir)
    want = b"".join(expected_jsonl(logdir, f"t-{p}") for p in (0, 1, 10, 2, 3))
    for _ in range(2):
        got = subprocess.run(f"cat {m.path}/*/records.jsonl", shell=True, capture_output=True, check=True).stdout
        assert got == want
