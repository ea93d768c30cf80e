"""The mount daemon always ends, within a bounded time, whatever it was doing when its FUSE loop stopped
(SPEC §3: SIGTERM unmounts cleanly; §6: a systemd stop must be clean).

Found by suite8 at load 17 (test_clean_opt_in hung pytest): the daemon looked at its own mount point
(the stat that tells it the mount answers) from a thread of its own. When the loop stopped before it
answered that stat (the 30 s start timeout at nice 19, or a kill), the kernel waited for an answer
only the stopped loop could give, the thread waited for the kernel, and the process could never exit:
trio waited for the thread forever, and a SIGKILL left a zombie whose last thread no signal could end
(its /dev/fuse descriptor never closed, so the kernel never gave up on the request either).

The daemon here is the real ``kafkafs mount -f`` in a child process, with one change made by the
test: its answer to GETATTR of the mount's root is slow (``_SLOW_ROOT``), which holds the daemon's
own start-up stat in flight for as long as the test needs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fs.conftest import ROOT

# the real command, with GETATTR of the root inode answered only after DELAY seconds (and the
# daemon's start-up timeout set to TIMEOUT seconds)
_SLOW_ROOT = r"""
import sys, trio
marker, delay, timeout, *argv = sys.argv[1:]
from kafkafs.fs import mount as mount_module
from kafkafs.fs.operations import Operations
real = Operations.getattr
async def getattr(self, inode, ctx=None):
    if inode == 1:
        open(marker, "a").close()
        await trio.sleep(float(delay))
    return await real(self, inode, ctx)
Operations.getattr = getattr
mount_module.ANSWER_TIMEOUT = float(timeout)
from kafkafs.cli import main
sys.exit(main(argv))
"""


def _mounted(path: Path) -> bool:
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == str(path) for line in f)


class SlowRoot:
    """A foreground mount whose root answers GETATTR after ``delay`` seconds."""

    def __init__(self, logdir: Path, tmp_path: Path, delay: float, timeout: float = 30.0) -> None:
        self.mnt = tmp_path / "mnt"
        self.mnt.mkdir()
        self.marker = tmp_path / "getattr-of-root-asked"
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        args = ["mount", "-f", "--cache-dir", str(tmp_path / "cache"), str(logdir), str(self.mnt)]
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SLOW_ROOT, str(self.marker), str(delay), str(timeout), *args],
            env=env, stderr=subprocess.PIPE, cwd=str(ROOT),
        )

    def wait_for_own_stat(self, timeout: float = 60) -> None:
        """Until the daemon's own stat of its mount point is being answered (slowly)."""
        deadline = time.monotonic() + timeout
        while not self.marker.exists():
            assert self.proc.poll() is None, self.proc.stderr.read().decode() if self.proc.stderr else ""
            assert time.monotonic() < deadline, "the daemon never looked at its mount point"
            time.sleep(0.01)

    def ended_within(self, seconds: float) -> bool:
        try:
            self.proc.wait(timeout=seconds)
            return True
        except subprocess.TimeoutExpired:
            return False

    def stderr(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode(errors="replace")

    def close(self) -> None:
        """Whatever happened: no process and no mount left. A daemon stuck as before the fix can only be
        freed by aborting its FUSE connection (``umount -f``, root)."""
        if self.proc.poll() is None:
            self.proc.kill()
            if not self.ended_within(5):
                subprocess.run(["umount", "-f", "-l", str(self.mnt)], capture_output=True)
                self.proc.wait(timeout=30)
        if _mounted(self.mnt):
            subprocess.run(["fusermount3", "-uz", str(self.mnt)], capture_output=True)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


@pytest.fixture
def slow_root(built_logdir, tmp_path):
    made: list[SlowRoot] = []

    def make(delay: float, timeout: float = 30.0) -> SlowRoot:
        made.append(SlowRoot(built_logdir, tmp_path, delay, timeout))
        return made[-1]

    yield make
    for m in made:
        m.close()


def test_a_start_that_times_out_ends_and_unmounts(slow_root):
    """The mount does not answer within the start-up timeout: one error line, exit 1, nothing mounted.
    Before: the daemon never exited (trio waited for the thread whose stat nobody would answer)."""
    m = slow_root(delay=8, timeout=1)
    m.wait_for_own_stat()
    assert m.ended_within(20), "the daemon did not end after its start timed out"
    err = m.stderr()
    assert m.proc.returncode == 1, err
    assert "did not answer within 1 s" in err and "Traceback" not in err, err
    assert not _mounted(m.mnt)


def test_sigkill_with_its_own_stat_in_flight_ends_the_daemon(slow_root):
    """SIGKILL while the daemon's own stat of its mount point waits for an answer: the process ends
    (it leaves a dead mount, as any killed FUSE daemon does, which ``fusermount3 -uz`` clears). Before:
    an unkillable zombie until the connection was aborted by hand."""
    m = slow_root(delay=60)
    m.wait_for_own_stat()
    m.proc.send_signal(signal.SIGKILL)
    assert m.ended_within(10), "a killed daemon did not end: one of its threads waits for its own mount"


def test_sigterm_with_its_own_stat_in_flight_stops_at_once(slow_root):
    """SIGTERM before the mount answered its own stat: the daemon stops, unmounts and exits 0 without
    waiting for that answer. Before: it waited for the answer (here a minute; forever if the loop had
    stopped)."""
    m = slow_root(delay=60)
    m.wait_for_own_stat()
    m.proc.send_signal(signal.SIGTERM)
    assert m.ended_within(15), "SIGTERM did not stop the daemon"
    err = m.stderr()
    assert m.proc.returncode == 0 and "Traceback" not in err, err
    assert not _mounted(m.mnt)
