"""The standard-library scripted agent (`tests/agents/scripted_agent.py`) against its SDK twin (`sdk_agent.py`).

Both run the same script side by side, driven by raw JSON-RPC lines; what each writes on stdout must be the same
line for line, key order included, once the random parts of ids (and pids) are masked. Exit codes, stdout's EOF
and the stderr lines a test reads are compared too. A scenario added to one agent and not the other fails here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SCRIPTED, SDK_AGENT

pytestmark = pytest.mark.timeout(120)
TIMEOUT = 60.0  # per agent run; the SDK twin takes about a second to import on a loaded machine
MASKS = [(re.compile(r"scripted-[0-9a-f]{32}"), "scripted-<id>"), (re.compile(r"(tool-\d+)-[0-9a-f]{8}"), r"\1-<id>"),
         (re.compile(r"(child pid|grandchild) \d+"), r"\1 <pid>"),
         # pydantic's account of a response it refused is its own prose (the stdlib agent says it in one line).
         (re.compile(r"ValidationError: [^\"]*"), "ValidationError: <prose>")]


def masked(line: str) -> str:
    for pattern, replacement in MASKS:
        line = pattern.sub(replacement, line)
    # pydantic's validation errors are its own prose; the code and message are the contract.
    try:
        message = json.loads(line)
    except ValueError:
        return line
    error = message.get("error") if isinstance(message, dict) else None
    if isinstance(error, dict) and isinstance(error.get("data"), dict) and "errors" in error["data"]:
        error["data"] = {"errors": "<validation errors>"}
        return json.dumps(message, separators=(",", ":"))
    return line


@dataclass
class Client:
    """What the client answers to the agent's requests, changed by the script as it goes."""
    permission: Any = "allow"  # an option id, "cancelled", None (never answered) or a raw outcome dict
    fs_error: dict[str, Any] | None = None
    fs_result: Any = "real"  # anything else: the raw result of every fs request

    def answer(self, message: dict[str, Any]) -> dict[str, Any] | None:
        method, params = message["method"], message.get("params") or {}
        if method == "session/request_permission":
            if self.permission is None:
                return None
            if isinstance(self.permission, dict):
                return {"result": {"outcome": self.permission}}
            if self.permission == "cancelled":
                return {"result": {"outcome": {"outcome": "cancelled"}}}
            return {"result": {"outcome": {"outcome": "selected", "optionId": self.permission}}}
        if self.fs_error is not None:
            return {"error": self.fs_error}
        if self.fs_result != "real":
            return {"result": self.fs_result}
        if method == "fs/read_text_file":
            return {"result": {"content": Path(params["path"]).read_text()}}
        if method == "fs/write_text_file":
            Path(params["path"]).write_text(params["content"])
            return {"result": {}}
        return {"error": {"code": -32601, "message": "Method not found", "data": {"method": method}}}


