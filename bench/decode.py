"""Decode and render throughput: kafkafs (compiled kernel and Python reference) vs kafka-python + json.

For each kind of records from bench/records.py (``mixed``: JSON objects, UTF-8 text with non-ASCII,
binary values, null keys, headers with some binary values, tombstones; ``uniform``: ~100-byte JSON
objects), 100 records a batch, uncompressed, it builds one segment in memory and a log directory on
disk, and prints records/s for:

* kafka-python decode, and kafka-python decode + ``json.dumps`` of each record in the same JSON view
  (the baseline: what a Python tool built on a client library does);
* kafkafs ``decode_batch`` (columns), ``decode_batch`` + ``render_batch_jsonl``, ``render_raw_jsonl``
  (raw batch bytes to lines, one batch a call), ``raw_jsonl_lengths`` (sizing), ``render_span_jsonl``
  (many batches a call, what ``consume`` runs on every core and the mount reads through);
* the same rendering through the Python reference (the fallback without the kernel);
* ``kafkafs consume`` end to end: a subprocess reading the log directory, output to /dev/null.

Every figure is the best of --repeat runs, all in one run of this script, as records per second of
wall time and per CPU-second (this process's, or the subprocess's: steadier on a shared machine).
The slow Python contenders run on the first --baseline-records records.

    .venv/bin/python bench/decode.py [--records N] [--repeat R] [--kinds mixed,uniform]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.records import segment_bytes  # noqa: E402
from kafkafs.consume_spans import tune_malloc  # noqa: E402
from kafkafs.format import kernel  # noqa: E402
from kafkafs.format.batch import decode_batch, scan_batches  # noqa: E402
from kafkafs.format.jsonview import (  # noqa: E402
    raw_jsonl_lengths,
    render_batch_jsonl,
    render_raw_jsonl,
    render_span_jsonl,
)

TOPIC = "orders"


def _kp_batches(data: bytes):
    from kafka.record.memory_records import MemoryRecords

    records = MemoryRecords(data)
    while True:
        batch = records.next_batch()
        if batch is None:
            return
        yield batch


def kafka_python_decode(data: bytes) -> int:
    n = 0
    for batch in _kp_batches(data):
        for r in batch:
            r.offset, r.timestamp, r.key, r.value, r.headers  # noqa: B018 - touch every field
            n += 1
    return n


def _view(b: bytes | None):
    if b is None:
        return None
    try:
        text = b.decode("utf-8")
    except UnicodeDecodeError:
        return {"$base64": base64.b64encode(b).decode("ascii")}
    if text.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


def kafka_python_json(data: bytes) -> int:
    n = 0
    sink = []
    for batch in _kp_batches(data):
        for r in batch:
            obj = {
                "topic": TOPIC, "partition": 0, "offset": r.offset, "timestamp": r.timestamp,
                "timestampType": "LogAppendTime" if r.timestamp_type == 1 else "CreateTime",
                "key": _view(r.key), "value": _view(r.value),
                "headers": [{"key": k, "value": _view(v)} for k, v in r.headers],
            }
            sink.append(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))
            n += 1
        sink.clear()
    return n


def ours_decode(data: bytes) -> int:
    return sum(len(decode_batch(data, h)) for h in scan_batches(data))


def ours_decode_render(data: bytes) -> int:
    n = 0
    for h in scan_batches(data):
        batch = decode_batch(data, h)
        render_batch_jsonl(TOPIC, 0, batch)
        n += len(batch)
    return n


def ours_raw(data: bytes) -> int:
    n = 0
    for h in scan_batches(data):
        n += render_raw_jsonl(TOPIC, 0, data[h.position : h.end]).count(b"\n")
    return n


def ours_lengths(data: bytes) -> int:
    return sum(len(raw_jsonl_lengths(TOPIC, 0, data[h.position : h.end])) for h in scan_batches(data))


def ours_spans(data: bytes) -> int:
    """render_span_jsonl over the segment in 256 KiB pieces, one thread (consume runs these on every core)."""
    n = pos = 0
    view = memoryview(data)
    while pos < len(data):
        result = render_span_jsonl(TOPIC, 0, view[pos : pos + 256 * 1024])
        pos += result.consumed
        n += result.lines
    return n


def reference_raw(data: bytes) -> int:
    saved = kernel.KERNEL
    kernel.KERNEL = None
    try:
        return ours_raw(data)
    finally:
        kernel.KERNEL = saved


def consume_subprocess(logdir: Path) -> int:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed kafkafs has its bytecode compiled once
    with open(os.devnull, "wb") as sink:
        subprocess.run([sys.executable, "-m", "kafkafs.cli", "consume", str(logdir), f"{TOPIC}-0"],
                       stdout=sink, check=True, env=env)
    return -1  # the caller knows the count


def write_partition(logdir: Path, data: bytes) -> None:
    """A partition of the segment's batches written by the engine (indexes, 64 MiB segments), as a
    broker's would be."""
    from kafkafs.storage.config import Settings
    from kafkafs.storage.logdir import LogDir

    with LogDir(logdir, Settings({"segment.bytes": 64 * 1024 * 1024}), writable=True) as d:
        log = d.create_partition(TOPIC, 0)
        step = 4 * 1024 * 1024
        pos = 0
        for h in scan_batches(data):  # whole batches, about 4 MiB an append
            if h.end - pos >= step:
                log.append_batches(data[pos : h.end], flush=False)
                pos = h.end
        if pos < len(data):
            log.append_batches(data[pos:], flush=False)


