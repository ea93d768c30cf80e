"""Issue 9: safe on a broker's log directory. Each test is named after the finding it pins down.

Run as a user would: the ``kafkafs`` command in a subprocess, on copies of real and demo directories.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kafkafs.errors import UnsafeFileError
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir
from kafkafs.storage.safefiles import open_file, regular_files

from .test_cli import run


def _tree(root: Path) -> dict[str, tuple[str, int, str]]:
    """Every entry under ``root`` (links not followed): kind, size and a hash of regular files."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            if path.is_symlink():
                out[str(path.relative_to(root))] = ("link", 0, os.readlink(path))
            elif path.is_file():
                out[str(path.relative_to(root))] = ("file", st.st_size, hashlib.sha1(path.read_bytes()).hexdigest())
            else:
                out[str(path.relative_to(root))] = ("dir", 0, "")
    return out


@pytest.fixture
def demo_copy(tmp_path) -> Path:
    target = tmp_path / "logs"
    run("demo", str(target))
    return target


@pytest.fixture
def outside(tmp_path) -> Path:
    """Files outside the log directory that links inside it point at."""
    victim = tmp_path / "outside"
    victim.mkdir()
    (victim / "victim.log").write_bytes(b"precious bytes, not a segment\n" * 100)
    (victim / "victim.index").write_bytes(b"\x01" * 4096)
    return victim


def _plant_links(partition: Path, outside: Path, base: int = 5) -> None:
    os.symlink(outside / "victim.log", partition / f"{base:020d}.log")
    os.symlink(outside / "victim.index", partition / f"{base:020d}.index")


def test_finding1_recover_never_writes_through_links(demo_copy, outside):
    before_outside = _tree(outside)
    images = demo_copy / "images-0"
    _plant_links(images, outside)
    before_images = _tree(images)
    out = run("recover", str(demo_copy), check_rc=1)
    assert _tree(outside) == before_outside  # neither target truncated nor touched
    assert _tree(images) == before_images  # the refused partition is left exactly as it was
    lines = out.stdout.decode().splitlines()
    refused = [line for line in lines if line.startswith("images-0")]
    assert len(refused) == 1 and "refused" in refused[0] and "symbolic link" in refused[0]
    assert "1 refused" in lines[-1]
    # the other partitions were recovered as usual
    assert any(line.startswith("orders-0: ") and "refused" not in line for line in lines)
    assert b"Traceback" not in out.stderr


@pytest.mark.parametrize("command", ["produce", "clean", "recover"])
def test_finding1_every_writer_refuses_a_linked_partition(demo_copy, outside, command):
    images = demo_copy / "images-0"
    os.symlink(outside / "victim.log", images / "leader-epoch-checkpoint.tmp")
    before = _tree(outside), _tree(images)
    _writer_refuses_images(command, demo_copy, "symbolic link")
    assert (_tree(outside), _tree(images)) == before


@pytest.mark.parametrize("name", ["00000000000000000000.index", "00000000000000000000.log",
                                  "00000000000000000005.timeindex", "00000000000000000000.txnindex",
                                  "00000000000000000000.snapshot", "leader-epoch-checkpoint"])
@pytest.mark.parametrize("command", ["produce", "clean", "recover"])
def test_every_writer_refuses_a_folder_named_as_a_partition_file(demo_copy, command, name):
    """review6 F0: a directory where a writer opens a file of that name. recover printed a traceback
    (KeyError: the partition was neither refused nor recovered) and a --rw mount logged one at every
    lookup; now it is refused as a link is: one line, exit 1, nothing in it touched; verify says it."""
    images = demo_copy / "images-0"
    if (images / name).exists():
        (images / name).unlink()
    (images / name).mkdir()
    before = _tree(images)
    _writer_refuses_images(command, demo_copy, "folder")
    assert _tree(images) == before
    out = run("verify", str(demo_copy), check_rc=1)
    said = [line for line in out.stdout.decode().splitlines() if line.strip().startswith(f"{name}: ")]
    assert len(said) == 1 and "folder" in said[0], out.stdout.decode()
    if not name.endswith(".log"):  # readers read the rest (a folder is no segment)
        assert b'"topic":"images"' in run("consume", str(demo_copy), "images-0").stdout


