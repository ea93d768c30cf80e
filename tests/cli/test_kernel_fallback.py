"""Without the compiled kernel kafkafs works through the Python reference, with one warning line."""

import subprocess
import sys

import pytest

from kafkafs.format import kernel

BLOCKED = (
    "import sys; sys.modules['kafkafs.format._kernel'] = None\n"  # as if it had never been built
    "from kafkafs.cli import main; sys.exit(main(sys.argv[1:]))\n"
)


def _consume(logdir, *, blocked: bool) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", BLOCKED] if blocked else [sys.executable, "-m", "kafkafs.cli"]
    return subprocess.run([*cmd, "consume", str(logdir), "orders-0"], capture_output=True, timeout=120, check=True)


@pytest.mark.skipif(kernel.KERNEL is None, reason="compares the kernel with the fallback")
def test_consume_without_the_kernel_prints_the_same_records_and_one_warning(tmp_path):
    logdir = tmp_path / "logs"
    subprocess.run([sys.executable, "-m", "kafkafs.cli", "demo", str(logdir)], capture_output=True, check=True)
    fast = _consume(logdir, blocked=False)
    slow = _consume(logdir, blocked=True)
    assert fast.stdout == slow.stdout and fast.stdout.count(b"\n") > 10
    assert fast.stderr == b""
    lines = slow.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kafkafs: warning: the compiled record kernel"), lines


def test_the_warning_is_printed_once_per_process(tmp_path, monkeypatch, capsys):
    from kafkafs import cli

    logdir = tmp_path / "logs"
    subprocess.run([sys.executable, "-m", "kafkafs.cli", "demo", str(logdir)], capture_output=True, check=True)
    monkeypatch.setattr(kernel, "KERNEL", None)  # as if it had never been built
    monkeypatch.setattr(cli, "_kernel_noted", False)
    for command in (["consume", str(logdir), "orders"], ["consume", str(logdir), "orders-0"],
                    ["dump", str(next((logdir / "orders-0").glob("*.log")))]):
        assert cli.main(command) == 0
    err = capsys.readouterr().err
    assert err.count("compiled record kernel") == 1, err
