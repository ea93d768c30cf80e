"""A read of /dev/fuse that finds nothing to read does not stop the mount (the hang of 2026-11-27 22:56),
and ``kill -USR1`` makes the daemon write every thread's stack to its log (a hang made diagnosable).

pyfuse3 reads the next request with a blocking read(2), the GIL held, right after trio said /dev/fuse
readable; a request can leave the kernel's queue in between (its process killed while it waited, an
INTERRUPT of a request answered meanwhile). The daemon here is made to meet that at will: a
``sitecustomize`` of the test's has trio say /dev/fuse readable once with nothing in the queue, while
the loop is answering a lookup of ``hang-0`` (the interleaving a killed requester makes by chance).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

#: Imported by the daemon at its start (it is on its PYTHONPATH); does nothing unless HANG_FIRED is set.
HOOK = '''
import os

if os.environ.get("HANG_FIRED"):
    import select

    import trio
    import trio.lowlevel

    from kafkafs.fs import operations

    _real_wait = trio.lowlevel.wait_readable
    _lookup = operations.Operations.lookup
    _state = {"armed": False, "fired": False}

    def _is_fuse(fd):
        try:
            return os.readlink(f"/proc/self/fd/{int(fd)}") == "/dev/fuse"
        except (OSError, TypeError, ValueError):
            return False

    async def wait_readable(fd):
        if _state["fired"] or not _is_fuse(fd):
            return await _real_wait(fd)
        while not _state["armed"]:
            if select.select([fd], [], [], 0)[0]:
                return
            await trio.sleep(0.002)
        _state["fired"] = True  # "readable", with nothing in the queue: the read that follows waits
        open(os.environ["HANG_FIRED"], "w").close()

    async def lookup(self, parent_inode, name, ctx=None):
        if name == b"hang-0" and not _state["armed"]:
            _state["armed"] = True
            await trio.sleep(0.05)  # the loop's waiting reader goes first
        return await _lookup(self, parent_inode, name, ctx)

    trio.lowlevel.wait_readable = wait_readable
    operations.Operations.lookup = lookup
'''


def _without_hook() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HANG_FIRED")}


def test_a_read_of_dev_fuse_that_finds_nothing_does_not_stop_the_mount(mounted, tmp_path, monkeypatch):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(HOOK)
    fired = tmp_path / "fired"
    monkeypatch.setenv("PYTHONPATH", str(hook))
    monkeypatch.setenv("HANG_FIRED", str(fired))
    logdir = tmp_path / "logs"
    logdir.mkdir()
    m = mounted(logdir, "--rw")
    # the look in a process of its own: a lookup never answered must not hang the test
    look = subprocess.Popen(
        [sys.executable, "-c", "import os, sys; print(os.path.exists(sys.argv[1]))", str(m / "hang-0")],
        stdout=subprocess.PIPE, env=_without_hook(),
    )
    try:
        out, _ = look.communicate(timeout=8)
    except subprocess.TimeoutExpired:
        m.stop()  # the daemon's /dev/fuse closes: the look ends
        look.communicate(timeout=10)
        pytest.fail("the lookup was never answered: the loop's read waited for a request that had left the queue")
    assert fired.exists()  # the loop did meet a read with nothing to read
    assert out == b"False\n"
    (m / "t-0").mkdir()  # and serves on
    assert (m / "t-0" / "append").exists()


def test_sigusr1_writes_every_threads_stack_to_the_log_and_the_mount_serves_on(mounted, tmp_path):
    logdir = tmp_path / "logs"
    logdir.mkdir()
    m = mounted(logdir, "--rw")
    assert m.proc is not None
    os.kill(m.proc.pid, signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while "invalidation.py" not in m.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    text = m.log()
    assert "most recent call first" in text and "invalidation.py" in text  # the invalidator's thread too
    assert text.count("Thread 0x") >= 3
    (m / "t-0").mkdir()
    assert (m / "t-0").is_dir()