@dataclass
class Wire:
    """One agent process driven line by line; `lines` is everything it wrote on stdout, in order."""
    proc: asyncio.subprocess.Process
    client: Client = field(default_factory=Client)
    lines: list[str] = field(default_factory=list)
    stderr: bytearray = field(default_factory=bytearray)
    eof: bool = False
    _ids: int = 0
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @classmethod
    async def spawn(cls, script: str, *args: str, cwd: Path) -> Wire:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, script, *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, cwd=cwd, start_new_session=True, limit=64 * 1024 * 1024,
            env={**os.environ, "SCRIPTED_FOO": "bar"})
        wire = cls(proc)
        wire._tasks = [asyncio.create_task(wire._read()), asyncio.create_task(wire._drain())]
        return wire

    def messages(self) -> list[Any]:
        parsed = []
        for line in self.lines:
            try:
                parsed.append(json.loads(line))
            except ValueError:
                parsed.append(line)
        return parsed

    async def _read(self) -> None:
        assert self.proc.stdout
        while line := await self.proc.stdout.readline():
            self.lines.append(line.decode("utf-8", "replace").rstrip("\n"))
            with contextlib.suppress(ValueError):
                message = json.loads(line)
                if isinstance(message, dict) and "method" in message and "id" in message:
                    answer = self.client.answer(message)
                    if answer is not None:
                        await self.send({"jsonrpc": "2.0", "id": message["id"], **answer})
            self._changed.set()
        self.eof = True
        self._changed.set()

    async def _drain(self) -> None:
        assert self.proc.stderr
        while chunk := await self.proc.stderr.read(65536):
            self.stderr.extend(chunk)
            self._changed.set()

    def write(self, message: dict[str, Any]) -> None:
        """Queue one line now, so lines reach the agent in the order the script wrote them."""
        assert self.proc.stdin
        if not self.proc.stdin.is_closing():
            self.proc.stdin.write((json.dumps(message) + "\n").encode())

    async def send(self, message: dict[str, Any]) -> None:
        self.write(message)
        assert self.proc.stdin
        with contextlib.suppress(ConnectionError):
            await self.proc.stdin.drain()

    async def until(self, predicate: Callable[[], Any], what: str) -> Any:
        async def wait() -> Any:
            while not (value := predicate()):
                self._changed.clear()
                await self._changed.wait()
            return value
        try:
            return await asyncio.wait_for(wait(), TIMEOUT)
        except TimeoutError:
            raise AssertionError(f"timed out waiting for {what}; got {self.lines[-5:]}") from None

    def start(self, method: str, params: Any) -> Awaitable[dict[str, Any]]:
        """Send a request now; the awaitable is its response."""
        request_id = self._ids
        self._ids += 1
        self.write({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})

        def response() -> dict[str, Any] | None:
            return next((m for m in self.messages() if isinstance(m, dict) and m.get("id") == request_id
                         and "method" not in m), None)

        return asyncio.ensure_future(self.until(response, f"the response to {method}"))

    async def call(self, method: str, params: Any) -> dict[str, Any]:
        return await self.start(method, params)

    async def notify(self, method: str, params: Any) -> None:
        await self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def prompt(self, sid: str, text: str) -> Awaitable[dict[str, Any]]:
        return self.start("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]})

    def said(self, text: str) -> bool:
        return any(isinstance(m, dict) and m.get("method") == "session/update"
                   and m["params"]["update"].get("sessionUpdate") == "agent_message_chunk"
                   and m["params"]["update"]["content"]["text"] == text for m in self.messages())

    async def open(self, cwd: Path) -> str:
        init = await self.call("initialize", {"protocolVersion": 1, "clientCapabilities": {
            "fs": {"readTextFile": True, "writeTextFile": True}, "terminal": False},
            "clientInfo": {"name": "wire-test", "version": "1"}})
        assert "result" in init, init
        opened = await self.call("session/new", {"cwd": str(cwd), "mcpServers": []})
        return str(opened["result"]["sessionId"])

    async def cancelled(self, sid: str, text: str, started: str | None) -> dict[str, Any]:
        """Prompt `text`, wait until a line after it holds `started` (None: right away), cancel, return the
        prompt's response."""
        seen = len(self.lines)
        turn = self.prompt(sid, text)
        if started is not None:
            await self.until(lambda: any(started in line for line in self.lines[seen:]), f"{text!r} to start")
        await self.notify("session/cancel", {"sessionId": sid})
        return await turn

    async def exit(self) -> int:
        """Close stdin and wait for the exit."""
        assert self.proc.stdin
        self.proc.stdin.close()
        return await self.wait()

    async def wait(self) -> int:
        code = await asyncio.wait_for(self.proc.wait(), TIMEOUT)
        await asyncio.wait_for(asyncio.gather(*self._tasks), TIMEOUT)
        return code

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)


@dataclass
class Outcome:
    lines: list[str]
    facts: dict[str, Any]


Script = Callable[[Path, Path], Awaitable[Outcome]]


def both(script: Script, tmp_path: Path) -> None:
    """Run `script` against each agent (side by side, each in a home of its own) and compare what they did."""
    homes = {"stdlib": (SCRIPTED, tmp_path / "stdlib"), "sdk": (SDK_AGENT, tmp_path / "sdk")}

    async def run() -> list[Outcome]:
        return list(await asyncio.gather(*(script(Path(agent), home) for agent, home in homes.values())))

    def seen(outcome: Outcome, home: Path) -> tuple[list[str], Any]:
        def mask(text: str) -> str:
            return masked(text.replace(str(home), "<home>"))
        return [mask(line) for line in outcome.lines], json.loads(mask(json.dumps(outcome.facts)))

    ours, sdk = asyncio.run(run())
    (our_lines, our_facts), (sdk_lines, sdk_facts) = seen(ours, homes["stdlib"][1]), seen(sdk, homes["sdk"][1])
    assert our_lines == sdk_lines
    assert our_facts == sdk_facts


