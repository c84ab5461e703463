"""Lifecycle hooks on a live daemon: prompt patches keep the authored text, denials reject the
operation, a required denial stops the session with hook_stopped, and every run is a hook_runs row."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Daemon, start_daemon

HOOK = Path(__file__).parent / "hooks" / "policy_hook.py"


def hooks_config() -> str:
    def decl(name: str, event: str, matcher: str, required: bool) -> str:
        return (f'[[hooks.declarations]]\nname = "{name}"\nevent = "{event}"\nmode = "sync"\n'
                f"required = {'true' if required else 'false'}\ncommand = \"{sys.executable}\"\n"
                f'args = ["{HOOK}"]\ntimeout = "10s"\n[hooks.declarations.matcher]\n{matcher}\n\n')

    return (decl("strict-policy", "input.pre_submit", 'agent_name = "scripted"', True)
            + decl("soft-policy", "input.pre_submit", 'agent_name = "reader"', False)
            + decl("tool-gate", "tool.pre_call", 'tool_name = "*secret*"', False)
            + decl("create-gate", "session.pre_create", 'session_type = "user"', False)
            + decl("start-gate", "agent.pre_start", 'agent_name = "denier"', False)
            + decl("start-cwd", "agent.pre_start", 'agent_name = "general"', False))


@pytest.fixture(scope="module")
def hooked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(tmp_path_factory.mktemp("hooks-home"), extra_config=hooks_config())
    yield d
    d.stop()


def runs(d: Daemon, session_id: str) -> list[dict]:
    ws = d.session(session_id)["workspace_id"]
    response = d.http.get(f"/api/workspaces/{ws}/hooks/runs", params={"session": session_id})
    assert response.status_code == 200, response.text
    return response.json()["runs"]


def test_a_prompt_hook_rewrites_the_text_and_keeps_what_was_typed(hooked: Daemon, workspace: Path) -> None:
    s = hooked.create(workspace, agent="scripted")
    assert hooked.prompt(s["id"], "shout hello").status_code == 200
    hooked.wait_event(s["id"], "done")
    message = hooked.events(s["id"], type="user_message")[0]["content"]
    assert message["text"] == "SHOUT HELLO"
    assert message["authored_text"] == "shout hello"
    assert [r["outcome"] for r in runs(hooked, s["id"])] == ["applied"]


def test_a_required_hook_that_denies_a_prompt_stops_the_session_with_hook_stopped(
        hooked: Daemon, workspace: Path) -> None:
    s = hooked.create(workspace, agent="scripted")
    response = hooked.prompt(s["id"], "do the forbidden thing")
    assert response.status_code == 403
    assert response.json()["code"] == "hook_denied"
    stopped = hooked.wait_state(s["id"], {"stopped"})
    assert stopped["stop_reason"] == "hook_stopped"
    assert stopped["stop_detail"] == "forbidden word in prompt"
    assert stopped["failure"]["kind"] == "permission_failure"
    assert stopped["failure"]["crash_bundle_path"] is None
    assert stopped["badge"] == "failed"
    assert not hooked.events(s["id"], type="user_message"), "a denied prompt never reaches the store or the agent"
    recorded = runs(hooked, s["id"])
    assert [(r["hook_name"], r["outcome"], r["required"]) for r in recorded] == [("strict-policy", "denied", True)]
    cli = hooked.cli("hooks", "runs", "--session", s["id"], "-o", "json")
    assert cli.returncode == 0 and '"denied"' in cli.stdout


def test_a_non_required_denial_only_rejects_the_prompt(hooked: Daemon, workspace: Path) -> None:
    s = hooked.create(workspace, agent="reader")
    response = hooked.prompt(s["id"], "forbidden again")
    assert response.status_code == 403 and response.json()["code"] == "hook_denied"
    assert hooked.session(s["id"])["state"] == "active"
    assert hooked.prompt(s["id"], "echo fine").status_code == 200
    hooked.wait_event(s["id"], "done")


def test_a_tool_gate_hook_denies_the_permission_before_the_agent_gets_an_answer(
        hooked: Daemon, workspace: Path) -> None:
    (workspace / "secret.txt").write_text("top secret")
    s = hooked.create(workspace, agent="scripted")
    assert hooked.prompt(s["id"], "tool read secret.txt").status_code == 200
    hooked.wait_event(s["id"], "done")
    decisions = [e["content"] for e in hooked.events(s["id"], type="permission")]
    assert decisions[-1]["decision"] == "denied"
    assert decisions[-1]["decision_source"].startswith("hook:")
    result = hooked.events(s["id"], type="tool_result")[-1]["content"]
    assert "top secret" not in str(result)
    gate_runs = [r for r in runs(hooked, s["id"]) if r["event"] == "tool.pre_call"]
    assert gate_runs and gate_runs[-1]["outcome"] == "denied"


def test_a_pre_create_hook_can_deny_a_session_and_nothing_is_created(hooked: Daemon, workspace: Path) -> None:
    before = set((hooked.home / "sessions").iterdir())
    response = hooked.http.post("/api/sessions", json={"agent_name": "scripted", "workspace_path": str(workspace),
                                                       "name": "blocked one"})
    assert response.status_code == 403 and response.json()["code"] == "hook_denied"
    assert set((hooked.home / "sessions").iterdir()) == before


def test_an_agent_pre_start_cwd_patch_that_resolves_outside_the_workspace_fails_startup(
        hooked: Daemon, workspace: Path) -> None:
    s = hooked.create(workspace, agent="general")  # the hook answers with `<workspace>/../..`
    assert s["state"] == "stopped"
    assert s["failure"]["kind"] == "startup_failure"
    assert "cwd outside the workspace refused" in s["failure"]["summary"]
    assert [r["outcome"] for r in runs(hooked, s["id"]) if r["event"] == "agent.pre_start"] == ["applied"]


def test_a_pre_create_hook_patch_renames_the_session(hooked: Daemon, workspace: Path) -> None:
    s = hooked.create(workspace, agent="scripted", name="rename me")
    assert s["name"] == "renamed by policy"


def test_an_agent_pre_start_denial_fails_startup(hooked: Daemon, workspace: Path) -> None:
    s = hooked.create(workspace, agent="denier")
    assert s["state"] == "stopped"
    assert s["failure"]["kind"] == "startup_failure"
    assert "this agent may not start" in s["failure"]["summary"]
    assert [r["outcome"] for r in runs(hooked, s["id"]) if r["event"] == "agent.pre_start"] == ["denied"]