def _writer_refuses_images(command: str, logdir: Path, why: str) -> None:
    """Run the writer ``command`` on ``logdir``: exit 1, images-0 refused in one line that says ``why``."""
    if command == "produce":
        out = run("produce", str(logdir), "images-0", stdin=b"x\n", check_rc=1)
        assert out.stderr.decode().count("\n") == 1 and why in out.stderr.decode()
    else:
        extra = ("--set", "retention.ms=1") if command == "clean" else ()
        out = run(command, str(logdir), *extra, check_rc=1)
        refused = [line for line in out.stdout.decode().splitlines() if line.startswith("images-0: refused")]
        assert len(refused) == 1 and why in refused[0]


def _stamps(root: Path) -> dict[str, int]:
    return {str(p): p.lstat().st_mtime_ns for p in root.rglob("*")}


@pytest.mark.parametrize("command", ["produce", "clean", "recover"])
def test_a_writer_refuses_a_partition_folder_linked_outside_the_log_directory(demo_copy, tmp_path, command):
    # SPEC §4: a writer never changes anything outside LOGDIR. A partition folder that is a link to a
    # folder elsewhere may be read (§3), but writing there would change files outside LOGDIR.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (demo_copy / "images-0").rename(elsewhere / "images-0")
    os.symlink(elsewhere / "images-0", demo_copy / "images-0")
    before = _tree(elsewhere), _stamps(elsewhere)
    _writer_refuses_images(command, demo_copy, "outside the log directory")
    assert (_tree(elsewhere), _stamps(elsewhere)) == before
    # readers still follow it (SPEC §3: partition folders may be links)
    assert b'"topic":"images"' in run("consume", str(demo_copy), "images-0").stdout
    # a link that stays inside the log directory (LOGDIR itself a link, too) is written as before
    os.unlink(demo_copy / "images-0")
    (elsewhere / "images-0").rename(demo_copy / "real-images")
    os.symlink("real-images", demo_copy / "images-0")
    os.symlink(demo_copy, tmp_path / "logs-link")
    run("produce", str(tmp_path / "logs-link"), "images-0", stdin=b"x\n")


@pytest.mark.allow_warnings("links are skipped with a warning (SPEC §3)")
def test_finding1_engine_opens_nothing_through_a_link(tmp_path, outside):
    (tmp_path / "t-0").mkdir()
    os.symlink(outside / "victim.log", tmp_path / "t-0" / "00000000000000000000.log")
    with pytest.raises(UnsafeFileError):
        os.close(open_file(tmp_path / "t-0" / "00000000000000000000.log", os.O_RDWR))
    with LogDir(tmp_path, writable=True) as logdir, pytest.raises(UnsafeFileError):
        logdir.log("t-0")
    # readers skip the link: the partition reads as empty, the target is never opened
    with LogDir(tmp_path) as logdir:
        log = logdir.log("t-0")
        assert list(log.segments) == [] and list(log.read()) == []
    assert regular_files(tmp_path / "t-0") == []
    assert (outside / "victim.log").read_bytes().startswith(b"precious")


def test_finding1_checkpoint_tmp_link_is_not_followed(tmp_path, outside):
    run("produce", str(tmp_path), "t-0", stdin=b"x\n")
    os.symlink(outside / "victim.log", tmp_path / "recovery-point-offset-checkpoint.tmp")
    before = _tree(outside)
    run("produce", str(tmp_path), "t-0", stdin=b"y\n")
    assert _tree(outside) == before
    assert not (tmp_path / "recovery-point-offset-checkpoint").is_symlink()


def test_finding3_clean_keeps_internal_topics(fixtures_dir, tmp_path):
    copy = tmp_path / "a"
    shutil.copytree(fixtures_dir / "kafka-logs-a", copy, symlinks=True)
    out = run("clean", "--dry-run", str(copy), "--set", "retention.ms=1", "--set", "retention.bytes=0")
    lines = out.stdout.decode().splitlines()
    assert any(line.startswith("nikhilDemo-0: would delete") for line in lines)
    # compacted as the broker does, never deleted by age or size
    internal = [line for line in lines if line.startswith("__consumer_offsets")]
    assert internal and all("would compact" in line for line in internal), lines
    settings = Settings.load(None, {"retention.ms": 1, "cleanup.policy": "delete"})
    for topic in ("__consumer_offsets", "__transaction_state"):
        config = settings.for_topic(topic)
        assert config.compact and not config.delete and config.segment_bytes == 100 * 1024 * 1024
    metadata = settings.for_topic("__cluster_metadata")
    assert metadata.retention_ms == -1 and metadata.retention_bytes == -1 and not metadata.compact
    # tiered storage's metadata topic: TopicBasedRemoteLogMetadataManager creates it with
    # cleanup.policy=delete and retention.ms=remote.log.metadata.topic.retention.ms (default -1)
    remote = settings.for_topic("__remote_log_metadata")
    assert remote.retention_ms == -1 and remote.retention_bytes == -1 and not remote.compact
    assert settings.for_topic("orders").delete and settings.for_topic("orders").retention_ms == 1
    # an operator who names the topic decides
    named = Settings({"cleanup.policy": "delete"}, {"__consumer_offsets": {"cleanup.policy": "delete"}})
    assert named.for_topic("__consumer_offsets").delete


