"""Who holds a log directory's ``.lock``: the one line names the process and says what to do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kafkafs.errors import LogDirLocked
from kafkafs.storage.dirlock import check_not_locked, describe_holder
from kafkafs.storage.logdir import LogDir
from tests.storage.helpers import lock_held


@pytest.fixture
def holder(tmp_path):
    """A process holding ``tmp_path/logs``'s lock (``python hold.py LOGDIR --holder``)."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    with lock_held(logdir, tmp_path, "--holder") as pid:
        yield logdir, pid


def test_a_writer_is_told_which_process_holds_the_lock(holder):
    logdir, pid = holder
    with pytest.raises(LogDirLocked) as raised:
        LogDir(logdir, writable=True)
    message = str(raised.value)
    assert message.startswith(f"{logdir} is locked by another writer: process {pid} (")
    assert f"{logdir} --holder) holds {logdir}/.lock" in message
    assert "stop that writer" in message and "\n" not in message


def test_check_not_locked_takes_nothing(holder, tmp_path):
    logdir, pid = holder
    with pytest.raises(LogDirLocked, match=f"process {pid} "):
        check_not_locked(logdir)
    free = tmp_path / "free"
    free.mkdir()
    check_not_locked(free)  # no .lock at all
    with LogDir(free, writable=True):
        check_not_locked(free)  # held by this very process: no conflict with itself
    assert not (free / ".lock").exists() or (free / ".lock").stat().st_size == 0


def test_describe_holder():
    assert describe_holder(None) == describe_holder(0) == "another process (a broker or kafkafs)"
    me = describe_holder(os.getpid())
    assert me.startswith(f"process {os.getpid()} (")


def test_a_holder_with_newlines_in_its_command_is_named_on_one_line():
    # `python -c "<several lines>"` holding the lock: the error stays one line (SPEC §4)
    import time

    child = subprocess.Popen([sys.executable, "-c", "import time\ntime.sleep(30)\n"])
    try:
        for _ in range(100):  # until the child's /proc cmdline is its own
            if b"sleep" in Path(f"/proc/{child.pid}/cmdline").read_bytes():
                break
            time.sleep(0.05)
        text = describe_holder(child.pid)
        assert "\n" not in text and text.endswith("-c import time time.sleep(30))"), text
    finally:
        child.kill()
        child.wait()


def test_holder_of_and_holder_kind_name_what_holds_the_lock(holder, tmp_path):
    """review26 R26-1: a reader (verify) asks who holds .lock without taking it or raising; the kind names a
    broker by Kafka's main class on its command line, kafkafs by its name, else both."""
    from kafkafs.storage.dirlock import holder_kind, holder_of

    logdir, pid = holder
    assert holder_of(logdir) == pid
    assert holder_of(tmp_path / "nowhere") is None
    assert holder_kind(pid) == holder_kind(0) == "a running broker or writer"
    broker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "kafka.Kafka", "server.properties"])
    kafkafs = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "-m", "kafkafs", "mount", "--rw"])
    try:
        assert _kind_when_started(broker.pid) == "a running broker"
        assert _kind_when_started(kafkafs.pid) == "a running kafkafs writer"
    finally:
        for child in (broker, kafkafs):
            child.kill()
            child.wait()


def _kind_when_started(pid: int) -> str:
    import time

    from kafkafs.storage.dirlock import holder_kind

    for _ in range(100):  # until the child's /proc cmdline is its own
        if b"sleep" in Path(f"/proc/{pid}/cmdline").read_bytes():
            break
        time.sleep(0.05)
    return holder_kind(pid)
