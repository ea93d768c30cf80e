"""Soak: a ``--rw --clean`` mount under continuous appends, its background cleaner keeping the log bounded.

Two partitions in small segments: ``kv-0`` compacted (a few hundred keys, some tombstones) and ``ev-0``
under ``retention.bytes``. A writer appends to both through ``append`` without pause while readers check
every record they get, each value naming the offset it was appended at:

- ``records.jsonl`` read whole, over and over (JSON, offsets increasing, each value right for its offset);
- ``by-offset/N.json`` at random offsets between the log start and end (a record compacted away or
  deleted is ENOENT; any other error, or a wrong record, counts);
- ``tail -n +1 -f records.jsonl`` of both partitions: every line it prints must be a whole record, the one
  appended at its offset, offsets strictly increasing (a line cut short, a record printed again, a
  wrong record, or anything tail says on stderr, such as "file truncated", is an error).

The disk use of each partition folder (blocks, ``.deleted`` files included) is sampled every two seconds;
the log is bounded when the last quarter of the run never uses more than the second quarter did (plus
a few segments of slack; the first quarter warms up). At the end the mount is unmounted, and the compacted partition, read offline, must
hold every key's latest value.

    .venv/bin/python bench/cleaner_mount.py [--seconds 600] [--rate 400] [--keys 300] [--json] [--dir D]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SEGMENT = 8192
CONFIG = """\
"segment.bytes" = {segment}
"index.interval.bytes" = 1024
"segment.index.bytes" = 4096
"log.cleaner.backoff.ms" = 200
"log.retention.check.interval.ms" = 1000
"log.initial.task.delay.ms" = 0
"file.delete.delay.ms" = {delay}
"log.cleaner.dedupe.buffer.size" = 1048576
[topics."kv"]
"cleanup.policy" = "compact"
"min.cleanable.dirty.ratio" = 0.3
"delete.retention.ms" = 2000
[topics."ev"]
"retention.bytes" = 65536
"retention.ms" = -1
"""


class Soak:
    def __init__(self, root: Path, seconds: float, rate: int, keys: int, delay_ms: int = 10_000) -> None:
        self.delay_ms = delay_ms
        self.root = root
        self.logs = root / "logs"
        self.mnt = root / "mnt"
        self.seconds = seconds
        self.rate = rate
        self.keys = keys
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.errors: list[str] = []
        self.counts = {"appended": 0, "jsonl_reads": 0, "jsonl_records": 0, "by_offset_hits": 0,
                       "by_offset_gone": 0, "tail_lines": 0, "tail_replayed": 0, "tail_said": 0, "tail_cut": 0,
                       "wrong": 0, "errors": 0}
        self.latest: dict[str, str | None] = {}
        self.appended: dict[str, dict[int, tuple[str | None, str | None]]] = {"kv": {}, "ev": {}}
        self.inodes: dict[str, set[int]] = {"kv": set(), "ev": set()}
        self.next = {"kv": 0, "ev": 0}
        self.samples: list[tuple[float, int, int, int, int]] = []
        self.tail_last = {"kv": -1, "ev": -1}

    # ---------------------------------------------------------------------------------------- helpers

    def error(self, what: str) -> None:
        with self.lock:
            self.counts["errors"] += 1
            if len(self.errors) < 50:
                self.errors.append(what)

    def count(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.counts[name] += n

    def check(self, topic: str, rec: dict, where: str) -> bool:
        """The record is the one appended at its offset (key and value)."""
        good = self.appended[topic].get(rec.get("offset")) == (rec.get("key"), rec.get("value"))
        if not good:
            self.count("wrong")
            self.error(f"{where}: wrong record {rec}")
        return good

    # ---------------------------------------------------------------------------------------- setup

    def setup(self) -> None:
        from kafkafs.storage.config import Settings
        from kafkafs.storage.logdir import LogDir

        self.logs.mkdir(parents=True)
        self.mnt.mkdir()
        (self.root / "kafkafs.toml").write_text(CONFIG.format(segment=SEGMENT, delay=self.delay_ms))
        settings = Settings.load(self.root / "kafkafs.toml")
        with LogDir(self.logs, settings, writable=True) as logdir:
            logdir.create_partition("kv", 0)
            logdir.create_partition("ev", 0)

    def mount(self) -> subprocess.Popen:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)] + sys.path))
        self.mount_log = open(self.root / "mount.log", "wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "kafkafs", "mount", str(self.logs), str(self.mnt), "--rw", "--clean", "-f",
             "--config", str(self.root / "kafkafs.toml")],
            stdout=self.mount_log, stderr=subprocess.STDOUT, env=env, cwd=str(ROOT),
        )
        deadline = time.monotonic() + 120  # a loaded machine can take that long to start Python and FUSE
        while not os.path.ismount(self.mnt):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the mount did not start: " + (self.root / "mount.log").read_text())
            time.sleep(0.05)
        return proc

    # ---------------------------------------------------------------------------------------- workers

    def writer(self) -> None:
        rng = random.Random(5)
        kv = os.open(self.mnt / "kv-0" / "append", os.O_WRONLY | os.O_APPEND)
        ev = os.open(self.mnt / "ev-0" / "append", os.O_WRONLY | os.O_APPEND)
        per_tick = max(self.rate // 50, 1)
        try:
            while not self.stop.is_set():
                t = time.monotonic()
                lines = []
                for _ in range(per_tick):
                    key = f"k{rng.randrange(self.keys)}"
                    off = self.next["kv"] + len(lines)
                    value = None if rng.random() < 0.02 else f"{off}:{key}"
                    lines.append(json.dumps({"key": key, "value": value}))
                    self.latest[key] = value
                    self.appended["kv"][off] = (key, value)
                os.write(kv, ("\n".join(lines) + "\n").encode())
                self.next["kv"] += len(lines)
                evs = [f"e{self.next['ev'] + i}" for i in range(per_tick)]
                for i, value in enumerate(evs):
                    self.appended["ev"][self.next["ev"] + i] = (None, value)
                os.write(ev, ("\n".join(evs) + "\n").encode())
                self.next["ev"] += len(evs)
                self.count("appended", 2 * per_tick)
                time.sleep(max(0.02 - (time.monotonic() - t), 0))
        except OSError as exc:
            self.error(f"append: {exc}")
        finally:
            os.close(kv)
            os.close(ev)

    def jsonl_reader(self) -> None:
        while not self.stop.is_set():
            for topic in ("kv", "ev"):
                path = self.mnt / f"{topic}-0" / "records.jsonl"
                try:
                    self.inodes[topic].add(os.stat(path).st_ino)  # a new one after each rewrite
                    data = path.read_bytes()
                except OSError as exc:
                    self.error(f"records.jsonl of {topic}: {exc}")
                    continue
                if data and not data.endswith(b"\n"):
                    self.error(f"records.jsonl of {topic}: ends inside a line")
                last = -1
                for line in data.splitlines():
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        self.error(f"records.jsonl of {topic}: not JSON: {line[:80]!r}")
                        break
                    if rec["offset"] <= last:
                        self.error(f"records.jsonl of {topic}: offset {rec['offset']} after {last}")
                    last = rec["offset"]
                    self.check(topic, rec, f"records.jsonl of {topic}")
                self.count("jsonl_reads")
                self.count("jsonl_records", len(data.splitlines()))
            time.sleep(0.2)

    def by_offset_reader(self) -> None:
        rng = random.Random(9)
        while not self.stop.is_set():
            topic = rng.choice(("kv", "ev"))
            part = self.mnt / f"{topic}-0"
            try:
                info = json.loads((part / "partition.json").read_bytes())
            except OSError as exc:
                self.error(f"partition.json of {topic}: {exc}")
                continue
            lo, hi = info["logStartOffset"], info["logEndOffset"]
            if hi <= lo:
                time.sleep(0.05)
                continue
            n = rng.randrange(lo, hi)
            try:
                rec = json.loads((part / "by-offset" / f"{n}.json").read_bytes())
            except FileNotFoundError:
                self.count("by_offset_gone")
                continue
            except OSError as exc:
                self.error(f"by-offset/{n}.json of {topic}: {exc}")
                continue
            if rec.get("offset") != n:
                self.error(f"by-offset/{n}.json of {topic}: holds offset {rec.get('offset')}")
            self.check(topic, rec, f"by-offset/{n}.json of {topic}")
            self.count("by_offset_hits")
            time.sleep(0.005)

    def tail(self, topic: str) -> subprocess.Popen:
        proc = subprocess.Popen(["tail", "-n", "+1", "-f", str(self.mnt / f"{topic}-0" / "records.jsonl")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

        def lines() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                try:
                    rec = json.loads(line)
                except ValueError:
                    self.count("tail_cut")
                    self.error(f"tail -f {topic}: not a whole record: {line[:80]!r}")
                    continue
                self.check(topic, rec, f"tail -f {topic}")
                self.count("tail_lines")
                if rec["offset"] <= self.tail_last[topic]:
                    self.count("tail_replayed")
                    self.error(f"tail -f {topic}: offset {rec['offset']} printed after {self.tail_last[topic]}")
                self.tail_last[topic] = max(self.tail_last[topic], rec["offset"])

        def errors() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:  # "file truncated", "Stale file handle", ...
                self.count("tail_said")
                self.error(f"tail -f {topic}: {line.decode(errors='replace').strip()}")

        threading.Thread(target=lines, daemon=True).start()
        threading.Thread(target=errors, daemon=True).start()
        return proc

    def usage(self, name: str) -> tuple[int, int]:
        total = segments = 0
        with os.scandir(self.logs / name) as entries:
            for e in entries:
                try:
                    total += e.stat().st_blocks * 512
                except FileNotFoundError:
                    continue
                segments += e.name.endswith(".log")
        return total, segments

    def held(self, pid: int) -> int:
        """Bytes of removed segment files the mount still holds open (for readers that have not read
        them yet): on disk, though no longer in the folder."""
        total = 0
        fds = f"/proc/{pid}/fd"
        try:
            names = os.listdir(fds)
        except OSError:
            return 0
        for fd in names:
            try:
                target = os.readlink(f"{fds}/{fd}")
                if target.startswith(str(self.logs)) and target.endswith("(deleted)"):
                    total += os.stat(f"{fds}/{fd}").st_blocks * 512
            except OSError:
                continue
        return total

    # ---------------------------------------------------------------------------------------- run

    def run(self) -> dict:
        self.setup()
        proc = self.mount()
        tails = []
        threads = []
        try:
            tails = [self.tail("kv"), self.tail("ev")]
            for fn in (self.writer, self.jsonl_reader, self.by_offset_reader):
                threads.append(threading.Thread(target=fn, daemon=True))
                threads[-1].start()
            start = time.monotonic()
            while time.monotonic() - start < self.seconds:
                time.sleep(2)
                kv, kv_segments = self.usage("kv-0")
                ev, ev_segments = self.usage("ev-0")
                self.samples.append((time.monotonic() - start, kv, ev, kv_segments, ev_segments, os.getloadavg()[0],
                                     self.held(proc.pid)))
                if self.errors and len(self.errors) >= 50:
                    break
            self.stop.set()
            for t in threads:
                t.join(30)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and (self.tail_last["kv"] < self.next["kv"] - 1
                                                    or self.tail_last["ev"] < self.next["ev"] - 1):
                time.sleep(0.2)
        finally:
            self.stop.set()
            for t in tails:
                t.kill()
                t.wait()
            subprocess.run(["fusermount3", "-u", str(self.mnt)], capture_output=True)
            try:
                code = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
                subprocess.run(["fusermount3", "-uz", str(self.mnt)], capture_output=True)
            self.mount_log.close()
        log_text = (self.root / "mount.log").read_text(errors="replace")
        self.swaps = {"compactions": log_text.count(": compacted "), "retention": log_text.count("marked for deletion")}
        if code != 0:
            self.error(f"the mount exited with {code}")
        if "Traceback" in log_text or "ERROR" in log_text:
            self.error("the mount logged an error: " + log_text[-2000:])
        for topic in ("kv", "ev"):
            if self.tail_last[topic] < self.next[topic] - 1:
                self.error(f"tail -f {topic} stopped at {self.tail_last[topic]}, the log ends at {self.next[topic] - 1}")
        self.verify_offline()
        return self.summary()

    def verify_offline(self) -> None:
        from kafkafs.storage.config import Settings
        from kafkafs.storage.logdir import LogDir

        with LogDir(self.logs, Settings.load(self.root / "kafkafs.toml")) as logdir:
            seen: dict[str, str | None] = {}
            for _off, _ts, key, value, _h in logdir.log("kv-0").records():
                seen[key.decode()] = None if value is None else value.decode()
        for key, value in self.latest.items():
            if value is None:
                if seen.get(key) is not None:
                    self.error(f"offline: {key} holds {seen[key]!r} after its tombstone")
            elif seen.get(key) != value:
                self.error(f"offline: {key} holds {seen.get(key)!r}, its latest is {value!r}")

    def summary(self) -> dict:
        quarter = len(self.samples) // 4  # the first quarter warms up (file.delete.delay.ms and all)
        first, second = self.samples[quarter:2 * quarter], self.samples[3 * quarter:]

        def peak(rows, i):
            return max((r[i] for r in rows), default=0)

        bounded = all(peak(second, i) <= peak(first, i) * 1.5 + 4 * SEGMENT for i in (1, 2))
        return {
            "seconds": self.seconds,
            "appended": self.counts["appended"],
            "counts": self.counts,
            "kv_disk_peak_2nd_quarter": peak(first, 1), "kv_disk_peak_4th_quarter": peak(second, 1),
            "ev_disk_peak_2nd_quarter": peak(first, 2), "ev_disk_peak_4th_quarter": peak(second, 2),
            "kv_segments_max": peak(self.samples, 3), "ev_segments_max": peak(self.samples, 4),
            "kv_disk_final": self.samples[-1][1] if self.samples else 0,
            "ev_disk_final": self.samples[-1][2] if self.samples else 0,
            "bounded": bounded,
            "timeline": [(round(r[0]), r[1], r[2], r[6]) for r in self.samples[:: max(len(self.samples) // 10, 1)]],
            "held_peak": peak(self.samples, 6),
            "swaps": self.swaps,
            "records_jsonl_inodes": {t: len(v) for t, v in self.inodes.items()},
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "load_mean": round(sum(r[5] for r in self.samples) / max(len(self.samples), 1), 2),
            "errors": self.errors,
        }


def print_table(result: dict) -> None:
    kib = 1024
    c = result["counts"]
    rows = [
        ("run", f"{result['seconds']:.0f} s, {result['appended']:,} records appended"),
        ("kv-0 disk peak, 2nd / 4th quarter", f"{result['kv_disk_peak_2nd_quarter'] / kib:,.0f} / "
                                          f"{result['kv_disk_peak_4th_quarter'] / kib:,.0f} KiB"),
        ("ev-0 disk peak, 2nd / 4th quarter", f"{result['ev_disk_peak_2nd_quarter'] / kib:,.0f} / "
                                          f"{result['ev_disk_peak_4th_quarter'] / kib:,.0f} KiB"),
        ("segments at most (kv / ev)", f"{result['kv_segments_max']} / {result['ev_segments_max']}"),
        ("bounded", "yes" if result["bounded"] else "NO"),
        ("records.jsonl reads / records checked", f"{c['jsonl_reads']:,} / {c['jsonl_records']:,}"),
        ("by-offset lookups: found / gone", f"{c['by_offset_hits']:,} / {c['by_offset_gone']:,}"),
        ("swaps: compactions / retention deletions", f"{result['swaps']['compactions']:,} / "
                                                     f"{result['swaps']['retention']:,}"),
        ("records.jsonl inodes seen (kv / ev)", f"{result['records_jsonl_inodes']['kv']:,} / "
                                                f"{result['records_jsonl_inodes']['ev']:,}"),
        ("tail -f lines / cut / printed again / said on stderr",
         f"{c['tail_lines']:,} / {c['tail_cut']:,} / {c['tail_replayed']:,} / {c['tail_said']:,}"),
        ("wrong records / errors", f"{c['wrong']:,} / {c['errors']:,}"),
        ("load average (1 min): mean of samples / at the end",
         f"{result['load_mean']} / {result['load_average'][0]}"),
    ]
    rows.append(("removed files still open in the mount, peak", f"{result['held_peak'] / kib:,.0f} KiB"))
    rows += [(f"disk at {t:>4} s (kv / ev / held)", f"{kv / kib:,.0f} / {ev / kib:,.0f} / {held / kib:,.0f} KiB")
             for t, kv, ev, held in result["timeline"]]
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    for e in result["errors"][:10]:
        print("  " + e)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--rate", type=int, default=400, help="records per second per partition")
    parser.add_argument("--keys", type=int, default=300)
    parser.add_argument("--delete-delay-ms", type=int, default=10_000, help="file.delete.delay.ms")
    parser.add_argument("--dir", type=Path)
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--show", type=Path, help="print the table of a summary saved with --json, and exit")
    args = parser.parse_args()
    if args.show:
        result = json.loads(args.show.read_text().strip().splitlines()[-1])
        print_table(result)
        return 0 if result["bounded"] and not result["errors"] else 1
    root = Path(args.dir or tempfile.mkdtemp(prefix="kafkafs-cleaner-soak-"))
    if args.dir:
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
    try:
        result = Soak(root, args.seconds, args.rate, args.keys, args.delete_delay_ms).run()
    finally:
        if os.path.ismount(root / "mnt"):
            subprocess.run(["fusermount3", "-uz", str(root / "mnt")], capture_output=True)
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(result))
    else:
        print_table(result)
    return 0 if result["bounded"] and not result["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
