"""What the agent says of its session outside the transcript (issue 29, points 5-9) against the real daemon: modes
offered at session/new and switched through the API and the CLI; its slash commands; its own title over the
auto-title, as plain text; context use and cost on the record, the list, per turn and in /metrics; a budget that
stops the session; the context warning."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SCRIPTED, Daemon, markers, of_type, start_daemon, wait_for

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    home = tmp_path_factory.mktemp("home")
    command = [sys.executable, str(SCRIPTED), "--modes", "--prompt-log", str(home / "prompts.jsonl")]
    extra = (f'[providers.modal]\ncommand = {json.dumps(command)}\n\n[agents.modal]\nprovider = "modal"\n\n'
             # Its `plan` stands for claude's `default`: the mode in which the agent asks the client first.
             f'[providers.asking]\ncommand = {json.dumps(command)}\nask_mode = "plan"\n\n'
             '[agents.asking]\nprovider = "asking"\npermissions = "approve-all"\n\n'
             '[agents.asking-deny]\nprovider = "asking"\npermissions = "deny-all"\n\n'
             '[agents.asking-reads]\nprovider = "asking"\npermissions = "approve-reads"\n\n'
             '[agents.modal-deny]\nprovider = "modal"\npermissions = "deny-all"\n\n'
             '[agents.capped]\nprovider = "modal"\nmax_cost_usd = 1.5\n\n'
             '[limits]\nmax_cost_usd = 100\n')
    d = start_daemon(home, extra_config=extra, timeout=120)
    yield d
    d.stop()


def test_modes_are_on_the_record_and_switched_through_the_api_and_the_cli(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="modal")["id"]
    assert daemon.session(sid)["mode"] == {"current": "default", "available": [
        {"id": "default", "name": "Default"}, {"id": "plan", "name": "Plan"}]}
    switched = daemon.http.post(daemon.scoped(sid, "/mode"), json={"mode": "plan"})
    assert switched.status_code == 200 and switched.json()["session"]["mode"]["current"] == "plan", switched.text
    assert daemon.cli_json("session", "mode", sid, "default")["session"]["mode"]["current"] == "default"
    refused = daemon.http.post(daemon.scoped(sid, "/mode"), json={"mode": "yolo"})
    assert refused.status_code == 400 and refused.json()["code"] == "invalid_mode", refused.text
    bad = daemon.cli("session", "mode", sid, "yolo")
    assert bad.returncode == 65 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    changes = [e["content"]["raw"] for e in daemon.all_events(sid) if e["content"].get("title") == "mode_changed"]
    assert changes == [{"from": "default", "to": "plan"}, {"from": "plan", "to": "default"}]
    no_modes = daemon.create(workspace)["id"]
    unsupported = daemon.http.post(daemon.scoped(no_modes, "/mode"), json={"mode": "plan"})
    assert unsupported.status_code == 409 and unsupported.json()["code"] == "modes_unsupported"


def test_a_new_session_starts_in_the_providers_ask_mode_unless_the_policy_approves_everything(
        daemon: Daemon, workspace: Path) -> None:
    """claude-agent-acp opens in `auto`, where it runs commands without asking the client: under deny-all or
    approve-reads a new session starts in the provider's `ask_mode` instead, recorded as any mode change."""
    for policy in ("deny", "reads"):
        sid = daemon.create(workspace, agent=f"asking-{policy}")["id"]
        assert daemon.session(sid)["mode"]["current"] == "plan", policy
        changes = [e["content"]["raw"] for e in daemon.all_events(sid) if e["content"].get("title") == "mode_changed"]
        assert changes == [{"from": "default", "to": "plan"}], (policy, changes)
    trusting = daemon.create(workspace, agent="asking")["id"]
    assert daemon.session(trusting)["mode"]["current"] == "default"
    assert not [e for e in daemon.all_events(trusting) if e["content"].get("title") == "mode_changed"]
    # A provider without an ask mode is left where the agent opened, whatever the policy.
    assert daemon.session(daemon.create(workspace, agent="modal-deny")["id"])["mode"]["current"] == "default"


