#!/usr/bin/env bash
# Runs the kernel's coverage-guided fuzz target (tests/faults/kernel_fuzz.py) on the build scripts/fuzz_setup.sh
# made: atheris' ASan + libFuzzer runtime preloaded (it must come before anything else in the process),
# Python's allocator set to malloc so that ASan sees every buffer, leaks not reported (CPython keeps its
# objects at exit). Arguments go to libFuzzer, e.g.
#   scripts/fuzz_kernel.sh -runs=1000000 -timeout=1 .fuzz/corpus
# An empty corpus folder gets the target's seeds first. Exit 0: every input ran, no report, no difference.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${FUZZ_PYTHON:-.venv/bin/python}
kernel=$(ls .fuzz/kernel/_kernel*.so 2>/dev/null | head -1)
[ -n "$kernel" ] || { echo "fuzz_kernel: no fuzz build of the kernel: run scripts/fuzz_setup.sh" >&2; exit 2; }
runtime=$("$PY" -c 'import atheris, os; print(os.path.join(os.path.dirname(os.path.dirname(atheris.__file__)), "asan_with_fuzzer.so"))')
export LD_PRELOAD="$runtime"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:allocator_may_return_null=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
export PYTHONMALLOC=malloc PYTHONPATH="$PWD" PYTHONDONTWRITEBYTECODE=1
# The target runs as a child of this shell, not in its place (exec): a process's peak RSS (ru_maxrss, what
# libFuzzer's -rss_limit_mb checks) survives fork and exec, so a target exec'd from a large caller (a pytest
# process that had grown to 4.4 GB) started "over" its limit and was blamed on its first input. A child
# forked from this small shell starts from its own.
trap 'kill -TERM "$child" 2>/dev/null' TERM INT HUP
"$PY" -m tests.faults.kernel_fuzz "$kernel" "$@" &
child=$!
while :; do
    rc=0; wait "$child" || rc=$?
    kill -0 "$child" 2>/dev/null || break  # a trapped signal interrupts wait; wait again until it ends
done
exit "$rc"
