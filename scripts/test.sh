#!/usr/bin/env bash
# Installs everything (scripts/bootstrap.sh) and runs the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
