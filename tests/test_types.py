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


STRICT = {  # mypy's --strict beyond what [tool.mypy] sets for every module
    "disallow_any_generics", "disallow_subclassing_any", "disallow_untyped_calls", "disallow_untyped_defs",
    "disallow_incomplete_defs", "disallow_untyped_decorators", "warn_return_any", "no_implicit_reexport",
    "strict_equality", "extra_checks",
}


def test_format_and_storage_are_held_to_strict():
    """Issue 23: strict on ``format/`` and ``storage/``, checked on the rest; no module's errors ignored."""
    import tomllib

    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert {"check_untyped_defs", "warn_unused_ignores", "warn_redundant_casts"} <= {k for k, v in mypy.items() if v}
    overrides = mypy.get("overrides", [])
    strict = [o for o in overrides if set(o["module"]) == {"kafkafs.format.*", "kafkafs.storage.*"}]
    assert strict and all(strict[0].get(flag) is True for flag in STRICT)
    assert not any(o.get("ignore_errors") for o in overrides)