def test_commands_title_usage_and_cost_reach_the_record_the_list_the_turn_and_metrics(
        daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="modal")["id"]
    turn = daemon.run_turn(sid, "agentinfo")
    session = wait_for(lambda: (s := daemon.session(sid))["usage"] and s, timeout=10, what="the usage on the record")
    assert session["available_commands"] == [{"name": "review", "description": "Review the current changes"},
                                             {"name": "init", "description": "Write an AGENTS.md"}]
    # The agent's own title, Markdown stripped; it is the name until a person gives one.
    assert (session["name"], session["name_source"]) == ("Fix ratio() in calc.py", "agent")
    assert session["usage"] == {"context_used": 95000, "context_size": 100000,
                                "cost": {"amount": 0.42, "currency": "USD"}}
    [done] = of_type(turn, "done")
    assert done["content"]["cost"] == {"amount": 0.42, "currency": "USD"}  # this turn's share
    [history] = [t for t in daemon.cli_json("session", "history", sid) if t["turn_id"] == done["turn_id"]]
    [reply] = [m for m in history["messages"] if m["role"] == "assistant"]
    assert reply["metadata"]["cost"] == {"amount": 0.42, "currency": "USD"}, reply["metadata"]
    context = markers(daemon.all_events(sid), "context_near_limit")
    assert len(context) == 1 and "95%" in context[0]["content"]["text"], context
    wide = daemon.cli("session", "list", "--wide")
    assert wide.returncode == 0 and "0.42 USD" in wide.stdout, wide.stdout
    metrics = daemon.http.get("/metrics").text
    assert 'compozy_agent_cost_total{agent="modal",currency="USD",provider="modal"} 0.42' in metrics, \
        [line for line in metrics.splitlines() if "cost" in line]

    # A slash command reaches the agent as typed; a person's name wins over the agent's title.
    daemon.run_turn(sid, "/review the diff")
    log = [json.loads(line) for line in (daemon.home / "prompts.jsonl").read_text().splitlines()]
    assert log[-1]["text"] == "/review the diff"
    assert daemon.http.patch(daemon.scoped(sid), json={"name": "mine"}).status_code == 200
    daemon.run_turn(sid, "agentinfo")
    assert (daemon.session(sid)["name"], daemon.session(sid)["name_source"]) == ("mine", "user")


def test_a_session_that_reaches_its_budget_is_stopped_with_budget_exceeded(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="capped")["id"]  # the agent's 1.5 USD, not [limits]' 100
    accepted = daemon.prompt(sid, "spend 1.75")
    assert accepted.status_code == 200, accepted.text
    stopped = daemon.wait_state(sid, {"stopped"}, timeout=30)
    assert stopped["stop_reason"] == "budget_exceeded", stopped
    assert stopped["failure"]["kind"] == "budget_exceeded" and "1.50 USD" in stopped["failure"]["summary"]
    events = daemon.all_events(sid)
    assert markers(events, "budget_exceeded"), [e["type"] for e in events]
    turn = [e for e in events if e["turn_id"] == accepted.json()["prompt"]["turn_id"]]
    assert of_type(turn, "error") or of_type(turn, "done"), [e["type"] for e in turn]  # the turn ended



def test_a_tasks_budget_spans_its_attempts_and_its_cost_is_their_sum(daemon: Daemon, workspace: Path) -> None:
    created = daemon.http.post("/api/tasks", json={"prompt": "spend 1.75", "agent_name": "capped",
                                                   "workspace_path": str(workspace)})
    assert created.status_code == 201, created.text
    task_id = created.json()["task"]["id"]

    def task() -> dict[str, Any]:
        return daemon.http.get(f"/api/tasks/{task_id}").json()["task"]

    first = wait_for(lambda: (t := task())["status"] in ("failed", "needs_attention") and t, timeout=60,
                     what="the first attempt to end on its budget")
    assert first["cost"] == {"amount": 1.75, "currency": "USD"}, first
    assert daemon.session(first["session_ids"][0])["stop_reason"] == "budget_exceeded"
    assert daemon.http.post(f"/api/tasks/{task_id}/retry").status_code == 200
    # Nothing of the 1.5 USD is left: the retry's attempt fails at once, no session started for it.
    second = wait_for(lambda: (t := task())["attempts"] == 2 and t["runs"][-1]["status"] == "finished" and t,
                      timeout=60, what="the retry to be refused by the budget")
    assert second["runs"][-1]["reason"] == "budget_exceeded" and len(second["session_ids"]) == 1, second
