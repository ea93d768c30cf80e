"""storage/memory: the one path to glibc's mallopt (the mount gives large blocks back, consume keeps
its span buffers on the heap)."""

from __future__ import annotations

import ctypes
import platform

import pytest

from kafkafs.storage import memory


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_glibc_accepts_the_thresholds():
    assert memory.tune_malloc(1 << 20) is True
    assert memory.tune_malloc(4 << 20, 64 << 20) is True
    assert memory.tune_malloc(1 << 20) is True  # back to the mount's (this test process goes on)


def test_without_a_usable_libc_it_is_a_no_op(monkeypatch):
    def no_libc(*_args, **_kwargs):
        raise OSError("no libc here")

    monkeypatch.setattr(ctypes, "CDLL", no_libc)
    assert memory.tune_malloc(1 << 20) is False
