"""Shared by the index tests: an offset and a time index of base 45 in a temporary folder (fixtures),
the fixture partition they compare with, and a generator of increasing offsets."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from kafkafs.storage.offset_index import OffsetIndex
from kafkafs.storage.time_index import TimeIndex

from ..conftest import FIXTURES

PARTITION = FIXTURES / "kafka-logs-a" / "__consumer_offsets-12"
BASE = 45


@pytest.fixture
def index(tmp_path: Path):
    idx = OffsetIndex(tmp_path / "00000000000000000045.index", BASE, max_index_size=30 * 8)
    yield idx
    idx.close()


@pytest.fixture
def tindex(tmp_path: Path):
    idx = TimeIndex(tmp_path / "00000000000000000045.timeindex", BASE, max_index_size=30 * 12)
    yield idx
    idx.close()


def _monotonic(rng: random.Random, base: int, n: int) -> list[int]:
    out, last = [], base
    for _ in range(n):
        last += rng.randrange(1, 16)
        out.append(last)
    return out
