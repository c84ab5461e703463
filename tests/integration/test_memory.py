"""Memory against the real daemon and the scripted agent calling its MCP tools (docs/reference/memory.md): the
frozen snapshot, the journalled write path across a kill -9, bad frontmatter in health and doctor, reindex,
dreams, and `[[mcp.servers]]` handed only to the agents and workspaces they name."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Daemon, agent_calls, scripted_provider, start_daemon, wait_for

SECRET = "tracker-secret-0123456789abcdef"


def provider(name: str, home: Path) -> str:
    return scripted_provider(name, home, "--prompt-log", str(home / "prompts.jsonl"))


@pytest.fixture(scope="module")
def spaces(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("spaces")
    (root / "one").mkdir()
    (root / "two").mkdir()
    return (root / "one").resolve(), (root / "two").resolve()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, spaces: tuple[Path, Path]) -> Iterator[Daemon]:
    home = tmp_path_factory.mktemp("home")
    extra = (provider("mcpa", home) + provider("mcpb", home)
             + '[memory.dream]\nauto = false\nagent = "scripted"\nmin_interval = 0\nmin_sessions = 0\n'
             + 'min_candidates = 0\n\n'
             + '[[mcp.servers]]\nname = "tracker"\ncommand = "/usr/local/bin/tracker-mcp"\n'
             + 'env_from = { TRACKER_TOKEN = "COMPOZY_TEST_TRACKER" }\n'
             + f'agents = ["mcpa"]\nworkspaces = [{json.dumps(str(spaces[0]))}]\n')
    d = start_daemon(home, extra_config=extra, timeout=120, env_extra={"COMPOZY_TEST_TRACKER": SECRET})
    yield d
    d.stop()


def say(daemon: Daemon, sid: str, message: str) -> Any:
    """The agent's answer to one prompt, read back as the JSON the scripted agent printed."""
    events = daemon.run_turn(sid, message)
    text = "".join(e["content"].get("text", "") for e in events if e["type"] == "agent_message")
    return json.loads(text)


def prompts_of(daemon: Daemon, sid: str) -> list[str]:
    acp = daemon.meta(sid)["acp_session_id"]
    path = daemon.home / "prompts.jsonl"
    return [line["text"] for line in map(json.loads, path.read_text().splitlines()) if line["session_id"] == acp]


def test_a_memory_an_agent_writes_reaches_the_next_sessions_snapshot_not_a_running_one(
        daemon: Daemon, workspace: Path) -> None:
    writer = daemon.create(workspace)["id"]
    running = daemon.create(workspace)["id"]  # started before the write: its snapshot is frozen empty
    wrote = say(daemon, writer, "memwrite project workspace deploy-steps run make deploy then smoke")
    assert wrote["isError"] is False and wrote["result"]["slug"] == "deploy-steps", wrote
    entry = daemon.cli_json("memory", "show", "deploy-steps", "--workspace", str(workspace))["entry"]
    assert entry["provenance"] == f"session:{writer}" and entry["scope"] == "workspace"
    assert Path(entry["path"]) == workspace / ".compozy" / "memory" / "project" / "deploy-steps.md"

    daemon.run_turn(running, "echo hello")
    assert not any("deploy-steps" in text for text in prompts_of(daemon, running))
    assert daemon.http.get(f"/api/memory/sessions/{running}/snapshot").json()["snapshot"] is None

    later = daemon.create(workspace)["id"]
    daemon.run_turn(later, "echo hello")
    first = prompts_of(daemon, later)[0]
    assert first.startswith("<compozy-memory") and "run make deploy then smoke" in first, first
    assert first.rstrip().endswith("echo hello")
    given = daemon.http.get(f"/api/memory/sessions/{later}/snapshot").json()["snapshot"]
    assert given["entries"] == ["workspace/project/deploy-steps"]
    user_message = next(e for e in daemon.all_events(later) if e["type"] == "user_message")
    assert user_message["content"]["text"] == "echo hello" and user_message["content"]["memory_snapshot"] is True
    # The tools work in the running session, and a search there is a recall of the entry.
    found = say(daemon, running, "memsearch deploy")["result"]["results"]
    assert [(r["slug"], r["scope"]) for r in found] == [("deploy-steps", "workspace")]
    assert say(daemon, running, "memshow deploy-steps")["result"]["body"].startswith("run make deploy")


