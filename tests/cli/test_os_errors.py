"""An OS error names the path and what kafkafs was doing (SPEC §4: "cannot take LOGDIR/.lock: permission
denied"), for every command, in one line on stderr, with the exit code of a failure.

The commands run as a user who lacks the permission: the tests run as root, so the command is started
through ``setpriv`` without the capabilities that let root past file permissions (CAP_DAC_OVERRIDE,
CAP_DAC_READ_SEARCH, CAP_FOWNER); a user who is not root runs it as it is.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CAPS = "-dac_override,-dac_read_search,-fowner"


def _unprivileged() -> list[str]:
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv (util-linux): no way to run a command that lacks permissions")
    return ["setpriv", f"--inh-caps={CAPS}", f"--bounding-set={CAPS}"]


def run(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    """``kafkafs ARGS`` as a user that file permissions apply to."""
    proc = subprocess.run(
        [*_unprivileged(), sys.executable, "-m", "kafkafs", *args],
        input=stdin, capture_output=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert b"Traceback" not in proc.stderr, proc.stderr.decode()
    return proc


def error_line(proc: subprocess.CompletedProcess, rc: int = 1) -> str:
    """The one line a failed command printed on stderr (warnings aside)."""
    assert proc.returncode == rc, proc.stderr.decode()
    lines = [line for line in proc.stderr.decode().splitlines() if "WARNING" not in line]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture
def demo(tmp_path) -> Path:
    logdir = tmp_path / "logs"
    subprocess.run([sys.executable, "-m", "kafkafs", "demo", str(logdir)], check=True, capture_output=True,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    return logdir


@pytest.fixture
def read_only(demo):
    """The demo log directory with its folder and its .lock read-only."""
    (demo / ".lock").chmod(0o444)
    demo.chmod(0o555)
    yield demo
    demo.chmod(0o755)


def test_a_writer_says_it_cannot_remove_the_shutdown_marker(demo):
    demo.chmod(0o555)  # .lock writable, the folder not
    try:
        line = error_line(run("recover", str(demo)))
    finally:
        demo.chmod(0o755)
    assert line == f"kafkafs: error: cannot remove {demo}/.kafka_cleanshutdown: permission denied"


# ---------------------------------------------------------------------------------------------- writers


@pytest.mark.parametrize(
    "args",
    [("produce", "{logdir}", "orders-0"), ("recover", "{logdir}"), ("clean", "{logdir}")],
    ids=["produce", "recover", "clean"],
)
def test_writers_say_they_cannot_take_the_lock(read_only, args):
    argv = [a.format(logdir=read_only) for a in args]
    line = error_line(run(*argv, stdin=b"x\n"))
    assert line == f"kafkafs: error: cannot take {read_only}/.lock: permission denied"


@pytest.mark.parametrize("foreground", [False, True], ids=["daemon", "foreground"])
def test_mount_rw_says_it_cannot_take_the_lock(read_only, tmp_path, foreground):
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse here")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    line = error_line(run("mount", "--rw", *(["-f"] if foreground else []), str(read_only), str(mnt)))
    assert line == f"kafkafs: error: cannot take {read_only}/.lock: permission denied"
    assert not os.path.ismount(mnt)


def test_produce_says_which_segment_it_cannot_open_for_writing(demo):
    segment = sorted((demo / "orders-0").glob("*.log"))[-1]
    segment.chmod(0o444)
    line = error_line(run("produce", str(demo), "orders-0", stdin=b"x\n"))
    assert line == f"kafkafs: error: cannot open {segment} for writing: permission denied"


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _verified(logdir: Path) -> tuple[int, str]:
    """What ``kafkafs verify LOGDIR`` finds (its problem count and report), run in this process."""
    from kafkafs.inspect import verify_logdir
    from kafkafs.storage.logdir import LogDir

    out = io.StringIO()
    with LogDir(logdir) as opened:
        problems = verify_logdir(opened, out)
    return problems, out.getvalue()


@pytest.mark.parametrize("lost_index", [False, True], ids=["indexed", "lost-index"])
def test_a_recover_that_cannot_open_a_sealed_segment_leaves_its_indexes_as_they_were(demo, lost_index):
    """review23 R23-1: a recover that failed on a sealed segment's ``.log`` it may not open left the
    segment's trimmed ``.index`` / ``.timeindex`` (or a lost ``.index``, rebuilt as no damage) as 10 MiB of
    preallocated zeros: damage `verify` then reported, and a broker would have read the time index's
    last entry as timestamp 0. The error line stays; every file of the partition is as it was."""
    folder = demo / "orders-1"
    sealed = sorted(folder.glob("*.log"))
    assert len(sealed) > 1
    if lost_index:
        sealed[0].with_suffix(".index").unlink()
    verified = _verified(demo)
    before = _files(folder)
    sealed[0].chmod(0)
    try:
        proc = run("recover", str(demo))
    finally:
        sealed[0].chmod(0o644)
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.decode().splitlines() if "error" in line]
    # one line (the read-only look before the writable open said it too: failed before, seen)
    assert errors == [f"kafkafs: error: cannot open {sealed[0]} for writing: permission denied"], proc.stderr
    assert _files(folder) == before
    assert _verified(demo) == verified


def test_produce_says_it_cannot_create_a_partition(demo):
    demo.chmod(0o755)
    (demo / ".lock").touch()
    (demo / ".lock").chmod(0o666)
    (demo / ".kafka_cleanshutdown").unlink(missing_ok=True)
    # the folder is writable for its owner only; the lock file for anyone: a new partition cannot be made
    os.chown(demo, 12345, 12345) if os.geteuid() == 0 else pytest.skip("needs root to give the folder away")
    try:
        line = error_line(run("produce", str(demo), "fresh-0", stdin=b"x\n"))
    finally:
        os.chown(demo, 0, 0)
    assert line == f"kafkafs: error: cannot create {demo}/fresh-0: permission denied"


# ---------------------------------------------------------------------------------------------- readers


@pytest.mark.parametrize(
    "args",
    [
        ("consume", "{logdir}", "orders-0"),
        ("verify", "{logdir}"),
        ("dump", "{segment}"),
        ("index", "{logdir}", "--cache-dir", "{cache}"),
    ],
    ids=["consume", "verify", "dump", "index"],
)
def test_readers_say_which_file_they_cannot_read(demo, tmp_path, args):
    segment = sorted((demo / "orders-0").glob("*.log"))[0]
    segment.chmod(0o000)
    argv = [a.format(logdir=demo, segment=segment, cache=tmp_path / "cache") for a in args]
    proc = run(*argv)
    lines = [line for line in proc.stderr.decode().splitlines() if "WARNING" not in line]
    assert proc.returncode == 1, proc.stderr.decode()
    assert f"kafkafs: error: cannot read {segment}: permission denied" in lines, lines


@pytest.mark.parametrize("command", ["consume", "verify", "index"])
def test_readers_say_which_folder_they_cannot_list(demo, tmp_path, command):
    folder = demo / "sensors-0"
    folder.chmod(0o000)
    try:
        extra = {"consume": ["sensors-0"], "index": ["--cache-dir", str(tmp_path / "cache")]}.get(command, [])
        proc = run(command, str(demo), *extra)
    finally:
        folder.chmod(0o755)
    lines = [line for line in proc.stderr.decode().splitlines() if "WARNING" not in line]
    assert proc.returncode == 1, proc.stderr.decode()
    assert f"kafkafs: error: cannot list {folder}: permission denied" in lines, lines


def test_index_says_it_cannot_create_its_cache(demo, tmp_path):
    parent = tmp_path / "ro"
    parent.mkdir(mode=0o555)
    line = error_line(run("index", str(demo), "--cache-dir", str(parent / "cache")))
    assert line == f"kafkafs: error: cannot create the size cache {parent / 'cache'}: permission denied"


def test_mount_says_it_cannot_read_the_log_directory(demo, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    demo.chmod(0o000)
    try:
        line = error_line(run("mount", str(demo), str(mnt)), rc=2)  # a path mount cannot take: usage
    finally:
        demo.chmod(0o755)
    assert line == f"kafkafs: error: cannot read {demo}: permission denied"


@pytest.mark.parametrize("command", ["verify", "index", "clean"])
def test_commands_say_they_cannot_read_the_log_directory(demo, command):
    demo.chmod(0o000)
    try:
        line = error_line(run(command, str(demo)), rc=2)
    finally:
        demo.chmod(0o755)
    assert line == f"kafkafs: error: cannot read {demo}: permission denied"


def test_systemd_install_says_what_it_cannot_write(demo, tmp_path):
    root = tmp_path / "root"
    root.mkdir(mode=0o555)
    line = error_line(run("systemd", "install", str(demo), "/mnt/kafka", "--root", str(root)))
    assert line == f"kafkafs: error: cannot create {root}/etc: permission denied"


def test_demo_says_it_cannot_create_its_folder(tmp_path):
    parent = tmp_path / "ro"
    parent.mkdir(mode=0o555)
    line = error_line(run("demo", str(parent / "logs")), rc=2)  # a path the command cannot take: usage
    assert line == f"kafkafs: error: cannot create {parent / 'logs'}: permission denied"


# ---------------------------------------------------------------------------------------------- the line


def test_describe_os_error():
    from kafkafs.errors import describe_os_error, tag_os_error

    exc = PermissionError(13, "Permission denied", "/data/logs/.lock")
    assert describe_os_error(exc) == "cannot use /data/logs/.lock: permission denied"
    assert describe_os_error(tag_os_error(exc, "take {path}")) == "cannot take /data/logs/.lock: permission denied"
    assert describe_os_error(tag_os_error(exc, "read {path}")) == "cannot take /data/logs/.lock: permission denied"
    nameless = OSError(28, "No space left on device")
    assert describe_os_error(tag_os_error(nameless, "write {path}", "/data/logs")) == (
        "cannot write /data/logs: no space left on device")
    assert describe_os_error(OSError(5, "Input/output error")) == "cannot use: input/output error"
    moved = tag_os_error(OSError(18, "Invalid cross-device link", "/a.tmp", None, "/b"), "rename {path}")
    assert describe_os_error(moved) == "cannot rename /a.tmp to /b: invalid cross-device link"


def test_consume_and_groups_read_on_past_a_folder_they_cannot_list(demo, fixtures_dir, tmp_path):
    """review9 R9-5: an OS error on one partition folder is local, as damage is: `consume TOPIC` printed
    nothing of the readable partitions, and `groups` failed whole for a partition it needs at most for
    a lag column. Now the readable ones are read to their end, the folder is said in one line, exit 1;
    groups shows that partition's log end offset and lag as unknown (-), and a folder no group names
    is none of its business (exit 0)."""
    folder = demo / "orders-0"
    whole = run("consume", str(demo), "orders-1")
    assert whole.returncode == 0 and whole.stdout
    folder.chmod(0o000)
    try:
        proc = run("consume", str(demo), "orders")
    finally:
        folder.chmod(0o755)
    assert error_line(proc) == f"kafkafs: error: cannot list {folder}: permission denied"
    assert proc.stdout == whole.stdout

    logs = tmp_path / "c"
    shutil.copytree(fixtures_dir / "kafka-logs-c", logs)
    (logs / "other-0").mkdir(mode=0o000)  # no group commits to it
    assert run("groups", str(logs)).returncode == 0
    committed = logs / "TestTopicPatient-0"
    committed.chmod(0o000)
    try:
        proc = run("groups", str(logs))
    finally:
        committed.chmod(0o755)
    line = error_line(proc)
    assert line.startswith(f"kafkafs: error: cannot list {committed}: permission denied;"), line
    row = next(r.split() for r in proc.stdout.decode().splitlines() if " TestTopicPatient " in r)
    assert row[1:6] == ["TestTopicPatient", "0", "3", "-", "-"]


@pytest.mark.parametrize("how", [[], ["--no-interleave"], ["--grep", "."]], ids=["interleaved", "no-interleave", "grep"])
def test_consume_reads_on_past_a_segment_it_cannot_read(demo, how):
    """review23 R23-5: a segment of one partition that the user may not read stopped `consume TOPIC`
    whole (nothing of the other partition printed, interleaved or not), where damage and a folder that
    cannot be listed are local. Now that partition ends there, said in one line, every other partition is
    read to its end, exit 1 (the kernel's merge, one partition after the other, and the line by line way)."""
    whole = run("consume", str(demo), "orders", *how)
    assert whole.returncode == 0
    segment = sorted((demo / "orders-0").glob("*.log"))[0]  # the first partition: the others come after it
    segment.chmod(0o000)
    try:
        proc = run("consume", str(demo), "orders", *how)
    finally:
        segment.chmod(0o644)
    assert error_line(proc) == f"kafkafs: error: cannot read {segment}: permission denied"
    others = [line for line in whole.stdout.splitlines(keepends=True) if b'"partition":0,' not in line]
    assert proc.stdout.splitlines(keepends=True) == others and others


def test_dump_says_it_cannot_read_a_file_in_a_folder_it_cannot_search(demo):
    """review9 R9-2: a segment in a folder without search permission exists: dump said "no such file",
    exit 2 (a usage error); it is an OS error like an unreadable file's, exit 1. A missing file stays
    a usage error."""
    folder = demo / "orders-0"
    segment = sorted(folder.glob("*.log"))[0]
    folder.chmod(0o600)
    try:
        proc = run("dump", str(segment))
    finally:
        folder.chmod(0o755)
    assert error_line(proc) == f"kafkafs: error: cannot read {segment}: permission denied"
    missing = folder / "00000000000000099999.log"
    assert error_line(run("dump", str(missing)), rc=2) == f"kafkafs: error: {missing}: no such file"


@pytest.mark.parametrize("how", [[], ["--no-interleave"], ["--grep", "."], ["-c", "1000"], ["-o", "100"]],
                         ids=["interleaved", "no-interleave", "grep", "count", "offset"])
def test_consume_prints_the_sealed_segments_before_an_active_segment_it_cannot_read(demo, how):
    """fix58's left-over: the partition's end is read from its active segment, so when the user may not
    read that one, `consume` printed nothing of the partition (its log end unknown), its readable sealed
    segments neither. Now they are printed, then the active segment is said in one line, exit 1."""
    whole = run("consume", str(demo), "orders-0")
    assert whole.returncode == 0
    active = sorted((demo / "orders-0").glob("*.log"))[-1]
    sealed = int(active.name.split(".")[0])
    assert sealed > 100
    active.chmod(0o000)
    try:
        proc = run("consume", str(demo), "orders", *how)
        tail = run("consume", str(demo), "orders-0", "-o", "-5")
    finally:
        active.chmod(0o644)
    assert error_line(proc) == f"kafkafs: error: cannot read {active}: permission denied"
    lines = [line for line in proc.stdout.splitlines(keepends=True) if b'"partition":0,' in line]
    first = 100 if "-o" in how else 0
    assert lines == whole.stdout.splitlines(keepends=True)[first:sealed]  # before: none
    assert any(b'"partition":1,' in line for line in proc.stdout.splitlines())
    assert error_line(tail) == f"kafkafs: error: cannot read {active}: permission denied"  # needs the end
    assert tail.stdout == b""
