"""Human CLI lines (compozy/cli/events_view.py): relative times, `--since` and tables that never wrap ids."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from compozy.cli.events_view import ago, fit_table, since_timestamp

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(("stamp", "expected"), [
    ("2026-11-30T11:59:48.000000Z", "12s ago"), ("2026-11-30T11:57:00Z", "3m ago"),
    ("2026-11-30T09:55:00Z", "2h05m ago"), ("2026-11-26T09:00:00Z", "4d03h ago"), ("2026-11-30T12:00:05Z", "now"),
])
def test_ages_are_two_units_at_most(stamp: str, expected: str) -> None:
    assert ago(stamp, NOW) == expected


def test_since_takes_durations_and_rfc3339_in_the_stores_form() -> None:
    assert since_timestamp("1h30m", NOW) == "2026-11-30T10:30:00.000000Z"
    assert since_timestamp("90s", NOW) == "2026-11-30T11:58:30.000000Z"
    assert since_timestamp("99999999h", NOW) == "0001-01-01T00:00:00.000000Z"  # before year 1: everything
    assert since_timestamp("2026-11-30T13:00:00+01:00") == "2026-11-30T12:00:00.000000Z"
    with pytest.raises(ValueError, match="--since"):
        since_timestamp("yesterday")


def test_flexible_columns_shrink_and_fixed_ones_stay_whole() -> None:
    sid = "sess_0123456789abcdef"
    lines = fit_table(["ID", "NAME"], [(sid, "x" * 100)], {"NAME"}, 40)
    assert lines[1].startswith(sid + "  ") and lines[1].endswith("…") and len(lines[1]) == 40
