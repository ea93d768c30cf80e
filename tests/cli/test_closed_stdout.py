"""A closed standard output (``kafkafs recover | head -2``) changes neither the work nor the exit code
(SPEC §4), for every command that prints; ``consume`` stops there, exit 0.

The reader is made to go away before the command writes anything: the test closes its end of the
pipe at once, so every write of the command meets EPIPE (``| head`` does the same, only at a moment
that depends on the scheduler: the issue saw 2 runs of 6 exit 0 and the rest 1).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kafkafs.storage.logdir import CLEAN_SHUTDOWN_FILE

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def run_closed(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    """The command with a standard output whose reader has gone."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kafkafs", *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(),
    )
    proc.stdout.close()  # the reader goes before the command prints a thing
    _out, err = proc.communicate(stdin, timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, b"", err)


def run(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkafs", *args], input=stdin, capture_output=True,
                          env=_env(), timeout=120)


def _damaged_demo(root: Path) -> Path:
    root.mkdir(exist_ok=True)
    logdir = root / "logs"
    assert run("demo", str(logdir)).returncode == 0
    for name in ("orders-0", "orders-1", "sensors-0"):
        log = sorted((logdir / name).glob("*.log"))[-1]
        with open(log, "ab") as f:
            f.write(b"\x00\x01garbage that is no batch" * 3)  # an invalid tail: recover cuts it
    return logdir


def test_recover_with_a_closed_stdout_keeps_work_and_exit_code(tmp_path):
    closed = _damaged_demo(tmp_path / "a")
    kept = _damaged_demo(tmp_path / "b")
    expected = run("recover", str(kept))
    assert expected.returncode == 1, expected.stderr  # damage found and repaired
    got = run_closed("recover", str(closed))
    assert got.returncode == expected.returncode, got.stderr.decode()
    # the same warnings, and no "Broken pipe" or traceback
    assert got.stderr == expected.stderr.replace(str(kept).encode(), str(closed).encode()), got.stderr.decode()
    # the work was done all the same: the cut tails are gone, the shutdown is marked clean
    assert (closed / CLEAN_SHUTDOWN_FILE).exists()
    assert run("verify", str(closed)).returncode == 0
    for name in ("orders-0", "orders-1", "sensors-0"):
        a = sorted((closed / name).glob("*.log"))[-1]
        b = sorted((kept / name).glob("*.log"))[-1]
        assert a.stat().st_size == b.stat().st_size
    # and again, with nothing left to repair: 0 both ways
    assert run_closed("recover", str(closed)).returncode == run("recover", str(kept)).returncode == 0


@pytest.mark.parametrize(
    "args",
    [
        ("verify", "{logdir}"),
        ("dump", "{logdir}/orders-0/00000000000000000000.log", "--print-data-log"),
        ("clean", "{logdir}", "--dry-run"),
        ("demo", "{root}/another"),
    ],
    ids=["verify", "dump", "clean", "demo"],
)
def test_every_printing_command_keeps_its_exit_code(tmp_path, args):
    logdir = _damaged_demo(tmp_path)
    argv = [a.format(logdir=logdir, root=tmp_path) for a in args]
    expected = run(*argv)
    if args[0] == "demo":
        import shutil

        shutil.rmtree(tmp_path / "another")
    got = run_closed(*argv)
    assert (got.returncode, got.stderr) == (expected.returncode, expected.stderr), got.stderr.decode()


def test_consume_stops_at_a_closed_stdout(tmp_path):
    logdir = tmp_path / "logs"
    assert run("demo", str(logdir)).returncode == 0
    got = run_closed("consume", str(logdir), "orders")
    assert (got.returncode, got.stderr) == (0, b"")
    # --follow would wait for ever with a reader: without one it ends at the first write
    got = run_closed("consume", str(logdir), "orders-0", "--follow")
    assert (got.returncode, got.stderr) == (0, b"")


def test_guarded_stdout_leaves_a_captured_stdout_alone(capsys):
    from kafkafs.stdout import guarded_stdout

    with guarded_stdout() as raw:
        print("seen")
    assert raw is None
    assert capsys.readouterr().out == "seen\n"


FULL = "kafkafs: error: cannot write standard output: no space left on device"


def _run_to(stdout: str, *args: str) -> subprocess.CompletedProcess:
    """The command with its standard output redirected as a shell does (``> /dev/full``, ``>&-``)."""
    shell = f'exec "$@" {stdout}'
    return subprocess.run(["sh", "-c", shell, "sh", sys.executable, "-m", "kafkafs", *args],
                          capture_output=True, env=_env(), timeout=120)


