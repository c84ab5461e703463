"""The CLI against a daemon whose answers have shapes it does not expect (another version, a proxy, a cut body): a
real HTTP server on this home's socket, in a process of its own with its own daemon record. Every command ends in
one line on stderr with exit 1, never a traceback; a config.toml the daemon would refuse is refused by the CLI too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT

# Answers every request with the bytes of `answer` (re-read per request) and this home's X-Compozy-Home.
FAKE_DAEMON = r"""
import json, os, socket, sys, time
from http.server import BaseHTTPRequestHandler
from socketserver import ThreadingUnixStreamServer
from urllib.parse import quote

home, answer = sys.argv[1], sys.argv[2]

class Handler(BaseHTTPRequestHandler):
    def address_string(self):
        return "unix"

    def _answer(self):
        body = open(answer, "rb").read()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Compozy-Home", quote(home))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._answer()

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._answer()

    def log_message(self, *args):
        pass

path = os.path.join(home, "daemon.sock")
os.umask(0o077)
server = ThreadingUnixStreamServer(path, Handler)
with open(os.path.join(home, "daemon.json"), "w") as record:
    json.dump({"pid": os.getpid(), "port": 1, "http_host": "127.0.0.1", "socket": path, "home": home,
               "status": "running", "started_at": "2026-01-01T00:00:00Z"}, record)
server.serve_forever()
"""

SHAPES = {
    "a list": b"[]",
    "a string": b'"ok"',
    "null": b"null",
    "wrong fields": json.dumps({"daemon": 5, "sessions": "none", "session": [], "items": 3, "workspaces": {},
                                "tasks": 7, "status": {}, "events": {"x": 1}, "url": None}).encode(),
    "not JSON": b"<html>proxy error</html>",
}

COMMANDS = [
    ("status",), ("doctor",), ("dashboard", "--no-open"), ("session", "list"), ("session", "status", "sess_0a"),
    ("session", "events", "sess_0a"), ("workspace", "list"), ("task", "list"),
    ("agent", "heartbeat", "status", "general"),
]


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    home = tmp_path_factory.mktemp("odd-home")
    answer = home / "answer.json"
    answer.write_bytes(b"{}")
    proc = subprocess.Popen([sys.executable, "-c", FAKE_DAEMON, str(home), str(answer)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not (home / "daemon.json").exists():
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < deadline, "the fake daemon did not start"
        time.sleep(0.05)
    yield home, answer
    proc.kill()
    proc.wait(10)


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COMPOZY_HOME": str(home)}
    for name in ("COMPOZY_URL", "COMPOZY_DEBUG", "COMPOZY_HTTP_PORT"):
        env.pop(name, None)
    return subprocess.run([sys.executable, "-m", "compozy.cli", *args], env=env, cwd=str(ROOT),
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("shape", list(SHAPES))
def test_an_answer_of_an_unexpected_shape_is_one_line_and_exit_1(fake: tuple[Path, Path], shape: str) -> None:
    home, answer = fake
    answer.write_bytes(SHAPES[shape])
    for command in COMMANDS:
        result = cli(home, *command)
        where = f"compozy {' '.join(command)} on {shape}: rc={result.returncode} stderr={result.stderr!r}"
        assert "Traceback" not in result.stderr, where
        if result.returncode == 0:
            continue  # a shape this command can show (a list where it prints what it got) is no failure
        lines = result.stderr.strip().splitlines()
        assert result.returncode in (1, 69), where  # 69: `{"error", "code"}` read as the daemon's own refusal
        assert len(lines) == 1 and lines[0].startswith("error: "), where


def test_a_wrong_shape_says_what_happened_under_json_too(fake: tuple[Path, Path]) -> None:
    home, answer = fake
    answer.write_bytes(SHAPES["a list"])
    result = cli(home, "dashboard", "--no-open", "-o", "json")
    assert result.returncode == 1, result.stderr
    assert json.loads(result.stderr)["code"] == "unexpected_answer"


@pytest.mark.parametrize(("text", "key"), [
    ('[http]\nport = "abc"\n', "http.port"),
    ("[http]\nport = 2123.5\n", "http.port"),
    ("x = " + "[" * 5000 + "]" * 5000 + "\n", "config.toml"),
])
def test_the_cli_refuses_a_port_the_daemon_refuses(tmp_path: Path, text: str, key: str) -> None:
    """It used to dial the default port 2123 instead (with the token, to whoever listens there), or end in a
    traceback for a file nested too deep."""
    (tmp_path / "config.toml").write_text(text)
    (tmp_path / "token").write_text("t" * 43 + "\n")
    for command in (("status",), ("dashboard", "--no-open")):
        result = cli(tmp_path, *command)
        assert result.returncode == 78, result.stderr
        assert "Traceback" not in result.stderr
        [line] = result.stderr.strip().splitlines()
        assert line.startswith("error: invalid config: ") and key in line and line.endswith("(config_invalid)"), line