def test_the_cli_writes_lists_searches_edits_and_deletes_with_precedence(daemon: Daemon, workspace: Path) -> None:
    ws = str(workspace)
    assert daemon.cli_json("memory", "write", "--scope", "global", "--type", "user", "--name", "Indent style",
                           "--description", "tabs or spaces", "Use four spaces.")["slug"] == "indent-style"
    assert daemon.cli_json("memory", "write", "--scope", "workspace", "--workspace", ws, "--type", "user",
                           "--name", "Indent style", "Use tabs here.")["created"] is True
    entries = daemon.cli_json("memory", "list", "--workspace", ws)["entries"]
    assert {(e["scope"], e["slug"]) for e in entries} >= {("global", "indent-style"), ("workspace", "indent-style")}
    # The workspace's entry shadows the global one of the same (type, slug).
    assert daemon.cli_json("memory", "show", "indent-style", "--workspace", ws)["entry"]["body"] == "Use tabs here.\n"
    results = daemon.cli_json("memory", "search", "indent", "--workspace", ws)["results"]
    assert [(r["slug"], r["scope"]) for r in results] == [("indent-style", "workspace")]
    assert set(results[0]) == {"slug", "name", "scope", "type", "snippet"}
    assert daemon.cli_json("memory", "search", "indent")["results"][0]["scope"] == "global"
    daemon.cli_json("memory", "edit", "indent-style", "--scope", "global", "--body", "Use two spaces.")
    assert daemon.cli_json("memory", "show", "indent-style")["entry"]["body"] == "Use two spaces.\n"
    daemon.cli_json("memory", "delete", "indent-style", "--scope", "workspace", "--workspace", ws)
    assert daemon.cli_json("memory", "show", "indent-style", "--workspace", ws)["entry"]["scope"] == "global"
    index = (daemon.home / "memory" / "MEMORY.md").read_text()
    assert "[Indent style](user/indent-style.md)" in index
    missing = daemon.cli("memory", "show", "no-such-entry", "-o", "json")
    assert missing.returncode == 69 and json.loads(missing.stderr)["code"] == "memory_not_found"
    bad = daemon.http.post("/api/memory/entries", json={"scope": "workspace", "type": "user", "name": "x",
                                                        "body": "y"})
    assert bad.status_code == 400 and bad.json()["code"] == "workspace_required"


def test_bad_frontmatter_shows_in_health_and_doctor_and_the_rest_still_works(
        daemon: Daemon, workspace: Path) -> None:
    daemon.cli_json("memory", "write", "--scope", "global", "--type", "reference", "--name", "Runbook", "See wiki.")
    bad = daemon.home / "memory" / "reference" / "broken.md"
    bad.write_text("---\nname: [unclosed\n---\nbody\n")
    health = daemon.cli("memory", "health", "-o", "json")
    assert health.returncode == 1
    report = json.loads(health.stdout)
    assert any(p["path"] == str(bad) and p["problem"].startswith("bad frontmatter") for p in report["problems"])
    doctor = daemon.cli_json("doctor", "--only", "memory")
    item = next(i for i in doctor["items"] if i["id"] == "memory")
    assert item["severity"] == "warn" and "broken.md" in item["message"]
    assert daemon.cli_json("memory", "search", "runbook")["results"][0]["slug"] == "runbook"
    assert "runbook" in {e["slug"] for e in daemon.cli_json("memory", "list")["entries"]}
    bad.unlink()


def test_reindex_rebuilds_a_deleted_index(daemon: Daemon) -> None:
    daemon.cli_json("memory", "write", "--scope", "global", "--type", "feedback", "--name", "Short answers",
                    "Keep answers short.")
    (daemon.home / "memory" / "index.db").unlink()
    stale = daemon.cli("memory", "health", "-o", "json")
    assert stale.returncode == 1 and json.loads(stale.stdout)["index"]["state"] == "stale"
    rebuilt = daemon.cli_json("memory", "reindex")
    assert rebuilt["index"]["state"] == "fresh" and rebuilt["entries"] >= 1
    assert (daemon.home / "memory" / "index.db").exists()
    assert daemon.cli_json("memory", "search", "short answers")["results"][0]["slug"] == "short-answers"


def test_a_dream_promotes_records_decisions_and_is_revertible(daemon: Daemon, workspace: Path) -> None:
    writer = daemon.create(workspace)["id"]
    wrote = say(daemon, writer, "memwrite project agent lint-rule always run ruff first")
    assert wrote["result"]["slug"] == "lint-rule"
    agent_file = daemon.home / "agents" / "scripted" / "memory" / "project" / "lint-rule.md"
    original = agent_file.read_text()
    reader = daemon.create(workspace)["id"]
    assert say(daemon, reader, "memsearch lint")["result"]["results"][0]["slug"] == "lint-rule"  # a recall

    started = daemon.http.post("/api/memory/dreams/trigger", json={"workspace": str(workspace)})
    assert started.status_code == 202, started.text
    dream = started.json()["dream"]

    def finished() -> dict[str, Any] | None:
        found = next(d for d in daemon.cli_json("memory", "dream", "status")["dreams"] if d["id"] == dream["id"])
        return found if found["state"] != "running" else None

    done = wait_for(finished, 60, "the dream to finish")
    assert done["state"] == "done", done
    decision = done["decisions"][0]
    assert decision["action"] == "promote" and set(decision["source_sessions"]) == {writer, reader}
    promoted = workspace / ".compozy" / "memory" / "project" / "lint-rule.md"
    assert promoted.exists() and not agent_file.exists()
    assert f"provenance: dream:{dream['id']}" in promoted.read_text()
    # The dream's session: type dream, approve-all, hidden from the default list.
    meta = daemon.meta(done["session_id"])
    assert meta["session_type"] == "dream" and meta["effective_permissions"] == "approve-all"
    listed = {s["id"] for s in daemon.cli_json("session", "list", "--all", "--limit", "100")["sessions"]}
    assert done["session_id"] not in listed and writer in listed
    dreams = daemon.cli_json("session", "list", "--all", "--type", "dream")["sessions"]
    assert [s["id"] for s in dreams] == [done["session_id"]]

    reverted = daemon.cli_json("memory", "dream", "revert", decision["id"])["decision"]
    assert reverted["reverted_at"]
    assert agent_file.read_text() == original and not promoted.exists()
    again = daemon.cli("memory", "dream", "revert", decision["id"], "-o", "json")
    assert again.returncode == 65 and json.loads(again.stderr)["code"] == "already_reverted"