@pytest.mark.parametrize(
    "args",
    [
        ("verify", "{logdir}"),
        ("dump", "{logdir}/orders-0/00000000000000000000.log", "--print-data-log"),
        ("clean", "{logdir}", "--dry-run"),
        ("groups", "{logdir}"),
        ("transactions", "{logdir}", "--json"),
        ("consume", "{logdir}", "orders"),
    ],
    ids=["verify", "dump", "clean", "groups", "transactions", "consume"],
)
def test_a_report_that_cannot_be_written_is_one_line_and_exit_1(tmp_path, args):
    """review9 R9-6: `kafkafs verify DIR > report` on a full disk was a traceback and exit 120 (consume
    said 'cannot read DIR'); `>&-` (no standard output at all) was an AttributeError for dump, consume,
    groups and transactions. Now a failed write of the output is one line, exit 1; a closed standard
    output is one whose reader has gone (SPEC §4): the work and its exit code as without it."""
    logdir = tmp_path / "logs"
    assert run("demo", str(logdir)).returncode == 0
    argv = [a.format(logdir=logdir) for a in args]
    got = _run_to("> /dev/full", *argv)
    assert (got.returncode, got.stderr.decode().splitlines()) == (1, [FULL]), got.stderr.decode()
    expected = run(*argv)
    got = _run_to(">&-", *argv)
    assert (got.returncode, got.stderr) == (expected.returncode, expected.stderr), got.stderr.decode()


def test_recover_to_a_full_disk_says_it_and_keeps_the_exit_code_of_its_work(tmp_path):
    logdir = _damaged_demo(tmp_path)
    got = _run_to("> /dev/full", "recover", str(logdir))
    assert got.returncode == 1 and FULL in got.stderr.decode().splitlines(), got.stderr.decode()
    assert b"Traceback" not in got.stderr
    assert run("verify", str(logdir)).returncode == 0  # the work was done
    assert _run_to("> /dev/full", "recover", str(logdir)).returncode == 0  # nothing to repair: 0, said or not


def test_produce_without_a_standard_input_is_one_line(tmp_path):
    """review9 R9-6 addendum: `kafkafs produce LOGDIR t-0 <&-` was an AttributeError traceback; it is an
    OS error (as cat says it), before anything is made."""
    got = _run_to("<&-", "produce", str(tmp_path / "logs"), "t-0")
    line = "kafkafs: error: cannot read standard input: bad file descriptor"
    assert (got.returncode, got.stderr.decode().splitlines()) == (1, [line]), got.stderr.decode()
    assert not (tmp_path / "logs").exists()



def _produce_with_stderr(redirect: str, logdir: Path, *lines: bytes) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", f'exec "$@" {redirect}', "sh", sys.executable, "-m", "kafkafs", "produce",
                           str(logdir), "orders-0"], input=b"".join(lines), capture_output=True, env=_env(),
                          timeout=120)


def test_a_closed_or_full_stderr_loses_messages_never_records_files_or_exit_codes(tmp_path):
    """review12 R12-6. (a) ``2>&-``: Python's sys.stderr was None and every message went to standard
    output, into consume's JSON lines (and file descriptor 2 was free for the next file opened); now
    /dev/null takes it. (b) ``2>/dev/full``: produce appended and exited 1 (its note could not be
    written: a script sends the records again), and a usage error exited 1, not 2."""
    logdir = tmp_path / "logs"
    assert run("demo", str(logdir)).returncode == 0
    before = len(run("consume", str(logdir), "orders-0").stdout.splitlines())
    for redirect in ("2>&-", "2>/dev/full"):
        got = _run_to(redirect, "consume", str(logdir), "orders-0", "-o", "999999")
        assert (got.returncode, got.stdout) == (0, b""), (redirect, got.stdout.decode())
        assert _run_to(redirect, "verify", str(tmp_path / "nothing")).returncode == 2, redirect
        got = _produce_with_stderr(redirect, logdir, b"one\n", b"two\n")
        assert (got.returncode, got.stdout) == (0, b""), (redirect, got)
    assert run("verify", str(logdir)).returncode == 0
    values = [line for line in run("consume", str(logdir), "orders-0").stdout.decode().splitlines()[before:]]
    assert [('"value":"one"' in v, '"value":"two"' in v) for v in values] == [(True, False), (False, True)] * 2


def test_a_closed_stdout_is_not_left_free_for_the_next_file_opened():
    """``>&-``: /dev/null took file descriptor 1 and was closed again at once (it landed on 1 itself),
    so the next file kafkafs opened (a segment, an index) became its standard output."""
    script = (
        "import os, sys\n"
        "from kafkafs.stdout import guarded_stdout\n"
        "with guarded_stdout():\n"
        "    fd = os.open(sys.argv[1], os.O_RDONLY)\n"
        "    sys.stderr.write(f'{fd} {os.readlink(\"/proc/self/fd/1\")}')\n"
    )
    done = subprocess.run([sys.executable, "-c", script, __file__], capture_output=True, env=_env(), timeout=60,
                          preexec_fn=lambda: os.close(1))
    fd, target = done.stderr.decode().split()
    assert (int(fd) != 1, target) == (True, os.devnull), done.stderr
