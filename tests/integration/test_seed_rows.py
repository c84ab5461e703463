"""The last seed rows (issue 34), each against the real daemon and the scripted agent: a blank first prompt is
create-only, `session history` is the assembled turn sequence, `--steer` after an interrupt composes the salvage
once, wake decisions name their closed reason where the health seed says they appear, and the smaller rows an
operator hits."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NO_TITLE, Daemon, markers, module_daemon, of_type, wait_for

HOLD_STOP = Path(__file__).parent / "hooks" / "hold_stop.py"
# Sessions of the `denier` agent stop only once their test releases the pre-stop hook.
HOOKS = (f'[[hooks.declarations]]\nname = "hold-stop"\nevent = "session.pre_stop"\nmode = "sync"\n'
         f'command = "{sys.executable}"\nargs = ["{HOLD_STOP}"]\ntimeout = "30s"\n'
         '[hooks.declarations.matcher]\nagent_name = "denier"\n')
daemon = module_daemon(NO_TITLE + HOOKS)


def user_texts(events: list[dict[str, Any]]) -> list[str]:
    return [e["content"]["text"] for e in of_type(events, "user_message")]


# ---- 1. a blank first prompt is create-only --------------------------------------------------------------------

@pytest.mark.parametrize("prompt", ["", "   ", " \n\t "], ids=["empty", "spaces", "whitespace"])
def test_a_blank_first_prompt_creates_the_session_and_stages_nothing(daemon: Daemon, workspace: Path,
                                                                     prompt: str) -> None:
    response = daemon.http.post("/api/sessions", json={"agent_name": "scripted", "workspace_path": str(workspace),
                                                       "prompt": prompt})
    assert response.status_code == 201, response.text
    sid = response.json()["session"]["id"]
    assert daemon.wait_state(sid, {"active", "stopped"})["state"] == "active"
    # A staged prompt would be dispatched before anything sent later: the first turn is the one sent now.
    daemon.run_turn(sid, "echo after")
    events = daemon.all_events(sid)
    assert user_texts(events) == ["echo after"]
    assert not markers(events, "prompt_queued") and not markers(events, "prompt_accepted")


def test_a_non_blank_first_prompt_is_trimmed_and_staged(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, prompt="  echo staged  \n")["id"]
    first = wait_for(lambda: of_type(daemon.all_events(sid), "user_message"), what="the staged first turn")
    assert first[0]["content"]["text"] == "echo staged"


def test_session_new_with_a_blank_prompt_is_create_only(daemon: Daemon, workspace: Path) -> None:
    result = daemon.cli("session", "new", "--agent", "scripted", "--cwd", str(workspace), "--prompt", "   ",
                        "-o", "json")
    assert result.returncode == 0, result.stderr
    created = json.loads(result.stdout)
    assert created["state"] == "active"
    daemon.run_turn(created["id"], "echo after")
    assert user_texts(daemon.all_events(created["id"])) == ["echo after"]


def test_a_first_prompt_too_large_names_the_prompt_field(daemon: Daemon, workspace: Path) -> None:
    response = daemon.http.post("/api/sessions", json={"agent_name": "scripted", "workspace_path": str(workspace),
                                                       "prompt": "x" * 70000})
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["code"] == "message_too_large" and body["error"].startswith("prompt exceeds"), body


# ---- 3. --steer after an interrupt, as POST …/steer --------------------------------------------------------------

COMPOSED = "hang\n\nUser correction/guidance after interrupt: do it differently"


def interrupted(d: Daemon, workspace: Path) -> str:
    """A session whose `hang` turn was cut by the dedicated interrupt (from the CLI): its text is the salvage."""
    sid = d.create(workspace)["id"]
    assert d.prompt(sid, "hang").status_code == 200
    d.wait_event(sid, "agent_message", text="working")
    cut = d.cli("session", "interrupt", sid, "-o", "json")
    assert cut.returncode == 0 and json.loads(cut.stdout)["prompt"]["interrupted"] is True, cut.stderr
    return sid


def test_cli_steer_after_an_interrupt_composes_the_interrupted_prompt_once(daemon: Daemon, workspace: Path) -> None:
    sid = interrupted(daemon, workspace)
    steered = daemon.cli("session", "prompt", sid, "do it differently", "--steer", "--no-follow", "-o", "json")
    assert steered.returncode == 0, steered.stderr
    result = json.loads(steered.stdout)["prompt"]
    assert result["status"] == "accepted" and result["mode"] == "steer"
    turn = wait_for(lambda: [e for e in of_type(daemon.all_events(sid), "user_message")
                             if e["turn_id"] == result["turn_id"]], what="the composed turn")
    assert turn[0]["content"]["text"] == COMPOSED and turn[0]["content"]["authored_text"] == "do it differently"
    # That turn runs now: a second steer is staged for it, never composed again.
    again = daemon.cli("session", "prompt", sid, "and again", "--steer", "-o", "json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["prompt"]["status"] == "staged"
    assert [e["content"]["text"] for e in of_type(daemon.all_events(sid), "user_message")] == ["hang", COMPOSED]
    assert daemon.http.post(daemon.scoped(sid, "/stop")).status_code == 204


def test_a_steer_mode_prompt_after_an_interrupt_composes_too(daemon: Daemon, workspace: Path) -> None:
    sid = interrupted(daemon, workspace)
    response = daemon.prompt(sid, "do it differently", mode="steer")
    assert response.status_code == 200, response.text
    turn_id = response.json()["prompt"]["turn_id"]
    rows = wait_for(lambda: [e for e in of_type(daemon.all_events(sid), "user_message") if e["turn_id"] == turn_id],
                    what="the composed turn")
    assert rows[0]["content"]["text"] == COMPOSED
    assert daemon.http.post(daemon.scoped(sid, "/stop")).status_code == 204


def test_a_turn_between_the_interrupt_and_the_steer_ends_the_salvage(daemon: Daemon, workspace: Path) -> None:
    sid = interrupted(daemon, workspace)
    daemon.run_turn(sid, "echo in between")
    stale = daemon.http.post(daemon.scoped(sid, "/steer"), json={"text": "do it differently"})
    assert stale.status_code == 409 and stale.json()["code"] == "prompt_not_in_progress", stale.text
    cli = daemon.cli("session", "prompt", sid, "do it differently", "--steer")
    assert cli.returncode == 65 and "prompt_not_in_progress" in cli.stderr, cli.stderr
    assert len(cli.stderr.strip().splitlines()) == 1
    assert [e["content"]["text"] for e in of_type(daemon.all_events(sid), "user_message")] == [
        "hang", "echo in between"]


# ---- 4. wake decisions name their closed reason where the health seed says they appear -------------------------

POLICY = "---\nversion: 1\nsummary: look around\n---\nCheck the inbox.\n"
UNKNOWN_SESSION = "sess_0000000000000000"


def test_heartbeat_status_names_the_wake_reason_of_an_agent_without_policy(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    status = daemon.cli_json("agent", "heartbeat", "status", "scripted")
    assert status["validation_status"] == "missing" and status["wake_reason"] == "heartbeat_no_policy"
    mine = [s for s in status["sessions"] if s["session_id"] == sid]
    assert mine == [{"session_id": sid, "workspace_id": daemon.session(sid)["workspace_id"], "state": "idle",
                     "result": "skipped", "reason": "heartbeat_no_policy"}]
    http = daemon.http.get("/api/agents/scripted/heartbeat/status", params={"session_id": sid}).json()
    assert http["wake_reason"] == "heartbeat_no_policy" and [s["session_id"] for s in http["sessions"]] == [sid]
    human = daemon.cli("agent", "heartbeat", "status", "scripted")
    assert human.returncode == 0 and "refused: heartbeat_no_policy" in human.stdout, human.stdout


def test_heartbeat_status_gives_each_sessions_decision_and_sends_nothing(daemon: Daemon, workspace: Path) -> None:
    policy = daemon.home / "agents" / "reader" / "HEARTBEAT.md"
    policy.parent.mkdir(parents=True, exist_ok=True)
    policy.write_text(POLICY)
    try:
        idle = daemon.create(workspace, agent="reader")["id"]
        busy = daemon.create(workspace, agent="reader")["id"]
        assert daemon.prompt(busy, "hang").status_code == 200

        def decisions() -> dict[str, str] | None:
            status = daemon.cli_json("agent", "heartbeat", "status", "reader")
            found = {s["session_id"]: s["reason"] for s in status["sessions"]}
            return found if found.get(busy) == "session_prompt_active" else None

        found = wait_for(decisions, what="the busy session's decision")
        assert found[idle] == "wake_sent"
        # A session of another agent is the documented extension `heartbeat_no_eligible_session`.
        other = daemon.create(workspace)["id"]
        status = daemon.cli_json("agent", "heartbeat", "status", "reader", "--session", other)
        assert [s["reason"] for s in status["sessions"]] == ["heartbeat_no_eligible_session"]
        # Nothing was sent or recorded by these reads.
        assert not of_type(daemon.all_events(idle), "synthetic_reentry")
        events = daemon.http.get("/api/agents/reader/heartbeat/status",
                                 params={"include_recent_wake_events": "true"}).json()["wake_events"]
        assert events == []
        assert daemon.http.post(daemon.scoped(busy, "/stop")).status_code == 204
    finally:
        policy.unlink()


def test_a_wake_of_an_unknown_session_is_a_session_not_found_decision(daemon: Daemon, workspace: Path) -> None:
    result = daemon.cli("agent", "heartbeat", "wake", "scripted", "--session", UNKNOWN_SESSION, "-o", "json")
    assert result.returncode == 0, result.stderr
    decision = json.loads(result.stdout)["decision"]
    assert (decision["result"], decision["reason"], decision["session_id"]) == (
        "skipped", "session_not_found", UNKNOWN_SESSION)
    human = daemon.cli("agent", "heartbeat", "wake", "scripted", "--session", UNKNOWN_SESSION, "--dry-run")
    assert human.returncode == 0 and "session_not_found" in human.stdout, human.stdout + human.stderr
    http = daemon.http.post("/api/agents/scripted/heartbeat/wake", json={"session_id": UNKNOWN_SESSION})
    assert http.status_code == 200 and http.json()["decision"]["reason"] == "session_not_found", http.text
    # An id anybody can make up leaves no audit row.
    events = daemon.http.get("/api/agents/scripted/heartbeat/status",
                             params={"include_recent_wake_events": "true"}).json()["wake_events"]
    assert not [e for e in events if e["session_id"] == UNKNOWN_SESSION]
    # An unknown agent is still an error.
    unknown = daemon.cli("agent", "heartbeat", "wake", "nobody", "--session", UNKNOWN_SESSION)
    assert unknown.returncode == 69 and "agent_not_found" in unknown.stderr


# ---- 5. the smaller rows ----------------------------------------------------------------------------------------

def test_a_prompt_during_a_stop_says_the_session_is_stopping(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="denier")["id"]
    path = daemon.scoped(sid, "/stop")

    def stop() -> None:
        with daemon.client(timeout=60) as client:
            client.post(path)

    stopper = threading.Thread(target=stop)
    stopper.start()
    try:
        wait_for(lambda: (workspace / "stop-held").exists(), what="the pre-stop hook")
        refused = daemon.prompt(sid, "echo too late")
        assert refused.status_code == 400, refused.text
        assert (refused.json()["code"], refused.json()["error"]) == ("session_not_active",
                                                                     "session is stopping, not active")
        cli = daemon.cli("session", "prompt", sid, "echo too late")
        assert cli.returncode == 65 and "session is stopping, not active" in cli.stderr, cli.stderr
    finally:
        (workspace / "release-stop").write_text("go\n")
        stopper.join(60)
    assert daemon.wait_state(sid, {"stopped"})["state"] == "stopped"


def test_health_last_error_reads_as_the_failure_summary(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace)["id"]
    daemon.run_turn(sid, "autherr")
    failure = wait_for(lambda: daemon.session(sid).get("failure"), what="the auth failure")
    assert failure["kind"] == "provider_auth_failure" and "Authentication required" in failure["summary"]
    health = daemon.cli_json("session", "health", sid)["health"]
    # The kind was redacted as if it named a secret (`provider_auth_failure: [REDACTED] Authentication required`).
    assert health["last_error"] == f"{failure['kind']}: {failure['summary']}"
    assert "[REDACTED]" not in health["last_error"]


EXAMPLE_ID = "sess_0123456789abcdef"


def jq_examples(*path: str) -> list[tuple[list[str], list[str]]]:
    """(compozy arguments, jq arguments) of each `compozy … | jq …` line in a command's --help examples."""
    from compozy.cli.main import cli

    command = cli
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
    found = []
    for line in (command.help or "").split("Examples:", 1)[1].splitlines():
        left, _, right = line.strip().partition(" | jq ")
        if left.startswith("compozy ") and right:
            found.append((shlex.split(left)[1:], shlex.split(right.split(" | ")[0])))
    return found


