"""The one timestamp format of stored records: RFC3339 UTC with a Z, microsecond precision.

Its own module, importing nothing of ours: the store writer process (store/write_process.py) needs it without the
session record's models.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import overload


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
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
