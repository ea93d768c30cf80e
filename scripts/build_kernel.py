"""Build the compiled record kernel (kafkafs/format/_kernel.c and its headers) in place with gcc and Python's headers.

``pip install -e .`` builds it too (pyproject.toml's ``ext-modules``, the same flags); this script is
for a checkout used through PYTHONPATH (a git worktree), for scripts/bootstrap.sh when the C source
changed, and for a sanitizer build:

    python scripts/build_kernel.py              # rebuild when the source is newer than the module
    python scripts/build_kernel.py --force      # rebuild anyway
    python scripts/build_kernel.py --sanitize   # -fsanitize=address,undefined (run with LD_PRELOAD=libasan)
    python scripts/build_kernel.py --gil-check --out DIR  # KAFKAFS_GIL_CHECK: a broken GIL rule aborts
    python scripts/build_kernel.py --fuzz --out DIR  # clang: ASan + UBSan + libFuzzer's coverage (tests/faults/kernel_fuzz.py)

Prints one line on stderr when it builds; exits 1 (with gcc's messages) when the build fails.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE_DIR = ROOT / "kafkafs" / "format"
SOURCES = [SOURCE_DIR / "_kernel.c"]
HEADERS = sorted(SOURCE_DIR.glob("_kernel_*.h"))  # every header _kernel.c is made of
FLAGS = ["-O2", "-Wall", "-Wextra", "-std=c11", "-fPIC", "-shared", "-fno-strict-aliasing"]
SANITIZE = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-g"]
GIL_CHECK = ["-DKAFKAFS_GIL_CHECK", "-O1"]  # the GIL rule (_kernel_text.h) checked at every take and release
# the coverage-guided fuzz build: clang's sanitizers with libFuzzer's coverage counters (the runtime comes
# from atheris' asan_with_fuzzer.so, preloaded); any UBSan report aborts, so the fuzzer keeps its input
FUZZ = ["-fsanitize=address,undefined,fuzzer-no-link", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer",
        "-g", "-O1"]
CLANG = ("clang", "clang-19", "clang-16", "clang-14")


def find_clang() -> str | None:
    """The first clang on PATH (scripts/fuzz_setup.sh installs Debian's clang-14)."""
    import shutil

    return next((found for name in CLANG if (found := shutil.which(name))), None)


def target() -> Path:
    return SOURCE_DIR / ("_kernel" + sysconfig.get_config_var("EXT_SUFFIX"))


def stale(out_dir: Path | None = None) -> bool:
    out = target() if out_dir is None else Path(out_dir) / target().name
    if not out.exists():
        return True
    built = out.stat().st_mtime_ns
    return any(src.stat().st_mtime_ns > built for src in SOURCES + HEADERS)


def build(sanitize: bool = False, quiet: bool = False, *, gil_check: bool = False, out_dir: Path | None = None,
          fuzz: bool = False) -> bool:
    """Compile into a temporary file next to the target and rename it in place (atomic for readers);
    ``out_dir``: build there instead (a checked build for a test, loaded by path); ``fuzz``: with clang,
    for the coverage-guided fuzzer (never in place: give ``out_dir``)."""
    out = target() if out_dir is None else Path(out_dir) / target().name
    include = sysconfig.get_paths()["include"]
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".kernel-", suffix=".so", dir=out.parent)
    os.close(fd)
    extra = [*(SANITIZE if sanitize else ["-DNDEBUG"]), *(GIL_CHECK if gil_check else [])]
    compiler = "gcc"
    if fuzz:
        compiler = find_clang() or "clang"
        extra = FUZZ
    cmd = [compiler, *FLAGS, *extra, f"-I{include}", *map(str, SOURCES), "-o", tmp]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        os.unlink(tmp)
        print(f"build_kernel: {compiler} not found", file=sys.stderr)
        return False
    if done.returncode != 0:
        os.unlink(tmp)
        sys.stderr.write(done.stderr)
        print("build_kernel: the kernel did not build", file=sys.stderr)
        return False
    if done.stderr.strip():
        sys.stderr.write(done.stderr)
    os.chmod(tmp, 0o755)
    os.replace(tmp, out)
    if not quiet:
        notes = "".join([" (sanitizers)" if sanitize else "", " (GIL checks)" if gil_check else "",
                         " (fuzz: clang, ASan, UBSan, coverage)" if fuzz else ""])
        print(f"build_kernel: built {out}{notes}", file=sys.stderr)
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--sanitize", action="store_true")
    parser.add_argument("--gil-check", action="store_true")
    parser.add_argument("--fuzz", action="store_true", help="clang build for tests/faults/kernel_fuzz.py (needs --out)")
    parser.add_argument("--out", type=Path, help="build into this folder instead of in place")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args()
    if args.fuzz and args.out is None:
        parser.error("--fuzz builds beside the tree, never in place: give --out DIR")
    if args.fuzz and not (args.force or stale(args.out)):
        return 0  # the fuzz build is kept (scripts/fuzz_setup.sh): rebuilt when the source changed
    if not (args.force or args.sanitize or args.gil_check or args.out or stale()):
        return 0
    return 0 if build(args.sanitize, args.quiet, gil_check=args.gil_check, out_dir=args.out, fuzz=args.fuzz) else 1


if __name__ == "__main__":
    sys.exit(main())
