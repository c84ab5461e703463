"""HEARTBEAT.md grammar and time windows (docs/reference/health.md §5), by property: the parser never raises and
round-trips
what it accepts; quiet windows wrap midnight, are zone-invariant, and follow the wall clock across DST changes."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from compozy_base.config.heartbeat import HeartbeatConfig
from health.heartbeat import FORBIDDEN, Window, allowed_at, parse

CFG = HeartbeatConfig()
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Sydney", "Asia/Kolkata", "America/Sao_Paulo"]
clocks = st.builds(time, st.integers(0, 23), st.integers(0, 59))
instants = st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2035, 1, 1), timezones=st.just(UTC))
windows = st.builds(lambda z, s, e: {"timezone": z, "start": s.strftime("%H:%M"), "end": e.strftime("%H:%M")},
                    st.sampled_from(ZONES), clocks, clocks)
safe_text = st.text(st.characters(whitelist_categories=("L", "N", "Zs"), max_codepoint=0x2FF), max_size=60)


def render(front: dict[str, Any], body: str) -> str:
    return f"---\n{yaml.safe_dump(front, sort_keys=False)}---\n{body}\n"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_the_parser_never_raises_and_invalid_means_an_error_diagnostic(text: str) -> None:
    parsed = parse(text, CFG)
    assert parsed.valid == (not parsed.errors)
    assert all(d["code"].startswith("heartbeat_") for d in parsed.diagnostics)
    assert bool(parsed.digest) == parsed.valid


@settings(max_examples=150, deadline=None)
@given(enabled=st.booleans(), summary=safe_text, minutes=st.integers(5, 600),
       active=st.lists(windows, max_size=3), quiet=st.lists(windows, max_size=3),
       include=st.lists(st.sampled_from(["self", "session_health", "task", "inbox_summary"]), unique=True),
       body=safe_text)
def test_an_accepted_policy_round_trips_into_its_canonical_form(enabled: bool, summary: str, minutes: int,
                                                                active: list[dict[str, str]],
                                                                quiet: list[dict[str, str]], include: list[str],
                                                                body: str) -> None:
    front = {"version": 1, "enabled": enabled, "summary": summary,
             "preferences": {"min_interval": f"{minutes}m", "active_hours": active, "quiet_windows": quiet},
             "context": {"include": include}}
    parsed = parse(render(front, body), CFG)
    assert parsed.valid, parsed.diagnostics
    assert parsed.policy["enabled"] is enabled and parsed.policy["summary"] == summary.strip()
    assert parsed.policy["preferences"] == {"min_interval_seconds": minutes * 60.0, "active_hours": active,
                                            "quiet_windows": quiet}
    assert parsed.policy["context"]["include"] == include
    # CRLF is normalised: the same policy, the same digest.
    assert parse(render(front, body).replace("\n", "\r\n"), CFG).digest == parsed.digest
    # The digest covers the body and the config subset.
    assert parse(render(front, body + " more"), CFG).digest != parsed.digest
    assert parse(render(front, body), HeartbeatConfig(wake_cooldown=120.0)).digest != parsed.digest


@settings(max_examples=100, deadline=None)
@given(key=st.sampled_from(sorted(FORBIDDEN)), nested=st.booleans())
def test_a_forbidden_key_anywhere_in_the_frontmatter_invalidates_the_file(key: str, nested: bool) -> None:
    front: dict[str, Any] = {"version": 1, "preferences": {key: "x"}} if nested else {"version": 1, key: "x"}
    parsed = parse(render(front, ""), CFG)
    assert not parsed.valid and "heartbeat_forbidden_field" in {d["code"] for d in parsed.diagnostics}


@settings(max_examples=100, deadline=None)
@given(key=st.sampled_from(sorted(FORBIDDEN)), heading=st.booleans())
def test_reserved_body_sections_and_fields_invalidate_the_file(key: str, heading: bool) -> None:
    body = f"## {key}\ntext" if heading else f"intro\n{key}: value"
    code = "heartbeat_reserved_section" if heading else "heartbeat_reserved_body_field"
    parsed = parse(render({"version": 1}, body), CFG)
    assert not parsed.valid and code in {d["code"] for d in parsed.diagnostics}


def test_grammar_errors_have_their_codes() -> None:
    cases = {
        "---\nversion: 1\n": "heartbeat_malformed_frontmatter",
        "---\nversion: 1\nversion: 1\n---\n": "heartbeat_malformed_frontmatter",
        "---\nversion: [\n---\n": "heartbeat_malformed_frontmatter",
        "---\nversion: 2\n---\n": "heartbeat_invalid_version",
        "---\nsurprise: 1\n---\n": "heartbeat_unknown_field",
        "---\nenabled: maybe\n---\n": "heartbeat_invalid_field_type",
        "---\npreferences:\n  min_interval: soon\n---\n": "heartbeat_invalid_min_interval",
        "---\npreferences:\n  quiet_windows: [{timezone: UTC+2, start: '01:00', end: '02:00'}]\n---\n":
            "heartbeat_invalid_timezone",
        "---\npreferences:\n  quiet_windows: [{timezone: Mars/Olympus, start: '01:00', end: '02:00'}]\n---\n":
            "heartbeat_invalid_timezone",
        "---\npreferences:\n  quiet_windows: [{timezone: UTC, start: '25:00', end: '02:00'}]\n---\n":
            "heartbeat_invalid_time_window",
    }
    for text, code in cases.items():
        parsed = parse(text, CFG)
        assert not parsed.valid and code in {d["code"] for d in parsed.diagnostics}, (text, parsed.diagnostics)
    big = parse("x" * (CFG.max_body_bytes + 1), CFG)
    assert [d["code"] for d in big.diagnostics] == ["heartbeat_oversized_body"]


def test_preferences_below_the_floor_are_clamped_and_windows_ignored_when_config_says_so() -> None:
    text = "---\npreferences:\n  min_interval: 1m\n  quiet_windows: [{timezone: UTC, start: 22:00, end: 06:00}]\n---\n"
    parsed = parse(text, CFG)
    assert parsed.valid and parsed.policy["preferences"]["min_interval_seconds"] == CFG.min_interval
    assert parsed.policy["preferences"]["quiet_windows"][0]["start"] == "22:00"  # unquoted clocks stay clocks
    ignored = parse(text, HeartbeatConfig(allow_active_hours_preferences=False))
    assert ignored.valid and ignored.policy["preferences"]["quiet_windows"] == []
    assert {d["code"] for d in ignored.diagnostics} == {"heartbeat_preference_clamped", "heartbeat_preference_ignored"}


# ---- time windows --------------------------------------------------------------------------------------------

@settings(max_examples=400, deadline=None)
@given(zone=st.sampled_from(ZONES), start=clocks, end=clocks, instant=instants)
def test_a_window_and_its_inverse_split_every_instant_across_midnight(zone: str, start: time, end: time,
                                                                     instant: datetime) -> None:
    if start == end:
        return
    assert Window(zone, start, end).contains(instant) != Window(zone, end, start).contains(instant)


@settings(max_examples=300, deadline=None)
@given(zone=st.sampled_from(ZONES), other=st.sampled_from(ZONES), start=clocks, end=clocks, instant=instants)
def test_membership_does_not_depend_on_how_the_instant_is_written(zone: str, other: str, start: time, end: time,
                                                                  instant: datetime) -> None:
    w = Window(zone, start, end)
    assert w.contains(instant) == w.contains(instant.astimezone(ZoneInfo(other)))


def minutes_inside(w: Window, day: date) -> int:
    """Minutes of the zone's local `day` (however long DST makes it) that the window covers, stepped in UTC."""
    tz = ZoneInfo(w.timezone)
    t = datetime.combine(day, time(0), tz).astimezone(UTC)
    stop = datetime.combine(day + timedelta(days=1), time(0), tz).astimezone(UTC)
    count = 0
    while t < stop:
        count += w.contains(t)
        t += timedelta(minutes=1)
    return count


