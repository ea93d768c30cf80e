"""The mount's reads: its read-ahead window is raised so that a sequential reader of ``records.jsonl``
gets 1 MiB requests (FUSE's max) instead of 128-256 KiB ones; each costs pyfuse3 about the same."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kafkafs.fs.mount import READ_AHEAD_KB


def test_a_mount_reads_ahead_a_mebibyte(mounted, logdir_copy):
    m = mounted(logdir_copy)
    dev = os.stat(m.path).st_dev
    setting = Path(f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb")
    if not os.access(setting, os.W_OK):
        pytest.skip("this user may not set a device's read-ahead")
    assert int(setting.read_text()) == READ_AHEAD_KB == 1024
