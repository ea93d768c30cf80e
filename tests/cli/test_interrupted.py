"""Ctrl-C and SIGTERM (review12 R12-9): while a command starts, no traceback (exit 130); `produce`
stopped by either says what it appended, and that is what the log holds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkafs import cli
from kafkafs.storage.logdir import LogDir

ROOT = Path(__file__).resolve().parents[2]


def test_ctrl_c_while_the_command_line_is_built_is_quiet(monkeypatch, capsys) -> None:
    def interrupted():
        raise KeyboardInterrupt  # where a Ctrl-C during start-up's imports lands

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["verify", "/nonexistent"]) == 130
    assert capsys.readouterr().err == ""


def _records(logdir: Path, name: str) -> int:
    with LogDir(logdir) as d:
        return sum(1 for _ in d.log(name).records()) if name in d.partition_names() else 0


@pytest.mark.parametrize("signum, code, how", [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "interrupted")])
def test_produce_stopped_says_what_it_appended(tmp_path, signum, code, how) -> None:
    logdir = tmp_path / "logs"
    logdir.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    produce = subprocess.Popen(
        [sys.executable, "-m", "kafkafs", "produce", str(logdir), "t-0"],
        stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
        # a runner started in the background (`cmd &` without job control) hands its children SIGINT ignored,
        # and Python then keeps it ignored (as a Unix program should): the test wants a terminal's Ctrl-C
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert produce.stdin is not None
    try:
        deadline = time.monotonic() + 60
        while _records(logdir, "t-0") < 3000 and time.monotonic() < deadline:
            produce.stdin.write("".join(f"line {i}\n" for i in range(1000)))  # a chunk: one batch
            produce.stdin.flush()
            time.sleep(0.05)
        produce.send_signal(signum)
        _, err = produce.communicate(timeout=60)
    finally:
        if produce.poll() is None:
            produce.kill()
            produce.wait()
    assert produce.returncode == code
    held = _records(logdir, "t-0")
    assert held >= 3000
    assert err.splitlines() == [
        "kafkafs: created partition t-0",
        f"kafkafs: {how}: the {held} records before it were appended to t-0, at offsets 0..{held - 1} "
        "(do not send them again)",
    ]
