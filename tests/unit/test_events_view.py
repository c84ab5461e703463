"""Human CLI lines (compozy/cli/events_view.py): relative times, `--since` and tables that never wrap ids."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from compozy.cli.events_view import ago, fit_table, history_lines, since_timestamp
from sessions.live import transcript
from sessions.store.events import EventLog, read_events
from sessions.store.ops import NewEvent

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


# ---- `session history`: each thing said once (issue 50, row 6) -------------------------------------------------

T1 = "turn_00000000000000c1"
CALL = "tool-1-0123abcd"
WRITE = {"request_id": CALL, "action": "edit", "resource": "Write out.txt", "title": "Write out.txt",
         "tool_call_id": CALL}


def history_of(tmp_path: Path, events: list[NewEvent]) -> list[str]:
    """`session history`'s lines for one turn, assembled from a real events.db as the daemon assembles it."""
    log = EventLog(tmp_path / "events.db", "reader")
    log.append(events)
    log.close()
    entries = transcript.assemble(read_events(tmp_path / "events.db", limit=1000))
    turns: list[dict[str, Any]] = [{"turn_id": T1, "started_at": None, "messages": [e["message"] for e in entries]}]
    return history_lines(turns, "sess_0123456789abcdef", width=100, now=NOW)[1:]


def turn_with(*middle: NewEvent) -> list[NewEvent]:
    return [NewEvent("user_message", T1, {"text": "tool write out.txt hello"}),
            NewEvent("tool_call", T1, {"tool_call_id": CALL, "title": "Write out.txt", "tool_name": "Write out.txt",
                                       "tool_kind": "edit", "status": "in_progress"}),
            *middle,
            NewEvent("tool_result", T1, {"tool_call_id": CALL, "tool_name": "Write out.txt", "status": "completed",
                                         "tool_result": {"content": "ok"}}),
            NewEvent("agent_message", T1, {"text": "written"}),
            NewEvent("done", T1, {"stop_reason": "end_turn", "prompt_stop_reason": "end_turn"})]


def test_a_permission_a_person_decided_is_one_history_line_with_its_decision(tmp_path: Path) -> None:
    lines = history_of(tmp_path, turn_with(
        NewEvent("permission", T1, {**WRITE, "decision": "pending", "decision_source": "person"}),
        NewEvent("permission", T1, {**WRITE, "decision": "approved", "decision_source": "person",
                                    "option_id": "allow"})))
    assert [line for line in lines if "permission" in line] == ["  permission edit Write out.txt → approved"]
    assert lines[0] == "  user       tool write out.txt hello"


def test_a_decision_the_policy_made_without_a_request_shown_is_still_a_line(tmp_path: Path) -> None:
    lines = history_of(tmp_path, turn_with(
        NewEvent("permission", T1, {**WRITE, "decision": "approved", "decision_source": "policy:approve-all"})))
    assert [line for line in lines if "permission" in line] == ["  permission edit Write out.txt → approved"]