def test_finding3_cluster_metadata_never_cleaned_by_age_or_size(fixtures_dir, tmp_path):
    copy = tmp_path / "c"
    shutil.copytree(fixtures_dir / "kafka-logs-c", copy, symlinks=True)
    out = run("clean", "--dry-run", str(copy), "--set", "retention.ms=1", "--set", "retention.bytes=0")
    lines = out.stdout.decode().splitlines()
    assert not [line for line in lines if line.startswith("__") and "would delete" in line], lines


def test_finding4_clean_dry_run_writes_nothing(fixtures_dir, tmp_path):
    copy = tmp_path / "a"
    shutil.copytree(fixtures_dir / "kafka-logs-a", copy, symlinks=True)
    (copy / ".lock").unlink(missing_ok=True)
    before = _tree(copy)
    stamp = {p: p.stat().st_mtime_ns for p in copy.rglob("*")}
    out = run("clean", "--dry-run", str(copy), "--set", "retention.ms=1")
    assert b"would delete" in out.stdout
    assert _tree(copy) == before  # no .lock, no checkpoint rewritten, no rename
    assert {p: p.stat().st_mtime_ns for p in copy.rglob("*")} == stamp
    assert not (copy / ".lock").exists()
    # and a dry run does not need the lock: it works while another writer holds the directory
    with LogDir(copy, writable=True):
        assert b"would delete" in run("clean", "--dry-run", str(copy), "--set", "retention.ms=1").stdout


def _rc(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "kafkafs.cli", *args], capture_output=True, timeout=120)
    assert b"Traceback" not in proc.stderr, proc.stderr.decode()
    if proc.returncode == 2:
        assert proc.stderr.decode().count("\n") == 1 and proc.stderr.startswith(b"kafkafs: "), (args, proc.stderr)
    return proc


def test_finding9_exit_codes_are_the_same_for_every_command(demo_copy, tmp_path):
    nope = str(tmp_path / "nope")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    usage = [
        ("mount", nope, str(mnt)),
        ("verify", nope),
        ("recover", nope),
        ("clean", nope),
        ("clean", "--dry-run", nope),
        ("consume", nope, "t-0"),
        ("dump", nope + ".log"),
        ("dump", str(demo_copy)),
        ("verify", str(demo_copy / "orders-0")),  # a partition folder is not a log directory
        ("recover", str(demo_copy / "orders-0")),
        ("clean", str(demo_copy / "orders-0")),
        ("mount", str(demo_copy / "orders-0"), str(mnt)),
        ("verify", str(Path(__file__).parent)),  # a folder that is no log directory
        ("verify", str(demo_copy / "orders-0" / "00000000000000000000.log")),
        ("produce", str(demo_copy), "bad name!-0"),
        ("verify", str(demo_copy), "--no-such-flag"),
        (),  # no command at all: one line too (it printed the whole help)
    ]
    for args in usage:
        proc = _rc(*args)
        assert proc.returncode == 2, (args, proc.returncode, proc.stderr)
    assert os.listdir(mnt) == [] and not os.path.ismount(mnt)
    assert not (demo_copy / "orders-0" / ".lock").exists()
    for args in [("verify", str(demo_copy)), ("dump", str(demo_copy / "orders-0" / "00000000000000000000.log"))]:
        assert _rc(*args).returncode == 0, args
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _rc("verify", str(empty)).returncode == 0  # a log directory with no partitions yet
    # damage: 1
    seg = demo_copy / "orders-0" / "00000000000000000000.log"
    data = bytearray(seg.read_bytes())
    data[100] ^= 0xFF
    seg.write_bytes(bytes(data))
    assert _rc("verify", str(demo_copy)).returncode == 1
    assert _rc("dump", str(seg)).returncode == 1


