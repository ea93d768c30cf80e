"""Shared fixtures: where the real broker-written data lives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _find_shared() -> Path:
    env = os.environ.get("KAFKAFS_SHARED")
    if env:
        return Path(env)
    for parent in [ROOT, *ROOT.parents]:
        candidate = parent / "shared" / "fixtures"
        if candidate.is_dir():
            return candidate
    return ROOT.parent / "shared" / "fixtures"


FIXTURES = _find_shared()


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.fail(f"the shared fixtures are missing: {FIXTURES} (set KAFKAFS_SHARED)")
    return FIXTURES


@pytest.fixture(autouse=True, scope="session")
def _private_cache_home(tmp_path_factory):
    """Mounts and commands started by tests keep their size cache in a temporary folder, never in the
    user's ~/.cache (subprocesses inherit the environment)."""
    saved = {name: os.environ.get(name) for name in ("XDG_CACHE_HOME", "CACHE_DIRECTORY")}
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))
    os.environ.pop("CACHE_DIRECTORY", None)
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
