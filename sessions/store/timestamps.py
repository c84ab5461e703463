"""The one timestamp format of stored records: RFC3339 UTC with a Z, microsecond precision.

Its own module, importing nothing of ours: the store writer process (store/writer/process.py) needs it without the
session record's models.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from typing import overload

# A test hook: this node's own clock runs this many seconds fast (negative: slow), as another machine's would. Leases
# never read it (they run on the database's clock: sessions/catalog/cluster.py); what the node stamps does.
CLOCK_OFFSET = float(os.environ.get("COMPOZY_TEST_CLOCK_OFFSET") or 0)
_OFFSET_NS = int(CLOCK_OFFSET * 1e9)

# (the second, its text up to the fraction's dot): `now_stamp` formats the date and time once a second. One tuple,
# replaced whole, so a thread never reads one second's text with another's number.
_second: list[tuple[int, str]] = [(-1, "")]
_TO_THE_SECOND = "%Y-%m-%dT%H:%M:%S."  # then six digits of microseconds and `Z`
_FORMAT = f"{_TO_THE_SECOND}%fZ"


def utcnow() -> datetime:
    """This node's clock (skewed by `COMPOZY_TEST_CLOCK_OFFSET` in the clock tests)."""
    if _OFFSET_NS:
        return datetime.now(UTC) + timedelta(seconds=CLOCK_OFFSET)
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
    return stamp_of(time.time_ns() + _OFFSET_NS)


def stamp_of(ns: int) -> str:
    """The stored text of `ns` nanoseconds after the epoch (floored to the microsecond, as `datetime.now` is).
    strftime took 1.5 µs a call; the date and time to the second are formatted once for every call in that second."""
    second, micro = divmod(ns // 1000, 1_000_000)
    cached, text = _second[0]
    if second != cached:
        text = datetime.fromtimestamp(second, UTC).strftime(_TO_THE_SECOND)
        _second[0] = (second, text)
    return f"{text}{micro:06d}Z"
