"""A batch write whose driver is killed while it appends (review21 R21-4): verify names what it left,
recover takes it out, so the job appended none of its rows (no Spark needed: the driver's own publish,
killed for real)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest

from kafkafs.cli import main
from kafkafs.spark.write import Stager, staging_root, start_job
from kafkafs.storage.logdir import LogDir

from .conftest import engine_rows

JOB = "job-killed"


def _stage(tmp_path) -> list:
    root = staging_root(str(tmp_path), None)
    start_job(root, JOB)
    stager = Stager(root, JOB, "task-0-0", topic="t", logdir=str(tmp_path))
    n = 30_000
    stager.add(pa.RecordBatch.from_pydict({
        "value": pa.array([b"row-%d" % i for i in range(n)], pa.binary()),
        "partition": pa.array([i % 2 for i in range(n)], pa.int32())}))
    return stager.finish()


def _publish_and_die(tmp_path, files, after_appends: int) -> int:
    """The driver's commit, in a process that SIGKILLs itself as append number ``after_appends`` + 1 starts."""
    script = textwrap.dedent(f"""
        import os, signal, sys
        from kafkafs.spark.publish import commit_staged
        from kafkafs.spark.write import StagedFile
        from kafkafs.storage.config import Settings
        from kafkafs.storage.log import Log
        real, calls = Log.append_batches, [0]
        def dying(self, data, **kw):
            calls[0] += 1
            if calls[0] > {after_appends}:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(self, data, **kw)
        Log.append_batches = dying
        files = [StagedFile(*f) for f in {[(f.topic, f.partition, f.path, f.records, f.batches, f.size) for f in files]!r}]
        commit_staged({str(tmp_path)!r}, files, Settings(), job={JOB!r})
    """)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True).returncode


def test_a_write_killed_while_appending_is_named_by_verify_and_taken_out_by_recover(tmp_path, capsys):
    with LogDir(tmp_path, writable=True) as ld:
        ld.create_partition("t", 0).append_records([(1, None, b"before", [])])
        ld.create_partition("t", 1)
    files = _stage(tmp_path)
    assert sum(f.batches for f in files) >= 4
    assert _publish_and_die(tmp_path, files, after_appends=3) == -9
    rows = [r for r in engine_rows(tmp_path) if r[0] == "t"]
    assert 1 < len(rows) < 30_001, "the kill left part of the job appended"
    capsys.readouterr()
    from kafkafs.errors import InvalidInput
    from kafkafs.spark.publish import commit_staged
    from kafkafs.storage.config import Settings

    with pytest.raises(InvalidInput, match=f"an earlier Spark write \\({JOB}\\) stopped while appending"):
        commit_staged(str(tmp_path), files, Settings(), job="job-next")  # nothing appended after its part

    assert main(["verify", str(tmp_path)]) == 1
    said = capsys.readouterr().out
    line = next(x for x in said.splitlines() if x.startswith(f".kafkafs-staging/{JOB}: "))
    ends = {p: max(r[2] for r in rows if r[1] == p) for p in (0, 1) if any(r[1] == p for r in rows)}
    assert f"t-0: offsets 1..{ends[0]} " in line and "`kafkafs recover` takes it out" in line, said

    assert main(["recover", str(tmp_path)]) == 1
    said = capsys.readouterr().out
    assert f"t-0: took out offsets 1..{ends[0]}" in said, said
    assert "the job appended none of its rows" in said and "1 unfinished Spark write(s) taken out" in said, said
    assert [r[6] for r in engine_rows(tmp_path) if r[0] == "t"] == [b"before"]
    assert not (tmp_path / ".kafkafs-staging").exists()
    assert main(["verify", str(tmp_path)]) == 0
    capsys.readouterr()
    # running the job again appends its rows once
    commit_staged(str(tmp_path), _stage(tmp_path), Settings(), job=JOB)
    assert len([r for r in engine_rows(tmp_path) if r[0] == "t"]) == 30_001
    assert not (tmp_path / ".kafkafs-staging" / JOB / "publishing.json").exists()


def test_a_write_that_fails_or_finishes_leaves_no_intent(tmp_path, monkeypatch):
    from kafkafs.spark.publish import commit_staged
    from kafkafs.storage.config import Settings
    from kafkafs.storage.log import Log

    files = _stage(tmp_path)
    real = Log.append_batches
    calls = [0]

    def failing(self, data, **kw):
        calls[0] += 1
        if calls[0] == 3:
            raise OSError(28, "No space left on device")
        return real(self, data, **kw)

    monkeypatch.setattr(Log, "append_batches", failing)
    with pytest.raises(OSError, match="No space"):
        commit_staged(str(tmp_path), files, Settings(), job=JOB)
    monkeypatch.undo()
    assert not (tmp_path / ".kafkafs-staging" / JOB / "publishing.json").exists()
    assert engine_rows(tmp_path) == []
    commit_staged(str(tmp_path), files, Settings(), job=JOB)
    assert not (tmp_path / ".kafkafs-staging" / JOB / "publishing.json").exists()
    assert len(engine_rows(tmp_path)) == 30_000
