"""`session history`: the user-visible turn sequence (debugging seed, step 5), assembled by the transcript's
assembler: per turn, in time order, the user's message, the reply as one message with its thoughts and tool calls,
and the markers where they happened; `-o json` gives the same structure, newest N turns, bounded per turn."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import JSON_ONLY, NO_TITLE, ROOT, Daemon, module_daemon, of_type

daemon = module_daemon(NO_TITLE)


def at_80_columns(d: Daemon, *args: str) -> list[str]:
    result = subprocess.run([sys.executable, "-m", "compozy.cli", *args], cwd=str(ROOT), capture_output=True,
                            text=True, timeout=60, env={**d.env, "COLUMNS": "80", "LINES": "24"})
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def parts(turn: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [p for m in turn["messages"] for p in m["parts"] if p["type"] == kind]


def marker_kinds(turn: dict[str, Any]) -> list[str]:
    return [p["data"]["marker"]["kind"].removeprefix("transcript_marker.") for p in parts(turn, "data-compozy-event")
            if "marker" in p["data"]]


def test_history_is_the_assembled_turn_sequence(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, prompt="think about it")["id"]
    daemon.wait_event(sid, "done")
    daemon.run_turn(sid, "tools 3 0")
    daemon.run_turn(sid, "slow 200 0")
    turns = daemon.cli_json("session", "history", sid)
    # The create's markers come first, on their own: nothing happened before them.
    assert turns[0]["turn_id"] == "-" and marker_kinds(turns[0]) == ["prompt_queued", "prompt_accepted"]
    first, tools, slow = turns[1:]
    assert [m["role"] for m in first["messages"]] == ["user", "assistant"]
    assert parts(first, "text")[0]["text"] == "think about it"
    assert [p["text"] for p in parts(first, "reasoning")] == ["about it"]
    assert parts(first, "text")[1]["text"] == "thought done"
    # Each tool call is one part with its status, whatever rows its call and result took.
    assert [(p["title"], p["status"]) for p in parts(tools, "dynamic-tool")] == [
        (f"Step {i}", "completed") for i in range(3)]
    # 200 streamed chunks are one reply, not 200 rows.
    assert [m["role"] for m in slow["messages"]] == ["user", "assistant"]
    assert parts(slow, "text")[1]["text"] == "".join(f"c{i} " for i in range(200))
    stored = daemon.all_events(sid)
    assert slow["event_count"] == len([e for e in stored if e["turn_id"] == slow["turn_id"]])
    assert sum(t["event_count"] for t in turns) == len(stored)
    assert [t["start_sequence"] for t in turns] == sorted(t["start_sequence"] for t in turns)

    lines = at_80_columns(daemon, "session", "history", sid)
    # A header per turn, a line per message part (one per tool call), never a line per streamed chunk.
    assert [line for line in lines if line.startswith("  tool")] == [
        f"  tool       Step {i} (other) completed" for i in range(3)]
    assert [line.split(None, 1)[0] for line in lines[1:]] == [
        "marker", "marker", "──", "user", "thought", "agent", "──", "user", "tool", "tool", "tool", "agent", "──",
        "user", "agent"], lines


def test_markers_stay_where_they_happened(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    running = daemon.prompt(sid, "hang").json()["prompt"]["turn_id"]
    daemon.wait_event(sid, "agent_message", text="working")
    assert daemon.prompt(sid, "echo later", mode="queue").status_code == 202
    assert daemon.http.post(daemon.scoped(sid, "/interrupt")).status_code == 200
    daemon.run_turn(sid, "echo next")
    turns = daemon.cli_json("session", "history", sid)
    # The interrupt's marker is recorded outside any turn: it is shown after the turn it cut, before the next one,
    # not gathered with the other turnless markers into a block of its own.
    assert turns[0]["turn_id"] == running
    assert marker_kinds(turns[0]) == ["prompt_queued", "prompt_dropped", "prompt_interrupted"]
    assert parts(turns[1], "text")[0]["text"] == "echo next"
    human = daemon.cli("session", "history", sid).stdout
    order = [human.index(s) for s in ("hang", "prompt_queued", "prompt_interrupted", "echo next")]
    assert order == sorted(order), human


def test_history_keeps_the_newest_turns_and_bounds_a_huge_turn(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    # 750 tool calls and their results: 1,500 rows that never merge (streamed text chunks do, docs/reference/events.md
    # §2).
    for text in ("echo one", "echo two", "tools 750 0"):
        daemon.run_turn(sid, text, timeout=90)
    turns = daemon.cli_json("session", "history", sid)
    assert [parts(t, "text")[0]["text"] for t in turns] == ["echo one", "echo two", "tools 750 0"]
    huge = turns[-1]
    stored = [e for e in daemon.all_events(sid) if e["turn_id"] == huge["turn_id"]]
    assert len(stored) > 1500
    assert huge["truncated"] is True and huge["event_count"] == 1000
    assert huge["omitted_events"] == len(stored) - 1000
    assert huge["sequence"] == stored[-1]["sequence"] and stored[-1]["type"] == "done"
    assert len(parts(huge, "dynamic-tool")) < 750
    assert parts(huge, "dynamic-tool")[-1]["title"] == "Step 749"

    last_two = daemon.cli_json("session", "history", sid, "--last", "2")
    assert [t["turn_id"] for t in last_two] == [t["turn_id"] for t in turns[-2:]]
    assert "truncated" not in last_two[0]
    after = daemon.cli_json("session", "history", sid, "--after", str(turns[-1]["start_sequence"] - 1))
    assert [t["turn_id"] for t in after] == [huge["turn_id"]]
    # The HTTP route returns the same structure.
    http = daemon.http.get(daemon.scoped(sid, "/history"), params={"limit": 2}, headers=JSON_ONLY).json()["history"]
    assert http == last_two


def test_session_events_keeps_the_rows(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    daemon.run_turn(sid, "slow 5 0")
    rows = daemon.cli_json("session", "events", sid)["events"]
    assert len(of_type(rows, "agent_message")) >= 1 and rows[0]["type"] in ("user_message", "transcript_marker.created")
    assert all("sequence" in r and "content" in r for r in rows)


# ---- a page of events says what it left out (issue 50, row 9) ---------------------------------------------------

def test_session_events_without_last_says_it_shows_only_the_newest_200(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    daemon.run_turn(sid, "tools 120 0")  # a tool_call and a tool_result per step: over 240 rows
    stored = daemon.all_events(sid)
    assert len(stored) > 200
    newest = stored[-200:]

    page = daemon.cli_json("session", "events", sid)
    assert [e["sequence"] for e in page["events"]] == [e["sequence"] for e in newest]
    assert page["page"] == {"limit": 200, "order": "newest", "has_more": True,
                            "first_sequence": newest[0]["sequence"], "last_sequence": newest[-1]["sequence"]}
    human = daemon.cli("session", "events", sid)
    assert human.returncode == 0, human.stderr
    assert human.stdout.splitlines()[-1] == (
        f"newest 200 events shown (from sequence {newest[0]['sequence']}); older ones: "
        f"compozy session events {sid} --after 0 (oldest first), or --last up to 1000")
    helped = daemon.cli("session", "events", "--help")
    assert "newest 200" in " ".join(helped.stdout.split())

    # A page that holds everything says nothing more; one after a cursor says where the next one starts.
    whole = daemon.cli_json("session", "events", sid, "--last", "1000")
    assert len(whole["events"]) == len(stored) and whole["page"]["has_more"] is False
    assert "older ones" not in daemon.cli("session", "events", sid, "--last", "1000").stdout
    first = daemon.cli_json("session", "events", sid, "--after", "0")
    assert first["page"]["order"] == "after" and first["page"]["has_more"] is True
    assert first["page"]["next_after"] == stored[199]["sequence"]
    rest = daemon.cli_json("session", "events", sid, "--after", str(first["page"]["next_after"]))
    assert [e["sequence"] for e in first["events"] + rest["events"]] == [e["sequence"] for e in stored]
    assert rest["page"]["has_more"] is False
    # Rows for a script: the page's rows, one a line.
    jsonl = daemon.cli("session", "events", sid, "-o", "jsonl").stdout.splitlines()
    assert len(jsonl) == 200
