"""``failOnDataLoss``: what Spark's Kafka source does when requested offsets are gone."""

from __future__ import annotations

import logging

from ..errors import OffsetOutOfRange

__all__ = ["report_data_loss", "ADVICE_WHEN_FAILING", "ADVICE_WHEN_GOING_ON"]

log = logging.getLogger("kafkafs.spark")

#: Spark's advice when ``failOnDataLoss`` is true (a read fails) and false (it goes on).
ADVICE_WHEN_FAILING = (
    "Some data may have been lost because they are not available in Kafka any more; either the data was aged "
    "out by Kafka or the topic may have been deleted before all the data in the topic was processed. If you "
    "don't want your streaming query to fail on such cases, set the source option failOnDataLoss to false."
)
ADVICE_WHEN_GOING_ON = (
    "Some data may have been lost because they are not available in Kafka any more; either the data was aged "
    "out by Kafka or the topic may have been deleted before all the data in the topic was processed. If you "
    'want your streaming query to fail on such cases, set the source option "failOnDataLoss" to "true".'
)


def report_data_loss(fail: bool, message: str) -> None:
    """``failOnDataLoss``: raise (Spark's KAFKA_DATA_LOSS text, then the reason) :class:`OffsetOutOfRange` or log a warning and go on, as Spark does.

    Data loss is a requested offset that retention (or a deleted partition) removed: offsets below the
    log start offset. A gap that compaction left inside the log is not a loss (a consumer skips it).
    """
    if fail:
        raise OffsetOutOfRange(f"{ADVICE_WHEN_FAILING} Reason: {message}")
    log.warning("%s Reason: %s", ADVICE_WHEN_GOING_ON, message)
