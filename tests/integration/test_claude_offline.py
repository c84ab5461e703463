"""The real claude adapter (`--provider claude`, its pinned npm package through npx) against a local fake of the
Anthropic Messages API: with only an API key and a base URL in the provider's env a turn runs end to end, the
session record lists claude's modes and switches them, its usage is filled from what the agent reports, and a Bash
command the model asks for runs in the workspace (issue 29's acceptance).

No network but loopback and the npm registry (npx fetches the pinned package on a machine that has not yet):
`ANTHROPIC_BASE_URL` points at the fake before the agent first starts, and HOME / CLAUDE_CONFIG_DIR are the test's
own, so nothing of the user's is read and no real model API is reached. Skipped, with the reason, where Node.js
(npx) is missing."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from compozy_base.config.agents import NPM_PACKAGES
from tests.conftest import Daemon, of_type, said, start_daemon, wait_for

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(shutil.which("npx") is None, reason="Node.js (npx) is needed to run claude-agent-acp")]

REPLY = "Hello from the fake Claude."
KEY = "sk-ant-compozy-test-0123456789"
MARK = "compozy-terminal-ok"
COMMAND = f"echo {MARK} | tee ran.txt"
TOOL_USE_ID = "toolu_fake_1"
TITLE = "Fake session title"
TERMINAL_PROMPT = "please run the terminal check"
INPUT_TOKENS, OUTPUT_TOKENS = 1200, 34


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text_of(b.get("text") if b.get("type") == "text" else b.get("content"))
                         for b in content if isinstance(b, dict))
    return ""


def last_user(body: dict[str, Any]) -> object:
    """The content of a request's last user message (claude code may put a `system` message after it)."""
    users = [m for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "user"]
    return users[-1].get("content") if users else None


class FakeMessages(BaseHTTPRequestHandler):
    """`POST /v1/messages` answered as the Messages API does (an event stream when `stream` is set, else one JSON
    message); `/v1/messages/count_tokens` with a count; any other request with an empty 200. Every request is kept
    in `seen`, with its key and its body."""

    protocol_version = "HTTP/1.1"
    seen: list[dict[str, Any]] = []

    def log_message(self, format: str, *args: object) -> None:  # quiet: the test reads `seen`
        return

    def _answer(self, content_type: str, body: bytes, status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _record(self, body: dict[str, Any] | None = None) -> None:
        self.seen.append({"method": self.command, "path": self.path, "key": self.headers.get("x-api-key", ""),
                          "authorization": self.headers.get("Authorization", ""), "body": body or {}})

    def do_GET(self) -> None:
        self._record()
        self._answer("application/json", b"{}")

    do_HEAD = do_GET

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        self._record(body)
        path = self.path.split("?")[0]
        if path.endswith("/count_tokens"):
            self._answer("application/json", json.dumps({"input_tokens": INPUT_TOKENS}).encode())
            return
        if not path.endswith("/v1/messages"):
            self._answer("application/json", b"{}")
            return
        blocks = self._reply(body)
        model = str(body.get("model") or "claude-sonnet-4-5")
        if body.get("stream"):
            self._answer("text/event-stream", self._stream(model, blocks))
        else:
            message = {"id": "msg_fake", "type": "message", "role": "assistant", "model": model, "content": blocks,
                       "stop_reason": self._stop(blocks), "stop_sequence": None,
                       "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS}}
            self._answer("application/json", json.dumps(message).encode())

    @staticmethod
    def _stop(blocks: list[dict[str, Any]]) -> str:
        return "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"

    @staticmethod
    def _reply(body: dict[str, Any]) -> list[dict[str, Any]]:
        """The agent's conversation (it offers tools): a Bash call when asked for the terminal check, the command's
        output once it comes back, else REPLY. A side request without tools (claude names the session) gets TITLE."""
        content = last_user(body)
        results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"] if isinstance(
            content, list) else []
        if results:
            return [{"type": "text", "text": f"The command said: {_text_of(results[0].get('content')).strip()}"}]
        asked = _text_of(content)
        if TERMINAL_PROMPT in asked and any(t.get("name") == "Bash" for t in body.get("tools") or []):
            return [{"type": "tool_use", "id": TOOL_USE_ID, "name": "Bash",
                     "input": {"command": COMMAND, "description": "Print the check mark"}}]
        return [{"type": "text", "text": REPLY if body.get("tools") else TITLE}]

    def _stream(self, model: str, blocks: list[dict[str, Any]]) -> bytes:
        events: list[tuple[str, dict[str, Any]]] = [("message_start", {"message": {
            "id": "msg_fake", "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": 1, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0}}})]
        for index, block in enumerate(blocks):
            if block["type"] == "text":
                events += [("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}}),
                           ("content_block_delta", {"index": index, "delta": {"type": "text_delta",
                                                                              "text": block["text"]}})]
            else:
                events += [("content_block_start", {"index": index, "content_block": {**block, "input": {}}}),
                           ("content_block_delta", {"index": index, "delta": {
                               "type": "input_json_delta", "partial_json": json.dumps(block["input"])}})]
            events.append(("content_block_stop", {"index": index}))
        events += [("message_delta", {"delta": {"stop_reason": self._stop(blocks), "stop_sequence": None},
                                      "usage": {"output_tokens": OUTPUT_TOKENS}}),
                   ("message_stop", {})]
        return b"".join(f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()
                        for kind, data in events)


@pytest.fixture(scope="module")
def model_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeMessages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


# What keeps claude code on the fake and off the user's machine: a HOME and config dir of the test's own (npm
# keeps the user's cache and config, so npx finds the package it fetched before), no traffic but the model's,
# and no other credential or backend that the environment running the tests may carry.
ISOLATION = {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
             "DISABLE_ERROR_REPORTING": "1", "ANTHROPIC_AUTH_TOKEN": "", "CLAUDE_CODE_OAUTH_TOKEN": "",
             "CLAUDE_CODE_USE_BEDROCK": "", "CLAUDE_CODE_USE_VERTEX": "", "ANTHROPIC_MODEL": "",
             # As root, claude-agent-acp offers bypassPermissions (and asks the CLI to allow it) when IS_SANDBOX is
             # set at all, while the CLI refuses unless it is exactly "1": unset, the session starts either way.
             "IS_SANDBOX": "",
             "npm_config_cache": str(Path.home() / ".npm"), "npm_config_userconfig": str(Path.home() / ".npmrc")}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, model_server: str) -> Iterator[Daemon]:
    root = tmp_path_factory.mktemp("claude")
    home = root / "agent-home"
    (home / ".claude").mkdir(parents=True)
    env = {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": model_server,
           "HOME": str(home), "CLAUDE_CONFIG_DIR": str(home / ".claude"), **ISOLATION}
    extra = ("[providers.claude]\nenv = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())
             + ' }\n\n[agents.coder]\nprovider = "claude"\n')
    d = start_daemon(root / "home", extra_config=extra, timeout=120, env_extra={"ANTHROPIC_API_KEY": ""})
    yield d
    d.stop()


