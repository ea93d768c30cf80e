"""Build the compiled record kernel (kafkafs/format/_kernel.c and its headers) in place with gcc and Python's headers.

``pip install -e .`` builds it too (pyproject.toml's ``ext-modules``, the same flags); this script is
for a checkout used through PYTHONPATH (a git worktree), for scripts/bootstrap.sh when the C source
changed, and for a sanitizer build:

    python scripts/build_kernel.py              # rebuild when the source is newer than the module
    python scripts/build_kernel.py --force      # rebuild anyway
    python scripts/build_kernel.py --sanitize   # -fsanitize=address,undefined (run with LD_PRELOAD=libasan)
    python scripts/build_kernel.py --gil-check --out DIR  # KAFKAFS_GIL_CHECK: a broken GIL rule aborts

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


def target() -> Path:
    return SOURCE_DIR / ("_kernel" + sysconfig.get_config_var("EXT_SUFFIX"))


def stale() -> bool:
    out = target()
    if not out.exists():
        return True
    built = out.stat().st_mtime_ns
    return any(src.stat().st_mtime_ns > built for src in SOURCES + HEADERS)


def build(sanitize: bool = False, quiet: bool = False, *, gil_check: bool = False, out_dir: Path | None = None) -> bool:
    """Compile into a temporary file next to the target and rename it in place (atomic for readers);
    ``out_dir``: build there instead (a checked build for a test, loaded by path)."""
    out = target() if out_dir is None else Path(out_dir) / target().name
    include = sysconfig.get_paths()["include"]
    fd, tmp = tempfile.mkstemp(prefix=".kernel-", suffix=".so", dir=out.parent)
    os.close(fd)
    extra = [*(SANITIZE if sanitize else ["-DNDEBUG"]), *(GIL_CHECK if gil_check else [])]
    cmd = ["gcc", *FLAGS, *extra, f"-I{include}", *map(str, SOURCES), "-o", tmp]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        os.unlink(tmp)
        print("build_kernel: gcc not found", file=sys.stderr)
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
        notes = "".join([" (sanitizers)" if sanitize else "", " (GIL checks)" if gil_check else ""])
        print(f"build_kernel: built {out}{notes}", file=sys.stderr)
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--sanitize", action="store_true")
    parser.add_argument("--gil-check", action="store_true")
    parser.add_argument("--out", type=Path, help="build into this folder instead of in place")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args()
    if not (args.force or args.sanitize or args.gil_check or args.out or stale()):
        return 0
    return 0 if build(args.sanitize, args.quiet, gil_check=args.gil_check, out_dir=args.out) else 1


if __name__ == "__main__":
    sys.exit(main())
