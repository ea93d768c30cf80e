"""A broker-shaped log directory, measured whole: 200 partitions x 25,000 mixed records (bench/records.py).

Every row compares two ways of doing the same work in the same run (runs interleaved, A B A B ...;
medians of ``--repeat`` runs), so the ratios hold on a shared, noisy machine. Rows:

* ``read``: ``cat MNT/*/records.jsonl`` through a mount (its size cache filled, the logs in the page
  cache; the first read on a fresh mount, then a second read) against ``cat MNT/*/segments/*.log``
  through the same mount (bytes per second), the in-process kernel rendering every partition on 2
  threads (``render_span_jsonl``), and ``kafkafs consume --no-interleave``; the daemon's CPU for the
  first read, and the binding's floor: ``cat`` of as many files of one partition's JSON served from
  memory by a bare pyfuse3 + trio file system (``bench/memfs.py``), one buffer served again and again
  (cache-hot) and each file its own copy (fresh bytes, as the mount serves). ``--against DIR``: the same mounts
  by another checkout, interleaved (before/after). The CPU budget: the daemon's and cat's CPU for the
  first read, and the fastest that CPU could run on this machine's cores, as a ratio to the kernel in
  process; and the floor of that (the kernel's CPU for the render plus the binding's floor's CPU).
* ``size``: the first ``ls -l MNT/*/records.jsonl`` with an empty size cache and the logs evicted from
  the page cache, against ``cat LOGDIR/*/*.log`` evicted and the kernel sizing every partition in
  process (``--against DIR``: the first ``ls -l`` by another checkout's mount too, interleaved); then
  a remount with the cache kept: ``ls -l`` warm and with every file evicted.
* ``remount``: a remount with the size cache kept, ``ls -l`` warm and evicted, with the daemon's CPU;
  ``--against DIR`` runs the same mounts from another checkout, interleaved (before/after in one run).
* ``quiet``: the CPU a mount of every partition uses while nothing happens.
* ``consume``: ``kafkafs consume LOGDIR t`` (a whole topic, interleaved by timestamp) against
  ``--no-interleave``.
* ``byoffset``: ``by-offset/N.json`` of ``--offsets`` offsets, each read 5 times: the first read of
  each and the repeated ones (p50), against open+read of a tiny raw file through the same mount;
  ``--against DIR``: the same offsets by another checkout's mount, interleaved (before/after).
* ``produce``: ``--produce`` mixed JSON-object lines (lines of ``records.jsonl``) and as many plain
  lines through ``kafkafs produce``, against kafka-python's batch builder fed by ``json.loads`` of each
  line in memory (the Python client's floor); and the same lines written to ``MNT/t-0/append`` of a
  ``--rw`` mount, 1,000 lines a write: the ratio of the medians, each run's ratio (append, then the
  produce of the same run), and each run's CPU ratio (the daemon's CPU for the append / produce's).

"Evicted": ``posix_fadvise(DONTNEED)`` on each file (dropping the whole page cache needs a privilege
this machine's sandbox may not give); the mount is fresh, so it has no page cache of its own.

    python bench/many.py [--partitions 200] [--records 25000] [--only read,size,...] [--work DIR]
    python bench/many.py --logdir DIR --topic T      # an existing directory (a broker's), read rows only
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.fs import Mounted, append_all, print_rows  # noqa: E402
from bench.records import batches  # noqa: E402
from kafkafs.storage.config import Settings  # noqa: E402
from kafkafs.storage.logdir import LogDir  # noqa: E402

PY = sys.executable
SECTIONS = ("read", "size", "remount", "quiet", "consume", "byoffset", "produce")
SETTINGS = Settings({"segment.bytes": 64 * 1024 * 1024})


# ---------------------------------------------------------------------------------------------- data


def build(logdir: Path, topic: str, partitions: int, per: int) -> None:
    """``partitions`` partitions of ``per`` mixed records, each from its own seed; every partition's
    timestamps run BASE_TIMESTAMP + 0 .. per-1 (a topic written at one rate: timestamps interleave
    record by record across partitions, ties broken by partition)."""
    logdir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with LogDir(logdir, SETTINGS, writable=True) as d:
        for p in range(partitions):
            if (logdir / f"{topic}-{p}").is_dir():
                continue
            log = d.create_partition(topic, p)
            append_all(log, batches("mixed", per, seed=1000 + p))
            log.flush()
            if p % 20 == 19:
                print(f"  built {p + 1}/{partitions} partitions ({time.perf_counter() - start:.0f} s)", file=sys.stderr)


def partition_dirs(logdir: Path, topic: str) -> list[Path]:
    found = [p for p in logdir.iterdir() if p.is_dir() and p.name.rpartition("-")[0] == topic]
    return sorted(found, key=lambda p: int(p.name.rpartition("-")[2]))


def log_files(logdir: Path, topic: str) -> list[Path]:
    return sorted(f for d in partition_dirs(logdir, topic) for f in d.glob("*.log"))


def evict(paths: list[Path]) -> None:
    """Drop these files' pages from the page cache."""
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def all_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