def start(daemon: Daemon, workspace: Path) -> dict[str, Any]:
    """A claude session, active: a first npx start may still be fetching the package."""
    session = daemon.wait_state(daemon.create(workspace, agent="coder", wait=False)["id"], {"active", "stopped"},
                                timeout=240)
    assert session["state"] == "active", session
    return session


def asked(text: str) -> list[dict[str, Any]]:
    """The main conversation's requests the fake answered whose last user message carries `text`."""
    return [s for s in FakeMessages.seen if s["path"].split("?")[0] == "/v1/messages"
            and text in _text_of(last_user(s["body"]))]


def test_claude_with_only_an_api_key_runs_a_turn_end_to_end_against_a_local_model(
        daemon: Daemon, workspace: Path) -> None:
    session = start(daemon, workspace)
    assert session["acp_caps"]["agent_info"]["version"] == NPM_PACKAGES["claude"].version
    turn = daemon.run_turn(session["id"], "say hello", timeout=120)
    assert of_type(turn, "done")[0]["content"]["stop_reason"] == "end_turn", [e["type"] for e in turn]
    assert REPLY in said(turn)
    transcript = daemon.http.get(daemon.scoped(session["id"], "/transcript"))
    assert transcript.status_code == 200 and REPLY in transcript.text, transcript.text
    requests = asked("say hello")
    assert requests and all(r["key"] == KEY and r["body"].get("stream") for r in requests), requests
    assert all(s["key"] == KEY for s in FakeMessages.seen if s["method"] == "POST"), FakeMessages.seen


def test_the_record_lists_claudes_modes_and_a_switch_reaches_the_agent(daemon: Daemon, workspace: Path) -> None:
    session = start(daemon, workspace)
    mode = session["mode"]
    ids = [m["id"] for m in mode["available"]]
    assert {"default", "acceptEdits", "plan"} <= set(ids) and mode["current"] in ids, mode
    assert {"id": "plan", "name": "Plan"} in mode["available"], mode
    url = daemon.scoped(session["id"], "/mode")
    switched = daemon.http.post(url, json={"mode": "plan"})
    assert switched.status_code == 200, switched.text
    assert switched.json()["session"]["mode"]["current"] == "plan"
    record = daemon.http.get(daemon.scoped(session["id"])).json()["session"]
    assert record["mode"]["current"] == "plan", record["mode"]
    # claude exposes its modes as a config option too: the option follows the agent's own answer, and the agent
    # says so itself with a `current_mode_update`.
    [option] = [o for o in record["config_options"] if o.get("category") == "mode"]
    assert option["current"] == "plan", option
    wait_for(lambda: [e for e in daemon.all_events(session["id"]) if e["type"] == "system" and e["content"].get(
        "raw", {}).get("currentModeId") == "plan"], timeout=30, what="claude's current_mode_update to plan")
    cli = daemon.cli_json("session", "mode", session["id"], "acceptEdits")
    assert cli["session"]["mode"]["current"] == "acceptEdits", cli
    assert daemon.session(session["id"])["mode"]["current"] == "acceptEdits"
    refused = daemon.http.post(url, json={"mode": "no-such-mode"})
    assert refused.status_code in (400, 422) and "invalid_mode" in refused.text, refused.text