def test_verify_reports_a_link_in_a_partition_folder(tmp_path, outside):
    # its only .log is a link: the reader skips it (a warning), but the partition is not OK: verify
    # says so in its report, for that partition, and exits 1
    logs = tmp_path / "logs"  # beside `outside`, a folder a broker (and verify) would refuse in a log directory
    (logs / "t-0").mkdir(parents=True)
    os.symlink(outside / "victim.log", logs / "t-0" / "00000000000000000000.log")
    out = run("verify", str(logs), check_rc=1)
    lines = out.stdout.decode().splitlines()
    assert lines[0].startswith("t-0: ") and lines[0].endswith("1 problem(s)"), lines
    assert lines[1].strip().startswith("00000000000000000000.log: not a regular file"), lines
    assert (outside / "victim.log").read_bytes().startswith(b"precious")


def test_writers_refuse_a_partition_whose_recovery_would_cut_whole_batches(demo_copy):
    """review6 F9: on a directory without .kafka_cleanshutdown (a copy of a running broker's), a CRC-bad
    batch mid-segment: clean and produce ran the unclean-start recovery as a side effect, cut it AND
    every valid batch after it, and exited 0 ('nothing to clean'); the dry run said nothing. Now every
    writer but recover refuses that partition untouched (one line, exit 1), the dry run says the same,
    no clean-shutdown marker is written over it, and recover cuts as a broker's unclean start does."""
    from kafkafs.format.batch import read_batch_header

    (demo_copy / ".kafka_cleanshutdown").unlink()
    segment = sorted((demo_copy / "orders-0").glob("*.log"))[-1]
    data = bytearray(segment.read_bytes())
    starts, pos = [], 0
    while pos < len(data):
        starts.append(pos)
        pos = read_batch_header(bytes(data), pos).end
    assert len(starts) > 2
    bad = starts[len(starts) // 2]
    data[read_batch_header(bytes(data), bad).end - 3] ^= 0x55  # a record byte: the CRC fails
    segment.write_bytes(bytes(data))
    before = _tree(demo_copy / "orders-0")
    for args in (("clean", "--dry-run"), ("clean",)):
        out = run(*args[:1], str(demo_copy), *args[1:], check_rc=1)
        refused = [line for line in out.stdout.decode().splitlines() if line.startswith("orders-0: refused")]
        assert len(refused) == 1 and f"position {bad}: CRC mismatch" in refused[0], out.stdout.decode()
        assert "kafkafs recover" in refused[0]
        assert _tree(demo_copy / "orders-0") == before
        assert not (demo_copy / ".kafka_cleanshutdown").exists()  # orders-0 still needs its recovery
    out = run("produce", str(demo_copy), "orders-0", stdin=b"x\n", check_rc=1)
    assert out.stderr.decode().count("\n") == 1 and f"position {bad}" in out.stderr.decode()
    assert _tree(demo_copy / "orders-0") == before
    run("produce", str(demo_copy), "images-0", stdin=b"x\n")  # the other partitions are written as before
    out = run("recover", str(demo_copy), check_rc=1)
    assert any(line.startswith("orders-0: ") and "truncated" in line for line in out.stdout.decode().splitlines())
    assert segment.stat().st_size == bad
    run("verify", str(demo_copy))


@pytest.mark.parametrize("command", ["produce", "clean", "recover"])
def test_a_writer_refuses_a_partition_folder_linked_to_another_partition(demo_copy, command):
    """review9 R9-9: `ln -s orders-0 LOGDIR/images-0`: produce to images-0 appended to orders-0's log (a
    record of topic orders, said to be of images). A writer refuses such an alias in one line, as a
    link out of LOGDIR; it writes nothing through it (clean cleans orders-0 itself, by its own name)."""
    import shutil

    shutil.rmtree(demo_copy / "images-0")
    os.symlink("orders-0", demo_copy / "images-0")
    before = _tree(demo_copy / "orders-0")
    _writer_refuses_images(command, demo_copy, "the folder of another partition")
    if command != "clean":
        assert _tree(demo_copy / "orders-0") == before


@pytest.mark.parametrize("command", ["produce", "clean", "recover"])
def test_a_writer_refuses_a_partition_whose_files_are_hard_linked(demo_copy, tmp_path, command):
    """review9 R9-11: in a `cp -al` (or `rsync --link-dest`) copy every file shares its inode with the
    original: produce grew the ORIGINAL's .log, recover cut it, clean rewrote its indexes in place. A
    writer refuses such a partition in one line, as one that holds a symbolic link; the original stays
    as it was."""
    linked = tmp_path / "linked"
    subprocess.run(["cp", "-al", str(demo_copy), str(linked)], check=True)
    before = _tree(demo_copy)
    _writer_refuses_images(command, linked, "hard link")
    assert _tree(demo_copy) == before
