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


# the real command, with changes made by the test: a lookup of "die-now" raises out of the FUSE loop (an
# internal error of the loop, not a signal); a page invalidation of the inode GATES/arm names waits at the
# kernel's door until GATES/go exists (so that it is sent while a read of that file holds its page); and
# while GATES/slowread exists, a read waits on the loop (as one does for a span another thread renders)
_DYING_LOOP = r"""
import os, sys, time
gates, *argv = sys.argv[1:]
import pyfuse3
from kafkafs.fs.operations import Operations
real_lookup = Operations.lookup
async def lookup(self, parent_inode, name, ctx=None):
    if name == b"die-now":
        raise RuntimeError("an internal error of the FUSE loop (the test's)")
    return await real_lookup(self, parent_inode, name, ctx)
Operations.lookup = lookup
real_invalidate = pyfuse3.invalidate_inode
def armed_for():
    try:
        with open(os.path.join(gates, "arm")) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None
def invalidate_inode(ino, attr_only=False):
    if not attr_only and ino == armed_for():
        open(os.path.join(gates, "invalidating"), "a").close()
        while not os.path.exists(os.path.join(gates, "go")):
            time.sleep(0.01)
    return real_invalidate(ino, attr_only)
pyfuse3.invalidate_inode = invalidate_inode
import trio
from kafkafs.fs import operations
real_read = Operations.read
async def read(self, fh, off, size):
    if os.path.exists(os.path.join(gates, "slowread")):  # taken by the loop, waiting on it (as read_soon does)
        open(os.path.join(gates, "reading"), "a").close()
        await trio.sleep_forever()
    return await real_read(self, fh, off, size)
Operations.read = operations._handler()(read)
from kafkafs.cli import main
sys.exit(main(argv))
"""

# a reader: opens FILE while the mount answers, learns its size when GATES/stat exists, then reads that
# much when GATES/read exists (a read within the size it knows: the kernel asks for the pages alone)
_READER = r"""
import os, sys, time
path, gates = sys.argv[1:]
def gate(name):
    while not os.path.exists(os.path.join(gates, name)):
        time.sleep(0.01)
fd = os.open(path, os.O_RDONLY)
open(os.path.join(gates, "opened"), "a").close()
gate("stat")
size = os.fstat(fd).st_size
open(os.path.join(gates, "statted"), "a").close()
gate("read")
try:
    print("read", len(os.pread(fd, size, 0)), flush=True)
except OSError as exc:
    print("error", exc.errno, flush=True)
"""


def _wait_for(check, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        time.sleep(0.02)


def _abort_connection(device: str | None) -> None:
    """Free a daemon stuck in the kernel: abort its FUSE connection through fusectl, mounted in a mount
    namespace of its own (nothing changes in the machine's mount table)."""
    if device is None:
        return
    minor = device.split(":")[1]
    script = f"mount -t fusectl none /sys/fs/fuse/connections && echo 1 > /sys/fs/fuse/connections/{minor}/abort"
    subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, timeout=30)


def test_a_loop_that_dies_of_an_error_ends_with_a_page_invalidation_sent_while_a_read_is_queued(logdir_copy, tmp_path):
    """hang10's leftover: the FUSE loop dies of an error (not a signal) while a reader's request waits in
    the kernel, unread, and the invalidator sends a page invalidation of that file: the invalidation
    waits for the page the read holds locked, the read for a loop that is gone, and the daemon, whose
    thread the kernel holds, never exits (nor can it be killed) until its connection is aborted by hand.
    Now the loop's death answers what is queued (refused) until the invalidator has stopped: the daemon
    ends and unmounts, the reader gets an error."""
    _loop_death_with_a_read(logdir_copy, tmp_path, taken=False)


def test_a_loop_that_dies_of_an_error_ends_with_a_page_invalidation_sent_while_a_read_it_took_is_cancelled(
    logdir_copy, tmp_path
):
    """As above, with the read taken by the loop and waiting on it when it died: the loop's death cancels
    its handler, which answered nothing, so the page stayed locked until the connection closed, and the
    invalidation waited for it. A handler cancelled (the mount stopping) now answers ENOTCONN."""
    _loop_death_with_a_read(logdir_copy, tmp_path, taken=True)


def _loop_death_with_a_read(logdir_copy, tmp_path, *, taken: bool) -> None:
    from kafkafs.fs.mount_probe import mounted_device
    from kafkafs.storage.logdir import LogDir

    gates = tmp_path / "gates"
    gates.mkdir()
    for segment in (logdir_copy / "events-3").glob("*.log"):  # written long ago: read through the page cache
        os.utime(segment, (time.time() - 3600, time.time() - 3600))
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    log_path = tmp_path / "mount.log"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    args = ["mount", "-f", "--cache-dir", str(tmp_path / "cache"), str(logdir_copy), str(mnt)]
    children: list[subprocess.Popen] = []
    device = None
    with open(log_path, "wb") as log:
        daemon = subprocess.Popen([sys.executable, "-c", _DYING_LOOP, str(gates), *args], env=env, stderr=log, cwd=str(ROOT))
    try:
        _wait_for(lambda: mounted_device(str(mnt)) is not None and b"mounted" in log_path.read_bytes(), "mounted")
        device = mounted_device(str(mnt))
        reader = subprocess.Popen([sys.executable, "-c", _READER, str(mnt / "events-3" / "records.jsonl"), str(gates)],
                                  stdout=subprocess.PIPE, text=True)
        children.append(reader)
        _wait_for(lambda: (gates / "opened").exists(), "the reader opened records.jsonl")
        (gates / "arm").write_text(str(os.stat(mnt / "events-3" / "records.jsonl").st_ino))

        def appended_and_invalidating() -> bool:  # records arrive until the invalidator sends for them
            with LogDir(logdir_copy, writable=True) as logdir:
                logdir.log("events-3").append_records([(1_763_700_000_000, None, b"more", ())])
            time.sleep(0.2)
            return (gates / "invalidating").exists()

        _wait_for(appended_and_invalidating, "a page invalidation of records.jsonl")
        (gates / "stat").touch()
        _wait_for(lambda: (gates / "statted").exists(), "the reader's fstat")
        if taken:
            (gates / "slowread").touch()
            (gates / "read").touch()
            _wait_for(lambda: (gates / "reading").exists(), "the read taken by the loop")
        children.append(subprocess.Popen(["stat", str(mnt / "die-now")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        _wait_for(lambda: b"the FUSE loop stopped" in log_path.read_bytes(), "the loop's death", 15)
        (gates / "read").touch()  # queued in the kernel: the loop that would read it is gone
        time.sleep(0.5)
        (gates / "go").touch()  # the invalidation goes in, while the read holds its page
        try:
            daemon.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pytest.fail("the daemon did not end after its FUSE loop died: " + log_path.read_text(errors="replace")[-2000:])
        out, _ = reader.communicate(timeout=20)
        assert out.startswith("error"), out
        assert not _mounted(mnt)
        err = log_path.read_text(errors="replace")
        assert "the FUSE loop stopped" in err and "an internal error of the FUSE loop" in err
        assert daemon.returncode == 1, err
    finally:
        if daemon.poll() is None:
            daemon.kill()
            try:
                daemon.wait(timeout=5)
            except subprocess.TimeoutExpired:
                _abort_connection(device)
                daemon.wait(timeout=30)
        for child in children:
            if child.poll() is None:
                child.kill()
            child.wait(timeout=30)
        if _mounted(mnt):
            subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)
