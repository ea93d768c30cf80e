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

from kafkafs.storage.cleaner import compact
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


@pytest.mark.slow  # a 12 s live run: default suite under 15 min
def test_tail_f_follows_records_jsonl_through_compaction_and_retention(tmp_path, mounted):
    _follow_through_swaps(tmp_path, mounted, 12)


@pytest.mark.slow
def test_tail_f_for_two_minutes(tmp_path, mounted):
    _follow_through_swaps(tmp_path, mounted, 120)


CLEANER = Settings(
    {"segment.bytes": 1500, "index.interval.bytes": 256, "file.delete.delay.ms": 0},
    topics={"kv": {"cleanup.policy": "compact", "delete.retention.ms": 0, "min.cleanable.dirty.ratio": 0.01}},
)


def _slow_reader(path: Path, stop: threading.Event, out: list[bytes], errors: list[str]) -> None:
    """A reader that lags: a small read now and then from one open descriptor, to its end and on."""
    try:
        with open(path, "rb", buffering=0) as f:
            while True:
                data = f.read(700)
                if data:
                    out.append(data)
                elif stop.is_set():
                    return
                time.sleep(0.02)
    except OSError as exc:
        errors.append(f"slow reader: {exc}")


def test_tail_f_of_a_read_only_mount_follows_another_processs_cleaner(tmp_path, mounted):
    """review8 R8-4: a read-only mount of a folder another process appends to and compacts as a broker's
    LogCleaner does beside a fast producer (each segment merged away soon after it rolls, its files
    deleted at once): ``tail -f`` and a slow reader of the open records.jsonl died with ESTALE when a
    segment the mount had just laid out for them was closed before they read it. Both read on to the
    last record: whole lines, in offset order, each the record appended at its offset (those the cleaner
    dropped before a reader got there are skipped, as a consumer that lags the cleaner skips them)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    with LogDir(logs, CLEANER, writable=True) as logdir:
        logdir.create_partition("kv", 0)
    mount = mounted(logs)
    path = mount / "kv-0" / "records.jsonl"
    tail = _tail(path)
    stop, slow, errors = threading.Event(), [], []
    reader = threading.Thread(target=_slow_reader, args=(path, stop, slow, errors), daemon=True)
    reader.start()
    appended: dict[int, tuple] = {}
    rng = random.Random(4)
    try:
        with LogDir(logs, CLEANER, writable=True) as logdir:
            log = logdir.log("kv-0")
            deadline = time.monotonic() + 6
            swaps = 0
            while time.monotonic() < deadline:
                for _ in range(10):
                    start = log.log_end_offset
                    rows = []
                    for i in range(3):
                        key = f"k{rng.randrange(20)}"
                        appended[start + i] = (key, f"{start + i}:{key}")
                        rows.append((None, key.encode(), appended[start + i][1].encode(), ()))
                    log.append_records(rows)
                    time.sleep(0.005)
                swaps += bool(compact(log, int(time.time() * 1000)))
        last = max(appended)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and tail[0].poll() is None and not (
                tail[1] and tail[1][-1].startswith(b'{"topic":"kv","partition":0,"offset":%d,' % last)):
            time.sleep(0.2)
        stop.set()
        reader.join(15)
    finally:
        stop.set()
        tail[0].kill()
        tail[0].wait()
    assert errors == []
    assert tail[2] == [], f"tail -f said {tail[2][:3]}"
    assert swaps > 10
    for name, lines in (("tail -f", tail[1]), ("slow reader", b"".join(slow).splitlines(keepends=True))):
        previous = -1
        for line in lines:
            rec = json.loads(line)  # a cut line fails here
            assert rec["offset"] > previous and appended[rec["offset"]] == (rec["key"], rec["value"]), (name, rec)
            previous = rec["offset"]
        assert previous == last, f"{name} stopped at {previous} of {last}"
