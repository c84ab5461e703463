"""`session recap`'s one line per message: what the agent said; its reasoning only when it said nothing else; and
each marker and each error said once."""

from __future__ import annotations

from typing import Any

import pytest

from compozy.cli.reads import _message_line, _render, marker_rows


def test_a_message_line_shows_the_reply_not_the_reasoning_mixed_in() -> None:
    both = {"role": "assistant", "parts": [{"type": "reasoning", "text": "Reading the request."},
                                           {"type": "text", "text": "Hello there."}]}
    assert _message_line(both) == "Hello there."
    thinking = {"role": "assistant", "parts": [{"type": "reasoning", "text": " planning "}]}
    assert _message_line(thinking) == "(thinking) planning"


PROVIDER_FAILURE = {"kind": "transcript_marker.provider_failure", "occurred_at": "2026-12-05T07:49:53.931999Z",
                    "summary": "Turn ended by session stop (agent_crashed).", "sequence": 11,
                    "turn_id": "turn_00000000000000c2"}
TIMEOUT = {**PROVIDER_FAILURE, "kind": "transcript_marker.prompt_timeout", "summary": "Prompt timed out.",
           "sequence": 7}
KILLED = "agent process killed by SIGKILL"


def stopped_recap() -> dict[str, Any]:
    """What `GET …/recap` answers for a session whose agent was killed mid-turn (the shape of sessions/recap.py)."""
    failure = {"kind": "process_exit", "summary": KILLED, "crash_bundle_path": None}

    def system(event_type: str, **data: Any) -> dict[str, Any]:
        return {"id": f"m-{event_type}", "role": "system", "metadata": {"created_at": "2026-12-05T07:49:53Z"},
                "parts": [{"type": "data-compozy-event", "data": {"event_type": event_type, **data}}]}

    return {"session": {"id": "sess_1e12eb484ff852ad", "state": "stopped", "badge": "failed", "agent_name": "reader",
                        "workspace_id": "ws_1", "stop_reason": "agent_crashed", "stop_detail": KILLED,
                        "failure": failure},
            "active_run": None, "pending_markers": [PROVIDER_FAILURE], "recent_markers": [TIMEOUT, PROVIDER_FAILURE],
            "pending_inputs": [],
            "recent_messages": [system("error", error=KILLED, failure=failure),
                                system("transcript_marker.created", marker=PROVIDER_FAILURE,
                                       text=PROVIDER_FAILURE["summary"]),
                                system("session_stopped", stop_reason="agent_crashed", error=KILLED,
                                       failure=failure)],
            "snapshot": {"event_cursor": 12, "generated_at": "2026-12-05T07:49:53.939586Z",
                         "consistency": "persisted_reads"}}


def test_a_marker_both_pending_and_recent_is_listed_once_pending_first() -> None:
    rows = marker_rows(stopped_recap())
    assert [(pending, kind.removeprefix("transcript_marker.")) for pending, kind, _, _ in rows] == [
        ("yes", "provider_failure"), ("", "prompt_timeout")]


def test_the_stopped_row_names_the_stop_and_leaves_the_error_text_to_the_error_row() -> None:
    lines = [_message_line(m) for m in stopped_recap()["recent_messages"]]
    assert lines == [KILLED, PROVIDER_FAILURE["summary"], "session stopped (agent_crashed)"]


def test_the_human_recap_says_the_marker_and_the_error_once_each(capsys: pytest.CaptureFixture[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    _render(stopped_recap())
    out = capsys.readouterr().out
    assert out.count("Turn ended by session stop (agent_crashed).") == 2  # its marker row, its message row
    # The Failure field and the error row: the session_stopped row names the stop instead.
    assert out.count(KILLED) == 3  # Failure, Stop detail, the error row
    assert "session stopped (agent_crashed)" in out
