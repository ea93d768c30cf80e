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
