#!/usr/bin/env bash
# Installs what kafkafs needs on a fresh Debian machine, idempotently:
#   Debian packages: fuse3 (fusermount3, the kernel-side mount helper), libfuse3-dev and pkg-config
#   (to build pyfuse3), a JDK for Spark, jq (the demo shows it), gcc and the Python headers (to build
#   kafkafs's compiled record kernel, kafkafs/format/_kernel*.{c,h}), systemd's tools (systemd-analyze
#   verifies the unit `kafkafs systemd install` writes); then a virtualenv in .venv with the
#   package installed editable with its dev and spark extras. The kernel is rebuilt whenever its C
#   source is newer than the installed module. Last, Apache Kafka's jars for the broker tests
#   (maven fetches them into .kafka/, scripts/fetch_kafka.sh; offline, the broker tests skip), and clang-14
#   with atheris for the kernel's fuzz target (scripts/fuzz_setup.sh: two Debian packages, one wheel and one
#   clang build of the kernel, ~15 s here where gcc's toolchain is in already; without them the fuzz test skips).
# Usage: scripts/bootstrap.sh            (prints progress to stderr; safe to run again)
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '[bootstrap] %s\n' "$*" >&2; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    say "not root and no sudo: install fuse3 libfuse3-dev pkg-config openjdk-17-jre-headless jq maven yourself"; fi
fi

need=()
command -v fusermount3 >/dev/null 2>&1 || need+=(fuse3)
pkg-config --exists fuse3 2>/dev/null || need+=(libfuse3-dev)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
# Java 17 or newer (Kafka 4's broker and tools, Spark): an older java on PATH does not count
java_major() { "$1" -version 2>&1 | sed -n '1s/.*version "\(1\.\)\{0,1\}\([0-9]*\).*/\2/p'; }
have_java17=""
for j in "$(command -v java 2>/dev/null)" /usr/lib/jvm/*/bin/java; do
  [ -n "$j" ] && [ -x "$j" ] && [ "$(java_major "$j")" -ge 17 ] 2>/dev/null && { have_java17=1; break; }
done
[ -n "$have_java17" ] || need+=(openjdk-17-jre-headless)
command -v jq >/dev/null 2>&1 || need+=(jq)
command -v gcc >/dev/null 2>&1 || need+=(gcc)
# systemd-analyze, systemctl and systemd-sysusers: `kafkafs systemd install` and its test (nothing is started)
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
command -v mvn >/dev/null 2>&1 || need+=(maven)
if [ ${#need[@]} -gt 0 ]; then
  say "installing Debian packages: ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  for cand in python3.13 python3.12 python3.11 python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      PY="$cand"; break
    fi
  done
fi
[ -n "$PY" ] || { say "Python 3.11 or newer is needed"; exit 1; }
if ! "$PY" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv python3-dev >/dev/null
fi
# the Python headers for the compiled kernel (Python.h of the interpreter that builds it)
if ! "$PY" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null; then
  say "installing the Python headers (python3-dev) for the compiled kernel"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-dev >/dev/null
fi

stamp=.venv/.installed
if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $PY"
  "$PY" -m venv .venv
fi
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  say "installing kafkafs and its dependencies into .venv (first run takes a few minutes: pyspark is large)"
  pip_log=.venv/pip-install.log
  if ! { .venv/bin/python -m pip install -q --upgrade pip && .venv/bin/python -m pip install -q -e ".[dev,spark]"; } >"$pip_log" 2>&1; then
    grep -v '^WARNING: Location' "$pip_log" | tail -40 >&2
    say "pip install failed (full log: $pip_log)"; exit 1
  fi
  .venv/bin/python -c 'import kafkafs, pyfuse3, crc32c, cramjam, zstandard, orjson, kafka, pyspark' \
    || { say "the Python install failed"; exit 1; }
  touch "$stamp"
fi
# the compiled record kernel: rebuilt in place when its C source changed since it was built (pip
# builds it with the install above; this catches a source that changed without pyproject.toml)
if ! .venv/bin/python scripts/build_kernel.py; then
  say "the compiled kernel did not build: kafkafs works, rendering through the slower Python reference"
fi
# Apache Kafka's jars (broker, kafka-dump-log, kafka-storage, ...) for tests/broker/: fetched once into
# .kafka/<version>/libs; a machine without the network keeps going and the broker tests skip
scripts/fetch_kafka.sh
# clang and atheris for the kernel's coverage-guided fuzz target (tests/faults/kernel_fuzz.py; CI runs it briefly)
scripts/fuzz_setup.sh || say "the kernel fuzz target is not set up: its test skips"
