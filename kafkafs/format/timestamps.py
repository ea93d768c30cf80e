"""Timestamps as the command line and the mount's ``by-time/`` names take them, and as they print."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from ..errors import InvalidInput

__all__ = ["parse_timestamp", "parse_target_time", "format_timestamp"]


#: The fraction of an ISO-8601 time's seconds (``.0015`` of ``10:01:00.0015Z``).
_SECONDS_FRACTION = re.compile(r":\d\d[.,](\d+)")


def parse_timestamp(text: str, *, round_up: bool = False) -> int:
    """Epoch milliseconds from ``1763700000000`` or ISO-8601 UTC (``2026-11-21T10:00:00[.123]Z``).

    Digits below the millisecond are cut (a record's own timestamp, as Java's ``toEpochMilli``), or with
    ``round_up`` count as the next millisecond: for a bound (a start, "the first record at or after",
    and a range's end, "before"), since timestamps are whole milliseconds the first record at or after
    ``10:01:00.0015`` is one at ``.002`` or later."""
    text = text.strip()
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    iso = text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        raise InvalidInput(
            f"not a timestamp: {text!r} (use epoch milliseconds or ISO-8601 UTC such as 2026-11-21T10:00:00Z)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    ms = (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
    if round_up:
        fraction = _SECONDS_FRACTION.search(iso)
        if fraction is not None and fraction.group(1)[3:].strip("0"):
            ms += 1
    return ms


def parse_target_time(text: str) -> int:
    """:func:`parse_timestamp` of a time to look up (a bound: rounded up), which is never negative:
    Kafka's ``offsetsForTimes`` refuses a negative target time ("is negative"), and a magic 0 record's
    timestamp -1 is "none", not a time before 1970. ``InvalidInput`` for one."""
    value = parse_timestamp(text, round_up=True)
    if value < 0:
        raise InvalidInput(f"a time to look up is never negative: {text.strip()!r} is {value} (Kafka's offsetsForTimes "
                           "refuses it too)")
    return value


def format_timestamp(ms: int) -> str:
    """ISO-8601 UTC with milliseconds, e.g. ``2026-11-21T10:00:00.123Z``."""
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
