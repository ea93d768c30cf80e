"""A segment renamed to a base offset above the offsets it holds (fuzz seed 3031, input 59:
``00000000000000000000.log`` renamed ``00000000000000001000.log``): ``consume`` and the mount's
``by-offset/`` listing used to loop forever in ``LocalLog.batches`` (it went back to the segment before
for an offset the renamed one did not hold). Now every reader ends; what comes before the renamed
segment is served once each and in order, and its batches (offsets below its base: damage, issue 20)
are said to be damage: ``consume`` exits 1, the engine raises, lookups there are EIO or ENOENT; ``verify``
calls them damage, and ``recover`` leaves what ``verify`` accepts."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from pathlib import Path

import orjson
import pytest

from kafkafs.errors import CorruptRecordError, NotFound
from kafkafs.fs.tree.root import Tree
from kafkafs.storage.logdir import LogDir

from . import fuzz

# (segment renamed, its new base, whether its index files go with it)
CASES = [(0, 1000, False), (0, 1000, True), (118, 1118, False), (118, 1118, True), (55, 1055, True)]
SUFFIXES = (".log", ".index", ".timeindex", ".txnindex", ".snapshot")


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    return fuzz.make_template(tmp_path_factory.mktemp("renamed") / "template")


def renamed(template: Path, target: Path, old: int, new: int, indexes: bool) -> Path:
    shutil.copytree(template, target)
    part = target / fuzz.PARTITION
    for suffix in SUFFIXES if indexes else (".log",):
        src = part / f"{old:020d}{suffix}"
        if src.exists():
            src.rename(part / f"{new:020d}{suffix}")
    return target


def within(seconds: float, fn):
    """``fn()``'s result, failing the test (not hanging it) when it runs past ``seconds``."""
    out: list = []

    def work() -> None:
        try:
            out.append(("ok", fn()))
        except BaseException as exc:  # noqa: BLE001
            out.append(("raised", exc))

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"hang: {fn} ran past {seconds} s"
    kind, value = out[0]
    if kind == "raised":
        raise value
    return value


def engine_offsets(logdir: Path, *, damaged: bool = False) -> list[int]:
    """The offsets the engine reads, up to the damage it raises (``damaged``: it must raise some)."""
    with LogDir(logdir) as d:
        log = d.log(fuzz.PARTITION)

        def read() -> list[int]:
            out = []
            try:
                for batch in log.read(validate=False):
                    out.extend(batch.offsets)
            except CorruptRecordError as exc:
                assert damaged, exc
                assert "below the segment's base" in exc.reason or "go backwards" in exc.reason, exc
                return out
            assert not damaged, "no damage raised"
            return out

        return within(30, read)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkafs", *args], capture_output=True, timeout=60)


@pytest.mark.parametrize(("old", "new", "indexes"), CASES)
def test_engine_and_consume_end_and_agree(template, tmp_path, old, new, indexes):
    logdir = renamed(template, tmp_path / "logs", old, new, indexes)
    offsets = engine_offsets(logdir, damaged=True)
    assert offsets == sorted(set(offsets)) and offsets, offsets  # once each, in order
    # the segments below the renamed one are served whole
    with LogDir(template) as d:
        intact = [o for b in d.log(fuzz.PARTITION).read() for o in b.offsets if o < old]
    assert offsets[: len(intact)] == intact
    proc = cli("consume", str(logdir), fuzz.PARTITION)
    assert proc.returncode == 1, proc.stderr  # the renamed segment's batches are damage, said
    assert b"Traceback" not in proc.stderr and f"{new:020d}.log".encode() in proc.stderr
    assert [orjson.loads(line)["offset"] for line in proc.stdout.splitlines()] == offsets


@pytest.mark.allow_warnings("the renamed segment's batches are damage: logged once")
@pytest.mark.parametrize(("old", "new", "indexes"), CASES)
def test_tree_by_offset_ends_and_serves_what_it_lists(template, tmp_path, old, new, indexes):
    logdir = renamed(template, tmp_path / "logs", old, new, indexes)
    offsets = engine_offsets(logdir, damaged=True)
    tree = Tree(LogDir(logdir))
    try:
        names = within(30, lambda: tree.listdir(f"{fuzz.PARTITION}/by-offset"))
        listed = [int(name[:-5]) for name in names]
        assert listed == sorted(set(listed)) and listed[: len(offsets)] == offsets  # the damaged ones maybe too

        def read_all() -> dict[int, int]:
            got = {}
            for n in range(0, new + 200):
                try:
                    got[n] = orjson.loads(tree.read_file(f"{fuzz.PARTITION}/by-offset/{n}.json"))["offset"]
                except (NotFound, CorruptRecordError):  # no such offset, or one in the damaged batches
                    pass
            return got

        got = within(60, read_all)
        assert all(got[o] == o for o in offsets) and all(k == v for k, v in got.items())
        # the ranges listed past a small list limit end too (a damaged one may fail with EIO)
        small = Tree(LogDir(logdir), list_limit=5)
        try:
            for name in within(30, lambda: small.listdir(f"{fuzz.PARTITION}/by-offset")):
                try:
                    within(30, lambda name=name: small.read_file(f"{fuzz.PARTITION}/by-offset/{name}"))
                except CorruptRecordError:
                    pass
        finally:
            small.close()
    finally:
        tree.close()


@pytest.mark.allow_warnings("recover cuts the batches below the renamed segment's base")
@pytest.mark.parametrize(("old", "new", "indexes"), CASES)
def test_verify_calls_it_damage_and_recover_repairs_it(template, tmp_path, old, new, indexes):
    logdir = renamed(template, tmp_path / "logs", old, new, indexes)
    proc = cli("verify", str(logdir))
    assert proc.returncode == 1, proc.stdout
    assert f"is below the segment's base {new}" in proc.stdout.decode()
    proc = cli("recover", str(logdir))
    assert proc.returncode == 1, proc.stdout + proc.stderr  # damage found and cut (SPEC §4)
    assert b"Traceback" not in proc.stderr
    proc = cli("verify", str(logdir))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.decode().rstrip().endswith("OK")
    offsets = engine_offsets(logdir)
    assert offsets == sorted(set(offsets))  # what survived, once each and in order (maybe with a gap)
    proc = cli("consume", str(logdir), fuzz.PARTITION)
    assert proc.returncode == 0 and proc.stdout.count(b"\n") == len(offsets)


def test_a_mount_reads_every_file_without_hanging(template, tmp_path, mounted):
    logdir = tmp_path / "logs"
    logdir.mkdir()
    for i, (old, new, indexes) in enumerate(CASES):
        one = renamed(template, tmp_path / f"case{i}", old, new, indexes)
        shutil.copytree(one / fuzz.PARTITION, logdir / f"m{i}-0")
    m = mounted(logdir)
    m.allow_errors = True
    read, problems = fuzz.read_everything(m.path, timeout=30)
    assert read > 10 * len(CASES) and not problems, problems
    assert "Traceback" not in m.log(), m.log()
    for i, _case in enumerate(CASES):
        listed = sorted(p.name for p in (m / f"m{i}-0" / "by-offset").iterdir())
        for name in listed[:3] + listed[-3:]:
            assert orjson.loads((m / f"m{i}-0" / "by-offset" / name).read_bytes())["offset"] == int(name[:-5])
