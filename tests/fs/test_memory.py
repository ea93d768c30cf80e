"""return_large_blocks: freed large blocks go back to the system (glibc's M_MMAP_THRESHOLD fixed)."""

from __future__ import annotations

import ctypes
import platform

import pytest

from kafkafs.fs import memory


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_glibc_accepts_the_threshold():
    assert memory.return_large_blocks() is True
    assert memory.return_large_blocks(4 << 20) is True


def test_without_a_usable_libc_it_is_a_no_op(monkeypatch):
    def no_libc(*_args, **_kwargs):
        raise OSError("no libc here")

    monkeypatch.setattr(ctypes, "CDLL", no_libc)
    assert memory.return_large_blocks() is False
