"""Holders: which processes still hold a descriptor of an open ``append`` file, from ``/proc``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from kafkafs.fs.tree.holders import Holders

if not os.path.isdir("/proc/self/fd") or not sys.platform.startswith("linux"):
    pytest.skip("needs Linux /proc", allow_module_level=True)


@pytest.fixture
def append(tmp_path):
    path = tmp_path / "events-3" / "append"
    path.parent.mkdir()
    path.write_bytes(b"")
    return path


def _wait_until(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def _holds(pid: int, path) -> bool:
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(path) for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


def test_the_opener_its_children_and_those_seen_before(append):
    ino = os.stat(append).st_ino
    # the opener (a shell) does not hold the file; its child, which opened it, does
    shell = subprocess.Popen(["bash", "-c", f"sleep 30 >> '{append}' & wait"], start_new_session=True)
    try:
        _wait_until(lambda: any(_holds(int(p), append) for p in os.listdir("/proc") if p.isdigit()))
        holders = Holders(shell.pid, ino, "events-3/append")
        assert holders.any()
        assert not Holders(shell.pid, ino + 1, "events-3/append").any()  # another file of that name
        assert not Holders(shell.pid, ino, "events-4/append").any()
        child = next(iter(holders.seen))
        os.kill(shell.pid, signal.SIGKILL)  # the child outlives it, re-parented away from the opener
        shell.wait()
        assert holders.any() and holders.seen == {child}
        os.kill(child, signal.SIGKILL)
        _wait_until(lambda: not _holds(child, append))
        assert not holders.any()  # nobody (every process looked at: the opener is gone)
    finally:
        try:
            os.killpg(shell.pid, signal.SIGKILL)
        except ProcessLookupError:  # the group is gone: both killed above and reaped (the child by init)
            pass
        shell.wait()


def test_a_process_that_closed_its_descriptor_holds_nothing(append):
    """The common last close: the opener closed its descriptor and is still there; no child holds one."""
    ino = os.stat(append).st_ino
    script = f"exec 3>> '{append}'; echo opened; exec 3>&-; echo closed; exec sleep 30"
    shell = subprocess.Popen(["bash", "-c", script], stdout=subprocess.PIPE)
    try:
        assert shell.stdout.readline() == b"opened\n"
        assert shell.stdout.readline() == b"closed\n"
        assert not Holders(shell.pid, ino, "events-3/append").any()
    finally:
        shell.kill()
        shell.wait()


def test_a_holder_whose_opener_ended_before_anyone_looked(append):
    """The opener exited (a zombie, not reaped yet) and its child, re-parented, still holds the file: every
    process is looked at."""
    ino = os.stat(append).st_ino
    shell = subprocess.Popen(["bash", "-c", f"sleep 30 >> '{append}' & echo $!"], stdout=subprocess.PIPE)
    child = int(shell.stdout.readline())
    try:
        _wait_until(lambda: _holds(child, append))
        _wait_until(lambda: open(f"/proc/{shell.pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z")
        assert Holders(shell.pid, ino, "events-3/append").any()
    finally:
        os.kill(child, signal.SIGKILL)
        shell.wait()
