"""fs/mount_probe: the daemon's look at a path from a child process (its device number, or why not;
cancelled at any moment, reaped later), and the mount table's device of a FUSE mount."""

from __future__ import annotations

import os

import pytest
import trio

from kafkafs.fs.mount_probe import MountProbe, mounted_device


def test_a_probe_says_the_device_number(tmp_path):
    probe = MountProbe(str(tmp_path))
    assert trio.run(probe.stat) == os.stat(tmp_path).st_dev
    probe.reap(timeout=5)
    assert probe._children == []


def test_a_probe_that_cannot_look_says_why(tmp_path):
    probe = MountProbe(str(tmp_path / "missing"))
    with pytest.raises(OSError, match="cannot look at .*missing: No such file or directory"):
        trio.run(probe.stat)
    probe.reap(timeout=5)


def test_a_cancelled_probe_is_let_go_not_killed(tmp_path, monkeypatch):
    # a child whose stat takes its time (the mount is slow to answer): cancelled, it is not killed (a kill
    # can take its request out of the kernel's queue after the loop was told /dev/fuse is readable, and
    # the loop's read then waits for the next request: the hang of 2026-11-27 22:56); its input ends
    monkeypatch.setattr("kafkafs.fs.mount_probe._PROBE", "import sys, time; sys.stdin.readline(); time.sleep(0.5); sys.stdin.read()")
    probe = MountProbe(str(tmp_path))

    async def main() -> None:
        with trio.move_on_after(0.3):
            await probe.stat()
        await probe.collect(10.0)

    children = probe._children
    trio.run(main)
    assert probe._child is None  # the next look starts another
    assert [child.returncode for child in children] == [0]  # it ended by itself, at the end of its input
    assert probe._children == []  # and was collected


def test_a_probe_that_never_ends_is_killed_at_the_reap(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr("kafkafs.fs.mount_probe._PROBE", "import signal, time; signal.signal(signal.SIGPIPE, signal.SIG_IGN); time.sleep(60)")
    probe = MountProbe(str(tmp_path))

    async def main() -> None:
        with trio.move_on_after(0.3):
            await probe.stat()

    trio.run(main)
    child = probe._children[0]
    probe.reap(timeout=0.5)
    assert child.returncode == -9 and probe._children == []
    assert "is still waiting for the mount" in caplog.text


def test_one_child_answers_every_look_and_ends_with_its_input(tmp_path):
    probe = MountProbe(str(tmp_path))
    probe.start()

    async def main() -> list[int]:
        return [await probe.stat() for _ in range(3)]

    assert trio.run(main) == [os.stat(tmp_path).st_dev] * 3
    child = probe._children[0]
    assert len(probe._children) == 1
    probe.reap(timeout=10)
    assert child.returncode == 0


def test_no_fuse_mount_has_no_device(tmp_path):
    assert mounted_device(str(tmp_path)) is None
    assert mounted_device("/proc") is None  # mounted, but not FUSE


def test_the_device_of_a_fuse_mount(ro_mount):
    dev = mounted_device(str(ro_mount.path))
    st = os.stat(ro_mount.path)
    assert dev == f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"


def test_a_released_probe_ends_by_itself(tmp_path):
    probe = MountProbe(str(tmp_path))
    assert trio.run(probe.stat) == os.stat(tmp_path).st_dev
    child = probe._children[0]
    probe.release()
    trio.run(probe.collect, 10.0)
    assert child.returncode == 0 and probe._children == []  # its input ended, and it was collected
