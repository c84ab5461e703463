"""The real codex adapter (`--provider codex`, its pinned npm package through npx) against a local fake of the
OpenAI Responses API: with only an API key in the provider's env a turn runs end to end, and without one the start
waits for auth naming the methods codex offers (issue 29's acceptance).

No network but loopback and the npm registry (npx fetches the pinned package on a machine that has not yet): codex's
`openai_base_url` points at the fake before codex first starts, so it never reaches a real model API. Skipped, with
the reason, where Node.js (npx) is missing."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from compozy_base.config.agents import NPM_PACKAGES
from tests.conftest import Daemon, of_type, said, start_daemon

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(shutil.which("npx") is None, reason="Node.js (npx) is needed to run codex-acp")]

REPLY = "Hello from the fake model."
KEY = "sk-compozy-test-0123456789"


class FakeResponses(BaseHTTPRequestHandler):
    """`POST /v1/responses` answered with the Responses API's event stream; anything else (codex first tries a
    WebSocket on the same path) with a plain 200, after which codex falls back to HTTPS."""

    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, str, str]] = []  # (method, path, Authorization)

    def log_message(self, format: str, *args: object) -> None:  # quiet: the test reads `seen`
        return

    def _answer(self, content_type: str, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.seen.append(("GET", self.path, self.headers.get("Authorization", "")))
        self._answer("application/json", b'{"models": []}')

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.seen.append(("POST", self.path, self.headers.get("Authorization", "")))
        message = {"type": "message", "role": "assistant", "id": "msg_1"}
        usage = {"input_tokens": 12, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 6,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 18}
        events = [("response.created", {"response": {"id": "resp_1"}}),
                  ("response.output_item.added", {"output_index": 0, "item": {**message, "content": []}}),
                  ("response.output_text.delta", {"output_index": 0, "content_index": 0, "item_id": "msg_1",
                                                  "delta": REPLY}),
                  ("response.output_item.done", {"output_index": 0, "item": {
                      **message, "content": [{"type": "output_text", "text": REPLY}]}}),
                  ("response.completed", {"response": {"id": "resp_1", "usage": usage}})]
        self._answer("text/event-stream", b"".join(
            f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode() for kind, data in events))


@pytest.fixture(scope="module")
def model_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeResponses)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def codex_home(root: Path, base_url: str) -> Path:
    """A CODEX_HOME of the test's own whose config sends every model call to the fake."""
    home = root / "codex-home"
    home.mkdir(parents=True)
    (home / "config.toml").write_text(f'model = "gpt-6.1-sol"\nopenai_base_url = "{base_url}"\n\n'
                                      "[model_providers.openai]\nsupports_websockets = false\n")
    return home


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, model_server: str) -> Iterator[Daemon]:
    root = tmp_path_factory.mktemp("codex")
    keyed, bare = codex_home(root / "keyed", model_server), codex_home(root / "bare", model_server)
    spec = NPM_PACKAGES["codex"].spec
    extra = (f'[providers.codex]\nauth_method = "api-key"\n'
             f'env = {{ OPENAI_API_KEY = "{KEY}", CODEX_HOME = "{keyed}" }}\n\n'
             f'[providers.codexbare]\ncommand = ["npx", "-y", "{spec}"]\nenv = {{ CODEX_HOME = "{bare}" }}\n\n'
             '[agents.coder]\nprovider = "codex"\n\n[agents.bare]\nprovider = "codexbare"\n')
    d = start_daemon(root / "home", extra_config=extra, timeout=120, env_extra={"OPENAI_API_KEY": ""})
    yield d
    d.stop()


def test_codex_with_only_an_api_key_runs_a_turn_end_to_end_against_a_local_model(
        daemon: Daemon, workspace: Path) -> None:
    FakeResponses.seen.clear()
    session = daemon.create(workspace, agent="coder")
    assert session["state"] == "active", session
    assert session["acp_caps"]["authenticated_with"] == "api-key"
    turn = daemon.run_turn(session["id"], "hi", timeout=120)
    assert of_type(turn, "done"), [e["type"] for e in turn]
    assert REPLY in said(turn)
    posts = [s for s in FakeResponses.seen if s[0] == "POST"]
    assert posts and all(path == "/v1/responses" and auth == f"Bearer {KEY}" for _, path, auth in posts), posts


def test_codex_without_a_key_waits_for_auth_naming_the_methods_it_offers(daemon: Daemon, workspace: Path) -> None:
    session = daemon.create(workspace, agent="bare")
    assert session["state"] == "stopped" and session["badge"] == "waiting-for-auth", session
    failure = session["failure"]
    assert failure["kind"] == "provider_auth_failure", failure
    assert "api-key (API Key)" in failure["summary"] and "chat-gpt (ChatGPT)" in failure["summary"], failure
