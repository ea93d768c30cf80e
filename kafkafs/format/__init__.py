"""kafkafs.format: Kafka's bytes, sans I/O (records, batches, indexes, state files, rendering)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from mmap import mmap

#: What the readers of bytes here take: anything with the buffer protocol, ``len``, indexing and
#: slicing (a memory-mapped file too).
Buffer: TypeAlias = "bytes | bytearray | memoryview | mmap"