def best(fn, arg, repeat: int, count: int | None = None) -> tuple[float, float, int]:
    """(records/s of wall time, records per CPU-second, records): the best of ``repeat`` runs. CPU time
    counts this process, or the child for the subprocess: on a loaded machine it is the steadier figure."""
    best_wall = best_cpu = float("inf")
    n = 0
    for _ in range(repeat):
        c0 = time.process_time()
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        n = fn(arg)
        wall = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = time.process_time() - c0 + (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        best_wall = min(best_wall, wall)
        best_cpu = min(best_cpu, cpu)
    if count is not None:
        n = count
    return n / best_wall, n / best_cpu, n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--baseline-records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--kinds", default="mixed,uniform")
    args = parser.parse_args()
    if kernel.KERNEL is None:
        print(f"warning: {kernel.missing_note()}")
    else:
        tune_malloc()  # as consume does: span outputs reuse heap memory
    load = os.getloadavg()
    print(f"{args.records:,} records a kind, 100 a batch, uncompressed; best of {args.repeat}; "
          f"load average {load[0]:.1f} on {os.cpu_count()} CPUs")
    for kind in args.kinds.split(","):
        data = segment_bytes(kind, args.records)
        small = segment_bytes(kind, min(args.records, args.baseline_records))
        json_bytes = sum(len(render_raw_jsonl(TOPIC, 0, small[h.position : h.end])) for h in scan_batches(small))
        json_per_record = json_bytes / min(args.records, args.baseline_records)
        log_per_record = len(data) / args.records
        with tempfile.TemporaryDirectory(prefix="kafkafs-bench-") as tmp:
            write_partition(Path(tmp), data)
            rows = [
                ("kafka-python decode", *best(kafka_python_decode, small, args.repeat)),
                ("kafka-python decode + json.dumps", *best(kafka_python_json, small, args.repeat)),
                ("kafkafs decode_batch", *best(ours_decode, data, args.repeat)),
                ("kafkafs decode_batch + render_batch_jsonl", *best(ours_decode_render, data, args.repeat)),
                ("kafkafs render_raw_jsonl", *best(ours_raw, data, args.repeat)),
                ("kafkafs raw_jsonl_lengths", *best(ours_lengths, data, args.repeat)),
                ("kafkafs render_span_jsonl (one thread)", *best(ours_spans, data, args.repeat)),
                ("kafkafs render_raw_jsonl, Python reference", *best(reference_raw, small, 1)),
                ("kafkafs consume (subprocess, > /dev/null)", *best(consume_subprocess, Path(tmp), args.repeat, args.records)),
            ]
        base_wall, base_cpu = rows[1][1], rows[1][2]
        print(f"\n{kind}: {log_per_record:.0f} bytes of log and {json_per_record:.0f} bytes of JSON a record")
        print(f"| {'reader':<44} | {'records':>9} | {'records/s':>10} | {'vs base':>7} | {'rec/CPU-s':>10} | "
              f"{'vs base':>7} | {'MB log/CPU-s':>12} |")
        print(f"|{'-' * 46}|{'-' * 10}:|{'-' * 11}:|{'-' * 8}:|{'-' * 11}:|{'-' * 8}:|{'-' * 13}:|")
        for name, wall, cpu, n in rows:
            print(f"| {name:<44} | {n:>9,} | {wall:>10,.0f} | {wall / base_wall:>6.1f}x | {cpu:>10,.0f} | "
                  f"{cpu / base_cpu:>6.1f}x | {cpu * log_per_record / 1e6:>12.1f} |")

if __name__ == "__main__":
    main()
