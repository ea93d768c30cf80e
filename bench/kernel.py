"""The compiled kernel's own speed, before and after: its length pass, its render and its encoder, side by side.

``render_span`` (what the mount sizes ``records.jsonl`` with, ``lengths=True``, and reads it through)
over one segment of mixed records (bench/records.py) in memory, one thread, timed in thread CPU time
(steadier than wall time on a shared machine). With ``--against DIR`` (repeatable), the kernels built
in other checkouts are loaded into the same process and every repetition times each of them back to
back on the same bytes, alternating their order, so that a before/after ratio holds on a noisy
machine. ``--piece``: bytes of log a call (512 KiB: the mount reads 8 x 64 KB at a time; 0: the
whole segment at once); ``--mmap-threshold`` sets malloc's (32 MiB by default, so that output buffers
are reused; the mount fixes it at 1 MiB, and then a process whose heap has no free room gets every
render's output buffer as fresh pages, which fault and are zeroed on first touch: a cost of the mount's
setting, not of the kernel, and one this script's heap, grown by building the segment, may not show).
Prints the best and the median of ``--repeat`` per kernel, in MB/s of log.

The ``encode`` pass is the write path (``encode_lines``, what ``kafkafs produce``, the mount's ``append``
and Spark's writer use): the segment's records as the lines of ``records.jsonl`` (what bench/many.py's
produce rows write), encoded in produce's groups (1,000 lines or 512 KiB) with the reference parser
for the lines the kernel hands back; its row says how many lines went to the reference (``to python``).
The ``into`` pass is the render through ``render_span_into`` (the lines written into one reused
bytearray, as the mount's reads can take them, with no output buffer of the kernel's own to fault in
and shrink); a kernel without it is left out of that pass. ``--passes`` picks the passes (default: all).

    python bench/kernel.py [--records 250000] [--repeat 9] [--against /path/to/other/checkout]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.records import segment_bytes  # noqa: E402
from kafkafs.format import lineencode  # noqa: E402
from kafkafs.format.jsonrender import line_prefix  # noqa: E402
from kafkafs.produce import MAX_BYTES, MAX_LINES  # noqa: E402
from kafkafs.storage.memory import tune_malloc  # noqa: E402


def load_kernel(tree: Path) -> ModuleType:
    """The kernel built in checkout ``tree`` (scripts/build_kernel.py there), as a module of its own."""
    found = sorted((tree / "kafkafs" / "format").glob("_kernel.*.so"))
    if not found:
        raise SystemExit(f"no built kernel in {tree}: run scripts/build_kernel.py there")
    spec = importlib.util.spec_from_file_location("_kernel", found[0])  # its init function's name; not kept in sys.modules
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def one_pass(kernel: ModuleType, prefix: bytes, data: bytes, lengths: bool, piece: int) -> int:
    """Every batch of ``data`` rendered (or sized) by ``kernel``; returns the JSON bytes."""
    out = 0
    view = memoryview(data)
    pos = 0
    while pos < len(data):
        end = len(data) if not piece else min(pos + piece, len(data))
        got = kernel.render_span(prefix, view[pos:end], 0, lengths, -1, end == len(data), -1)
        if got[1] == 0:
            raise SystemExit("the kernel took no batch: --piece is smaller than a batch")
        pos += got[1]
        out += len(got[0])
    return out


def into_pass(kernel: ModuleType, prefix: bytes, data: bytes, piece: int, out: bytearray) -> int:
    """one_pass's render with ``render_span_into`` into ``out`` (reused: room for any piece's lines)."""
    written = 0
    view = memoryview(data)
    pos = 0
    while pos < len(data):
        end = len(data) if not piece else min(pos + piece, len(data))
        got = kernel.render_span_into(prefix, view[pos:end], 0, -1, end == len(data), -1, out, 0)
        if got[1] == 0:
            raise SystemExit("the kernel took no batch: --piece is smaller than a batch")
        pos += got[1]
        written += got[0]
    return written


def encode_pass(kernel: ModuleType, lines: bytes, parsed: list[int]) -> int:
    """Every line of ``lines`` (no final newline) through ``kernel``'s encode_lines in produce's groups;
    returns the batches' bytes and adds the lines handed to the reference parser to ``parsed[0]``."""

    def parse(line: bytes, number: int) -> object:
        parsed[0] += 1
        return lineencode._parse(line, number)

    out = pos = 0
    while pos <= len(lines):
        data, pos, _count = kernel.encode_lines(lines, pos, MAX_LINES, MAX_BYTES, 1, 0, 1 << 40, -1, 0, None, parse)
        out += len(data)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=250_000)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--against", action="append", default=[], help="another checkout whose kernel to time too")
    parser.add_argument("--piece", type=int, default=512 << 10, help="bytes of log a call (0: the whole segment)")
    parser.add_argument("--mmap-threshold", type=int, default=32 << 20, help="malloc's (glibc: at most 32 MiB)")
    parser.add_argument("--passes", default="lengths,render,into,encode",
                        help="comma-separated: lengths, render, into, encode")
    args = parser.parse_args()
    passes = args.passes.split(",")
    tune_malloc(args.mmap_threshold, max(args.mmap_threshold * 2, 64 << 20))
    kernels = [(name, load_kernel(Path(tree).resolve())) for name, tree in
               [("this", ROOT)] + [(Path(t).name or t, t) for t in args.against]]
    data = segment_bytes("mixed", args.records)
    prefix = line_prefix("t", 0)
    lines = bytes(kernels[0][1].render_span(prefix, data, 0, False, -1, True, -1)[0]).rstrip(b"\n")
    parsed: dict[str, list[int]] = {name: [0] for name, _ in kernels}
    out = bytearray(3 * (args.piece or len(data)) + 4096)
    runs: dict[tuple[str, str], list[float]] = {}
    load = os.getloadavg()[0]
    for rep in range(args.repeat):
        for what in passes:
            for name, kernel in kernels if rep % 2 == 0 else kernels[::-1]:
                start = time.thread_time()
                if what == "into" and not hasattr(kernel, "render_span_into"):
                    continue
                if what == "encode":
                    encode_pass(kernel, lines, parsed[name])
                elif what == "into":
                    into_pass(kernel, prefix, data, args.piece, out)
                else:
                    one_pass(kernel, prefix, data, what == "lengths", args.piece)
                runs.setdefault((what, name), []).append(time.thread_time() - start)
    print(f"\nkernel, {args.records:,} mixed records ({len(data) / 1e6:.1f} MB of log), one thread, piece "
          f"{args.piece or 'whole'}, load average {load:.2f} at start, {os.getloadavg()[0]:.2f} at the end; "
          f"best and median of {args.repeat}\n")
    print("| pass | kernel | best | median | median vs this (into: vs its render) |")
    print("|---|---|---|---|---|")
    for (what, name), times in runs.items():
        best, med = min(times), statistics.median(times)
        ratio = med / statistics.median(runs[(what, "this")])
        if what == "into" and ("render", name) in runs:
            ratio = med / statistics.median(runs[("render", name)])
        size, unit = (len(lines), "MB/s of lines") if what == "encode" else (len(data), "MB/s")
        extra = f", {parsed[name][0] // args.repeat:,} lines to python" if what == "encode" else ""
        print(f"| {what} | {name} | {best * 1e3:.1f} ms, {size / best / 1e6:.0f} {unit} | "
              f"{med * 1e3:.1f} ms, {size / med / 1e6:.0f} {unit}{extra} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
