"""Ctrl-C and SIGTERM (review12 R12-9): while a command starts, no traceback (exit 130); `produce`
stopped by either says what it appended, and that is what the log holds."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from kafkafs import __main__ as entry
from kafkafs import cli
from kafkafs.outcome import EXIT_INTERRUPTED
from kafkafs.storage.logdir import LogDir

ROOT = Path(__file__).resolve().parents[2]


def test_ctrl_c_while_the_command_line_is_built_is_quiet(monkeypatch, capsys) -> None:
    def interrupted():
        raise KeyboardInterrupt  # where a Ctrl-C during start-up's imports lands

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["verify", "/nonexistent"]) == 130
    assert capsys.readouterr().err == ""


#: Said on the descriptor $STARTED_FD as the command line's import begins (an audit hook): the moment from
#: which the start is kafkafs's. Before it the interpreter's own start runs (with a development install,
#: site's editable finder: 10-60 ms on a busy machine), where a Ctrl-C is Python's, whatever the program.
_ANNOUNCE = """\
import os, sys
def _announce(event, args, fd=int(os.environ.pop("STARTED_FD")), said=[]):
    if event == "import" and args[0] == "kafkafs.cli" and not said:
        said.append(os.write(fd, b"!"))
sys.addaudithook(_announce)
"""


def _console_script() -> str:
    """What pip writes as the ``kafkafs`` console script, for pyproject's entry point."""
    entry_point = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["kafkafs"]
    module, _, function = entry_point.partition(":")
    return f"import sys\nfrom {module} import {function}\nif __name__ == '__main__':\n    sys.exit({function}())\n"


_AS_MODULE = "import runpy\nrunpy.run_module('kafkafs', run_name='__main__', alter_sys=True)\n"  # python -m kafkafs


@pytest.mark.parametrize("how, after_ms", [("script", 0), ("script", 10), ("script", 30), ("script", 60),
                                           ("script", 100), ("-m", 0), ("-m", 30)])
def test_ctrl_c_at_any_moment_of_the_start_is_quiet(tmp_path, how, after_ms) -> None:
    """A Ctrl-C while the console script (or ``python -m kafkafs``) imports the command line, parses,
    opens the log directory or waits for records: exit 130, nothing on stderr. Before, a Ctrl-C while
    ``kafkafs.cli`` was imported (the console script imported it before cli.main could catch anything)
    printed a traceback and died of SIGINT: 0 and 10 ms failed (seen)."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    with LogDir(logdir, writable=True) as d:
        d.create_partition("t", 0)
    script = tmp_path / "kafkafs"
    script.write_text(_ANNOUNCE + (_console_script() if how == "script" else _AS_MODULE))
    started, announce = os.pipe()
    env = dict(os.environ, PYTHONPATH=str(ROOT), STARTED_FD=str(announce))
    consume = subprocess.Popen(
        [sys.executable, str(script), "consume", str(logdir), "t-0", "--follow"], stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, pass_fds=(announce,),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # a terminal's Ctrl-C (see below)
    )
    os.close(announce)
    try:
        assert select.select([started], [], [], 60)[0] and os.read(started, 1) == b"!"
        time.sleep(after_ms / 1000)
        consume.send_signal(signal.SIGINT)
        _, err = consume.communicate(timeout=60)
    finally:
        os.close(started)
        if consume.poll() is None:
            consume.kill()
            consume.wait()
    assert (consume.returncode, err.decode()) == (130, ""), err.decode()


def test_the_entry_point_exits_as_the_command_line_does() -> None:
    assert entry.EXIT_INTERRUPTED == EXIT_INTERRUPTED


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


MARKER = b'{"version":0,"brokerEpoch":10}'  # what a KRaft broker's clean stop leaves


@pytest.mark.parametrize("signum, code, how", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "SIGTERM"),
                                                (signal.SIGHUP, 129, "SIGHUP")])
def test_produce_stopped_between_batches_puts_the_marker_back(tmp_path, signum, code, how) -> None:
    """review22 R22-3: `tail -f app.log | kafkafs produce DIR t-0` ends by a signal; what it appended is
    whole batches, so the directory closes as after the end of input: the broker's marker back, byte for
    byte (else a broker recovers every log and elects leaders uncleanly). Failed before (seen): no marker
    after SIGINT/SIGTERM; SIGHUP killed it with no message (exit -1)."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    with LogDir(logdir, writable=True) as d:
        d.create_partition("t", 0)
    (logdir / ".kafka_cleanshutdown").write_bytes(MARKER)
    produce = subprocess.Popen(
        [sys.executable, "-m", "kafkafs", "produce", str(logdir), "t-0"],
        stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=str(ROOT)), text=True,
        preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL) for s in (signal.SIGINT, signal.SIGHUP)],
    )
    assert produce.stdin is not None
    try:
        produce.stdin.write("line 0\n")
        produce.stdin.flush()
        deadline = time.monotonic() + 60
        while _records(logdir, "t-0") < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        produce.send_signal(signum)
        _, err = produce.communicate(timeout=60)
    finally:
        if produce.poll() is None:
            produce.kill()
            produce.wait()
    assert (produce.returncode, err.splitlines()) == (code, [
        f"kafkafs: {how}: the record before it was appended to t-0, at offsets 0..0 (do not send them again)"])
    assert (logdir / ".kafka_cleanshutdown").read_bytes() == MARKER
    assert _records(logdir, "t-0") == 1
