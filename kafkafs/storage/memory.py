"""How this process's allocator keeps or gives back memory: glibc's ``mallopt``, the one path to it.

glibc serves a block above ``M_MMAP_THRESHOLD`` with ``mmap`` and returns it at ``free``; below, from
the heap, whose free top it trims past ``M_TRIM_THRESHOLD``. By default the mmap threshold starts at
128 KiB and grows to the size of the largest block freed (up to 32 MiB). Setting it fixes it. Two
users want opposite things:

* the mount (a long-running daemon) fixes it at 4 MiB, so the memory of a decompression bomb (every
  one cleanly EIO) goes back to the system instead of staying in the worker threads' arenas
  (issue 9, finding 7);
* ``consume`` (a short-lived command) raises it to 32 MiB and keeps 64 MiB of free heap, so the spans'
  output buffers (a few MB each) are reused instead of fresh mmap'd pages that the OS zeroes on every
  call (that was 40% of its rendering time).

A no-op where the C library is not glibc. Applies to the whole process: call it once, at start.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

__all__ = ["tune_malloc"]

log = logging.getLogger("kafkafs")

_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers
_M_MMAP_THRESHOLD = -3


def tune_malloc(mmap_threshold: int, trim_threshold: int | None = None) -> bool:
    """Serve blocks of ``mmap_threshold`` bytes or more with ``mmap`` (given back when freed), and keep
    up to ``trim_threshold`` bytes of free heap (glibc's default when None); True when glibc took them."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold))
    if ok and trim_threshold is not None:
        ok = bool(mallopt(_M_TRIM_THRESHOLD, trim_threshold))
    if not ok:
        log.debug("mallopt was refused")
    return ok
