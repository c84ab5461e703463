"""Provider context recovery (sessions reference §14) over real events.db files: a log with a conversation is
replayed; a log with nothing anyone said (a session whose start failed: the daemon's own errors only) has nothing
to recover (issue 50, row 7), so no replay is prepended and no `session_recovered` marker is written."""

from __future__ import annotations

from pathlib import Path

from sessions.runtime.projection import INSTRUCTION, build_projection
from sessions.store.events import EventLog
from sessions.store.ops import NewEvent

T1 = "turn_00000000000000d1"
FAILURE = {"kind": "startup_failure", "summary": "ACP session/new failed: -32603 Internal error"}


def store(tmp_path: Path, events: list[NewEvent]) -> Path:
    path = tmp_path / "events.db"
    log = EventLog(path, "flaky")
    log.append(events)
    log.close()
    return path


def test_a_session_whose_start_failed_has_nothing_to_recover(tmp_path: Path) -> None:
    path = store(tmp_path, [
        NewEvent("error", "", {"error": FAILURE["summary"], "failure": FAILURE, "text": "stderr tail"}),
        NewEvent("session_stopped", "", {"stop_reason": "error", "failure": FAILURE, "error": FAILURE["summary"]}),
    ])
    assert build_projection(path) == (None, 0)


def test_an_empty_store_has_nothing_to_recover(tmp_path: Path) -> None:
    assert build_projection(store(tmp_path, [])) == (None, 0)


def test_a_conversation_is_replayed_with_its_errors(tmp_path: Path) -> None:
    path = store(tmp_path, [
        NewEvent("user_message", T1, {"text": "remember plum"}),
        NewEvent("agent_message", T1, {"text": "noted"}),
        NewEvent("done", T1, {"stop_reason": "end_turn"}),
        NewEvent("error", "", {"error": "agent process killed by SIGKILL"}),
    ])
    text, count = build_projection(path)
    assert count == 3 and text is not None and text.startswith(INSTRUCTION)
    assert "remember plum" in text and "agent process killed by SIGKILL" in text
