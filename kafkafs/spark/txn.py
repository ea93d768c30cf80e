"""``read_committed``: which transactional batches were aborted.

A transactional batch belongs to the transaction its producer ends with the next control batch (a
COMMIT or ABORT marker) of the same producer id. Kafka's brokers answer this from the ``.txnindex``
files, which only brokers write; so the worker looks ahead instead: from the first batch of a
transaction it scans batch headers (decoding only control batches of that producer) until the
marker, and remembers the answer for the rest of the transaction's batches. Scans cross split and
segment ends; a transaction without a marker yet (still open) counts as not committed.

Reads stop at the last stable offset (:func:`kafkafs.spark.plan.stable_end`), as a broker's do, so a
transaction still in progress is only met when an explicit ``endingOffsets`` is past it.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ..format.batch import BatchHeader, control_type_of
from ..storage.config import LogConfig
from ..storage.log import Log

__all__ = ["TxnResolver"]

log = logging.getLogger("kafkafs.spark")


class TxnResolver:
    """Answers "is this transactional batch aborted (or still open)?" for one partition."""

    def __init__(self, directory: str, config: LogConfig) -> None:
        self._directory = directory
        self._config = config
        self._log: Log | None = None
        # producer id -> (scanned from offset, marker offset or None when open, aborted)
        self._known: dict[int, tuple[int, int | None, bool]] = {}

    def _open(self) -> Log:
        if self._log is None:
            self._log = Log.open(Path(self._directory), self._config, writable=False)
        return self._log

    def aborted(self, header: BatchHeader) -> bool:
        """True when the batch's transaction ended with ABORT or has not ended."""
        pid = header.producer_id
        known = self._known.get(pid)
        offset = header.base_offset
        if known is not None:
            scanned_from, marker, aborted = known
            if scanned_from <= offset and (marker is None or offset < marker):
                return aborted
        marker, aborted = self._find_marker(pid, header.next_offset)
        self._known[pid] = (offset, marker, aborted)
        return aborted

    def _find_marker(self, pid: int, from_offset: int) -> tuple[int | None, bool]:
        log_ = self._open()
        for segment, view in log_.batches(from_offset):
            h = view.header
            if not h.is_control or h.producer_id != pid:
                continue
            batch = view.decode(file=str(segment.log_path))
            kind = control_type_of(batch.keys[0]) if batch.keys else None
            return h.base_offset, kind != "COMMIT"
        log.info("%s: transaction of producer %d is still open; its records are not returned", self._directory, pid)
        return None, True

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
