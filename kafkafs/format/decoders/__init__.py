"""Records as their writers meant them (SPEC §8): Kafka's internal topics (``__consumer_offsets``,
``__transaction_state``, ``__share_group_state``, ``__cluster_metadata``, ``__remote_log_metadata``)
decoded by Kafka's own message definitions (``messages/``: those of the Kafka release ``SOURCES.tsv``
names, Apache License 2.0) through one generic schema reader, and values framed for a Schema Registry
decoded by their schemas (Avro, JSON Schema, Protobuf).

:func:`decoder_for` is the one place that decides which topic has a decoder: it picks a partition's
:class:`~.view.Decoder` (None for an ordinary topic without a registry: the generic fast path stays
untouched). The plain functions below serve ``dump``'s decoder flags and raise
:class:`kafkafs.errors.CorruptRecordError` for bytes that do not decode.

The decoder modules (Kafka's message definitions, Avro, JSON Schema) take about 0.1 s to import, so
this package imports them only when a name from them is first used (PEP 562 ``__getattr__``): an
ordinary topic's ``consume`` never pays for them.
"""

from __future__ import annotations

import functools
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .internal import (
        control_key,
        control_value,
        metadata_record,
        offsets_key,
        offsets_value,
        remote_log_metadata_record,
        share_state_key,
        share_state_value,
        transaction_key,
        transaction_value,
    )
    from .registry import SchemaRegistry
    from .view import Decoder

__all__ = [
    "decoder_for",
    "Decoder",
    "SchemaRegistry",
    "offsets_key",
    "offsets_value",
    "transaction_key",
    "transaction_value",
    "metadata_record",
    "share_state_key",
    "share_state_value",
    "remote_log_metadata_record",
    "control_key",
    "control_value",
    "INTERNAL_TOPICS",
]

#: Kafka's internal topics and the decoder kind of each.
INTERNAL_TOPICS = {
    "__consumer_offsets": "offsets",
    "__transaction_state": "transactions",
    "__cluster_metadata": "metadata",
    "__share_group_state": "share-state",
    "__remote_log_metadata": "remote-log-metadata",
}

#: The module each lazily imported public name comes from.
_LAZY = {
    "Decoder": ".view",
    "SchemaRegistry": ".registry",
    "offsets_key": ".internal",
    "offsets_value": ".internal",
    "transaction_key": ".internal",
    "transaction_value": ".internal",
    "metadata_record": ".internal",
    "share_state_key": ".internal",
    "share_state_value": ".internal",
    "remote_log_metadata_record": ".internal",
    "control_key": ".internal",
    "control_value": ".internal",
}

@functools.cache
def _internal(kind: str) -> Decoder:
    """One InternalDecoder per kind, made on first use (decoders are immutable and shared; two threads
    racing may each make one, and one of them is kept)."""
    from .view import InternalDecoder

    return InternalDecoder(kind)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def decoder_for(topic: str, registry: SchemaRegistry | None = None, mode: str = "auto") -> Decoder | None:
    """The decoder of ``topic``'s records: Kafka's internal topics always; any other topic when a
    Schema Registry (a :class:`~.registry.SchemaRegistry` with at least one schema) is given; else None.
    ``mode`` other than "auto" (``--values string|base64``): None, nothing is decoded.
    Thread-safe (the mount's worker threads ask it)."""
    if mode != "auto":
        return None
    kind = INTERNAL_TOPICS.get(topic)
    if kind is not None:
        return _internal(kind)
    if registry is not None and len(registry):
        return registry.decoder()
    return None
