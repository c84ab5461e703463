"""Transcript assembly (docs/reference/events.md §5) over real events.db files written with EventLog."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sessions.live import transcript
from sessions.store.events import EventLog, read_events
from sessions.store.ops import NewEvent

T1, T2, T3 = "turn_00000000000000a1", "turn_00000000000000a2", "turn_00000000000000a3"


def ev(type_: str, turn_id: str = T1, **content: Any) -> NewEvent:
    return NewEvent(type_, turn_id, content)


def write(path: Path, events: list[NewEvent]) -> Path:
    log = EventLog(path, "scripted")
    log.append(events)
    log.close()
    return path


def rows(path: Path) -> list[dict[str, Any]]:
    return read_events(path, limit=100_000)


def full(path: Path) -> list[dict[str, Any]]:
    return transcript.assemble(rows(path))


def messages(path: Path) -> list[tuple[str, list[str]]]:
    return [(e["message"]["role"], [p["type"] for p in e["message"]["parts"]]) for e in full(path)]


def marker(kind: str, summary: str = "s") -> NewEvent:
    raw = {"kind": f"transcript_marker.{kind}", "occurred_at": "2025-01-01T00:00:00.000000Z", "summary": summary}
    return ev("transcript_marker.created", title=kind, text=summary, raw=raw)


def busy_session() -> list[NewEvent]:
    """Three turns exercising every rule: chunks, thoughts, tools, permissions, markers, errors, stop."""
    return [
        ev("available_commands_update", "", title="available_commands_update", available_commands=[]),
        ev("user_message", T1, text="hello", source="user"),
        ev("thought", T1, text="let me "),
        ev("thought", T1, text="think"),
        ev("agent_message", T1, text="Hel"),
        ev("agent_message", T1, text=""),
        ev("agent_message", T1, text="lo "),
        ev("agent_message", T1, text="there"),
        ev("tool_call", T1, tool_call_id="tc1", tool_name="Read a.txt", title="Read a.txt", tool_kind="read",
           tool_input={"path": "/w/a.txt"}, status="pending"),
        ev("permission", T1, request_id="tc1", tool_call_id="tc1", decision="pending", title="Read a.txt",
           raw={"options": [{"optionId": "allow", "kind": "allow_once", "name": "Allow"}]}),
        ev("permission", T1, request_id="tc1", tool_call_id="tc1", decision="approved", decision_source="person"),
        ev("tool_call", T1, tool_call_id="tc1", status="in_progress"),
        ev("tool_result", T1, tool_call_id="tc1", tool_name="Read a.txt", status="completed",
           tool_result={"content": "file body"}),
        marker("prompt_queued"),
        ev("agent_message", T1, text="done."),
        ev("usage", T1, usage={"context_used": 10}),
        ev("done", T1, stop_reason="end_turn", usage={"total_tokens": 7}),
        marker("prompt_accepted"),
        ev("user_message", T2, text="write it"),
        ev("tool_call", T2, tool_call_id="tc2", tool_name="Write b.txt", title="Write b.txt", tool_kind="edit"),
        ev("tool_result", T2, tool_call_id="tc2", tool_name="Write b.txt", status="failed",
           tool_result={"content": "denied"}, tool_error="permission denied"),
        ev("plan", T2, entries=[]),
        ev("agent_message", T2, text="after the plan"),
        ev("error", T2, error="agent exited with signal 9",
           failure={"kind": "process_exit", "summary": "agent exited with signal 9", "crash_bundle_path": None}),
        ev("session_stopped", "", stop_reason="agent_crashed", stop_detail="agent exited with signal 9"),
        ev("tool_result", T3, tool_call_id="tc-gone", tool_name="Run", tool_error="interrupted"),
    ]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return write(tmp_path / "events.db", busy_session())


# ---- assembly rules --------------------------------------------------------------------------

def test_entries_follow_the_assembly_rules(store: Path) -> None:
    assert messages(store) == [
        ("user", ["text"]),
        ("assistant", ["reasoning", "text", "dynamic-tool", "data-compozy-permission", "data-compozy-event",
                       "data-compozy-event", "text"]),
        ("system", ["data-compozy-event"]),  # prompt_accepted marker while nothing is open
        ("user", ["text"]),
        ("assistant", ["dynamic-tool"]),  # closed by the plan
        ("system", ["data-compozy-event"]),  # the plan itself
        ("assistant", ["text"]),
        ("system", ["data-compozy-event"]),  # error
        ("system", ["data-compozy-event"]),  # session_stopped
        ("assistant", ["dynamic-tool"]),  # a result whose call is gone (repair after a crash)
    ]


def test_chunks_merge_and_empty_chunks_are_dropped(store: Path) -> None:
    answer = full(store)[1]
    parts = answer["message"]["parts"]
    assert parts[0] == {"type": "reasoning", "text": "let me think"}
    assert parts[1] == {"type": "text", "text": "Hello there"}
    assert parts[-1] == {"type": "text", "text": "done."}


def test_tool_calls_join_their_results_by_tool_call_id(store: Path) -> None:
    entries = full(store)
    ok = entries[1]["message"]["parts"][2]
    assert ok["toolCallId"] == "tc1" and ok["toolName"] == "Read a.txt"
    assert ok["state"] == "output-available"
    assert ok["input"] == {"path": "/w/a.txt"}  # the in_progress update did not wipe the input
    assert ok["output"] == {"content": "file body"}
    assert (ok["toolKind"], ok["status"]) == ("read", "completed")
    failed = entries[4]["message"]["parts"][0]
    assert failed["state"] == "output-error" and failed["errorText"] == "permission denied"
    assert (failed["toolKind"], failed["status"]) == ("edit", "failed")
    assert "output" not in failed
    orphan = entries[9]["message"]["parts"][0]
    assert orphan["toolCallId"] == "tc-gone" and orphan["state"] == "output-error"


def test_a_permission_request_is_settled_in_place_by_its_decision(store: Path) -> None:
    parts = full(store)[1]["message"]["parts"]
    request, decision = parts[3], parts[4]
    assert request["id"] == "tc1"
    assert request["data"]["decision"] == "approved"
    assert request["data"]["options"] == [{"option_id": "allow", "kind": "allow_once", "label": "Allow"}]
    assert decision["data"]["event_type"] == "permission"
    assert decision["data"]["decision_source"] == "person"


def test_done_closes_the_assistant_message_with_stop_reason_and_usage(store: Path) -> None:
    answer = full(store)[1]
    meta = answer["message"]["metadata"]
    assert meta["stop_reason"] == "end_turn"
    assert meta["usage"] == {"total_tokens": 7}
    assert meta["turn_id"] == T1
    by_seq = {r["sequence"]: r for r in rows(store)}
    assert by_seq[answer["start_sequence"]]["type"] == "thought"
    assert by_seq[answer["sequence"]]["type"] == "done"
    assert answer["message"]["id"] == f"msg_{by_seq[answer['start_sequence']]['id']}"


def test_a_plan_closes_its_own_turn_but_a_daemon_system_row_does_not_split_an_answer(tmp_path: Path) -> None:
    path = write(tmp_path / "events.db", [
        ev("user_message", text="go"), ev("agent_message", text="one "),
        ev("system", "", title="auto_title", text="A title"),  # recorded outside any turn
        ev("agent_message", text="two"), ev("plan", entries=[]), ev("agent_message", text="three"),
        ev("done", stop_reason="end_turn"),
    ])
    entries = full(path)
    assert [(e["message"]["role"], [p.get("text") for p in e["message"]["parts"]]) for e in entries] == [
        ("user", ["go"]), ("assistant", ["one two"]), ("system", [None]), ("assistant", ["three"])]
    assert entries[2]["message"]["parts"][0]["data"]["event_type"] == "plan"
    assert transcript.read_page(path, limit=1).entries == entries[-1:]
    assert transcript.resume(path, 3).open_entry == transcript.resume(path, 2).open_entry  # not a clean point


def test_a_plan_shows_its_entries_and_joins_another_turns_open_answer(tmp_path: Path) -> None:
    steps = [{"content": "read", "status": "completed"}, {"content": "write", "status": "pending"}]
    path = write(tmp_path / "events.db", [
        ev("user_message", T1, text="go"), ev("agent_message", T1, text="working"),
        ev("plan", T2, entries=steps),  # another turn's plan does not close this answer
        ev("agent_message", T1, text=" still"), ev("done", T1, stop_reason="end_turn"),
        ev("plan", T1, entries=steps[:1]),  # nothing open: a message of its own
    ])
    entries = full(path)
    answer = entries[1]["message"]["parts"]
    assert [p["type"] for p in answer] == ["text", "data-compozy-event", "text"]
    assert answer[1]["data"]["entries"] == steps
    assert entries[2]["message"]["role"] == "system"
    assert entries[2]["message"]["parts"][0]["data"]["entries"] == steps[:1]


def test_markers_errors_and_stops_carry_their_evidence(store: Path) -> None:
    entries = full(store)
    queued = entries[1]["message"]["parts"][5]["data"]
    assert queued["marker"]["kind"] == "transcript_marker.prompt_queued"
    error = entries[7]["message"]["parts"][0]["data"]
    assert error["event_type"] == "error" and error["failure"]["kind"] == "process_exit"
    stopped = entries[8]["message"]["parts"][0]["data"]
    assert stopped["stop_reason"] == "agent_crashed" and stopped["stop_detail"] == "agent exited with signal 9"


def test_assembly_is_deterministic(store: Path) -> None:
    assert full(store) == full(store)
    first = transcript.read_page(store, limit=5)
    second = transcript.read_page(store, limit=5)
    assert first.entries == second.entries


# ---- incremental and bounded reads -----------------------------------------------------------

def upsert(cache: dict[str, dict[str, Any]], entries: list[dict[str, Any]]) -> None:
    for entry in entries:
        cache[entry["message"]["id"]] = entry


def ordered(cache: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(cache.values(), key=lambda e: e["start_sequence"])


def test_a_snapshot_then_deltas_from_any_cursor_equals_the_full_replay(store: Path) -> None:
    expected = full(store)
    total = len(rows(store))
    for cut in range(total + 1):
        cache: dict[str, dict[str, Any]] = {}
        upsert(cache, transcript.assemble(read_events(store, limit=cut)) if cut else [])
        assembler = transcript.resume(store, cut)
        delta = transcript.read_delta(store, assembler, cut, limit=3)
        while delta.rows:
            upsert(cache, delta.entries)
            delta = transcript.read_delta(store, assembler, delta.cursor, limit=3)
        assert ordered(cache) == expected, f"cut at {cut}"


def test_an_open_entry_handed_back_continues_like_the_live_assembler(tmp_path: Path) -> None:
    path = write(tmp_path / "events.db", [
        ev("user_message", text="go"), ev("agent_message", text="a"),
        ev("tool_call", tool_call_id="t", tool_name="Run"), ev("agent_message", text="b"),
    ])
    live = transcript.resume(path, 4)
    kept = transcript.Assembler(open_entry=live.open_entry)
    log = EventLog(path, "scripted")
    log.append([ev("agent_message", text="c"), ev("tool_result", tool_call_id="t", tool_result={"ok": 1}),
                ev("done", stop_reason="end_turn")])
    log.close()
    assert transcript.read_delta(path, kept, 4).entries == transcript.read_delta(path, live, 4).entries
    final = full(path)[-1]
    assert [p.get("text") for p in final["message"]["parts"] if p["type"] == "text"] == ["a", "bc"]


def test_backward_pages_cover_the_transcript_exactly_once(store: Path) -> None:
    expected = full(store)
    collected: list[dict[str, Any]] = []
    before = None
    while True:
        page = transcript.read_page(store, limit=2, before=before)
        assert len(page.entries) <= 2
        collected = page.entries + collected
        if not page.has_older:
            assert page.next_before_sequence is None
            break
        assert page.next_before_sequence == page.entries[0]["start_sequence"]
        before = page.next_before_sequence
    assert collected == expected


def test_the_newest_page_reads_from_a_restart_point_not_from_the_start(tmp_path: Path) -> None:
    events = []
    for i in range(50):
        events += [ev("user_message", f"turn_{i:016x}", text=f"q{i}"), ev("agent_message", f"turn_{i:016x}", text="a"),
                   ev("done", f"turn_{i:016x}", stop_reason="end_turn")]
    path = write(tmp_path / "events.db", events)
    start, partial = transcript._restart_point(path, 151, 3, None)
    assert (start, partial) == (142, False)  # the third-newest user message (148, 145, 142)
    page = transcript.read_page(path, limit=2)
    assert [e["message"]["parts"][0]["text"] for e in page.entries] == ["q49", "a"]
    assert page.has_older and page.max_sequence == 150


def test_a_page_boundary_inside_an_entry_returns_that_entry_whole(tmp_path: Path) -> None:
    path = write(tmp_path / "events.db", [
        ev("user_message", text="go"), ev("agent_message", text="one "), ev("agent_message", text="two "),
        ev("agent_message", text="three"), ev("done", stop_reason="end_turn"), ev("user_message", T2, text="next"),
    ])
    page = transcript.read_page(path, limit=10, before=3)
    assert [e["message"]["role"] for e in page.entries] == ["user", "assistant"]
    assert page.entries[1]["message"]["parts"] == [{"type": "text", "text": "one two three"}]
    assert page.entries[1]["sequence"] == 5


def test_a_capped_scan_reads_only_the_tail_and_marks_a_cut_entry(tmp_path: Path) -> None:
    chunks = [ev("agent_message", text=f"c{i} ") for i in range(5000)]
    path = write(tmp_path / "events.db", [ev("user_message", text="stream"), *chunks])
    page = transcript.read_page(path, limit=5, max_scan=100)
    assert len(page.entries) == 1 and page.partial
    entry = page.entries[0]
    assert entry["message"]["metadata"]["partial"] is True
    assert entry["start_sequence"] == 5001 - 100 + 1  # the newest 100 rows only
    assert entry["message"]["parts"][0]["text"].endswith("c4999 ")
    whole = transcript.read_page(path, limit=5)
    assert whole.entries[1]["message"]["parts"][0]["text"] == "".join(f"c{i} " for i in range(5000))


def test_a_capped_scan_that_starts_on_a_clean_edge_is_exact(tmp_path: Path) -> None:
    path = write(tmp_path / "events.db", [
        ev("user_message", text="one"), ev("agent_message", text="a"), ev("done", stop_reason="end_turn"),
        ev("agent_message", T2, text="b"), ev("agent_message", T2, text="c"), ev("done", T2, stop_reason="end_turn"),
    ])
    page = transcript.read_page(path, limit=5, max_scan=3)  # the window starts right after the first `done`
    assert not page.partial and page.has_older
    assert page.entries == full(path)[-1:]
    assert page.entries[0]["message"]["parts"] == [{"type": "text", "text": "bc"}]


def test_an_empty_or_missing_store_has_an_empty_transcript(tmp_path: Path) -> None:
    for path in (tmp_path / "missing.db", write(tmp_path / "empty.db", [])):
        page = transcript.read_page(path)
        assert (page.entries, page.max_sequence, page.has_older, page.next_before_sequence) == ([], 0, False, None)


# ---- fences ----------------------------------------------------------------------------------

GEN = transcript.TRANSCRIPT_GENERATION


@pytest.mark.parametrize(("cursor", "epoch", "generation", "reason"), [
    (None, None, None, None),
    (5, 1, GEN, None),
    (5, None, GEN, "fence_missing"),
    (5, 1, None, "fence_missing"),
    (5, 2, GEN, "epoch_mismatch"),
    (5, 1, 99, "generation_mismatch"),
    (11, 1, GEN, "sequence_reset"),
])
def test_fences_decide_between_deltas_and_a_reset(cursor: int | None, epoch: int | None, generation: int | None,
                                                  reason: str | None) -> None:
    got = transcript.check_fences(cursor, epoch, generation, current_epoch=1, max_sequence=10)
    assert (got.value if got else None) == reason
