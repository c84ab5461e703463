"""The one timestamp format of stored records: RFC3339 UTC with a Z, microsecond precision.

Its own module, importing nothing of ours: the store writer process (store/writer/process.py) needs it without the
session record's models.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import overload

# (the second, its text up to the fraction's dot): `now_stamp` formats the date and time once a second. One tuple,
# replaced whole, so a thread never reads one second's text with another's number.
_second: list[tuple[int, str]] = [(-1, "")]
_TO_THE_SECOND = "%Y-%m-%dT%H:%M:%S."  # then six digits of microseconds and `Z`
_FORMAT = f"{_TO_THE_SECOND}%fZ"


def utcnow() -> datetime:
    return datetime.now(UTC)


@overload
def isoformat(moment: datetime) -> str: ...
@overload
def isoformat(moment: datetime | None) -> str | None: ...


def isoformat(moment: datetime | None) -> str | None:
    """RFC3339 UTC with a Z, microsecond precision, or None."""
    if moment is None:
        return None
    return moment.astimezone(UTC).strftime(_FORMAT)


def now_stamp() -> str:
    """`isoformat(utcnow())`, from the same clock, for what is stamped per streamed chunk (a batch's rows)."""
    return stamp_of(time.time_ns())


def stamp_of(ns: int) -> str:
    """The stored text of `ns` nanoseconds after the epoch (floored to the microsecond, as `datetime.now` is).
    strftime took 1.5 µs a call; the date and time to the second are formatted once for every call in that second."""
    second, micro = divmod(ns // 1000, 1_000_000)
    cached, text = _second[0]
    if second != cached:
        text = datetime.fromtimestamp(second, UTC).strftime(_TO_THE_SECOND)
        _second[0] = (second, text)
    return f"{text}{micro:06d}Z"
