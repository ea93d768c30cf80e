"""``kafkafs index``: the size cache filled ahead of a mount."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from kafkafs import cli
from kafkafs.fs.tree.root import Tree
from kafkafs.fs.views.layoutcache import LayoutCache
from kafkafs.fs.views.prefill import index_logdir
from kafkafs.storage.logdir import LogDir

from ..conftest import ROOT, SMALL_SEGMENTS, expected_jsonl
from .test_layoutcache import Counting, tree_of


def test_index_fills_the_cache(logdir_copy, tmp_path, monkeypatch, capsys):
    cache_dir = tmp_path / "cache"
    before = {p: p.stat().st_mtime_ns for p in logdir_copy.rglob("*")}
    assert cli.main(["index", str(logdir_copy), "--cache-dir", str(cache_dir)]) == 0
    err = capsys.readouterr().err
    assert err.startswith("indexed 3 partitions") and "(0 from the cache" in err
    assert {p: p.stat().st_mtime_ns for p in logdir_copy.rglob("*")} == before, "index writes nothing in LOGDIR"
    counting = Counting(monkeypatch)
    t = tree_of(logdir_copy, cache_dir)
    try:
        for name in ("orders-0", "events-3"):
            assert t.resolve(f"{name}/records.jsonl").attr().size == len(expected_jsonl(logdir_copy, name))
        assert counting.sized == 0
    finally:
        t.close()
    report = index_logdir(logdir_copy, cache_dir=cache_dir, out=None)
    assert report.sized == 0 and report.from_cache == report.segments - 1  # empty-0's segment is empty


def test_index_values_mode_and_progress_lines(built_logdir, tmp_path):
    import io

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Terminal()
    report = index_logdir(built_logdir, cache_dir=tmp_path / "c", mode="string", out=out)
    assert report.sized == report.segments - 1 > 3  # empty-0's segment is empty
    bar = out.getvalue()
    assert bar.startswith("\rindex: [") and bar.endswith("\n")
    assert f"] {report.sized}/{report.sized} segments" in bar.rsplit("\r", 1)[-1]
    t = Tree(LogDir(built_logdir, SMALL_SEGMENTS), mode="string", cache=LayoutCache(tmp_path / "c"))
    try:
        t.resolve("orders-0/records.jsonl").attr()
        t.resolve("events-3/records.jsonl").attr()
        assert t.partitions.cache.misses == 0 and t.partitions.cache.hits == report.segments - 1  # empty-0's segment is empty
    finally:
        t.close()


def test_index_refuses_a_cache_inside_the_logdir(built_logdir, capsys):
    assert cli.main(["index", str(built_logdir), "--cache-dir", str(built_logdir / "cache")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "inside the log directory" in err
    assert not (built_logdir / "cache").exists()
    assert cli.main(["index", str(built_logdir / "nothing")]) == 2


def test_index_with_a_cache_it_cannot_write_fails(built_logdir, tmp_path, capsys):
    # filling the cache is all `index` does: a cache folder it cannot have is no success (it warned,
    # said "indexed ... into FILE" and exited 0)
    a_file = tmp_path / "a-file"
    a_file.write_bytes(b"")
    assert cli.main(["index", str(built_logdir), "--cache-dir", str(a_file)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a folder" in err and "indexed" not in err
    assert cli.main(["index", str(built_logdir), "--cache-dir", str(a_file / "below")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_index_with_the_cache_turned_off_is_a_usage_error(built_logdir, tmp_path, monkeypatch, capsys):
    # review12 R12-10: --cache-dir '' (the cache off, as for mount and consume) filled the CURRENT directory
    monkeypatch.chdir(tmp_path)
    assert cli.main(["index", str(built_logdir), "--cache-dir", ""]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "turns the size cache off" in err
    assert os.listdir(tmp_path) == []


def test_index_command_line(built_logdir, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "kafkafs.cli", "index", str(built_logdir), "--cache-dir", str(tmp_path / "c")],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "indexed 3 partitions" in done.stderr and "Traceback" not in done.stderr


def test_index_decodes_as_the_mount_does(tmp_path, fixtures_dir):
    """``index`` sizes internal topics and registry-framed values with their decoders, so a mount with the
    same schemas finds every size in the cache."""
    from kafkafs.format.decoders import decoder_for
    from kafkafs.format.jsonview import render_batch_jsonl
    from kafkafs.storage.schemas import load_registry
    from tests.registry_setup import build_registry_logdir

    logdir = build_registry_logdir(tmp_path / "logs")
    shutil.copytree(fixtures_dir / "kafka-logs-c" / "__consumer_offsets-6", logdir / "__consumer_offsets-6")
    report = index_logdir(logdir, cache_dir=tmp_path / "c", out=None)
    t = Tree(LogDir(logdir), cache=LayoutCache(tmp_path / "c"))
    t.partitions.registry = load_registry(logdir)
    try:
        for name in ("orders-0", "events-0", "__consumer_offsets-6"):
            topic = name.rsplit("-", 1)[0]
            decoder = decoder_for(topic, t.partitions.registry)
            assert decoder is not None
            with LogDir(logdir) as plain:
                want = sum(len(render_batch_jsonl(topic, int(name.rsplit("-", 1)[1]), b, decoder=decoder))
                           for b in plain.log(name).read())
            assert t.resolve(f"{name}/records.jsonl").attr().size == want
        assert t.partitions.cache.misses == 0 and t.partitions.cache.hits >= 3 and report.sized >= 3
    finally:
        t.close()


def test_index_exits_1_when_it_finds_damage(logdir_copy, tmp_path):
    # SPEC §4: exit 1 when damage is found; index logged each corrupt batch and exited 0. A new process
    # (damage is logged once per process)
    segment = sorted((logdir_copy / "orders-0").glob("*.log"))[0]
    data = bytearray(segment.read_bytes())
    data[200] ^= 0xFF  # inside the first batch's records: its CRC no longer holds
    segment.write_bytes(bytes(data))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    args = [sys.executable, "-m", "kafkafs", "index", str(logdir_copy), "--cache-dir", str(tmp_path / "c")]
    proc = subprocess.run(args, capture_output=True, timeout=120, env=env)
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert "corrupt batch in" in err and f"damage found (1, said above); `kafkafs verify {logdir_copy}`" in err
    assert "Traceback" not in err