def warm(paths: list[Path]) -> None:
    for path in paths:
        with open(path, "rb") as f:
            while f.read(1 << 20):
                pass


def shell(cmd: str, stdin: Path | None = None) -> float:
    """Wall seconds of ``sh -c cmd`` (output to /dev/null unless cmd says otherwise)."""
    return shell_cpu(cmd, stdin)[0]


def shell_cpu(cmd: str, stdin: Path | None = None, tree: Path = ROOT) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system, of every process it waited for) of ``sh -c cmd``
    run in ``tree`` (``python -m kafkafs.cli`` imports that checkout's kafkafs)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with open(stdin or os.devnull, "rb") as inp:
        done = subprocess.run(["sh", "-c", cmd], stdin=inp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tree)
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"{cmd!r} failed: {done.stderr.decode()[-2000:]}")
    return took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def process_cpu(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def kafkafs(*args: str) -> str:
    return " ".join([PY, "-m", "kafkafs.cli", *args])


def median_pairs(repeat: int, *fns: Callable[[], float]) -> list[float]:
    """Each function run ``repeat`` times, interleaved; the median of each."""
    runs: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            runs[i].append(fn())
    return [statistics.median(r) for r in runs]


def in_process_render(logs: list[Path], lengths: bool) -> float:
    """Every partition's records.jsonl rendered (or only sized) by the kernel on 2 threads: wall seconds."""
    return in_process_render_cpu(logs, lengths)[0]


def in_process_render_cpu(logs: list[Path], lengths: bool) -> tuple[float, float]:
    """:func:`in_process_render`: wall seconds and this process's CPU seconds (both threads)."""
    from kafkafs.format.jsonspan import render_span_jsonl

    def one(path: Path) -> int:
        topic, _, p = path.parent.name.rpartition("-")
        data = path.read_bytes()
        got = render_span_jsonl(topic, int(p), data, "auto", lengths=lengths)
        assert got.consumed == len(data), path
        return got.line_ends[-1] if len(got.line_ends) else 0

    start, cpu = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(2) as pool:
        total = sum(pool.map(one, logs))
    took, cpu = time.perf_counter() - start, time.process_time() - cpu
    assert total > 0
    return took, cpu


# ---------------------------------------------------------------------------------------------- sections


class Bench:
    def __init__(self, args: argparse.Namespace, work: Path, logdir: Path) -> None:
        self.args = args
        self.work = work
        self.logdir = logdir
        self.topic = args.topic
        self.rows: list[tuple[str, str, str]] = []
        self.logs = log_files(logdir, self.topic)
        self.log_bytes = sum(p.stat().st_size for p in self.logs)
        self.names = [d.name for d in partition_dirs(logdir, self.topic)]

    def row(self, section: str, what: str, result: str) -> None:
        self.rows.append((section, what, result))
        print(f"  {section}: {what}: {result}", file=sys.stderr, flush=True)

    def mount(self, cache: Path, *extra: str, tree: Path = ROOT) -> Mounted:
        return Mounted(self.logdir, self.work / "mnt", "--cache-dir", str(cache), *extra, tree=tree)

    def glob(self, mnt: Path, name: str) -> str:
        """The issue's ``MNT/*/NAME`` (as ``MNT/<topic>-*/NAME``: the bench's directory holds that topic
        alone), expanded by the shell in its name order, t-0 t-1 t-10 t-100 ..., the order in which a
        user's ``cat`` reads the partitions (it was the numeric order before 2026-11-27 21:30)."""
        assert all(n.startswith(f"{self.topic}-") for n in self.names)
        return f"{shlex.quote(str(mnt))}/{shlex.quote(self.topic)}-*/{shlex.quote(name)}"

    def trees(self) -> list[tuple[str, Path]]:
        """This checkout, and with ``--against DIR`` that one too (before/after in one run)."""
        trees = [("this checkout", ROOT)]
        if self.args.against:
            trees.append((f"--against {self.args.against}", Path(self.args.against).resolve()))
        return trees

    def read(self) -> None:
        """``cat MNT/*/records.jsonl`` on a fresh mount (first read, then second), ``cat
        MNT/*/segments/*.log`` through the same mount, the daemon's CPU for the first read; with
        ``--against DIR`` the same by that checkout's mount, runs interleaved; the in-process kernel
        and ``consume --no-interleave`` once a round."""
        cache = self.work / "cache-read"
        shutil.rmtree(cache, ignore_errors=True)
        warm(self.logs)
        t_kernel, c_kernel = in_process_render_cpu(self.logs, lengths=False)
        json_bytes = 0
        with self.mount(cache) as m:
            json_bytes = sum(os.stat(m.mnt / n / "records.jsonl").st_size for n in self.names)  # sizes the cache
        trees = self.trees()
        runs: dict[str, dict[str, list[float]]] = {
            t: {"first": [], "second": [], "seg": [], "cpu": [], "loop": [], "cat": []} for t, _ in trees
        }
        t_floor: list[float] = []
        c_floor: list[float] = []
        s_floor: list[float] = []  # the floor's daemon alone (one thread: its FUSE loop)
        t_fresh: list[float] = []  # the same, each file its own copy of the bytes (memfs.py --distinct)
        c_fresh: list[float] = []
        s_fresh: list[float] = []
        floor_bytes = 0
        t_kernel_runs = [t_kernel]
        c_kernel_runs = [c_kernel]
        t_consume: list[float] = []
        consume = kafkafs("consume", str(self.logdir), self.topic, "--no-interleave") + " > /dev/null"
        for _ in range(self.args.repeat):
            for label, tree in trees:
                got = runs[label]
                with self.mount(cache, tree=tree) as m:
                    recs = f"cat {self.glob(m.mnt, 'records.jsonl')} > /dev/null"
                    before, loop_before = m.cpu_seconds(), m.loop_cpu_seconds()
                    took, cat_cpu = shell_cpu(recs)
                    got["first"].append(took)
                    got["cpu"].append(m.cpu_seconds() - before)
                    got["loop"].append(m.loop_cpu_seconds() - loop_before)
                    got["cat"].append(cat_cpu)
                    got["second"].append(shell(recs))
                    segs = " ".join(str(m.mnt / n / "segments" / p.name) for n in self.names
                                    for p in sorted((self.logdir / n).glob("*.log")))
                    got["seg"].append(shell(f"cat {segs} > /dev/null"))
            took, floor_bytes, floor_cpu, served_cpu = self.memory_floor()
            t_floor.append(took)
            c_floor.append(floor_cpu)
            s_floor.append(served_cpu)
            took, _, floor_cpu, served_cpu = self.memory_floor(distinct=True)
            t_fresh.append(took)
            c_fresh.append(floor_cpu)
            s_fresh.append(served_cpu)
            took, cpu = in_process_render_cpu(self.logs, lengths=False)
            t_kernel_runs.append(took)
            c_kernel_runs.append(cpu)
            t_consume.append(shell(consume))
        kernel, cons = statistics.median(t_kernel_runs), statistics.median(t_consume)
        floor, floor_cpu, kernel_cpu = statistics.median(t_floor), statistics.median(c_floor), statistics.median(c_kernel_runs)
        floor_loop = statistics.median(s_floor)
        fresh, fresh_cpu, fresh_loop = statistics.median(t_fresh), statistics.median(c_fresh), statistics.median(s_fresh)
        cores = os.cpu_count() or 1
        self.row("read", "log / JSON bytes", f"{self.log_bytes / 1e6:,.0f} MB / {json_bytes / 1e6:,.0f} MB")
        for label, _ in trees:
            first, second, seg, cpu = (statistics.median(runs[label][k]) for k in ("first", "second", "seg", "cpu"))
            seg_rate = self.log_bytes / seg
            self.row("read", f"cat MNT/*/segments/*.log (same mount), {label}", f"{seg:.2f} s, {seg_rate / 1e6:,.0f} MB/s")
            for what, t in (("first read, fresh mount", first), ("second read", second)):
                rate = json_bytes / t
                self.row("read", f"cat MNT/*/records.jsonl, {what}, {label}",
                         f"{t:.2f} s, {rate / 1e6:,.0f} MB/s = {rate / seg_rate:.0%} of segments/ (target >= 60%); "
                         f"{t / kernel:.2f}x the kernel in process (target <= 1.5x); {t / cons:.2f}x consume"
                         + (f"; daemon {cpu:.2f} CPU s; {t / floor:.2f}x the binding's floor" if what.startswith("first") else ""))
            # what the first read costs in CPU, and the fastest it could be on this machine's cores at that cost
            cat_cpu, loop_cpu = statistics.median(runs[label]["cat"]), statistics.median(runs[label]["loop"])
            need = cpu + cat_cpu
            self.row("read", f"CPU budget of the first read, {label}",
                     f"daemon {cpu:.2f} (its FUSE loop {loop_cpu:.2f}) + cat {cat_cpu:.2f} = {need:.2f} CPU s: on {cores} cores at least "
                     f"{need / cores:.2f} s = {need / cores / kernel:.2f}x the kernel in process")
            # the serial part: the loop's CPU for each GB it serves, against the bare binding's loop for the same
            loop_per_gb = loop_cpu / (json_bytes / 1e9)
            floor_per_gb = floor_loop / (floor_bytes / 1e9) if floor_bytes else float("nan")
            fresh_per_gb = fresh_loop / (floor_bytes / 1e9) if floor_bytes else float("nan")
            self.row("read", f"FUSE loop CPU a GB of JSON served, first read, {label}",
                     f"{loop_per_gb:.2f} CPU s = {loop_per_gb / floor_per_gb:.2f}x the binding's floor ({floor_per_gb:.2f}), "
                     f"{loop_per_gb / fresh_per_gb:.2f}x its floor for fresh bytes ({fresh_per_gb:.2f})")
        self.row("read", f"the binding's floor: cat of {len(self.names)} files of one partition's JSON from memory "
                 "(bare pyfuse3 + trio, bench/memfs.py)",
                 f"{floor:.2f} s, {floor_bytes / floor / 1e6:,.0f} MB/s of {floor_bytes / 1e6:,.0f} MB; "
                 f"its daemon (its FUSE loop alone) {floor_loop:.2f} + cat {floor_cpu - floor_loop:.2f} = {floor_cpu:.2f} CPU s")
        self.row("read", "the binding's floor for fresh bytes: the same, each file its own copy (bench/memfs.py --distinct)",
                 f"{fresh:.2f} s, {floor_bytes / fresh / 1e6:,.0f} MB/s; its daemon {fresh_loop:.2f} + cat "
                 f"{fresh_cpu - fresh_loop:.2f} = {fresh_cpu:.2f} CPU s")
        self.row("read", "kernel in process, 2 threads (render_span_jsonl)", f"{kernel:.2f} s, {kernel_cpu:.2f} CPU s")
        least = kernel_cpu + fresh_cpu  # the render, and moving its (fresh) bytes through the binding
        self.row("read", "CPU floor of a first read: the kernel's render + the binding's floor for fresh bytes",
                 f"{least:.2f} CPU s: on {cores} cores at least {least / cores:.2f} s = "
                 f"{least / cores / kernel:.2f}x the kernel in process")
        self.row("read", "kafkafs consume --no-interleave > /dev/null", f"{cons:.2f} s")

    def memory_floor(self, distinct: bool = False) -> tuple[float, int, float, float]:
        """``cat`` of as many files as partitions, each the first partition's JSON, served from memory
        by a bare pyfuse3 + trio file system (``bench/memfs.py``; ``distinct``: each file its own copy of
        the bytes): wall seconds, bytes read, the CPU seconds of that file system and of cat for it,
        and of that file system alone (one thread)."""
        mnt = self.work / "memmnt"
        mnt.mkdir(parents=True, exist_ok=True)
        first = self.names[0]
        log = sorted((self.logdir / first).glob("*.log"))[0]
        proc = subprocess.Popen(
            [PY, str(ROOT / "bench" / "memfs.py"), str(log), self.topic, first.rpartition("-")[2], str(mnt),
             "--files", str(len(self.names)), *(["--distinct"] if distinct else [])],
            stdout=subprocess.PIPE, cwd=ROOT,
        )
        try:
            said = proc.stdout.readline().split() if proc.stdout else []
            if len(said) != 2 or said[0] != b"READY":
                raise SystemExit(f"bench/memfs.py did not start: {said!r}")
            before = process_cpu(proc.pid)
            took, cat_cpu = shell_cpu("cat " + " ".join(str(mnt / f"f{i}") for i in range(len(self.names))) + " > /dev/null")
            served_cpu = process_cpu(proc.pid) - before
        finally:
            subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)
                proc.wait()
        return took, int(said[1]) * len(self.names), served_cpu + cat_cpu, served_cpu

    def size(self) -> None:
        """The first ``ls -l MNT/*/records.jsonl`` with an empty size cache and the logs evicted (with
        ``--against DIR``, that checkout's mount too, interleaved), against ``cat`` of the evicted logs
        and the kernel sizing in process; then a remount with the cache kept."""
        cache = self.work / "cache-size"
        t_raw: list[float] = []
        trees = self.trees()
        t_ls: dict[str, list[float]] = {t: [] for t, _ in trees}
        cpu_ls: dict[str, list[float]] = {t: [] for t, _ in trees}
        t_kernel: list[float] = []
        raw = f"cat {' '.join(map(str, self.logs))} > /dev/null"
        for _ in range(self.args.repeat):
            evict(self.logs)
            t_raw.append(shell(raw))
            evict(self.logs)
            t_kernel.append(in_process_render(self.logs, lengths=True))
            for label, tree in trees:
                shutil.rmtree(cache, ignore_errors=True)
                evict(self.logs)
                with self.mount(cache, tree=tree) as m:
                    before = m.cpu_seconds()
                    t_ls[label].append(shell(f"ls -l {self.glob(m.mnt, 'records.jsonl')}"))
                    cpu_ls[label].append(m.cpu_seconds() - before)
        raw_t, k_t = map(statistics.median, (t_raw, t_kernel))
        self.row("size", "cat LOGDIR/*/*.log, evicted", f"{raw_t:.2f} s")
        self.row("size", "kernel sizes every partition in process, 2 threads, evicted", f"{k_t:.2f} s")
        for label, _ in trees:
            ls_t, cpu = statistics.median(t_ls[label]), statistics.median(cpu_ls[label])
            self.row("size", f"first ls -l MNT/*/records.jsonl, empty size cache, evicted, {label}",
                     f"{ls_t:.2f} s = {ls_t / raw_t:.2f}x cat of the logs (target <= 2x); {ls_t / k_t:.2f}x the kernel; "
                     f"daemon {cpu:.2f} CPU s")
        warm_t: list[float] = []
        cold_t: list[float] = []
        for _ in range(self.args.repeat):
            with self.mount(cache) as m:
                warm_t.append(shell(f"ls -l {self.glob(m.mnt, 'records.jsonl')}"))
            evict(self.logs + all_files(cache))
            with self.mount(cache) as m:
                cold_t.append(shell(f"ls -l {self.glob(m.mnt, 'records.jsonl')}"))
        ls_raw = statistics.median(shell(f"ls -l {' '.join(map(str, self.logs))}") for _ in range(self.args.repeat))
        self.row("size", "remount, cache kept: ls -l MNT/*/records.jsonl",
                 f"warm {statistics.median(warm_t) * 1e3:.0f} ms, evicted {statistics.median(cold_t) * 1e3:.0f} ms "
                 f"(target < 150 ms); ls -l LOGDIR/*/*.log {ls_raw * 1e3:.0f} ms")

    def remount(self) -> None:
        """A remount with the size cache kept: ``ls -l MNT/*/records.jsonl`` (the shell's glob included)
        and the CPU the daemon spent on it, warm and with the logs and the cache evicted; with
        ``--against DIR``, the same runs by the kafkafs of another checkout, interleaved (before/after)."""
        cache = self.work / "cache-size"
        with self.mount(cache) as m:  # the cache filled (a first sizing when it is empty)
            shell(f"ls -l {self.glob(m.mnt, 'records.jsonl')}")
        trees = self.trees()
        runs: dict[tuple[str, bool], list[tuple[float, float]]] = {(t, e): [] for t, _ in trees for e in (False, True)}
        for _ in range(self.args.repeat):
            for label, tree in trees:
                for evicted in (False, True):
                    if evicted:
                        evict(self.logs + all_files(cache))
                    with self.mount(cache, tree=tree) as m:
                        before = m.cpu_seconds()
                        took = shell(f"ls -l {self.glob(m.mnt, 'records.jsonl')}")
                        runs[(label, evicted)].append((took, m.cpu_seconds() - before))
        for label, _ in trees:
            said = []
            for evicted in (False, True):
                took = statistics.median(t for t, _ in runs[(label, evicted)])
                cpu = statistics.median(c for _, c in runs[(label, evicted)])
                said.append(f"{'evicted' if evicted else 'warm'} {took * 1e3:.0f} ms (daemon {cpu * 1e3:.0f} ms CPU)")
            self.row("remount", f"ls -l MNT/*/records.jsonl, cache kept, {label}", ", ".join(said) + " (target < 150 ms)")

    def quiet(self) -> None:
        cache = self.work / "cache-read"
        seconds = self.args.quiet_seconds
        with self.mount(cache) as m:
            os.listdir(m.mnt)
            for n in self.names:
                os.stat(m.mnt / n / "records.jsonl")
            time.sleep(2)
            before = m.cpu_seconds()
            time.sleep(seconds)
            used = m.cpu_seconds() - before
        self.row("quiet", f"mount of {len(self.names)} partitions, idle {seconds:.0f} s after a stat of each",
                 f"{used:.2f} CPU s = {used / seconds:.1%} of a core (target < 1%)")

    def consume(self) -> None:
        """``consume`` of the whole topic interleaved against ``--no-interleave``, runs interleaved
        (with ``--against DIR``, that checkout's two runs too: before/after in one run); wall and CPU."""
        base = kafkafs("consume", str(self.logdir), self.topic) + " > /dev/null"
        trees = self.trees()
        runs: dict[tuple[str, bool], list[tuple[float, float]]] = {(t, i): [] for t, _ in trees for i in (True, False)}
        for _ in range(self.args.repeat):
            for label, tree in trees:
                for inter in (True, False):
                    runs[(label, inter)].append(shell_cpu(base if inter else base + " --no-interleave", tree=tree))
        for label, _ in trees:
            wall = {i: statistics.median(t for t, _ in runs[(label, i)]) for i in (True, False)}
            cpu = {i: statistics.median(c for _, c in runs[(label, i)]) for i in (True, False)}
            self.row("consume", f"kafkafs consume LOGDIR t (interleaved) > /dev/null, {label}",
                     f"{wall[True]:.2f} s ({cpu[True]:.2f} CPU s) = {wall[True] / wall[False]:.2f}x --no-interleave "
                     f"(CPU {cpu[True] / cpu[False]:.2f}x) (target <= 1.5x)")
            self.row("consume", f"kafkafs consume LOGDIR t --no-interleave > /dev/null, {label}",
                     f"{wall[False]:.2f} s ({cpu[False]:.2f} CPU s)")

    def byoffset(self) -> None:
        """``by-offset/N.json`` of ``--offsets`` random offsets over every partition on a fresh mount (each
        partition's ``partition.json`` read first, as a reader that lists the partition would): the first
        read of each, then 4 more reads of each against open+read of a tiny raw file through the same
        mount; with ``--against DIR`` the same offsets by that checkout's mount, runs interleaved
        (``--repeat`` rounds; p50 over every round's reads)."""
        cache = self.work / "cache-read"
        rng = random.Random(5)
        count = self.args.offsets
        with self.mount(cache) as m:
            per = [json.loads((m.mnt / n / "partition.json").read_bytes())["logEndOffset"] for n in self.names]
            seg = m.mnt / self.names[0] / "segments"
            tiny = min((f for f in os.listdir(seg) if not f.endswith(".log")), key=lambda f: os.stat(seg / f).st_size)
            tiny_size = os.stat(seg / tiny).st_size
        picks = [rng.randrange(len(self.names)) for _ in range(count)]
        picks = [(p, rng.randrange(per[p])) for p in picks]

        def timed(path: Path) -> float:
            start = time.perf_counter()
            with open(path, "rb") as f:
                f.read()
            return time.perf_counter() - start

        trees = self.trees()
        runs: dict[str, dict[str, list[float]]] = {label: {"first": [], "again": [], "raw": []} for label, _ in trees}
        warm(self.logs)  # a first lookup reads its batch from the page cache, as the raw file's read does
        for round_ in range(self.args.repeat):
            for label, tree in trees[::-1] if round_ % 2 else trees:  # neither checkout always first
                got = runs[label]
                with self.mount(cache, tree=tree) as m:
                    for n in self.names:
                        (m.mnt / n / "partition.json").read_bytes()
                    tiny_path = m.mnt / self.names[0] / "segments" / tiny
                    for _ in range(50):
                        timed(tiny_path)
                    for p, offset in picks:
                        path = m.mnt / self.names[p] / "by-offset" / f"{offset}.json"
                        got["first"].append(timed(path))
                        for _ in range(4):
                            got["again"].append(timed(path))
                            got["raw"].append(timed(tiny_path))
        for label, _ in trees:
            f50, a50, r50 = (statistics.median(runs[label][k]) * 1e3 for k in ("first", "again", "raw"))
            self.row("byoffset", f"by-offset/N.json, {count} offsets over every partition: first read p50, {label}",
                     f"{f50:.3f} ms = {f50 / r50:.2f}x a tiny raw file")
            self.row("byoffset", f"by-offset/N.json, the same offsets read 4 more times: p50, {label}",
                     f"{a50:.3f} ms = {a50 / r50:.2f}x a tiny raw file (target <= 0.5x)")
            self.row("byoffset", f"open+read of segments/{tiny} ({tiny_size} bytes) through the mount: p50, {label}",
                     f"{r50:.3f} ms")

    def produce(self) -> None:
        n = self.args.produce
        json_lines = self.work / f"json-{n}.jsonl"
        plain_lines = self.work / f"plain-{n}.txt"
        if not json_lines.exists():
            with self.mount(self.work / "cache-read") as m, open(json_lines, "wb") as out:
                left = n
                for name in self.names:
                    with open(m.mnt / name / "records.jsonl", "rb") as f:
                        for line in f:
                            out.write(line)
                            left -= 1
                            if not left:
                                break
                    if not left:
                        break
            rng = random.Random(11)
            words = ["Zürich", "naïve", "café", "東京", "plain", "order", "payment", "ascii", "text", "tab\there"]
            with open(plain_lines, "w", encoding="utf-8") as out:
                for i in range(n):
                    out.write(f"line {i} " + " ".join(rng.choice(words) for _ in range(rng.randrange(3, 14))) + "\n")
        t_floor = kafka_python_floor(json_lines)
        runs: dict[str, list[float]] = {"json": [], "plain": [], "append": [], "floor": [t_floor]}
        cpu: dict[str, list[float]] = {"json": [], "append": []}
        for _ in range(self.args.repeat):
            for kind, lines in (("json", json_lines), ("plain", plain_lines)):
                target = self.work / "produce-logdir"
                shutil.rmtree(target, ignore_errors=True)
                target.mkdir()
                took, used = shell_cpu(kafkafs("produce", str(target), "t-0"), stdin=lines)
                runs[kind].append(took)
                if kind == "json":
                    cpu[kind].append(used)
            took, used = self.append_through_mount(json_lines)
            runs["append"].append(took)
            cpu["append"].append(used)
            runs["floor"].append(kafka_python_floor(json_lines))
        j, p, a, fl = (statistics.median(runs[k]) for k in ("json", "plain", "append", "floor"))
        ratios = [x / y for x, y in zip(runs["append"], runs["json"], strict=True)]
        cpu_ratios = [x / y for x, y in zip(cpu["append"], cpu["json"], strict=True)]
        self.row("produce", f"kafka-python's builder, json.loads of each of {n:,} JSON lines (in memory)",
                 f"{fl:.2f} s, {n / fl:,.0f} rec/s")
        self.row("produce", f"kafkafs produce, {n:,} mixed JSON-object lines",
                 f"{j:.2f} s, {n / j:,.0f} rec/s = {fl / j:.2f}x kafka-python (target >= 1.5x)")
        self.row("produce", f"kafkafs produce, {n:,} plain lines", f"{p:.2f} s, {n / p:,.0f} rec/s (target >= 1M/s)")
        self.row("produce", "the JSON lines into MNT/t-0/append, 1,000 lines a write",
                 f"{a:.2f} s, {n / a:,.0f} rec/s = {a / j:.2f}x produce's time (target <= 1.2x); each run "
                 f"{', '.join(f'{r:.2f}' for r in ratios)}x")
        self.row("produce", "CPU: the mount's daemon for the append / the produce process, each run",
                 f"{', '.join(f'{r:.2f}' for r in cpu_ratios)}x (medians {statistics.median(cpu['append']):.2f} s / "
                 f"{statistics.median(cpu['json']):.2f} s)")

    def append_through_mount(self, lines: Path) -> tuple[float, float]:
        """Seconds from the open of ``MNT/t-0/append`` of a fresh ``--rw`` mount to the end of its close
        (every write, then the fsync), and the daemon's CPU seconds meanwhile."""
        target = self.work / "append-logdir"
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir()
        m = Mounted(target, self.work / "mnt-rw", "--rw", "--cache-dir", str(self.work / "cache-rw"))
        try:
            (m.mnt / "t-0").mkdir()
            with open(lines, "rb") as f:
                data = f.read()
            chunks = []
            pos = 0
            while pos < len(data):
                end = pos
                for _ in range(1000):
                    nl = data.find(b"\n", end)
                    if nl < 0:
                        end = len(data)
                        break
                    end = nl + 1
                    if end >= len(data):
                        break
                chunks.append(data[pos:end])
                pos = end
            before = m.cpu_seconds()
            start = time.perf_counter()
            fd = os.open(m.mnt / "t-0" / "append", os.O_WRONLY)
            try:
                for chunk in chunks:
                    os.write(fd, chunk)
            finally:
                os.close(fd)
            return time.perf_counter() - start, m.cpu_seconds() - before
        finally:
            m.close()


