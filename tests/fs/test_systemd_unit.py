"""systemd/kafkafs@.service: the properties SPEC section 6 promises, and what must stay out of it."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

SYSTEMD = Path(__file__).resolve().parents[2] / "systemd"
UNIT = SYSTEMD / "kafkafs@.service"
README = SYSTEMD / "README.md"

Unit = dict[str, dict[str, list[str]]]

# Each gives the service a mount namespace of its own, where the FUSE mount would be invisible to the host.
MOUNT_NAMESPACE = [
    "ProtectSystem",
    "ProtectHome",
    "PrivateTmp",
    "ReadWritePaths",
    "ReadOnlyPaths",
    "InaccessiblePaths",
    "ExecPaths",
    "NoExecPaths",
    "TemporaryFileSystem",
    "BindPaths",
    "BindReadOnlyPaths",
    "PrivateMounts",
    "MountFlags",
    "RootDirectory",
    "RootImage",
    "ProtectControlGroups",
    "ProtectProc",
    "ProcSubset",
    "PrivateUsers",
]
# Each sets (or, for a service that is not root, implies) no_new_privs, which defeats setuid fusermount3.
NO_NEW_PRIVS = [
    "NoNewPrivileges",
    "SystemCallFilter",
    "SystemCallArchitectures",
    "RestrictAddressFamilies",
    "RestrictNamespaces",
    "RestrictSUIDSGID",
    "RestrictRealtime",
    "LockPersonality",
    "MemoryDenyWriteExecute",
    "PrivateDevices",
    "ProtectKernelTunables",
    "ProtectKernelModules",
    "ProtectKernelLogs",
    "ProtectClock",
    "DynamicUser",
]


def parse_unit(text: str) -> Unit:
    """A unit file as {section: {key: [values in order]}}; systemd allows a key many times."""
    unit: Unit = {}
    section: dict[str, list[str]] | None = None
    for raw in text.replace("\\\n", " ").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = unit.setdefault(line[1:-1], {})
            continue
        assert section is not None, f"setting outside a section: {line!r}"
        key, eq, value = line.partition("=")
        assert eq, f"not a setting: {line!r}"
        section.setdefault(key.strip(), []).append(value.strip())
    return unit


@pytest.fixture(scope="module")
def unit() -> Unit:
    return parse_unit(UNIT.read_text())


def one(unit: Unit, section: str, key: str) -> str:
    values = unit[section].get(key, [])
    assert len(values) == 1, f"{section}.{key}: {values}"
    return values[0]


def test_type_notify_main_process(unit: Unit) -> None:
    assert one(unit, "Service", "Type") == "notify"
    assert one(unit, "Service", "NotifyAccess") == "main"


def test_restarts_on_failure(unit: Unit) -> None:
    assert one(unit, "Service", "Restart") == "on-failure"
    assert one(unit, "Service", "RestartSec")


def test_runs_kafkafs_in_the_foreground(unit: Unit) -> None:
    argv = shlex.split(one(unit, "Service", "ExecStart"))
    assert argv[:2] == ["kafkafs", "mount"]
    assert "--foreground" in argv or "-f" in argv
    assert argv[-2:] == ["${LOGDIR}", "${MOUNTPOINT}"]


def test_instance_maps_to_logdir_and_env_file(unit: Unit) -> None:
    environment = unit["Service"]["Environment"]
    assert "LOGDIR=%f" in environment
    assert one(unit, "Service", "EnvironmentFile") == "/etc/kafkafs/%i.env"
    assert one(unit, "Unit", "RequiresMountsFor") == "%f"


def _lazy_unmount(command: str) -> bool:
    argv = shlex.split(command)
    flags = "".join(a[1:] for a in argv[1:] if a.startswith("-") and not a.startswith("--"))
    return argv[0].endswith("fusermount3") and "u" in flags and "z" in flags and argv[-1] == "${MOUNTPOINT}"


def test_clears_a_dead_mount_before_start_and_after_stop(unit: Unit) -> None:
    for key in ("ExecStartPre", "ExecStopPost"):
        command = one(unit, "Service", key)
        assert command.startswith("-/"), f"{key} must ignore failure and use an absolute path: {command}"
        assert _lazy_unmount(command[1:]), command


def test_stops_with_sigterm_in_bounded_time(unit: Unit) -> None:
    assert one(unit, "Service", "KillSignal") == "SIGTERM"
    assert re.fullmatch(r"\d+(s|min)?", one(unit, "Service", "TimeoutStopSec"))


def test_least_privilege_that_a_host_visible_mount_allows(unit: Unit) -> None:
    service = unit["Service"]
    assert one(unit, "Service", "User") == "kafkafs"
    assert one(unit, "Service", "CapabilityBoundingSet") == "CAP_SYS_ADMIN"
    assert "AmbientCapabilities" not in service
    present = [key for key in MOUNT_NAMESPACE + NO_NEW_PRIVS if key in service]
    assert present == [], f"these hide the mount or break setuid fusermount3: {present}"


def test_installs_into_multi_user(unit: Unit) -> None:
    assert one(unit, "Install", "WantedBy") == "multi-user.target"


def test_readme_drop_privileges_drop_in() -> None:
    blocks = re.findall(r"```ini\n(.*?)```", README.read_text(), re.S)
    drop_in = next(parse_unit(block) for block in blocks if "drop_privileges" in block)["Service"]
    assert drop_in["NoNewPrivileges"] == ["yes"]
    assert drop_in["NotifyAccess"] == ["all"]
    assert drop_in["User"] == [""]
    assert drop_in["ExecStart"][0] == "", "a drop-in must reset ExecStart= before setting it"
    assert "-o drop_privileges,setuid=kafkafs,foreground," in drop_in["ExecStart"][1]
    assert set(drop_in["CapabilityBoundingSet"][0].split()) == {
        "CAP_SYS_ADMIN",
        "CAP_SETPCAP",
        "CAP_SETUID",
        "CAP_SETGID",
    }
    assert [key for key in MOUNT_NAMESPACE if key in drop_in] == []


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    shutil.copy(UNIT, tmp_path / UNIT.name)
    instance = tmp_path / "kafkafs@var-lib-kafka-data.service"
    instance.symlink_to(UNIT.name)
    result = subprocess.run(
        [analyze, "verify", str(instance)], capture_output=True, text=True, timeout=60, check=False
    )
    # kafkafs is rarely installed where systemd looks for it on a build machine; nothing else may show.
    complaints = [
        line
        for line in (result.stdout + result.stderr).splitlines()
        if line.strip() and not re.search(r"Command \S*kafkafs is not executable", line)
    ]
    assert complaints == []


def test_keeps_its_size_cache_in_a_cache_directory(unit: Unit) -> None:
    assert one(unit, "Service", "CacheDirectory") == "kafkafs"
    assert "kafkafs index ${LOGDIR}" in UNIT.read_text(), "the optional ExecStartPre is documented"
