"""What the session page renders reaches the transcript frames: a tool call's diff and terminal content, a terminal's
later output, and a message the agent sent after its turn ended."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sessions.acp.mapping import map_update
from sessions.live import transcript
from tests.unit.test_transcript import T1, T2, ev, full, rows, write

DIFF = {"type": "diff", "path": "/w/calc.py", "oldText": "a\n", "newText": "b\n"}
TERMINAL = {"type": "terminal", "terminalId": "term-1"}


def tool_parts(path: Path) -> list[dict[str, Any]]:
    return [p for e in full(path) for p in e["message"]["parts"] if p["type"] == "dynamic-tool"]


def test_a_tool_calls_diff_and_terminal_content_is_recorded_on_its_row() -> None:
    update = {"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Edit calc.py", "kind": "edit",
              "status": "in_progress", "content": [DIFF, TERMINAL, {"type": "content",
                                                                   "content": {"type": "text", "text": "hi"}}]}
    type_, content = map_update(update, {}, {}) or ("", {})
    assert type_ == "tool_call"
    assert content["tool_content"] == [
        {"type": "diff", "path": "/w/calc.py", "old_text": "a\n", "new_text": "b\n"},
        {"type": "terminal", "terminal_id": "term-1"}, {"type": "text", "text": "hi"}]
    done = {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed", "content": [TERMINAL]}
    type_, content = map_update(done, {"t1": "Run"}, {}) or ("", {})
    assert type_ == "tool_result" and content["tool_result"]["terminals"] == [{"terminal_id": "term-1"}]


def test_a_tool_part_carries_its_content_blocks_through_its_updates_and_result(tmp_path: Path) -> None:
    blocks = [{"type": "diff", "path": "/w/calc.py", "old_text": None, "new_text": "x\n"}]
    path = write(tmp_path / "events.db", [
        ev("user_message", text="go"),
        ev("tool_call", tool_call_id="t", tool_name="Write calc.py", tool_kind="edit", tool_content=blocks),
        ev("tool_call", tool_call_id="t", status="in_progress"),  # an update that does not restate the content
        ev("tool_result", tool_call_id="t", tool_result={"content": "ok"}),
        ev("done", stop_reason="end_turn")])
    [part] = tool_parts(path)
    assert part["content"] == blocks and part["state"] == "output-available"


def test_terminal_output_joins_the_tool_part_that_ran_it_without_closing_the_answer(tmp_path: Path) -> None:
    exited = {"terminal_id": "term-1", "command": "pytest -q", "exit_code": 1, "output": "FAILED\n"}
    path = write(tmp_path / "events.db", [
        ev("user_message", text="go"),
        ev("tool_call", tool_call_id="t", tool_name="Run",
           tool_content=[{"type": "terminal", "terminal_id": "term-1"}]),
        ev("system", title="terminal_exited", raw={**exited, "extra": "not shown"}),
        ev("agent_message", text="ran it"),
        ev("done", stop_reason="end_turn"),
        # After the turn: no tool part is open to take it, so it is an event part of its own.
        ev("system", T1, title="terminal_exited", raw={**exited, "terminal_id": "term-2"})])
    entries = full(path)
    assert [e["message"]["role"] for e in entries] == ["user", "assistant", "system"]
    [part] = tool_parts(path)
    assert part["terminals"] == {"term-1": exited}
    assert entries[1]["message"]["parts"][-1] == {"type": "text", "text": "ran it"}
    assert entries[2]["message"]["parts"][0]["data"]["terminal"]["terminal_id"] == "term-2"


def test_a_message_after_the_turn_ended_is_marked_out_of_turn_in_the_replay_and_from_any_cursor(
        tmp_path: Path) -> None:
    path = write(tmp_path / "events.db", [
        ev("user_message", T1, text="go"), ev("agent_message", T1, text="answer"),
        ev("done", T1, stop_reason="end_turn"),
        ev("agent_message", "", text="a note after the turn"),
        ev("user_message", T2, text="again"), ev("agent_message", T2, text="second"),
        ev("done", T2, stop_reason="end_turn"),
        ev("agent_message", T2, text="late, with the ended turn's id")])
    entries = full(path)
    flags = [(e["message"]["role"], bool(e["message"]["metadata"].get("out_of_turn"))) for e in entries]
    assert flags == [("user", False), ("assistant", False), ("assistant", True), ("user", False),
                     ("assistant", False), ("assistant", True)]
    for cut in range(len(rows(path))):  # the live path: resume at any cursor, then deltas
        assembler = transcript.resume(path, cut)
        delta = transcript.read_delta(path, assembler, cut)
        late = [e for e in delta.entries if e["message"]["id"] == entries[-1]["message"]["id"]]
        assert late and late[0]["message"]["metadata"].get("out_of_turn") is True, f"cut at {cut}"
