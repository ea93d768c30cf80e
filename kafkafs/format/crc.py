"""Checksums: CRC-32C for RecordBatch v2, CRC-32 (zlib) for legacy magic 0 and 1 messages."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import zlib
from collections.abc import Callable

from . import Buffer

__all__ = ["crc32c", "crc32"]


def _load_crc32c() -> Callable[[Buffer, int], int]:
    """The crc32c package's compiled function, without running the package's ``__init__``: that one
    imports ``importlib.metadata`` (for its version) and its command line, which took a third of every
    kafkafs command's start-up (about 45 ms of CPU). Any surprise falls back to the plain import."""
    try:
        if "crc32c" not in sys.modules:
            spec = importlib.util.find_spec("crc32c")
            if spec is not None and spec.submodule_search_locations is not None:
                stub = importlib.util.module_from_spec(spec)  # the package, not executed
                sys.modules["crc32c"] = stub
                try:
                    compiled: Callable[[Buffer, int], int] = importlib.import_module("crc32c._crc32c").crc32c
                    return compiled
                finally:
                    if sys.modules.get("crc32c") is stub:
                        del sys.modules["crc32c"]  # a later `import crc32c` runs the real package
    except Exception:  # noqa: BLE001 - any packaging surprise: the ordinary way below
        pass
    import crc32c as package

    return package.crc32c


_crc32c = _load_crc32c()


def crc32c(data: Buffer, value: int = 0) -> int:
    """CRC-32C (Castagnoli) of ``data``; hardware-accelerated where the CPU has it."""
    return _crc32c(data, value)


def crc32(data: Buffer, value: int = 0) -> int:
    """CRC-32 (IEEE) of ``data``, as legacy Kafka messages carry it."""
    return zlib.crc32(data, value)