def kafka_python_floor(lines_path: Path) -> float:
    """kafka-python's DefaultRecordBatchBuilder fed by json.loads of each line, 1,000 records a batch:
    what a Python producer spends before any network."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    lines = lines_path.read_bytes().splitlines()

    def as_bytes(v: object) -> bytes | None:
        if v is None:
            return None
        if isinstance(v, str):
            return v.encode()
        if isinstance(v, dict) and "$base64" in v:
            return base64.b64decode(v["$base64"])
        return json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode()

    start = time.perf_counter()
    total = 0
    for i in range(0, len(lines), 1000):
        builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 30)
        for j, line in enumerate(lines[i : i + 1000]):
            obj = json.loads(line)
            headers = [(h["key"], as_bytes(h["value"])) for h in obj.get("headers") or ()]
            builder.append(j, obj.get("timestamp"), as_bytes(obj.get("key")), as_bytes(obj.get("value")), headers)
        total += len(builder.build())
    took = time.perf_counter() - start
    assert total > 0
    return took


# ---------------------------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=200)
    parser.add_argument("--records", type=int, default=25_000, help="records a partition")
    parser.add_argument("--topic", default="t")
    parser.add_argument("--logdir", help="measure this log directory instead of building one")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"sections to run, of {','.join(SECTIONS)}")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--offsets", type=int, default=200)
    parser.add_argument("--produce", type=int, default=1_000_000, help="lines for the produce rows")
    parser.add_argument("--quiet-seconds", type=float, default=20.0)
    parser.add_argument("--against", help="read, size, remount, consume, byoffset: also measure the kafkafs of this checkout "
                        "(before/after, runs interleaved)")
    parser.add_argument("--work", help="build (and reuse) the data here instead of a temporary folder")
    args = parser.parse_args()

    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="kafkafs-many-"))
    work.mkdir(parents=True, exist_ok=True)
    logdir = Path(args.logdir) if args.logdir else work / "logs"
    if not args.logdir:
        build(logdir, args.topic, args.partitions, args.records)
    load = os.getloadavg()
    bench = Bench(args, work, logdir)
    try:
        for name in args.only.split(","):
            if name not in SECTIONS:
                raise SystemExit(f"unknown section {name!r}")
            print(f"[{time.strftime('%H:%M:%S')}] {name}", file=sys.stderr, flush=True)
            getattr(bench, name)()
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
        print_table(bench, load)


def print_table(bench: Bench, load: tuple[float, float, float]) -> None:
    if not bench.rows:
        return
    print(f"\nkafkafs, {len(bench.names)} partitions of {bench.logdir} ({bench.log_bytes / 1e6:,.0f} MB of log), "
          f"{os.cpu_count()} CPUs, load average at start {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}, "
          f"at the end {os.getloadavg()[0]:.2f}; medians of {bench.args.repeat} interleaved runs\n")
    print_rows(bench.rows, "section")


if __name__ == "__main__":
    main()