# Days on which the wall clock jumps (02:00→03:00 in spring, 03:00→02:00 / 02:00→01:00 in autumn).
DST_DAYS = {"America/New_York": [(date(2026, 3, 8), -60), (date(2026, 11, 1), 60)],
            "Europe/Berlin": [(date(2026, 3, 29), -60), (date(2026, 10, 25), 60)]}


@settings(max_examples=40, deadline=None)
@given(zone=st.sampled_from(sorted(DST_DAYS)), which=st.integers(0, 1), start=st.integers(4 * 60, 22 * 60),
       length=st.integers(1, 60))
def test_a_window_clear_of_the_change_covers_its_wall_clock_length_on_a_dst_day(zone: str, which: int, start: int,
                                                                                length: int) -> None:
    day, _ = DST_DAYS[zone][which]
    end = min(start + length, 23 * 60 + 59)
    w = Window(zone, time(start // 60, start % 60), time(end // 60, end % 60))
    assert minutes_inside(w, day) == end - start


@settings(max_examples=8, deadline=None)
@given(zone=st.sampled_from(sorted(DST_DAYS)), which=st.integers(0, 1))
def test_a_window_across_the_change_is_an_hour_shorter_in_spring_and_longer_in_autumn(zone: str, which: int) -> None:
    day, shift = DST_DAYS[zone][which]
    assert minutes_inside(Window(zone, time(0, 30), time(4, 0)), day) == 210 + shift
    # The same window across midnight into the change: the night before plus the short (or long) morning.
    night = Window(zone, time(23, 0), time(4, 0))
    assert minutes_inside(night, day) == 60 + 240 + shift


@settings(max_examples=200, deadline=None)
@given(quiet=windows, instant=instants)
def test_a_quiet_window_denies_exactly_its_instants_and_active_hours_allow_only_theirs(quiet: dict[str, str],
                                                                                     instant: datetime) -> None:
    w = Window(quiet["timezone"], time.fromisoformat(quiet["start"]), time.fromisoformat(quiet["end"]))
    policy = {"preferences": {"active_hours": [], "quiet_windows": [quiet]}}
    assert allowed_at(policy, instant) == (not w.contains(instant))
    active = {"preferences": {"active_hours": [quiet], "quiet_windows": []}}
    assert allowed_at(active, instant) == w.contains(instant)
