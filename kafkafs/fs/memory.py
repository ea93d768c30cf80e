"""Memory that a long-running mount gives back (issue 9, finding 7).

glibc's malloc serves a large block with ``mmap`` and returns it at ``free``, but its threshold for
doing so grows to the size of the largest block freed (up to 32 MiB): after a few decompression bombs
(every one cleanly EIO) the worker threads' arenas keep hundreds of MiB that the process never uses
again. Fixing the threshold (``M_MMAP_THRESHOLD``) turns that adjustment off, so blocks of a MiB or more
always go back to the system when freed. A no-op where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

__all__ = ["return_large_blocks"]

log = logging.getLogger("kafkafs.fs")

_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
_THRESHOLD = 1 << 20


def return_large_blocks(threshold: int = _THRESHOLD) -> bool:
    """Make freed blocks of ``threshold`` bytes or more go back to the system; True when it could."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok = bool(mallopt(_M_MMAP_THRESHOLD, threshold))
    if not ok:
        log.debug("mallopt(M_MMAP_THRESHOLD) was refused")
    return ok
