"""Looking at the daemon's own mount point, from a child process: never from a thread of the daemon.

A stat of the mount point is a FUSE request that only the daemon's loop can answer. Made by one of the
daemon's own threads, it ties the process to that answer: if the loop stops before it answers (a start
that timed out, a signal, an error), trio waits for the thread for ever; and once the kernel has handed
the request to the loop, the waiting thread cannot be killed either, so a SIGKILL leaves a zombie that
keeps ``/dev/fuse`` open, and the kernel, waiting for the answer, never gives up on the request
(suite8's hang: only aborting the connection by hand ended it). A child process that waits instead
ties nothing: the daemon may stop, unmount and exit at any moment; closing its ``/dev/fuse`` descriptor
ends the child's request (ENOTCONN), and the child with it.

Used by the thread that runs the mount's trio loop (:meth:`MountProbe.stat`) and then by the one that
takes the mount down (:meth:`MountProbe.reap`).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

import trio

from .mountinfo import find_mount

__all__ = ["MountProbe", "mounted_device"]

log = logging.getLogger("kafkafs.fs")

#: What the child runs: for each line it reads, the device number of the path, or "!" and why it could
#: not stat it, on a line of its own.
_PROBE = (
    "import os, sys\n"
    "for _ in sys.stdin:\n"
    "    try:\n        said = str(os.stat(sys.argv[1]).st_dev)\n"
    "    except OSError as exc:\n        said = '!' + (exc.strerror or str(exc))\n"
    "    print(said, flush=True)\n"
)
#: Seconds the probes have to end at :meth:`MountProbe.reap` (one may wait for a request of the unmounted daemon).
REAP_TIMEOUT = 5.0
#: Seconds a probe killed at :meth:`MountProbe.reap` has to be collected.
KILLED_TIMEOUT = 1.0


class MountProbe:
    """Stats one path from a child process, started ahead (:meth:`start`, before the mount: its Python
    starts while the mount is made, so a look costs a pipe's round trip more than a stat of our own),
    and reaps every child it started (:meth:`reap`)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._child: subprocess.Popen[bytes] | None = None
        self._children: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        """Start the child (once; :meth:`stat` starts it if need be)."""
        if self._child is None:
            self._child = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _PROBE, self.path],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            )
            self._children.append(self._child)

    async def stat(self) -> int:
        """The device number of the path (as the kernel answers for it now); OSError if it cannot be
        looked at. Cancellable at any moment: the child is then let go (its input ends; reaped later),
        never killed. Its stat may be waiting for this very loop: the loop answers it, or the daemon's
        ``/dev/fuse`` closes and that ends it. A kill could take its request out of the kernel's queue
        after trio said ``/dev/fuse`` readable and before the loop read it: the loop's read then waited
        for the next request (:func:`~.daemon.wake_stuck_reads`; the hang of 2026-11-27 22:56)."""
        self.start()
        child = self._child
        assert child is not None and child.stdin is not None and child.stdout is not None
        said = b""
        try:
            os.write(child.stdin.fileno(), b"\n")
            while not said.endswith(b"\n"):
                await trio.lowlevel.wait_readable(child.stdout.fileno())
                chunk = os.read(child.stdout.fileno(), 4096)
                if not chunk:
                    raise OSError(f"cannot look at {self.path}: the probe ended")
                said += chunk
        except BaseException:
            self._child = None
            if child.stdin is not None:
                child.stdin.close()  # it ends once its stat is answered (never waited for here)
            raise
        text = said.decode("utf-8", "replace").strip()
        if text.startswith("!") or not text.isdigit():
            raise OSError(f"cannot look at {self.path}: {text.removeprefix('!') or 'the probe failed'}")
        return int(text)

    def release(self) -> None:
        """No more looks: the child at work ends once it reads the end of its input (waits for nothing;
        :meth:`reap` collects it)."""
        child, self._child = self._child, None
        if child is not None and child.stdin is not None:
            child.stdin.close()

    async def collect(self, timeout: float = REAP_TIMEOUT) -> None:
        """After :meth:`release`, on the loop: collect the children that end within ``timeout`` seconds
        (no zombie for the mount's life); a child still waiting is left to :meth:`reap`."""
        end = trio.current_time() + timeout
        while trio.current_time() < end and any(child.poll() is None for child in self._children):
            await trio.sleep(0.05)
        self._children = [child for child in self._children if child.returncode is None]

    def reap(self, timeout: float = REAP_TIMEOUT) -> None:
        """End the children (each gets an end of input; those whose stat waited for the mount end once
        the daemon's ``/dev/fuse`` is closed, which ends their requests) and wait up to ``timeout``
        seconds in all for them; one still there then is killed."""
        children, self._children, self._child = self._children, [], None
        end = time.monotonic() + timeout
        for child in children:
            for pipe in (child.stdin, child.stdout):
                if pipe is not None:
                    pipe.close()
            try:
                child.wait(timeout=max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                log.warning("a stat of %s from pid %d is still waiting for the mount", self.path, child.pid)
                try:
                    child.wait(timeout=KILLED_TIMEOUT)
                except subprocess.TimeoutExpired:
                    pass  # a zombie until the daemon exits


def mounted_device(path: str) -> str | None:
    """The ``major:minor`` of the FUSE mount on top at ``path`` (from ``/proc/self/mountinfo``: the
    mount itself is not touched), or None when no FUSE file system is mounted there."""
    # the folder's own name is not resolved: a stat of it is a request to the mount (which may not answer)
    try:
        entry = find_mount(path)
    except OSError:
        return None
    return entry.device if entry is not None and entry.fstype.startswith("fuse") else None
