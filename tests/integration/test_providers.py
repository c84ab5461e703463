"""Built-in providers that start on a fresh machine, and the model a session really runs.

No network: the agent's PATH holds a fake `npx` that records its argv and execs the scripted agent, so the
npm fallback is exercised end to end without downloading anything. A provider's `env.PATH` replaces the
daemon's PATH for its agent only, which lets one daemon have a provider without its executable, and one
without its executable and without npx.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from compozy_base.config.agents import NPM_PACKAGES
from tests.conftest import SCRIPTED, Daemon, start_daemon, toml_list

OFFERED = "default,opus,sonnet,haiku"  # what claude-agent-acp offers


@pytest.fixture(scope="module")
def bins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bins")
    fake, empty, log = root / "fakebin", root / "empty", root / "npx-argv.jsonl"
    fake.mkdir()
    empty.mkdir()
    npx = fake / "npx"
    npx.write_text(f"""#!{sys.executable}
import json, os, sys, time
with open({str(log)!r}, "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
time.sleep(1.5)  # a download takes a while: long enough for `session new` to show the progress
os.execv(sys.executable, [sys.executable, {str(SCRIPTED)!r}, "--models", {OFFERED!r}])
""")
    npx.chmod(0o755)
    return {"fake": fake, "empty": empty, "log": log}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, bins: dict[str, Path]) -> Iterator[Daemon]:
    # /usr/bin holds a real npx on machines with Node.js: the fake one comes first.
    extra = f"""
[providers.claude]
env = {{ PATH = "{bins['fake']}:/usr/bin:/bin" }}

[agents.claude]
provider = "claude"

[providers.gemini]
env = {{ PATH = "{bins['empty']}" }}

[agents.gemini]
provider = "gemini"

[providers.offered]
command = {toml_list([sys.executable, str(SCRIPTED), "--models", OFFERED])}
models = {{ default = "claude-sonnet-5" }}

[agents.offered]
provider = "offered"
"""
    d = start_daemon(tmp_path_factory.mktemp("home"), extra_config=extra)
    yield d
    d.stop()


def test_a_builtin_provider_without_its_executable_starts_its_pinned_npm_package_through_npx(
        daemon: Daemon, workspace: Path, bins: dict[str, Path]) -> None:
    session = daemon.create(workspace, agent="claude")
    assert session["state"] == "active", session
    argv = [json.loads(line) for line in bins["log"].read_text().splitlines()]
    assert argv[0] == ["-y", "@agentclientprotocol/claude-agent-acp@" + NPM_PACKAGES["claude"].version]
    progress = daemon.events(session["id"], type="runtime_progress")
    assert progress and "installing @agentclientprotocol/claude-agent-acp@" in progress[0]["content"]["text"]
    assert progress[0]["content"]["runtime"]["missing_executable"] == "claude-agent-acp"
    turn = daemon.run_turn(session["id"], "hello through npx")
    assert "echo: hello through npx" in "".join(e["content"].get("text", "") for e in turn)
    # No built-in default model: the adapter runs its own, and status says which.
    shown = daemon.session(session["id"])
    assert shown["model"] is None
    assert shown["agent_model"]["id"] == "default"


def test_session_new_shows_the_install_progress_while_it_waits(daemon: Daemon, workspace: Path) -> None:
    result = daemon.cli("session", "new", "--agent", "claude", "--cwd", str(workspace), "-o", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["state"] == "active"
    assert "installing @agentclientprotocol/claude-agent-acp@" in result.stderr


def test_neither_the_executable_nor_npx_is_a_startup_failure_naming_both(daemon: Daemon, workspace: Path) -> None:
    session = daemon.create(workspace, agent="gemini")
    assert session["state"] == "stopped", session
    failure = session["failure"]
    assert failure["kind"] == "startup_failure"
    assert "'gemini'" in failure["summary"] and "npx" in failure["summary"]
    assert "@google/gemini-cli@" in failure["summary"]


def test_a_configured_model_the_agent_does_not_offer_is_reported_not_shown_as_in_use(
        daemon: Daemon, workspace: Path) -> None:
    session = daemon.create(workspace, agent="offered")
    assert session["state"] == "active", session
    assert session["model_resolution"]["status"] == "unsupported"
    assert "offered: default, opus, sonnet, haiku" in session["model_resolution"]["reason"]
    assert session["agent_model"] == {"id": "default", "name": "Default", "source": "config_option"}
    human = daemon.cli("session", "status", session["id"])
    assert human.returncode == 0, human.stderr
    assert re.search(r"^\s*model\s+default\s*$", human.stdout, re.M), human.stdout
    assert "claude-sonnet-5" in human.stdout and "unsupported" in human.stdout


def test_a_model_the_agent_offers_is_applied_and_status_shows_the_one_it_reports(
        daemon: Daemon, workspace: Path) -> None:
    session = daemon.create(workspace, agent="offered", model="opus")
    assert session["state"] == "active", session
    assert session["model_resolution"] == {"requested": "opus", "status": "applied"}
    assert session["agent_model"]["id"] == "opus"
    assert daemon.cli_json("session", "status", session["id"])["session"]["agent_model"]["id"] == "opus"


def current_options(d: Daemon, session_id: str) -> dict[str, object]:
    status = d.cli_json("session", "status", session_id)["session"]
    return {o["id"]: o["current"] for o in status["config_options"]}


def test_the_config_options_on_the_record_show_the_values_applied_at_start(daemon: Daemon, workspace: Path) -> None:
    """Issue 50, row 4: the dashboard's switcher reads `config_options[].current`; after a model was applied it
    still read the value the agent opened the session with."""
    session = daemon.create(workspace, agent="offered", model="opus")
    assert session["model_resolution"]["status"] == "applied"
    assert current_options(daemon, session["id"]) == {"model": "opus"}


def test_the_demo_agent_started_with_a_model_and_fast_speed_shows_them_as_current(daemon: Daemon,
                                                                                 workspace: Path) -> None:
    """The audit's command: `session new --model demo-large --speed fast`, then `session status -o json`."""
    result = daemon.cli("session", "new", "--agent", "general", "--cwd", str(workspace), "--model", "demo-large",
                        "--speed", "fast", "-o", "json")
    assert result.returncode == 0, result.stderr
    created = json.loads(result.stdout)
    status = daemon.cli_json("session", "status", created["id"])["session"]
    assert status["model_resolution"]["status"] == "applied" and status["speed_resolution"]["status"] == "applied"
    assert current_options(daemon, created["id"]) == {"model": "demo-large", "speed": "fast"}
