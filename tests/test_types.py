"""mypy over kafkafs/ (the settings are pyproject's [tool.mypy]): no type error, and every
``# type: ignore`` names its error code and says why."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_finds_no_error():
    pytest.importorskip("mypy", reason="mypy is in the dev extra (pip install -e .[dev])")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--no-incremental"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_type_ignore_says_why():
    bare = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted((ROOT / "kafkafs").rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "type: ignore" in line and not re.search(r"type: ignore\[[\w,-]+\]\s+#\s*\S", line)
    ]
    assert not bare, "type: ignore without an error code and a reason: " + ", ".join(bare)
