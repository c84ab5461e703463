"""The built-in claude provider starts as root (issue 48): Claude Code refuses `--dangerously-skip-permissions` under
root unless IS_SANDBOX=1, which the built-in provider sets. Run against the same local fake of the Messages API as
tests/integration/test_claude_offline.py, with the key set through the API (secrets.toml), not config.toml: the
key reaches claude, a turn runs, and bypassPermissions (offered to root only in a sandbox) can be switched to and
used. Skipped where Node.js (npx) is missing or the tests do not run as root."""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import Daemon, of_type, start_daemon
from tests.integration.test_claude_offline import ISOLATION, KEY, REPLY, FakeMessages, asked, said

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(shutil.which("npx") is None, reason="Node.js (npx) is needed to run claude-agent-acp"),
              pytest.mark.skipif(os.geteuid() != 0, reason="the refusal this guards against happens only as root")]


@pytest.fixture(scope="module")
def model_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeMessages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, model_server: str) -> Iterator[Daemon]:
    root = tmp_path_factory.mktemp("claude-root")
    home = root / "agent-home"
    (home / ".claude").mkdir(parents=True)
    # The offline test's isolation, less its IS_SANDBOX override: the built-in provider's own value applies.
    isolation = {k: v for k, v in ISOLATION.items() if k != "IS_SANDBOX"}
    env = {"ANTHROPIC_BASE_URL": model_server, "HOME": str(home), "CLAUDE_CONFIG_DIR": str(home / ".claude"),
           **isolation}
    extra = ("[providers.claude]\nenv = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())
             + ' }\n\n[agents.coder]\nprovider = "claude"\n')
    # The daemon's own environment says IS_SANDBOX=yes, as some containers do: claude-agent-acp then offers
    # bypassPermissions and Claude Code, which takes only "1", refused to start as root. The provider's "1" wins.
    d = start_daemon(root / "home", extra_config=extra, timeout=120,
                     env_extra={"ANTHROPIC_API_KEY": "", "IS_SANDBOX": "yes"})
    yield d
    d.stop()


def test_the_builtin_claude_provider_starts_as_root_with_a_key_set_through_the_api(
        daemon: Daemon, workspace: Path) -> None:
    shown = daemon.cli_json("provider", "show", "claude")["provider"]
    assert shown["key_env"] == "ANTHROPIC_API_KEY" and shown["auth"] == "no_key", shown
    assert "compozy provider set-key claude ANTHROPIC_API_KEY" in shown["hint"], shown
    set_key = daemon.cli("provider", "set-key", "claude", "-o", "json", input=KEY)
    assert set_key.returncode == 0 and KEY not in set_key.stdout, set_key
    assert json.loads(set_key.stdout)["provider"]["auth"] == "key_set"

    session = daemon.wait_state(daemon.create(workspace, agent="coder", wait=False)["id"], {"active", "stopped"},
                                timeout=240)
    assert session["state"] == "active", session.get("failure")
    modes = [m["id"] for m in session["mode"]["available"]]
    assert "bypassPermissions" in modes, modes  # claude offers it to root only in a sandbox (IS_SANDBOX=1)
    turn = daemon.run_turn(session["id"], "say hello as root", timeout=120)
    assert of_type(turn, "done")[0]["content"]["stop_reason"] == "end_turn", [e["type"] for e in turn]
    assert REPLY in said(turn)
    assert all(r["key"] == KEY for r in asked("say hello as root")), asked("say hello as root")

    switched = daemon.http.post(daemon.scoped(session["id"], "/mode"), json={"mode": "bypassPermissions"})
    assert switched.status_code == 200, switched.text
    turn = daemon.run_turn(session["id"], "hello again, bypassing", timeout=120)
    assert of_type(turn, "done")[0]["content"]["stop_reason"] == "end_turn", [e["type"] for e in turn]
    assert daemon.session(session["id"])["state"] == "active"
    assert "cannot be used with root" not in daemon.log()
