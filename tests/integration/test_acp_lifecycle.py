"""The ACP client's session lifecycle against the real daemon (issue 29, points 1, 2 and 11): `authenticate` with
the method the agent offers and the provider allows, a start refused for authentication classified as
`provider_auth_failure` (badge `waiting-for-auth`) with the methods named, continued by `session resume` once the
agent is logged in; `session/resume` preferred to `session/load`; `session/close` before the process shutdown, a
refused close never blocking the stop."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Daemon, agent_calls, markers, of_type, scripted_provider, start_daemon, wait_for

pytestmark = pytest.mark.timeout(180)


MCP_TOKEN = "mcp-secret-value-0123456789"
MCP_SERVERS = f"""[[agents.withmcp.mcp_servers]]
name = "files"
command = "/usr/local/bin/mcp-files"
args = ["--root", "/srv"]
env = {{ FILES_TOKEN = "{MCP_TOKEN}" }}

[[agents.withmcp.mcp_servers]]
name = "tracker"
type = "http"
url = "http://127.0.0.1:9/mcp"
headers = {{ Authorization = "Bearer {MCP_TOKEN}" }}

[[agents.withmcp.mcp_servers]]
name = "events"
type = "sse"
url = "http://127.0.0.1:9/sse"

"""


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    home = tmp_path_factory.mktemp("home")
    state = str(home / "agent-state")
    key = {"SCRIPTED_API_KEY": "sk-scripted-123456"}
    extra = (scripted_provider("keyed", home, "--require-auth", env=key)
             + scripted_provider("codexlike", home, "--require-auth", env=key, auth_method="api-key")
             + scripted_provider("nokey", home, "--require-auth", "--login-file", str(home / "logged-in"))
             + scripted_provider("resumable", home, "--load-session", "--state-dir", state, "--lifecycle",
                                 "resume,close")
             + scripted_provider("closefail", home, "--lifecycle", "closefail")
             + scripted_provider("withmcp", home, "--mcp-http", "--load-session", "--state-dir", state,
                                 "--lifecycle", "resume") + MCP_SERVERS)
    d = start_daemon(home, extra_config=extra, timeout=120)
    yield d
    d.stop()


@pytest.mark.parametrize(("agent", "method"), [("keyed", "env-key"), ("codexlike", "api-key")])
def test_an_agent_that_offers_auth_methods_is_authenticated_before_its_session_opens(
        daemon: Daemon, workspace: Path, agent: str, method: str) -> None:
    # Without `authenticate` the agent answers session/new with auth_required, as codex-acp does: an env-var method
    # whose variables are set is chosen by itself; codex's `api-key` names no variables, so it needs auth_method.
    session = daemon.create(workspace, agent=agent)
    assert session["state"] == "active", session
    assert [c["params"]["methodId"] for c in agent_calls(daemon, agent) if c["method"] == "authenticate"] == [method]
    assert daemon.session(session["id"])["acp_caps"]["authenticated_with"] == method
    assert of_type(daemon.run_turn(session["id"], "echo hi"), "done")


def test_a_start_refused_for_authentication_waits_for_auth_names_the_methods_and_resumes_after_the_login(
        daemon: Daemon, workspace: Path) -> None:
    session = daemon.create(workspace, agent="nokey")
    assert session["state"] == "stopped", session
    failure = session["failure"]
    assert failure["kind"] == "provider_auth_failure" and session["badge"] == "waiting-for-auth", session
    summary = failure["summary"]
    assert "api-key (API Key)" in summary, summary
    assert "env-key (Scripted key): `compozy provider set-key nokey SCRIPTED_API_KEY`" in summary, summary
    assert "login (Log in): run `" in summary and " login` in a terminal" in summary, summary
    # The next step names the provider, the method and the session: no placeholder to fill in.
    assert "`compozy provider login nokey --method api-key`" in summary, summary
    assert f"then `compozy session resume {session['id']}`" in summary, summary
    assert "NAME" not in summary and " ID`" not in summary, summary
    assert not [c for c in agent_calls(daemon, "nokey") if c["method"] == "authenticate"]  # nothing it could choose

    (daemon.home / "logged-in").write_text("token stored by the agent's own login\n")
    resumed = daemon.cli("session", "resume", session["id"], "-o", "json")
    assert resumed.returncode == 0, resumed.stderr
    assert daemon.wait_state(session["id"], {"active", "stopped"})["state"] == "active"
    assert daemon.session(session["id"])["failure"] is None
    assert of_type(daemon.run_turn(session["id"], "echo after login"), "done")


def test_a_stop_closes_the_acp_session_and_reactivation_resumes_it_without_a_replay(
        daemon: Daemon, workspace: Path) -> None:
    session = daemon.create(workspace, agent="resumable")
    sid = session["id"]
    acp_id = daemon.session(sid)["acp_session_id"]
    caps = daemon.session(sid)["acp_caps"]
    assert caps["supports_resume"] and caps["supports_close"], caps
    assert daemon.http.post(daemon.scoped(sid, "/stop")).status_code == 204
    daemon.wait_state(sid, {"stopped"})
    closes = [c for c in agent_calls(daemon, "resumable") if c["method"] == "session/close"]
    assert [c["params"]["sessionId"] for c in closes] == [acp_id]

    # The next prompt reactivates it: session/resume of the same ACP session, so no session/load, no replay.
    assert of_type(daemon.run_turn(sid, "echo again"), "done")
    resumes = [c for c in agent_calls(daemon, "resumable") if c["method"] == "session/resume"]
    assert [c["params"]["sessionId"] for c in resumes] == [acp_id]
    assert daemon.session(sid)["acp_session_id"] == acp_id
    assert markers(daemon.all_events(sid), "session_recovered") == []
    assert "session/load" not in [c["method"] for c in agent_calls(daemon, "resumable")]


def test_a_refused_session_close_never_blocks_the_stop(daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="closefail")["id"]
    assert daemon.http.post(daemon.scoped(sid, "/stop")).status_code == 204
    stopped = daemon.wait_state(sid, {"stopped"})
    assert stopped["stop_reason"] == "user_canceled" and stopped["failure"] is None, stopped
    assert [c["method"] for c in agent_calls(daemon, "closefail") if c["method"] != "mcp"] == ["session/close"]
    wait_for(lambda: "session/close failed" in daemon.log(), timeout=10, what="the refused close in the log")


def test_the_agents_mcp_servers_are_handed_at_new_and_resume_their_secrets_kept_out_of_the_record(
        daemon: Daemon, workspace: Path) -> None:
    sid = daemon.create(workspace, agent="withmcp")["id"]
    assert daemon.http.post(daemon.scoped(sid, "/stop")).status_code == 204
    daemon.wait_state(sid, {"stopped"})
    assert of_type(daemon.run_turn(sid, f"echo {MCP_TOKEN}"), "done")  # reactivated through session/resume
    handed = [c["params"] for c in agent_calls(daemon, "withmcp") if c["method"] == "mcp"]
    assert [h["for"] for h in handed] == ["session/new", "session/resume"]
    expected = [{"name": "files", "command": "/usr/local/bin/mcp-files", "args": ["--root", "/srv"],
                 "env": [{"name": "FILES_TOKEN", "value": MCP_TOKEN}]},
                {"type": "http", "name": "tracker", "url": "http://127.0.0.1:9/mcp",
                 "headers": [{"name": "Authorization", "value": f"Bearer {MCP_TOKEN}"}]}]
    # The sse one: this agent has no sse. Last, each session's own memory server (tests/integration/test_memory.py).
    assert all(h["mcpServers"][:-1] == expected for h in handed), handed
    assert all(h["mcpServers"][-1]["name"] == "compozy-memory" for h in handed), handed
    skipped = [e for e in daemon.all_events(sid) if e["type"] == "system"
               and e["content"].get("title") == "mcp_servers_skipped"]
    assert skipped and "events (sse)" in skipped[0]["content"]["text"], skipped
    # The values are secrets: not in the events (the prompt that echoed one included), the record or the log.
    assert MCP_TOKEN not in json.dumps(daemon.all_events(sid)) and MCP_TOKEN not in json.dumps(daemon.session(sid))
    assert MCP_TOKEN not in daemon.log()
