"""The stored timestamp text (sessions/store/timestamps.py): `stamp_of`, which formats the second once and the
microseconds per call, must give exactly what `isoformat` gives for the same moment, whatever order the moments
come in (a clock stepped back, two seconds interleaved)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sessions.store.timestamps import isoformat, now_stamp, stamp_of, utcnow


def moment(ns: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=ns // 1000)


def test_stamp_of_matches_isoformat_across_seconds_in_any_order() -> None:
    base = 1_764_781_199_999_999_999  # the last nanosecond of a second, the last of a minute and an hour
    moments = [base, base + 1, base - 1_000_000_000, base + 1, base + 999, base + 86_400 * 10**9, base - 5_000,
               0, 999, 1_000_000_000_000]
    for ns in moments:
        assert stamp_of(ns) == isoformat(moment(ns)), ns


def test_now_stamp_is_read_from_the_clock_isoformat_reads() -> None:
    before = isoformat(utcnow())
    stamp = now_stamp()
    after = isoformat(utcnow())
    assert before <= stamp <= after  # one fixed-width format: text order is time order
