"""``tail -f records.jsonl`` on a real ``--rw`` mount while its background cleaner compacts and deletes
segments under it: every line tail prints is a whole record, in offset order, printed once, and the
record that was appended at that offset; ``cat`` and ``by-offset/`` reads meanwhile get no error."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir

pytestmark = pytest.mark.fuse

if not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None or shutil.which("tail") is None:
    pytest.skip("FUSE (or tail) is not available", allow_module_level=True)

CONFIG = """\
"segment.bytes" = 4096
"index.interval.bytes" = 512
"segment.index.bytes" = 4096
"log.cleaner.backoff.ms" = 100
"log.retention.check.interval.ms" = 300
"log.initial.task.delay.ms" = 0
"file.delete.delay.ms" = 3000
"log.cleaner.dedupe.buffer.size" = 1048576
[topics."kv"]
"cleanup.policy" = "compact"
"min.cleanable.dirty.ratio" = 0.1
"delete.retention.ms" = 1000
[topics."ev"]
"retention.bytes" = 16384
"retention.ms" = -1
"""
TOPICS = ("kv", "ev")


class Run:
    """Appends to kv-0 (compacted, 50 keys) and ev-0 (retention by size) through ``append``; keeps
    what went in at each offset; readers and ``tail -f`` check what comes out."""

    def __init__(self, mount: Path) -> None:
        self.mnt = mount
        self.appended: dict[str, dict[int, tuple]] = {t: {} for t in TOPICS}
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.inodes: dict[str, set[int]] = {t: set() for t in TOPICS}
        self.counts = {"cat": 0, "by_offset": 0, "by_offset_gone": 0}

    def error(self, text: str) -> None:
        if len(self.errors) < 30:
            self.errors.append(text)

    def right(self, topic: str, rec: dict) -> bool:
        return self.appended[topic].get(rec.get("offset")) == (rec.get("key"), rec.get("value"))

    def writer(self) -> None:
        rng = random.Random(1)
        fds = {t: os.open(self.mnt / f"{t}-0" / "append", os.O_WRONLY | os.O_APPEND) for t in TOPICS}
        next_offset = dict.fromkeys(TOPICS, 0)
        try:
            while not self.stop.is_set():
                for topic in TOPICS:
                    lines = []
                    for _ in range(5):
                        off = next_offset[topic] + len(lines)
                        if topic == "kv":
                            key = f"k{rng.randrange(50)}"
                            value = None if rng.random() < 0.03 else f"{off}:{key}" + "x" * rng.randrange(40)
                        else:
                            key, value = None, f"e{off}" + "y" * rng.randrange(40)
                        self.appended[topic][off] = (key, value)
                        lines.append(json.dumps({"key": key, "value": value}))
                    os.write(fds[topic], ("\n".join(lines) + "\n").encode())
                    next_offset[topic] += len(lines)
                time.sleep(0.01)
        except OSError as exc:
            self.error(f"append: {exc}")
        finally:
            for fd in fds.values():
                os.close(fd)

    def cat_reader(self) -> None:
        while not self.stop.is_set():
            for topic in TOPICS:
                path = self.mnt / f"{topic}-0" / "records.jsonl"
                try:
                    self.inodes[topic].add(os.stat(path).st_ino)
                    data = path.read_bytes()
                except OSError as exc:
                    self.error(f"cat {topic}: {exc}")
                    continue
                if data and not data.endswith(b"\n"):
                    self.error(f"cat {topic}: ends inside a line")
                last = -1
                for line in data.splitlines():
                    try:
                        rec = json.loads(line)
                    except ValueError:  # a half line: reported, not a dead reader thread
                        self.error(f"cat {topic}: not JSON: {line[:80]!r}")
                        break
                    if rec["offset"] <= last or not self.right(topic, rec):
                        self.error(f"cat {topic}: {rec} after offset {last}")
                    last = rec["offset"]
                self.counts["cat"] += 1
            try:  # the segment compaction keeps swapping: in the kernel's cache when the next swap comes
                (self.mnt / "kv-0" / "segments" / f"{0:020d}.log").read_bytes()
            except FileNotFoundError:
                pass  # mid-swap the name is briefly free, in the partition folder too
            except OSError as exc:
                self.error(f"segments/: {exc}")
            time.sleep(0.05)

    def by_offset_reader(self) -> None:
        rng = random.Random(2)
        while not self.stop.is_set():
            topic = rng.choice(TOPICS)
            part = self.mnt / f"{topic}-0"
            try:
                info = json.loads((part / "partition.json").read_bytes())
                lo, hi = info["logStartOffset"], info["logEndOffset"]
                if hi <= lo:
                    time.sleep(0.05)
                    continue
                n = rng.randrange(lo, hi)
                rec = json.loads((part / "by-offset" / f"{n}.json").read_bytes())
            except FileNotFoundError:
                self.counts["by_offset_gone"] += 1  # compacted away, or deleted since partition.json
                continue
            except OSError as exc:
                self.error(f"by-offset of {topic}: {exc}")
                continue
            if rec["offset"] != n or not self.right(topic, rec):
                self.error(f"by-offset/{n}.json of {topic}: {rec}")
            self.counts["by_offset"] += 1
            time.sleep(0.005)


def _tail(path: Path) -> tuple[subprocess.Popen, list[bytes], list[bytes]]:
    proc = subprocess.Popen(["tail", "-n", "+1", "-f", str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out: list[bytes] = []
    err: list[bytes] = []
    threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True).start()  # type: ignore[arg-type]
    threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True).start()  # type: ignore[arg-type]
    return proc, out, err


def _segments_match(logs: Path, mnt: Path, tries: int = 20) -> list[str]:
    """The ``.log`` files under ``segments/`` whose bytes differ from the partition folder's (a file the
    cleaner swaps meanwhile is compared again)."""
    differ: list[str] = []
    for _ in range(tries):
        differ = []
        for topic in TOPICS:
            for name in sorted(os.listdir(logs / f"{topic}-0")):
                if not name.endswith(".log"):
                    continue
                try:
                    disk = (logs / f"{topic}-0" / name).read_bytes()
                    seen = (mnt / f"{topic}-0" / "segments" / name).read_bytes()
                    again = (logs / f"{topic}-0" / name).read_bytes()
                except FileNotFoundError:
                    continue  # retention removed it meanwhile
                if seen != disk and disk == again:
                    differ.append(f"{topic}-0/{name}")
        if not differ:
            return []
        time.sleep(0.2)
    return differ


def _follow_through_swaps(tmp_path: Path, mounted, seconds: float) -> None:
    logs = tmp_path / "logs"
    config = tmp_path / "kafkafs.toml"
    config.write_text(CONFIG)
    logs.mkdir()
    with LogDir(logs, Settings.load(config), writable=True) as logdir:
        for topic in TOPICS:
            logdir.create_partition(topic, 0)
    mount = mounted(logs, "--rw", "--clean", "--config", str(config))
    run = Run(mount.path)
    tails = {t: _tail(mount / f"{t}-0" / "records.jsonl") for t in TOPICS}
    threads = [threading.Thread(target=fn, daemon=True) for fn in (run.writer, run.cat_reader, run.by_offset_reader)]
    try:
        for t in threads:
            t.start()
        time.sleep(seconds)
        run.stop.set()
        for t in threads:
            t.join(30)
        ends = {t: max(run.appended[t]) for t in TOPICS}
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            printed = {t: tails[t][1][-1] if tails[t][1] else b"" for t in TOPICS}
            if all(p.startswith(b"{") and p.endswith(b"\n") and json.loads(p)["offset"] == ends[t]
                   for t, p in printed.items()):
                break
            time.sleep(0.2)
        segments_match = _segments_match(logs, mount.path)
    finally:
        run.stop.set()
        for proc, _out, _err in tails.values():
            proc.kill()
            proc.wait()
    assert run.errors == []
    assert segments_match == []  # segments/ serves the files the swaps put there, not the old ones
    for topic in TOPICS:
        _proc, out, err = tails[topic]
        assert err == [], f"tail -f {topic} said {err[:3]}"  # no "file truncated"
        last = -1
        for line in out:
            rec = json.loads(line)  # a cut line fails here
            assert rec["offset"] > last, f"tail -f {topic} printed offset {rec['offset']} after {last}"
            assert run.right(topic, rec), f"tail -f {topic}: {rec}"
            last = rec["offset"]
        assert last == max(run.appended[topic]), f"tail -f {topic} stopped at {last}"
        # records compacted or deleted before tail's inode got to them are not in it (as for a consumer
        # that lags behind the cleaner); the rest are
        assert len(out) > 100
        # compaction or retention rewrote the partition several times: records.jsonl was renewed
        assert len(run.inodes[topic]) >= 3, (topic, run.inodes[topic])
    assert run.counts["cat"] > 10 and run.counts["by_offset"] > 10
    assert run.counts["by_offset_gone"] > 0


def test_tail_f_follows_records_jsonl_through_compaction_and_retention(tmp_path, mounted):
    _follow_through_swaps(tmp_path, mounted, 12)


@pytest.mark.slow
def test_tail_f_for_two_minutes(tmp_path, mounted):
    _follow_through_swaps(tmp_path, mounted, 120)