@pytest.mark.skipif(shutil.which("jq") is None, reason="needs jq")
@pytest.mark.parametrize("path", [("session", "status"), ("session", "health"), ("session", "recap"),
                                  ("session", "history"), ("session", "stop")], ids=" ".join)
def test_the_jq_examples_of_session_help_read_real_fields(daemon: Daemon, workspace: Path,
                                                         path: tuple[str, ...]) -> None:
    # A session whose turn failed: every field the examples read has a value (`.session.failure` too).
    sid = daemon.create(workspace, prompt="autherr")["id"]
    wait_for(lambda: daemon.session(sid).get("failure"), what="the failed turn")
    examples = jq_examples(*path)
    assert examples, f"compozy {' '.join(path)} --help shows no jq example"
    for args, jq in examples:
        printed = daemon.cli(*[sid if a == EXAMPLE_ID else a for a in args])
        assert printed.returncode == 0, printed.stderr
        read = subprocess.run(["jq", *jq], input=printed.stdout, capture_output=True, text=True, timeout=30)
        assert read.returncode == 0, read.stderr
        assert read.stdout.strip() not in ("", "null"), f"`{' '.join(args)} | jq {' '.join(jq)}` prints nothing"


def test_a_permission_request_naming_only_the_tool_call_id_shows_the_calls_kind_and_title(
        daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="reader")["id"]  # approve-reads: anything but a read waits for a person
    assert daemon.prompt(sid, "toolid write notes.txt hello").status_code == 200
    pending = wait_for(lambda: daemon.cli_json("session", "permissions", sid)["permissions"],
                       what="the pending request")
    assert [(p["kind"], p["title"]) for p in pending] == [("edit", "Write notes.txt")]
    stored = daemon.wait_event(sid, "permission", decision="pending")["content"]
    assert (stored["action"], stored["title"]) == ("edit", "Write notes.txt")
    assert stored["raw"]["toolCall"] == {"toolCallId": pending[0]["tool_call_id"]}  # what the agent sent, as sent
    denied = daemon.cli("session", "deny", sid, pending[0]["request_id"])
    assert denied.returncode == 0, denied.stderr
    daemon.wait_event(sid, "done")
    # A read named only by its id is a read: approve-reads approves it without asking anybody.
    turn = daemon.prompt(sid, "toolid read README.md").json()["prompt"]["turn_id"]
    rows = daemon.turn_events(sid, turn)
    assert [(e["content"]["decision"], e["content"]["decision_source"]) for e in of_type(rows, "permission")] == [
        ("approved", "policy:approve-reads")]


