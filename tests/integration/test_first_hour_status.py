"""Issue 48 against the real daemon: status that tells the truth (a stopped session's outcome, a quiet turn's
notice in the payload, `session status`, `session list` and the attention list) and the demo agent's tour (a plan,
a question, a permission, an edit with its diff, a terminal, Markdown; `slow`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.conftest import NO_TITLE, Daemon, module_daemon, of_type, said, wait_for

# A quiet turn is noticed after 1 s and asks for attention after 2 s (60 s and 5 min by default).
CONFIG = ('[session.supervision]\nquiet_notice_after = "1s"\nquiet_attention_after = "2s"\n'
          '[agents.demoreads]\nprovider = "demo"\npermissions = "approve-reads"\n' + NO_TITLE)

daemon = module_daemon(CONFIG, timeout=120.0)


def quiet_items(d: Daemon, sid: str) -> list[dict[str, Any]]:
    return [i for i in d.http.get("/api/attention").json()["items"] if i["session_id"] == sid and i["kind"] == "quiet"]


def test_a_completed_session_and_one_stopped_by_you_read_as_their_outcome_not_dead(daemon: Daemon,
                                                                                  workspace: Path) -> None:
    done = daemon.create(workspace)["id"]
    daemon.run_turn(done, "exitidle 0.2")
    stopped = daemon.wait_state(done, {"stopped"})
    assert stopped["stop_reason"] == "completed"
    assert stopped["outcome"] == {"label": "completed", "tone": "ok"} and stopped["quiet"] is None
    status = daemon.cli_json("session", "status", done)
    assert status["session"]["outcome"]["label"] == "completed"
    assert status["health"]["health"] == "dead"  # kept for the wake service
    text = daemon.cli("session", "status", done).stdout
    assert "stopped: completed" in text and "dead" not in text and "session_unhealthy" not in text
    listed = daemon.cli("session", "list", "--all").stdout
    assert any(done in line and "stopped: completed" in line for line in listed.splitlines())

    mine = daemon.create(workspace)["id"]
    assert daemon.session(mine)["outcome"] is None  # active: its state says what it does
    daemon.cli_json("session", "stop", mine)
    assert daemon.session(mine)["outcome"] == {"label": "stopped by you", "tone": "neutral"}


def test_a_quiet_turn_shows_its_notice_then_asks_for_attention_and_both_go_when_it_ends(daemon: Daemon,
                                                                                     workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    response = daemon.prompt(sid, "hang")
    assert response.status_code == 200, response.text
    quiet = wait_for(lambda: daemon.session(sid)["quiet"], what="the quiet notice")
    assert quiet["text"].startswith("no output for ") and quiet["seconds"] >= 1.0
    status_text = daemon.cli("session", "status", sid).stdout
    assert "active: no output for" in status_text
    [item] = wait_for(lambda: quiet_items(daemon, sid) or None, what="the quiet turn in the attention list")
    assert "no output for" in item["summary"] and item["url"] == f"/sessions/{sid}"
    [row] = [s for s in daemon.http.get("/api/sessions").json()["sessions"] if s["id"] == sid]
    assert row["quiet"] is not None and row["quiet"]["attention"] is True

    assert daemon.http.post(daemon.scoped(sid, "/prompt/cancel")).status_code == 200
    wait_for(lambda: daemon.session(sid)["prompt_state"] == "idle", what="the turn to end")
    assert daemon.session(sid)["quiet"] is None and quiet_items(daemon, sid) == []


def test_the_demo_tour_plans_asks_edits_with_a_diff_runs_a_terminal_and_answers_in_markdown(
        daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="demoreads")["id"]  # the built-in demo agent under approve-reads
    response = daemon.prompt(sid, "tour")
    assert response.status_code == 200, response.text
    turn_id = response.json()["prompt"]["turn_id"]

    [question] = wait_for(lambda: daemon.http.get(daemon.scoped(sid, "/elicitations")).json()["elicitations"] or None,
                          what="the tour's question")
    assert question["requested_schema"]["properties"]["greeting"]["enum"] == ["Hello", "Hi", "Howdy"]
    answered = daemon.http.post(daemon.scoped(sid, f"/elicitations/{question['id']}"),
                                json={"action": "accept", "content": {"greeting": "Howdy"}})
    assert answered.status_code == 200, answered.text

    # approve-reads: the edit waits for a person, then the command does.
    for expected in ("edit", "execute"):
        [request] = wait_for(lambda: daemon.http.get(daemon.scoped(sid, "/permissions")).json()["permissions"] or None,
                             what=f"the tour's {expected} permission")
        assert request["kind"] == expected
        approved = daemon.http.post(daemon.scoped(sid, f"/permissions/{request['request_id']}"),
                                    json={"decision": "approve"})
        assert approved.status_code == 200, approved.text
        wait_for(lambda rid=request["request_id"]: all(
            p["request_id"] != rid for p in daemon.http.get(daemon.scoped(sid, "/permissions")).json()["permissions"]),
            what="the permission to be answered")

    turn = daemon.turn_events(sid, turn_id, timeout=60)
    assert of_type(turn, "done")[0]["content"]["prompt_stop_reason"] == "end_turn"
    assert of_type(turn, "plan"), "a plan"
    written = (workspace / "compozy-tour.md").read_text()
    assert "Howdy from the Compozy demo tour." in written
    patches = [p for e in of_type(turn, "tool_result") for p in e["content"]["tool_result"].get("structured_patch", [])]
    assert [p["new_text"] for p in patches if p["path"].endswith("compozy-tour.md")] == [written]
    terminals = [c for e in of_type(turn, "tool_call") for c in e["content"].get("tool_content") or []
                 if c.get("type") == "terminal"]
    assert terminals, "a terminal"
    text = said(turn)
    assert "You chose **Howdy**" in text and "```python" in text


def test_slow_runs_about_twenty_seconds_and_stops_at_once_when_cancelled(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="general")["id"]  # the built-in demo agent
    response = daemon.prompt(sid, "slow")
    turn_id = response.json()["prompt"]["turn_id"]
    wait_for(lambda: "Step 2 of 20" in said(daemon.all_events(sid, turn_id=turn_id)), what="two slow steps")
    assert daemon.session(sid)["prompt_state"] == "prompting"
    assert daemon.http.post(daemon.scoped(sid, "/prompt/cancel")).status_code == 200
    turn = daemon.turn_events(sid, turn_id, timeout=10)
    assert "Step 20 of 20" not in said(turn)


def test_a_prompt_in_plain_english_with_tour_words_is_echoed_as_before(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="general")["id"]
    turn = daemon.run_turn(sid, "please edit the plan")
    assert said(turn) == "Hello from the Compozy demo agent. You said: please edit the plan"


def test_the_list_previews_the_last_reply_and_the_running_tool(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="general")["id"]
    assert daemon.session(sid)["preview"] is None  # nothing said yet
    daemon.run_turn(sid, "hello there")
    [row] = [s for s in daemon.http.get("/api/sessions").json()["sessions"] if s["id"] == sid]
    assert row["preview"] == {"kind": "message",
                              "text": "Hello from the Compozy demo agent. You said: hello there"}


def test_an_interrupt_names_each_prompt_it_drops(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    assert daemon.prompt(sid, "hang").status_code == 200
    wait_for(lambda: daemon.session(sid)["prompt_state"] == "prompting", what="the turn")
    queued = daemon.prompt(sid, "the prompt I queued", mode="queue").json()["prompt"]
    assert queued["status"] == "queued"
    answer = daemon.http.post(daemon.scoped(sid, "/interrupt"), json={})
    assert answer.status_code == 200, answer.text
    assert answer.json()["prompt"]["canceled_queued_entries"] == [queued["queue_entry_id"]]
    dropped = wait_for(lambda: [e for e in daemon.events(sid, type="transcript_marker.created")
                                if e["content"].get("title") == "prompt_dropped"] or None, what="the marker")
    assert "“the prompt I queued”" in dropped[0]["content"]["text"]
