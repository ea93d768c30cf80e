"""``kafkafs systemd install LOGDIR MOUNTPOINT``: the unit as installed names kafkafs by its absolute
path and passes ``systemd-analyze verify`` (SPEC §6 kept: Type=notify, no mount-namespace settings).

The install goes into a temporary root (``--root``, as ``systemctl --root``): the machine's /etc is
never touched by the suite."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kafkafs.systemd_install import escape_path, render_unit
from tests.fs.test_systemd_unit import MOUNT_NAMESPACE, NO_NEW_PRIVS, parse_unit

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "systemd" / "kafkafs@.service"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkafs", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def _verify(path: Path) -> subprocess.CompletedProcess:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (scripts/bootstrap.sh installs the systemd package)")
    return subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=120)


@pytest.fixture
def installed(tmp_path):
    if shutil.which("systemctl") is None:
        pytest.skip("systemctl is not installed (scripts/bootstrap.sh installs the systemd package)")
    logdir = tmp_path / "kafka-logs"
    assert run("demo", str(logdir)).returncode == 0
    root = tmp_path / "root"
    root.mkdir()
    proc = run("systemd", "install", str(logdir), "/mnt/kafka", "--root", str(root), "-o", "allow_other")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    return logdir, root, proc.stdout


def test_install_writes_enables_and_says_so(installed):
    logdir, root, said = installed
    instance = escape_path(str(logdir))
    unit = root / "etc/systemd/system/kafkafs@.service"
    lines = said.splitlines()
    assert lines[0].startswith(f"wrote {unit} (ExecStart=/")
    assert any(line.startswith(f"wrote {root}/etc/kafkafs/{instance}.env") for line in lines)
    assert lines[-1].startswith(f"enabled kafkafs@{instance}.service")
    assert (root / f"etc/kafkafs/{instance}.env").read_text() == "MOUNTPOINT=/mnt/kafka\nOPTIONS=-o allow_other\n"
    link = root / f"etc/systemd/system/multi-user.target.wants/kafkafs@{instance}.service"
    assert os.readlink(link) == "/etc/systemd/system/kafkafs@.service"
    assert (root / "mnt/kafka").is_dir()
    assert "kafkafs:" in (root / "etc/passwd").read_text()  # the system user, made by systemd-sysusers


def test_installed_unit_runs_this_kafkafs_by_absolute_path(installed):
    _logdir, root, _said = installed
    unit = parse_unit((root / "etc/systemd/system/kafkafs@.service").read_text())
    service = unit["Service"]
    argv = shlex.split(service["ExecStart"][0])
    assert os.path.isabs(argv[0]) and os.access(argv[0], os.X_OK), argv
    assert argv[1:] == ["mount", "--foreground", "$OPTIONS", "${LOGDIR}", "${MOUNTPOINT}"] or argv[1:3] == ["-m", "kafkafs"]
    for command in service["ExecStartPre"] + service["ExecStopPost"]:
        program = shlex.split(command.lstrip("-"))[0]
        assert os.path.isabs(program) and os.access(program, os.X_OK), command
    # SPEC §6 as in the template: Type=notify, nothing that gives the service a mount namespace
    assert service["Type"] == ["notify"]
    assert not set(service) & (set(MOUNT_NAMESPACE) | set(NO_NEW_PRIVS))
    template = parse_unit(TEMPLATE.read_text())
    assert {k: v for k, v in service.items() if not k.startswith("Exec")} == {
        k: v for k, v in template["Service"].items() if not k.startswith("Exec")}


def test_installed_unit_passes_systemd_analyze_verify(installed, tmp_path):
    logdir, root, _said = installed
    unit = root / "etc/systemd/system/kafkafs@.service"
    proc = _verify(unit)
    assert proc.returncode == 0 and "not executable" not in proc.stderr, proc.stderr
    # and as the instance systemctl enabled (the name that %i and %f expand from)
    named = tmp_path / "verify" / f"kafkafs@{escape_path(str(logdir))}.service"
    named.parent.mkdir()
    shutil.copy(unit, named)
    proc = _verify(named)
    assert proc.returncode == 0 and "not executable" not in proc.stderr, proc.stderr


def test_the_template_alone_does_not_verify():
    """Why the install step exists: systemd finds no `kafkafs` on its own search path."""
    if shutil.which("kafkafs", path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"):
        pytest.skip("a kafkafs is installed on systemd's search path here")
    proc = _verify(TEMPLATE.resolve())
    assert proc.returncode != 0 and "Command kafkafs is not executable" in proc.stderr


def test_render_unit_quotes_a_path_with_spaces():
    text = render_unit("ExecStartPre=-/usr/bin/fusermount3 -quz ${MOUNTPOINT}\n"
                       "ExecStart=kafkafs mount --foreground $OPTIONS ${LOGDIR} ${MOUNTPOINT}\n",
                       ["/opt/my env/bin/kafkafs"], "/bin/fusermount3")
    assert text == ('ExecStartPre=-/bin/fusermount3 -quz ${MOUNTPOINT}\n'
                    'ExecStart="/opt/my env/bin/kafkafs" mount --foreground $OPTIONS ${LOGDIR} ${MOUNTPOINT}\n')


@pytest.mark.parametrize("path", ["/var/lib/kafka/data", "/tmp/kafka-logs", "/srv//a b/ü.x/", "/.hidden/x"])
def test_escape_path_is_systemd_escapes(path):
    if shutil.which("systemd-escape") is None:
        pytest.skip("systemd-escape is not installed")
    expected = subprocess.run(["systemd-escape", "--path", path], capture_output=True, text=True, check=True).stdout
    assert escape_path(path) == expected.strip()


def test_install_refuses_what_is_not_a_log_directory(tmp_path):
    proc = run("systemd", "install", str(tmp_path / "nope"), "/mnt/x", "--root", str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr


def test_install_takes_config_and_set_as_every_logdir_command_does(tmp_path):
    """SPEC §7: every command that opens a log directory takes --config and --set. The install checks
    them as the mount would (a bad file or KEY=VALUE: one line, exit 2, nothing written) and hands them
    to the service's mount in OPTIONS. It took neither (argparse: unrecognized arguments)."""
    if shutil.which("systemctl") is None:
        pytest.skip("systemctl is not installed (scripts/bootstrap.sh installs the systemd package)")
    logdir = tmp_path / "kafka-logs"
    assert run("demo", str(logdir)).returncode == 0
    settings = tmp_path / "kafkafs.toml"
    settings.write_text('"segment.bytes" = 1048576\n')
    bad = tmp_path / "bad.toml"
    bad.write_text('"segment.bytes" = [\n')
    root = tmp_path / "root"
    root.mkdir()
    for extra, message in [(["--config", str(bad)], str(bad)), (["--set", "segment.bytes=lots"], "segment.bytes"),
                           (["--set", "nosuch=1"], "nosuch"), (["--set", "oops"], "KEY=VALUE")]:
        proc = run("systemd", "install", str(logdir), "/mnt/kafka", "--root", str(root), *extra)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
        assert "unrecognized" not in proc.stderr, proc.stderr
        assert not (root / "etc").exists(), "nothing is written before the settings are checked"
    proc = run("systemd", "install", str(logdir), "/mnt/kafka", "--root", str(root), "--rw",
               "--config", str(settings), "--set", "retention.ms=-1", "--set", "cleanup.policy=compact")
    assert proc.returncode == 0, proc.stderr
    env = (root / f"etc/kafkafs/{escape_path(str(logdir))}.env").read_text()
    assert env == (f"MOUNTPOINT=/mnt/kafka\nOPTIONS=--rw --config={settings} --set=retention.ms=-1 "
                   "--set=cleanup.policy=compact\n")