def workspace(home: Path) -> Path:
    ws = home / "ws"
    ws.mkdir(parents=True)
    (ws / "in.txt").write_text("file body\n")
    return ws


async def run_wire(agent: Path, home: Path, args: list[str], body: Callable[[Wire, Path], Awaitable[dict[str, Any]]],
                   ) -> Outcome:
    ws = workspace(home)
    wire = await Wire.spawn(str(agent), *args, cwd=ws)
    try:
        facts = await body(wire, ws)
    finally:
        wire.kill()
        with contextlib.suppress(TimeoutError):  # killed: a body that failed says why itself
            await wire.wait()
    return Outcome(wire.lines, facts)


# Prompts whose turn ends by itself, errors included.
TURNS = ["hello  world", "think deep  thoughts", "think", "plan", "usage", "unknown", "env SCRIPTED_FOO",
         "env NOPE_NOT_SET", "env", "silent 0.01", "slow 3 0.01", "stream 5", "stream 3 20", "stream 600", "tools 2 0",
         "", "ÉCHO ünïcode ✓", "stderr 1000", "hostile", "hostile surrogate", "error", "autherr", "empty", "stream x",
         "stream", "slow 1", "silent", "tool", "tool erase x", "tool read", "tools 1", "exitidle",
         "markdown", "diff", "diff big", "terminal", "hostile html"]


# ---- long-lived scripts ----------------------------------------------------------------------------------------

def test_turns_tools_errors_and_cancels_are_the_same_on_the_wire(tmp_path: Path) -> None:
    async def script(agent: Path, home: Path) -> Outcome:
        log = home / "prompts.jsonl"

        async def body(w: Wire, ws: Path) -> dict[str, Any]:
            sid = await w.open(ws)
            for text in TURNS:
                await w.prompt(sid, text)
            await w.call("session/prompt", {"sessionId": sid, "prompt": [
                {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                {"type": "text", "text": "two"}, {"type": "text", "text": "blocks"}]})
            await w.prompt(sid, "tool read in.txt")
            await w.prompt(sid, "tool write sub/../out.txt two  words")
            w.client.permission = "reject"
            await w.prompt(sid, "tool read in.txt")
            w.client.permission = "cancelled"
            await w.prompt(sid, "tool read in.txt")
            w.client.permission = "other"
            await w.prompt(sid, "tool read in.txt")
            w.client.permission = {"outcome": "selected"}  # no optionId
            await w.prompt(sid, "tool read in.txt")
            w.client.permission = {"outcome": "maybe"}
            await w.prompt(sid, "tool read in.txt")
            w.client.permission = "allow"
            w.client.fs_result = {"text": "not the field"}
            await w.prompt(sid, "tool read in.txt")
            w.client.fs_result = None  # a write's result may be null
            await w.prompt(sid, "tool write out2.txt z")
            w.client.fs_result = "real"
            w.client.fs_error = {"code": -32002, "message": "Resource not found", "data": {"uri": "nope"}}
            await w.prompt(sid, "tool read nope.txt")
            w.client.fs_error = {"code": -32602, "message": "outside the workspace"}
            await w.prompt(sid, "tool write /etc/x y")
            w.client.fs_error = None
            w.client.permission = None  # never answered: the turn waits in the permission request
            await w.cancelled(sid, "tool read in.txt", "session/request_permission")
            w.client.permission = "allow"
            await w.cancelled(sid, "hang", '"working"')
            await w.cancelled(sid, "toolhang", '"tool_call"')
            # Long intervals: the cancel always lands in the first wait, however loaded the machine.
            await w.cancelled(sid, "slow 100 30", '"c0 "')
            await w.cancelled(sid, "silent 30", None)  # the cancel follows the prompt on the pipe
            await w.cancelled(sid, "tools 50 30", '"step 0 done"')
            await w.cancelled(sid, "spawnchild", "child pid")
            await w.prompt(sid, "hello after cancels")
            # Requests no handler takes, or with parameters ACP does not allow.
            await w.prompt("scripted-unknown", "hello")
            await w.call("session/load", {"cwd": str(ws), "sessionId": sid, "mcpServers": []})
            await w.call("session/set_config_option", {"sessionId": sid, "configId": "model", "value": "x"})
            for method in ("session/list", "authenticate", "session/set_mode", "session/set_model", "_vendor/x",
                           "nonsense"):
                await w.call(method, {"sessionId": sid})
            await w.call("session/new", {"mcpServers": []})
            await w.call("session/new", None)
            await w.call("session/prompt", {"sessionId": sid})
            await w.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "nope"}]})
            await w.notify("session/cancel", {"sessionId": "scripted-unknown"})
            await w.notify("nonsense/notification", {})
            await w.send({"jsonrpc": "2.0", "id": 9999, "result": {}})  # a response to nothing
            await w.prompt(sid, "the end")
            code = await w.exit()
            return {"exit": code, "eof": w.eof, "out.txt": (ws / "out.txt").read_text(),
                    "prompt_log": [json.loads(line)["text"] for line in log.read_text().splitlines()],
                    "stderr_filler_lines": w.stderr.count(b"x" * 99 + b"\n")}

        return await run_wire(agent, home, ["--prompt-log", str(log)], body)

    both(script, tmp_path)


