"""Records as their writers meant them (SPEC §8): Kafka's internal topics decoded by Kafka's own message
definitions (``messages/``, data from apache/kafka under the Apache License 2.0) through one generic
schema reader, and values framed for a Schema Registry decoded by their schemas.

:func:`decoder_for` picks a partition's :class:`~.view.Decoder` (None for an ordinary topic without a
registry: the generic fast path stays untouched). The plain functions below serve ``dump``'s decoder
flags and raise :class:`kafkafs.errors.CorruptRecordError` for bytes that do not decode.
"""

from __future__ import annotations

from .internal import (
    control_key,
    control_value,
    metadata_record,
    offsets_key,
    offsets_value,
    transaction_key,
    transaction_value,
)
from .registry import SchemaRegistry
from .view import Decoder, InternalDecoder

__all__ = [
    "decoder_for",
    "Decoder",
    "SchemaRegistry",
    "offsets_key",
    "offsets_value",
    "transaction_key",
    "transaction_value",
    "metadata_record",
    "control_key",
    "control_value",
    "INTERNAL_TOPICS",
]

#: Kafka's internal topics and the decoder kind of each.
INTERNAL_TOPICS = {
    "__consumer_offsets": "offsets",
    "__transaction_state": "transactions",
    "__cluster_metadata": "metadata",
}

_INTERNAL = {topic: InternalDecoder(kind) for topic, kind in INTERNAL_TOPICS.items()}


def decoder_for(topic: str, registry=None) -> Decoder | None:
    """The decoder of ``topic``'s records: Kafka's internal topics always; any other topic when a
    Schema Registry (a :class:`~.registry.SchemaRegistry` with at least one schema) is given; else None."""
    internal_decoder = _INTERNAL.get(topic)
    if internal_decoder is not None:
        return internal_decoder
    if registry is not None and len(registry):
        return registry.decoder()
    return None
