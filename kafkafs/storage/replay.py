"""Reading a coordinator's partition for a replay (``__consumer_offsets``, ``__transaction_state``,
``__cluster_metadata``): a state built from a whole partition, record after record, as a broker loads it.

Damage does not stop the replay (SPEC §3: damage is local). A batch that does not decode (a CRC that
does not match, records that do not parse) is passed over; bytes that are not a batch at all (a length
no batch has, a torn batch, offsets out of order) end their segment's scan, and the replay goes on at
the next segment. Each is put in the caller's ``damage`` list, in the order met, so that the caller can
say which parts of its state the damaged bytes may have changed (what they held is not known): for a
coordinator's state, every id whose records lie in that partition.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..errors import CorruptRecordError
from ..format.batch import BatchHeader, DecodedBatch

if TYPE_CHECKING:
    from .log import Log

__all__ = ["replayable_batches"]


def replayable_batches(log_: Log, damage: list[CorruptRecordError]) -> Iterator[tuple[BatchHeader, DecodedBatch]]:
    """Every batch of ``log_`` from its log start offset that decodes, oldest first, with its header;
    the damage met on the way is appended to ``damage`` (see the module's docstring)."""
    start = log_.log_start_offset
    for segment in list(log_.segments):
        path = str(segment.log_path)
        try:
            for view in segment.ordered_batches(None, log_.segments.upper(segment.base_offset)):
                if view.header.last_offset < start:
                    continue
                try:
                    batch = view.decode(file=path)
                except CorruptRecordError as exc:
                    damage.append(exc)
                    continue
                yield view.header, batch
        except CorruptRecordError as exc:
            damage.append(exc if exc.file is not None else exc.at(path))


class KnownDamage:
    """What a coordinator state's replay met, by id: a state built from a compacted internal topic (groups,
    transactions) keeps ``damage`` (partition -> the damage met there) and ``where`` (id -> the partitions
    holding its records); an id with a record in a damaged partition is unknown. Plain data, no locking:
    callers own the state they replayed."""

    damage: dict[str, CorruptRecordError]
    where: dict[str, set[str]]

    def damage_of(self, name: str) -> CorruptRecordError | None:
        """The damage that makes ``name``'s view unknown (met in a partition holding its records), or None."""
        for partition in sorted(self.where.get(name, ())):
            found = self.damage.get(partition)
            if found is not None:
                return found
        return None

    def damaged(self) -> dict[str, CorruptRecordError]:
        """id -> its damage, for every damaged id."""
        return {n: d for n in sorted(self.where) if (d := self.damage_of(n)) is not None}