def test_usage_is_filled_from_what_claude_reports(daemon: Daemon, workspace: Path) -> None:
    session = start(daemon, workspace)
    turn = daemon.run_turn(session["id"], "count my tokens", timeout=120)
    [done] = of_type(turn, "done")
    # The prompt response's usage: the fake's message_start and message_delta counts, as claude summed them.
    assert done["content"]["usage"]["input_tokens"] == INPUT_TOKENS, done
    assert done["content"]["usage"]["output_tokens"] == OUTPUT_TOKENS, done
    # `usage_update`: the context used (input + output of the last message), claude's window for its model, and
    # the cost claude prices those tokens at.
    updates = [e["content"]["usage"] for e in of_type(turn, "usage")]
    assert updates and updates[-1]["context_used"] == INPUT_TOKENS + OUTPUT_TOKENS, updates
    usage = daemon.http.get(daemon.scoped(session["id"])).json()["session"]["usage"]
    assert usage["context_used"] == INPUT_TOKENS + OUTPUT_TOKENS, usage
    assert usage["context_size"] > INPUT_TOKENS + OUTPUT_TOKENS, usage
    assert usage["cost"]["currency"] == "USD" and usage["cost"]["amount"] > 0, usage
    # The turn's cost, its share of the session's (claude's side requests, such as the session's title, count too
    # and may be reported a moment later).
    assert done["content"]["cost"]["currency"] == "USD", done
    assert 0 < done["content"]["cost"]["amount"] <= usage["cost"]["amount"], (done, usage)


def test_a_bash_command_the_model_asks_for_runs_in_the_workspace(daemon: Daemon, workspace: Path) -> None:
    """claude-agent-acp (this pinned version) runs claude's Bash tool itself, in the session's cwd, and never calls
    the client's `terminal/create`, though we offer `terminal: true`: it reports the command and its output as a
    tool call (`_meta.terminal_*` display terminals only for a client that declares `_meta.terminal_output`). Our
    part is the permission request that claude's Manual mode (`default`) sends before a command that writes, decided
    by policy (approve-all here). The session starts in claude's `auto` mode, where claude's own classifier (a
    model request) decides instead and we are never asked; read-only commands such as a bare `echo` run without a
    request in either mode."""
    session = start(daemon, workspace)
    assert daemon.http.post(daemon.scoped(session["id"], "/mode"), json={"mode": "default"}).status_code == 200
    turn = daemon.run_turn(session["id"], TERMINAL_PROMPT, timeout=120)
    calls = of_type(turn, "tool_call")
    assert any(c["content"]["tool_kind"] == "execute" for c in calls), calls
    assert any(c["content"].get("tool_input", {}).get("command") == COMMAND for c in calls), calls
    [permission] = of_type(turn, "permission")
    assert permission["content"]["action"] == "execute" and permission["content"]["resource"] == COMMAND, permission
    assert permission["content"]["decision"] == "approved", permission
    assert permission["content"]["decision_source"] == "policy:approve-all", permission
    [result] = of_type(turn, "tool_result")
    assert result["content"]["status"] == "completed" and result["content"]["tool_result"]["raw_output"] == MARK
    assert (workspace / "ran.txt").read_text() == MARK + "\n"  # it ran in the workspace
    # The fake's next request carried the command's output back, and its answer ended the turn.
    followups = [s for s in FakeMessages.seen if isinstance(content := last_user(s["body"]), list) and any(
        b.get("type") == "tool_result" and b.get("tool_use_id") == TOOL_USE_ID and _text_of(b.get("content")) == MARK
        for b in content if isinstance(b, dict))]
    assert followups and all(f["key"] == KEY for f in followups), FakeMessages.seen
    assert f"The command said: {MARK}" in said(turn)
    assert of_type(turn, "done")[0]["content"]["stop_reason"] == "end_turn"
    systems = [e["content"].get("title") for e in daemon.all_events(session["id"]) if e["type"] == "system"]
    assert "terminal_created" not in systems, systems  # Bash does not go through our terminals (see above)
