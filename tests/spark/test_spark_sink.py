"""writeStream.format("kafkalog") killed in the middle of a micro-batch and restarted: each input row
ends up in the log exactly once (read back with kafka-python)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kafkafs.storage.logdir import LogDir

from .helpers import kafka_python_decode

pytestmark = pytest.mark.spark

# 45-50 s (two Spark jobs, one killed): a crash test, run with -m slow (the default suite stays under 15 min)

ROWS = 400
JOB = Path(__file__).with_name("stream_sink_job.py")

# Loaded by every Python process of the first run (driver, workers): the N-th append of the run
# (counted in a file across processes) announces itself and waits there to be killed.
PAUSE_HOOK = textwrap.dedent(
    """
    import os, time
    if os.environ.get("KAFKAFS_TEST_PAUSE_AT"):
        from kafkafs.storage.log import Log
        _real = Log.append_batches

        def _append(self, data, **kw):
            counter = os.environ["KAFKAFS_TEST_COUNTER"]
            with open(counter, "a+") as f:
                f.write("x")
                f.flush()
                f.seek(0)
                n = len(f.read())
            if n == int(os.environ["KAFKAFS_TEST_PAUSE_AT"]):
                with open(counter + ".paused", "w") as f:
                    f.write(str(os.getpid()))
                while not os.path.exists(counter + ".die"):
                    time.sleep(0.1)
                os._exit(1)
            return _real(self, data, **kw)

        Log.append_batches = _append
    """
)


def _input(path: Path) -> None:
    with LogDir(path, writable=True) as ld:
        log = ld.create_partition("in", 0)
        for a in range(0, ROWS, 50):
            log.append_records([(None, b"k%d" % i, b"row-%d" % i, []) for i in range(a, a + 50)])


def _run(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(JOB), *args], env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _values(logdir: Path) -> list[bytes]:
    return [r[5] for r in kafka_python_decode(logdir)]


@pytest.mark.slow
def test_stream_killed_mid_batch_and_restarted_appends_each_row_once(tmp_path):
    source, target, checkpoint, hook = (tmp_path / n for n in ("in", "out", "checkpoint", "hook"))
    for d in (source, target, hook):
        d.mkdir()
    _input(source)
    (hook / "sitecustomize.py").write_text(PAUSE_HOOK)
    counter = tmp_path / "appends"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", ""), str(Path.cwd())]),
               PYSPARK_PYTHON=sys.executable, KAFKAFS_TEST_PAUSE_AT="2", KAFKAFS_TEST_COUNTER=str(counter))
    args = [str(source), str(target), str(checkpoint)]
    first = _run(args, env)
    paused = Path(str(counter) + ".paused")
    try:
        deadline = time.monotonic() + 240
        while not paused.exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert paused.exists(), first.communicate(timeout=30)[0].decode(errors="replace")[-3000:]
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the driver, its JVM and the Python workers
        first.wait(30)
        Path(str(counter) + ".die").touch()  # and the paused process, if it was not in the group
    # killed in the middle of micro-batch 0 (200 rows): one of its two partitions is in the log
    assert 0 < len(_values(target)) < 200
    env.pop("KAFKAFS_TEST_PAUSE_AT")
    second = _run(args, env)
    out, _ = second.communicate(timeout=300)
    assert second.returncode == 0, out.decode(errors="replace")[-3000:]
    values = _values(target)
    assert sorted(values) == sorted(b"row-%d" % i for i in range(ROWS))
    assert not list((checkpoint / "kafkalog-sink").glob("pending"))