def test_the_daemon_dreams_by_itself_once_a_workspace_has_material(tmp_path: Path, workspace: Path) -> None:
    d = start_daemon(tmp_path / "home", extra_config='[memory.dream]\ncheck_every = "1s"\nmin_interval = "1h"\n'
                     'min_sessions = 0\nmin_candidates = 1\n')
    try:
        writer = d.create(workspace)["id"]
        say(d, writer, "memwrite user workspace terse-answers answer in one line")
        assert d.cli_json("memory", "dream", "status")["dreams"] == []  # written, not yet recalled by anyone
        say(d, d.create(workspace)["id"], "memsearch terse")
        # The dream's record comes first, its session a moment later.
        dream = wait_for(lambda: next((x for x in d.cli_json("memory", "dream", "status")["dreams"]
                                       if x["session_id"]), None), 30, "a dream with its session")
        assert dream["workspace"] == str(workspace) and dream["session_id"]
        # Its interval gate now holds the next one back.
        blocked = d.http.post("/api/memory/dreams/trigger", json={"workspace": str(workspace)})
        assert blocked.status_code == 409 and blocked.json()["diagnostic"]["evidence"]["gate"] in {"one_runner",
                                                                                                   "min_interval"}
    finally:
        d.stop()


def test_central_mcp_servers_reach_only_the_agents_and_workspaces_they_name(
        daemon: Daemon, spaces: tuple[Path, Path]) -> None:
    one, two = spaces

    def handed(name: str) -> list[list[str]]:
        return [[s["name"] for s in c["params"]["mcpServers"]] for c in agent_calls(daemon, name)
                if c["method"] == "mcp"]

    daemon.create(one, agent="mcpa")
    daemon.create(two, agent="mcpa")
    daemon.create(one, agent="mcpb")
    assert handed("mcpa") == [["tracker", "compozy-memory"], ["compozy-memory"]]
    assert handed("mcpb") == [["compozy-memory"]]
    raw = (daemon.home / "calls-mcpa.jsonl").read_text().splitlines()[0]
    assert {"name": "TRACKER_TOKEN", "value": SECRET} in json.loads(raw)["params"]["mcpServers"][0]["env"]
    listed = daemon.cli_json("mcp", "list")["servers"]
    tracker = next(s for s in listed if s["name"] == "tracker")
    assert tracker["agents"] == ["mcpa"] and tracker["workspaces"] == [str(one)] and tracker["env"] == ["TRACKER_TOKEN"]
    assert SECRET not in json.dumps(listed) and SECRET not in daemon.log()


def test_a_kill_9_between_the_journal_and_the_file_is_finished_once_at_boot(tmp_path: Path) -> None:
    home = tmp_path / "home"
    crashing = start_daemon(home, env_extra={"COMPOZY_TEST_MEMORY_CRASH": "after_journal"})
    try:
        result = crashing.cli("memory", "write", "--scope", "global", "--type", "project", "--name", "Survives",
                              "It was journalled.")
        assert result.returncode != 0
        assert crashing.proc.wait(30) == -signal.SIGKILL
    finally:
        crashing.stop()
    target = home / "memory" / "project" / "survives.md"
    assert not target.exists()  # the journal row committed, the file never landed
    booted = start_daemon(home)
    try:
        entries = [e for e in booted.cli_json("memory", "list")["entries"] if e["slug"] == "survives"]
        assert len(entries) == 1 and target.read_text().endswith("It was journalled.\n")
        assert (home / "memory" / "MEMORY.md").read_text().count("survives.md") == 1
        assert booted.cli_json("memory", "search", "journalled")["results"][0]["slug"] == "survives"
        # A trigger whose gates do not pass says which: the default config wants 5 completed sessions.
        blocked = booted.http.post("/api/memory/dreams/trigger", json={"workspace": str(tmp_path)})
        assert blocked.status_code == 409 and blocked.json()["code"] == "dream_gate_closed"
        assert blocked.json()["diagnostic"]["evidence"]["gate"] == "min_sessions"
    finally:
        booted.stop()
