#!/usr/bin/env bash
# Installs what the kernel's coverage-guided fuzz target needs (tests/faults/kernel_fuzz.py), idempotently:
#   Debian's clang-14 and libclang-rt-14-dev (clang's sanitizer and libFuzzer runtimes), atheris (pyproject's
#   "fuzz" extra) into .venv, and the kernel built with clang, ASan, UBSan and coverage into .fuzz/kernel/
#   (rebuilt when its C source changed; the kernel kafkafs itself loads is not touched).
# scripts/bootstrap.sh calls it; a machine that cannot install clang keeps going and the fuzz test skips.
# Usage: scripts/fuzz_setup.sh     then: scripts/fuzz_kernel.sh -runs=100000 .fuzz/corpus
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '[fuzz_setup] %s\n' "$*" >&2; }
SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi

have_clang() { command -v clang >/dev/null 2>&1 || command -v clang-14 >/dev/null 2>&1; }
# libFuzzer's runtime comes with atheris; clang-14 needs its own sanitizer runtimes to link the build
rt_missing() { ! ls /usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.asan-x86_64.a >/dev/null 2>&1 && \
               ! { have_clang && [ -e "$(clang -print-file-name=libclang_rt.asan-x86_64.a 2>/dev/null)" ]; }; }
if ! have_clang || rt_missing; then
  say "installing Debian packages: clang-14 libclang-rt-14-dev"
  if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq clang-14 libclang-rt-14-dev >/dev/null; }; then
    say "could not install clang: the kernel fuzz test will skip"; exit 1
  fi
fi

PY=${FUZZ_PYTHON:-.venv/bin/python}
if ! "$PY" -c 'import atheris' >/dev/null 2>&1; then
  req=$("$PY" -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["fuzz"])')
  say "installing $req into .venv"
  "$PY" -m pip install -q $req >/dev/null || { say "could not install $req: the kernel fuzz test will skip"; exit 1; }
fi
"$PY" scripts/build_kernel.py --fuzz --out .fuzz/kernel