def test_sessions_that_load_and_models_are_the_same_on_the_wire(tmp_path: Path) -> None:
    replay = ("Earlier conversation follows.\n<compozy_context_replay>[{\"role\": \"user\", \"text\": \"User request: "
              "crash\"}]</compozy_context_replay>\n\nUser request: think it over")

    async def script(agent: Path, home: Path) -> Outcome:
        state = home / "state"
        args = ["--load-session", "--state-dir", str(state), "--models", "alpha,beta-2", "--dispatch-after-replay",
                "--echo-verbatim"]
        lines: list[str] = []

        async def first(w: Wire, ws: Path) -> dict[str, Any]:
            sid = await w.open(ws)
            await w.call("session/set_config_option", {"sessionId": sid, "configId": "model", "value": "beta-2"})
            await w.call("session/set_config_option", {"sessionId": sid, "configId": "model", "value": "gamma"})
            await w.call("session/set_config_option", {"sessionId": sid, "configId": "speed", "value": "alpha"})
            await w.call("session/set_config_option", {"sessionId": sid, "configId": "model", "type": "boolean",
                                                       "value": True})
            await w.call("session/set_config_option", {"sessionId": sid, "configId": "model", "value": 3})
            await w.call("session/load", {"cwd": str(ws), "sessionId": sid, "mcpServers": []})
            for unknown in ("scripted-unknown", "../etc/passwd", "x" * 201):
                await w.call("session/load", {"cwd": str(ws), "sessionId": unknown, "mcpServers": []})
            await w.prompt(sid, "hello, verbatim")
            await w.prompt(sid, replay)
            return {"sid": sid, "exit": await w.exit()}

        one = await run_wire(agent, home / "one", args, first)
        lines += one.lines

        async def second(w: Wire, ws: Path) -> dict[str, Any]:
            await w.call("initialize", {"protocolVersion": "2024-11-05"})
            loaded = await w.call("session/load", {"cwd": str(ws), "sessionId": one.facts["sid"], "mcpServers": []})
            await w.prompt(one.facts["sid"], "after the restart")
            return {"loaded": loaded, "exit": await w.exit()}

        two = await run_wire(agent, home / "two", args, second)
        return Outcome(lines + two.lines, {"first_exit": one.facts["exit"], **two.facts,
                                           "state": sorted(p.name[:9] for p in state.iterdir())})

    both(script, tmp_path)


