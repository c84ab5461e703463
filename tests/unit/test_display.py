"""What a person reads of a session's state (sessions/core/display.py): the outcome of a stopped session and the
quiet-turn notice, with the clock as a parameter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from sessions.core.display import outcome, quiet, quiet_text

T0 = datetime(2026, 12, 5, 10, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.mark.parametrize(("stop_reason", "failure_kind", "label", "tone"), [
    ("completed", None, "completed", "ok"),
    ("user_canceled", None, "stopped by you", "neutral"),
    ("shutdown", None, "stopped: daemon shut down", "neutral"),
    ("budget_exceeded", None, "stopped: budget reached", "neutral"),
    ("timeout", "timeout", "failed: timeout", "failed"),
    ("agent_crashed", "process_exit", "failed: process_exit", "failed"),
    ("error", None, "failed: error", "failed"),
    # A failure on the record wins over a reason that alone would read as a clean end.
    ("user_canceled", "provider_auth_failure", "failed: provider_auth_failure", "failed"),
    (None, None, "stopped", "neutral"),
])
def test_a_stopped_session_reads_as_its_outcome_never_dead(stop_reason: str | None, failure_kind: str | None,
                                                           label: str, tone: str) -> None:
    assert outcome("stopped", stop_reason, failure_kind) == {"label": label, "tone": tone}


@pytest.mark.parametrize("state", ["starting", "active", "stopping"])
def test_a_session_that_is_not_stopped_has_no_outcome(state: str) -> None:
    assert outcome(state, "completed", None) is None


def quiet_at(now: float, *, last: float | None = 10, started: float | None = 0, prompting: bool = True,
             waiting: bool = False, notice: float = 60, attention: float = 300) -> dict[str, object] | None:
    doc = quiet(prompting=prompting, waiting_on_person=waiting, last_output=at(last) if last is not None else None,
                turn_started=at(started) if started is not None else None, now=at(now), notice_after=notice,
                attention_after=attention)
    return dict(doc) if doc is not None else None


def test_a_turn_quiet_for_80_seconds_says_no_output_for_1m_20s() -> None:
    assert quiet_at(90) == {"since": "2026-12-05T10:00:10Z", "seconds": 80.0, "text": "no output for 1m 20s",
                            "attention": False}


def test_the_notice_starts_at_quiet_notice_after_and_not_a_second_before() -> None:
    assert quiet_at(69.9) is None
    assert quiet_at(70) is not None


def test_past_quiet_attention_after_the_notice_asks_for_attention() -> None:
    assert quiet_at(309)["attention"] is False  # type: ignore[index]
    assert quiet_at(310)["attention"] is True  # type: ignore[index]


def test_output_from_an_earlier_turn_does_not_count_for_this_one() -> None:
    # The last output came before this turn began: the silence runs from the turn's start.
    doc = quiet_at(100, last=-500, started=20)
    assert doc is not None and doc["seconds"] == 80.0


def test_no_notice_without_a_running_turn_or_while_a_person_is_asked() -> None:
    assert quiet_at(1000, prompting=False) is None
    assert quiet_at(1000, waiting=True) is None


def test_zero_turns_the_notice_and_the_attention_off() -> None:
    assert quiet_at(1000, notice=0) is None
    assert quiet_at(1000, attention=0)["attention"] is False  # type: ignore[index]


def test_quiet_text_counts_seconds_minutes_and_hours() -> None:
    assert quiet_text(59.9) == "no output for 59s"
    assert quiet_text(60) == "no output for 1m 0s"
    assert quiet_text(3 * 3600 + 5 * 60 + 7) == "no output for 3h 5m"


def test_the_preview_is_the_running_tool_else_the_reply_so_far_else_the_last_reply() -> None:
    from sessions.core.display import preview, preview_text

    assert preview(prompting=True, current_tool="Run: npm test", live_reply="x", last_reply="y") == \
        {"kind": "tool", "text": "Run: npm test"}
    assert preview(prompting=True, current_tool=None, live_reply="so\nfar", last_reply="y") == \
        {"kind": "message", "text": "so far"}
    assert preview(prompting=False, current_tool="stale", live_reply="", last_reply="done") == \
        {"kind": "message", "text": "done"}
    assert preview(prompting=False, current_tool=None, live_reply="", last_reply="") is None
    assert len(preview_text("word " * 100)) == 160 and preview_text("word " * 100).endswith("…")
