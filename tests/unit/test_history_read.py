"""`read_history` over real events.db files: turns begin at their first user row, rows outside any turn
stay where they happened, and a huge turn or a long history is read within its bounds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sessions.live import history as transcript_history
from sessions.store.events import EventLog
from sessions.store.ops import NewEvent

T1, T2, T3 = "turn_00000000000000b1", "turn_00000000000000b2", "turn_00000000000000b3"


def ev(type_: str, turn_id: str, **content: Any) -> NewEvent:
    return NewEvent(type_, turn_id, content)


def write(path: Path, events: list[NewEvent]) -> Path:
    log = EventLog(path, "scripted")
    log.append(events)
    log.close()
    return path


def turn(turn_id: str, text: str, *middle: NewEvent) -> list[NewEvent]:
    return [ev("user_message", turn_id, text=text), *middle, ev("agent_message", turn_id, text=f"re {text}"),
            ev("done", turn_id, stop_reason="end_turn")]


def marker(kind: str) -> NewEvent:
    return ev("transcript_marker.created", "-", title=kind, text=kind,
              raw={"kind": f"transcript_marker.{kind}", "occurred_at": "2025-01-01T00:00:00Z", "summary": kind})


def texts(group: dict[str, Any]) -> list[str]:
    return [p.get("text") or p["data"].get("title", "") for m in group["messages"] for p in m["parts"]
            if p["type"] in ("text", "data-compozy-event")]


def test_turns_in_order_with_turnless_rows_where_they_happened(tmp_path: Path) -> None:
    path = write(tmp_path / "events.db", [marker("prompt_queued"), *turn(T1, "one"), marker("prompt_interrupted"),
                                          *turn(T2, "two"), ev("user_message", T2, text="agent echo", source="agent"),
                                          *turn(T3, "three")])
    history = transcript_history.read_history(path)
    assert [g["turn_id"] for g in history] == ["-", T1, T2, T3]
    assert texts(history[0]) == ["prompt_queued"]
    assert texts(history[1]) == ["one", "re one", "prompt_interrupted"]
    # An agent's user chunk is a later row of its turn, not a turn of its own.
    assert texts(history[2]) == ["two", "re two", "agent echo"]
    assert sum(g["event_count"] for g in history) == 12
    assert [g["start_sequence"] for g in history] == [1, 2, 6, 10]
    assert history[-1]["sequence"] == 12


def test_the_newest_turns_only(tmp_path: Path) -> None:
    path = write(tmp_path / "events.db", [marker("prompt_queued"), *turn(T1, "one"), *turn(T2, "two"),
                                          *turn(T3, "three")])
    assert [g["turn_id"] for g in transcript_history.read_history(path, last=2)] == [T2, T3]
    assert [g["turn_id"] for g in transcript_history.read_history(path, last=3)] == [T1, T2, T3]
    # After a sequence that cuts a turn: the rest of it, under its own id.
    cut = transcript_history.read_history(path, after=3)
    assert [g["turn_id"] for g in cut] == [T1, T2, T3] and cut[0]["start_sequence"] == 4
    assert transcript_history.read_history(path, after=100) == []
    assert transcript_history.read_history(tmp_path / "missing.db") == []


def test_a_huge_turn_keeps_its_prompt_and_its_newest_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transcript_history, "HISTORY_TURN_ROWS", 10)
    tools = [e for i in range(20) for e in (
        ev("tool_call", T2, tool_call_id=f"t{i}", title=f"Step {i}", status="in_progress"),
        ev("tool_result", T2, tool_call_id=f"t{i}", tool_name=f"Step {i}", status="completed",
           tool_result={"content": "ok"}))]
    path = write(tmp_path / "events.db", [*turn(T1, "one"), *turn(T2, "two", *tools)])
    small, huge = transcript_history.read_history(path)
    assert "truncated" not in small
    assert huge["truncated"] is True and huge["event_count"] == 10 and huge["omitted_events"] == 43 - 10
    assert texts(huge)[0] == "two" and texts(huge)[-1] == "re two"
    steps = [p["title"] for m in huge["messages"] for p in m["parts"] if p["type"] == "dynamic-tool"]
    assert steps == ["Step 16", "Step 17", "Step 18", "Step 19"]


def test_a_long_history_is_bounded_newest_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transcript_history, "HISTORY_ROWS", 5)
    path = write(tmp_path / "events.db", [*turn(T1, "one"), *turn(T2, "two"), *turn(T3, "three")])
    history = transcript_history.read_history(path)
    assert [g["turn_id"] for g in history] == [T2, T3]
    assert "truncated" not in history[1] and history[0]["truncated"] is True and history[0]["event_count"] == 2
    assert texts(history[0]) == ["two"] and history[0]["omitted_events"] == 1