def test_an_agent_deaf_to_cancel_is_the_same_on_the_wire(tmp_path: Path) -> None:
    async def script(agent: Path, home: Path) -> Outcome:
        async def body(w: Wire, ws: Path) -> dict[str, Any]:
            sid = await w.open(ws)
            turn = w.prompt(sid, "hang")
            await w.until(lambda: w.said("working"), "hang to start")
            await w.notify("session/cancel", {"sessionId": sid})
            await w.until(lambda: b"ignoring session/cancel" in w.stderr, "the warning")
            await w.prompt(sid, "meanwhile")  # the process still serves while the hung turn waits
            code = await w.exit()  # stdin's EOF ends it, hung turn and all, unanswered
            assert not turn.done()
            return {"exit": code, "warning": [line for line in w.stderr.decode().splitlines() if "ignoring" in line]}

        return await run_wire(agent, home, ["--ignore-cancel", "--echo-verbatim"], body)

    both(script, tmp_path)


# ---- scripts that end the process ------------------------------------------------------------------------------

async def until_exit_or_pid(w: Wire) -> int:
    """An orphaned grandchild holds stdout: kill it once named, then wait for the agent."""
    pid = await w.until(lambda: next((int(m.group(1)) for line in w.lines
                                      if (m := re.search(r"grandchild (\d+)", line))), None), "the grandchild")
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return await w.wait()


ENDINGS: dict[str, tuple[list[str], str]] = {
    "crash": ([], "crash"),
    "exit0": ([], "exit0"),
    "leak": ([], "leak sk-ant-planted-secret"),
    "exitidle": ([], "exitidle 0.05"),
    "orphanpipe": ([], "orphanpipe"),
    "orphanpipe setsid": ([], "orphanpipe setsid"),
    "closeout": ([], "closeout"),
    "closeoutidle": ([], "closeoutidle"),
    "wedge": ([], "wedge"),
    "spawnchild setsid": ([], "spawnchild setsid"),
    "stderr-at-start": (["--stderr-at-start", "300000"], "hello"),
    "fail-new-session": (["--fail-new-session"], ""),
    "broken-handshake": (["--broken-handshake"], ""),
    "exit-on-start": (["--exit-on-start"], ""),
}


async def _after_the_prompt(w: Wire, turn: Awaitable[dict[str, Any]], ending: str) -> dict[str, Any]:
    """What an ending does once the prompt is sent, as facts to compare."""
    facts: dict[str, Any] = {}
    if ending in ("crash", "exit0", "leak"):
        facts["exit"] = await w.wait()
    elif ending == "exitidle":
        await turn
        facts["exit"] = await w.wait()
    elif ending.startswith("orphanpipe"):
        facts["exit"] = await until_exit_or_pid(w)
    elif ending.startswith("closeout"):
        await w.until(lambda: w.eof, "stdout's EOF")
        facts["alive_after_eof"] = w.proc.returncode is None
    elif ending == "wedge":
        await w.until(lambda: w.said("wedged"), "the wedge")
        w.kill()
        facts["exit"] = await w.wait()
    elif ending == "spawnchild setsid":
        pid = int((await w.until(lambda: next((re.search(r"child pid (\d+)", line) for line in w.lines
                                                if "child pid" in line), None), "the child")).group(1))
        facts["exit"] = await w.exit()
        facts["child_outlived"] = os.path.exists(f"/proc/{pid}")
        os.kill(pid, signal.SIGKILL)
    else:
        await turn
        facts["exit"] = await w.exit()
        facts["stderr_bytes"] = len(w.stderr)
    return facts


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_endings_are_the_same(tmp_path: Path, ending: str) -> None:
    args, text = ENDINGS[ending]

    async def script(agent: Path, home: Path) -> Outcome:
        async def body(w: Wire, ws: Path) -> dict[str, Any]:
            facts: dict[str, Any] = {}
            if ending == "exit-on-start":
                return {"exit": await w.wait(), "stderr": w.stderr.decode()}
            if ending == "broken-handshake":
                w.start("initialize", {"protocolVersion": 1})
                return {"exit": await w.wait()}
            if ending == "fail-new-session":
                await w.call("initialize", {"protocolVersion": 1})
                await w.call("session/new", {"cwd": str(ws), "mcpServers": []})
                return {"exit": await w.exit()}
            sid = await w.open(ws)
            facts.update(await _after_the_prompt(w, w.prompt(sid, text), ending))
            if ending == "leak":
                facts["stderr"] = [line for line in w.stderr.decode().splitlines() if "fatal" in line]
            facts["eof"] = w.eof
            return facts

        return await run_wire(agent, home, args, body)

    both(script, tmp_path)