def at_80_columns(d: Daemon, *args: str) -> list[str]:
    result = subprocess.run([sys.executable, "-m", "compozy.cli", *args], capture_output=True, text=True,
                            timeout=60, env={**d.env, "COLUMNS": "80", "LINES": "24"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert not [line for line in lines if len(line) > 80], result.stdout
    return lines


def test_status_shows_a_failure_in_one_line_at_80_columns(daemon: Daemon, workspace: Path) -> None:
    crashed = []
    for _ in range(2):
        sid = daemon.create(workspace)["id"]
        assert daemon.prompt(sid, "crash").status_code == 200
        crashed.append(sid)
    for sid in crashed:
        wait_for(lambda sid=sid: (daemon.session(sid).get("failure") or {}).get("crash_bundle_path"),
                 what="a crash bundle")
    recent = daemon.http.get("/api/status").json()["health"]["failures"]["recent"]
    lines = at_80_columns(daemon, "status")
    section = lines[next(i for i, line in enumerate(lines) if "Recent session failures" in line):]
    # A title, a header and a line per failure, and one hint where the crash bundles are.
    assert len(section) == 2 + len(recent) + 1, "\n".join(section)
    for sid in crashed:
        row = next(line for line in section if sid in line)
        assert "process_exit" in row and "scripted" in row, row
    assert "compozy session status ID" in section[-1]


def test_task_list_keeps_every_status_on_one_line_at_80_columns(daemon: Daemon, workspace: Path) -> None:
    response = daemon.http.post("/api/tasks", json={"prompt": "hang", "agent_name": "scripted",
                                                    "workspace_path": str(workspace),
                                                    "title": "a task with a long title that goes on " * 3})
    assert response.status_code == 201, response.text
    task_id = response.json()["task"]["id"]
    wait_for(lambda: daemon.http.get(f"/api/tasks/{task_id}").json()["task"]["status"] == "running",
             what="the running task")
    lines = at_80_columns(daemon, "task", "list")
    row = next(line for line in lines if task_id in line)
    assert row.split()[:2] == [task_id, "running"], lines
    assert len([line for line in lines if line.strip()]) == 3, lines  # a header, the task, the totals
    assert daemon.http.post(f"/api/tasks/{task_id}/cancel").status_code == 200
