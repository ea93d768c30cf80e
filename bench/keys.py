"""Keys as a table, measured on one keyed partition of mixed records (bench/keyed.py), in one run.

1. Building the key index of every sealed segment, on one thread in a fresh process: MB of log per
   second of CPU time and of wall time (the target: 200 MB/s of log on one core).
2. ``kafkafs consume LOGDIR kv-0 --key K`` with the key indexes built, against ``kafkafs consume LOGDIR
   kv-0 | grep -F '"key":"K"'`` (both end to end, processes started; best of ``--repeat``), over
   ``--keys-sampled`` keys (the target: 20x).
3. With ``--mount``: a read-only mount of the directory (the indexes built): ``by-key/<name>.json`` vs
   ``by-offset/N.json`` open+read from Python, p50 and p99 over random keys and offsets (the target:
   by-key p50 within 3x of by-offset), and ``cat table.jsonl`` with the daemon's peak RSS (the target:
   under 150 MB for 10^7 records over 10^6 keys).

    python bench/keys.py [--records 10000000] [--keys 1000000] [--work DIR] [--mount]

Every number is printed with the load average at the start and the end of its step.
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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.keyed import TOPIC, build, key_bytes  # noqa: E402

PARTITION = f"{TOPIC}-0"


#: The environment of the commands measured: this checkout on the path, and bytecode written as an
#: installed kafkafs has it (an environment with PYTHONDONTWRITEBYTECODE would compile the modules that
#: never got their .pyc at every start, and a start is most of what `consume --key` takes).
ENV = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}, "PYTHONPATH": str(ROOT)}


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def kafkafs(*args: str, stdout=subprocess.DEVNULL) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkafs.cli", *args], stdout=stdout, stderr=subprocess.PIPE,
                          check=True, env=ENV)


_BUILD = """
import json, os, resource, sys, time
from kafkafs.storage.keyindex import KeyIndexStore
from kafkafs.storage.logdir import LogDir
logdir, cache = sys.argv[1], sys.argv[2]
with LogDir(logdir) as d:
    log = d.log(sys.argv[3])
    store = KeyIndexStore(cache)
    segments = list(log.segments)[:-1]
    cpu, wall = time.process_time(), time.perf_counter()
    for s in segments:
        store.get(s, log.topic, log.partition)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
    print(json.dumps({"bytes": sum(s.size for s in segments), "cpu": cpu, "wall": wall,
                      "entries": sum(store.get(s, log.topic, log.partition).entries for s in segments),
                      "vmhwm_kib": int(status["VmHWM"].split()[0])}))
"""


def build_indexes(logs: Path, cache: Path) -> dict:
    shutil.rmtree(cache, ignore_errors=True)
    out = subprocess.run([sys.executable, "-c", _BUILD, str(logs), str(cache), PARTITION], capture_output=True, check=True,
                         env=ENV)
    return json.loads(out.stdout)


def consume_by_key(logs: Path, cache: Path, keys: list[bytes], repeat: int) -> tuple[float, float, bool]:
    """(best seconds of consume --key, best seconds of consume | grep, same records) summed over keys."""
    indexed, grepped, same = 0.0, 0.0, True
    for key in keys:
        text = key.decode()
        best_a = best_b = float("inf")
        for _ in range(repeat):
            t = time.perf_counter()
            a = subprocess.run([sys.executable, "-m", "kafkafs.cli", "consume", str(logs), PARTITION, "--key", text,
                                "--cache-dir", str(cache)], capture_output=True, check=True,
                               env=ENV).stdout
            best_a = min(best_a, time.perf_counter() - t)
            t = time.perf_counter()
            b = subprocess.run(f"{sys.executable} -m kafkafs.cli consume {logs} {PARTITION} --cache-dir '' "
                               f"| grep -F '\"key\":{json.dumps(text)},'", shell=True, capture_output=True,
                               env=ENV).stdout
            best_b = min(best_b, time.perf_counter() - t)
        indexed += best_a
        grepped += best_b
        same = same and a == b
    return indexed, grepped, same


class _Rows(list):
    """The table's rows, each also said on stderr as soon as it is measured."""

    def append(self, row: tuple[str, str, str]) -> None:
        print(" | ".join(row), file=sys.stderr, flush=True)
        super().append(row)

    def extend(self, rows) -> None:
        for row in rows:
            self.append(row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--segment-mib", type=int, default=256)
    parser.add_argument("--work", type=Path, help="keep the data here (reused when it is there)")
    parser.add_argument("--keys-sampled", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--mount", action="store_true", help="also measure the mount (by-key, table.jsonl)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="kafkafs-bench-keys-"))
    logs, cache = work / "logs", work / "cache"
    rows = _Rows()
    try:
        if not (logs / PARTITION).is_dir():
            t = time.perf_counter()
            build(logs, args.records, args.keys, segment_bytes=args.segment_mib << 20)
            print(f"wrote {args.records} records over {args.keys} keys in {time.perf_counter() - t:.0f} s",
                  file=sys.stderr)
        before = load()
        got = build_indexes(logs, cache)
        mb = got["bytes"] / 1e6
        rows.append(("key index build, one thread (MB of log / CPU s; wall)",
                     f"{mb / got['cpu']:.0f} MB/s ({mb / got['wall']:.0f} MB/s wall; {mb:.0f} MB, "
                     f"{got['entries']} entries, peak RSS {got['vmhwm_kib'] // 1024} MiB)",
                     f"load {before} -> {load()}"))
        rng = random.Random(5)
        sampled = [key_bytes(k) for k in rng.sample(range(100, args.keys), args.keys_sampled * 3)]
        sampled = [k for k in sampled if len(k) < 100 and k.isascii() and b"\\" not in k][: args.keys_sampled]
        before = load()
        indexed, grepped, same = consume_by_key(logs, cache, sampled, args.repeat)
        rows.append((f"consume --key K (index) vs consume | grep, {len(sampled)} keys, best of {args.repeat}",
                     f"{indexed / len(sampled) * 1e3:.0f} ms vs {grepped / len(sampled) * 1e3:.0f} ms: "
                     f"{grepped / indexed:.1f}x; same lines: {same}", f"load {before} -> {load()}"))
        if args.mount:
            from bench.keys_mount import measure_mount

            rows.extend(measure_mount(logs, cache, args))
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    width = max(len(r[0]) for r in rows)
    for name, value, note in rows:
        print(f"{name.ljust(width)}  {value}  ({note})")


if __name__ == "__main__":
    main()
