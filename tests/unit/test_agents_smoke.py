"""Smoke tests for the demo agent and the scripted test agent.

Each test spawns the agent as a real subprocess and drives it with the SDK's client side.
Wire order is checked through the connection's raw ``observers=`` hook: the SDK runs every
notification's Client callback in its own task, so callback order proves nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from acp import PROTOCOL_VERSION, RequestError, spawn_agent_process, text_block
from acp.client.connection import ClientSideConnection
from acp.connection import StreamDirection, StreamEvent
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    FileSystemCapabilities,
    PermissionOption,
    ReadTextFileResponse,
    RequestPermissionResponse,
    ToolCallUpdate,
    WriteTextFileResponse,
)

REPO = Path(__file__).resolve().parents[2]
SCRIPTED = str(REPO / "tests" / "agents" / "scripted_agent.py")
DEMO_SCRIPT = str(REPO / "sessions" / "acp" / "demo_agent.py")
DEMO_MODULE = ["-m", "sessions.acp.demo_agent"]
CAPS = ClientCapabilities(fs=FileSystemCapabilities(read_text_file=True, write_text_file=True))
# Agents take ~1.5 s to import the SDK; under a loaded CI machine that can be several times longer.
TEST_TIMEOUT = 45.0
pytestmark = pytest.mark.timeout(90)


class RecordingClient:
    """Answers the agent's requests and records what it was asked."""

    def __init__(self, permission: str | None = "allow") -> None:
        self.permission = permission  # option id to select; None answers "cancelled"
        self.permission_requests: list[tuple[ToolCallUpdate, list[PermissionOption]]] = []
        self.reads: list[str] = []
        self.writes: list[tuple[str, str]] = []
        self.callback_updates: list[Any] = []

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        self.callback_updates.append(update)

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption], **_: Any
    ) -> RequestPermissionResponse:
        self.permission_requests.append((tool_call, options))
        if self.permission is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=self.permission))

    async def read_text_file(self, session_id: str, path: str, **_: Any) -> ReadTextFileResponse:
        self.reads.append(path)
        return ReadTextFileResponse(content=Path(path).read_text())

    async def write_text_file(self, session_id: str, path: str, content: str, **_: Any) -> WriteTextFileResponse:
        self.writes.append((path, content))
        Path(path).write_text(content)
        return WriteTextFileResponse()


@dataclass
class Harness:
    conn: ClientSideConnection
    proc: asyncio.subprocess.Process
    client: RecordingClient
    raw: list[dict[str, Any]]  # session/update params in wire order
    stderr: bytearray = field(default_factory=bytearray)

    def updates(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [p["update"] for p in self.raw if kind is None or p["update"].get("sessionUpdate") == kind]

    def texts(self, kind: str = "agent_message_chunk") -> list[str]:
        return [u["content"]["text"] for u in self.updates(kind)]

    async def start(self, cwd: Path | str = REPO) -> str:
        await self.conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=CAPS)
        return (await self.conn.new_session(cwd=str(cwd), mcp_servers=[])).session_id

    async def prompt(self, session_id: str, text: str) -> str:
        response = await self.conn.prompt(session_id=session_id, prompt=[text_block(text)])
        return response.stop_reason


async def _drain(stream: asyncio.StreamReader | None, sink: bytearray) -> None:
    # Always drain stderr: an undrained pipe would eventually block the agent.
    if stream is None:
        return
    while chunk := await stream.read(65536):
        sink.extend(chunk)


@contextlib.asynccontextmanager
async def running(
    args: list[str], client: RecordingClient | None = None, env: Mapping[str, str] | None = None
) -> AsyncIterator[Harness]:
    client = client or RecordingClient()
    raw: list[dict[str, Any]] = []
    stderr = bytearray()

    def observe(event: StreamEvent) -> None:
        if event.direction is StreamDirection.INCOMING and event.message.get("method") == "session/update":
            raw.append(event.message["params"])

    drain: asyncio.Task[None] | None = None
    try:
        async with spawn_agent_process(client, sys.executable, *args, cwd=REPO, env=env, observers=[observe]) as (
            conn,
            proc,
        ):
            drain = asyncio.create_task(_drain(proc.stderr, stderr))
            yield Harness(conn=conn, proc=proc, client=client, raw=raw, stderr=stderr)
    finally:
        if drain is not None:
            with contextlib.suppress(OSError):  # TimeoutError, or the pipe's own error: stderr is evidence only
                await asyncio.wait_for(drain, 2)


def run(coro_fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(coro_fn(), TEST_TIMEOUT))


async def eventually(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


# ---- demo agent -----------------------------------------------------------------------------


def test_demo_hello_round_trip() -> None:
    async def body() -> None:
        async with running(DEMO_MODULE) as h:
            init = await h.conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=CAPS)
            assert init.protocol_version == 1
            assert init.agent_info is not None and init.agent_info.name == "compozy-demo"
            assert init.agent_capabilities is not None and init.agent_capabilities.load_session is True
            new = await h.conn.new_session(cwd=str(REPO), mcp_servers=[])
            assert new.session_id.startswith("demo-")
            assert {o.id for o in new.config_options or []} == {"model", "speed"}
            await h.conn.set_config_option(config_id="speed", session_id=new.session_id, value="fast")

            assert await h.prompt(new.session_id, "hi there, agent") == "end_turn"
            kinds = [u["sessionUpdate"] for u in h.updates()]
            assert kinds[0] == "agent_thought_chunk"
            assert h.texts("agent_thought_chunk") == ["Reading the request."]
            chunks = h.texts()
            assert len(chunks) == 5
            assert "".join(chunks) == "Hello from the Compozy demo agent. You said: hi there, agent"
            assert not h.client.permission_requests

            await h.conn.load_session(cwd=str(REPO), session_id=new.session_id, mcp_servers=[])
            with pytest.raises(RequestError) as err:
                await h.conn.load_session(cwd=str(REPO), session_id="demo-nope", mcp_servers=[])
            assert err.value.code == -32002

    run(body)


@pytest.mark.parametrize("permission", ["allow", "reject"])
def test_demo_read_tool(tmp_path: Path, permission: str) -> None:
    content = "".join(f"line {i}\n" for i in range(100))
    (tmp_path / "notes.txt").write_text(content)

    async def body() -> None:
        async with running([DEMO_SCRIPT], RecordingClient(permission)) as h:
            session_id = await h.start(tmp_path)
            assert await h.prompt(session_id, "please read notes.txt") == "end_turn"
            start, update = h.updates("tool_call"), h.updates("tool_call_update")
            assert len(start) == 1 and start[0]["kind"] == "read" and start[0]["status"] == "pending"
            assert len(update) == 1 and update[0]["toolCallId"] == start[0]["toolCallId"]
            (tool_call, options), *_ = h.client.permission_requests
            assert tool_call.tool_call_id == start[0]["toolCallId"]
            assert {o.kind for o in options} == {"allow_once", "reject_once"}
            if permission == "allow":
                assert h.client.reads == [str(tmp_path / "notes.txt")]
                assert update[0]["status"] == "completed"
                assert update[0]["content"][0]["content"]["text"] == content[:200]
            else:
                assert h.client.reads == []
                assert update[0]["status"] == "failed"
            # Wire order: thought, tool call, tool result, then the reply.
            kinds = [u["sessionUpdate"] for u in h.updates()]
            assert kinds[:3] == ["agent_thought_chunk", "tool_call", "tool_call_update"]
            assert set(kinds[3:]) == {"agent_message_chunk"}
            assert "".join(h.texts()).endswith("You said: please read notes.txt")

    run(body)


def test_demo_answers_the_user_request_not_the_context_replay(tmp_path: Path) -> None:
    # After a reactivation Compozy prepends the earlier transcript; a "read" in it must not run the tool again.
    replayed = ("Earlier conversation follows.\n<compozy_context_replay>[{\"role\": \"user\", \"text\": "
                "\"read notes.txt\"}]</compozy_context_replay>\n\nUser request: what next?")

    async def body() -> None:
        async with running([DEMO_SCRIPT], RecordingClient("allow")) as h:
            session_id = await h.start(tmp_path)
            assert await h.prompt(session_id, replayed) == "end_turn"
            assert h.updates("tool_call") == [] and h.client.reads == []
            assert "".join(h.texts()).endswith("You said: what next?")

    run(body)


def test_demo_cancel() -> None:
    async def body() -> None:
        async with running(DEMO_MODULE) as h:
            session_id = await h.start()
            turn = asyncio.create_task(h.prompt(session_id, "a long reply " * 20))
            await eventually(lambda: len(h.texts()) >= 1)
            await h.conn.cancel(session_id=session_id)
            assert await turn == "cancelled"
            assert len(h.texts()) < 5

    run(body)


# ---- scripted agent -------------------------------------------------------------------------


def test_scripted_stream_in_order() -> None:
    async def body() -> None:
        async with running([SCRIPTED]) as h:
            session_id = await h.start()
            assert await h.prompt(session_id, "stream 1000") == "end_turn"
            assert h.texts() == [f"c{i} " for i in range(1000)]
            assert await h.prompt(session_id, "stream 3 64") == "end_turn"
            assert [len(t) for t in h.texts()[1000:]] == [64, 64, 64]

    run(body)


def test_scripted_hang_cancel() -> None:
    async def body() -> None:
        async with running([SCRIPTED]) as h:
            session_id = await h.start()
            turn = asyncio.create_task(h.prompt(session_id, "hang"))
            await eventually(lambda: h.texts() == ["working"])
            await h.conn.cancel(session_id=session_id)
            assert await turn == "cancelled"
            # The process keeps serving after a cancelled turn.
            assert await h.prompt(session_id, "hello") == "end_turn"
            assert h.texts()[-1] == "echo: hello"

    run(body)


def test_scripted_crash_kills_process() -> None:
    async def body() -> None:
        async with running([SCRIPTED]) as h:
            session_id = await h.start()
            with pytest.raises(ConnectionError):
                await h.prompt(session_id, "crash")
            assert await asyncio.wait_for(h.proc.wait(), 5) == -9
            assert h.texts() == ["c0 ", "c1 ", "c2 "]

    run(body)


def test_scripted_load_session_survives_restart(tmp_path: Path) -> None:
    state = tmp_path / "state"
    args = [SCRIPTED, "--load-session", "--state-dir", str(state)]

    async def body() -> None:
        async with running(args) as h:
            session_id = await h.start()
        assert h.proc.returncode == 0  # stdin EOF is a clean shutdown
        async with running(args) as h:
            init = await h.conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=CAPS)
            assert init.agent_capabilities is not None and init.agent_capabilities.load_session is True
            await h.conn.load_session(cwd=str(tmp_path), session_id=session_id, mcp_servers=[])
            assert h.raw == []  # no history replay
            assert await h.prompt(session_id, "hello again") == "end_turn"
            assert h.texts() == ["echo: hello again"]
            with pytest.raises(RequestError) as err:
                await h.conn.load_session(cwd=str(tmp_path), session_id="scripted-unknown", mcp_servers=[])
            assert err.value.code == -32002

    run(body)


def test_scripted_tools_and_misc_commands(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("file body")
    log = tmp_path / "prompts.jsonl"

    async def body() -> None:
        args = [SCRIPTED, "--prompt-log", str(log)]
        async with running(args, env={"SCRIPTED_FOO": "bar"}) as h:
            sid = await h.start(tmp_path)
            assert await h.prompt(sid, "tool read in.txt") == "end_turn"
            assert h.updates("tool_call_update")[-1]["status"] == "completed"
            assert h.updates("tool_call_update")[-1]["content"][0]["content"]["text"] == "file body"
            assert await h.prompt(sid, "tool write out.txt two  words") == "end_turn"
            assert (tmp_path / "out.txt").read_text() == "two  words"
            assert h.texts()[-2:] == ["tool allow", "tool allow"]
            h.client.permission = "reject"
            assert await h.prompt(sid, "tool read in.txt") == "end_turn"
            assert h.updates("tool_call_update")[-1]["status"] == "failed"
            assert h.texts()[-1] == "tool reject"

            assert await h.prompt(sid, "env SCRIPTED_FOO") == "end_turn"
            assert h.texts()[-1] == "bar"
            assert await h.prompt(sid, "unknown") == "end_turn"
            assert h.updates()[-2] == {"sessionUpdate": "future_widget", "payload": {"x": 1}}
            assert h.texts()[-1] == "after unknown"
            assert await h.prompt(sid, "plan") == "end_turn"
            assert len(h.updates("plan")[-1]["entries"]) == 2
            usage = await h.conn.prompt(session_id=sid, prompt=[text_block("usage")])
            assert usage.usage is not None and usage.usage.total_tokens == 150
            assert h.updates("usage_update")
            with pytest.raises(RequestError) as err:
                await h.prompt(sid, "error")
            assert err.value.code == -32603

            for text in ("slow 100 0.05", "silent 30", "toolhang"):
                turn = asyncio.create_task(h.prompt(sid, text))
                await asyncio.sleep(0.2)
                await h.conn.cancel(session_id=sid)
                assert await turn == "cancelled", text
        logged = log.read_text().splitlines()
        assert logged[0] == f'{{"session_id": "{sid}", "text": "tool read in.txt"}}'

    run(body)


def test_scripted_startup_failures() -> None:
    async def body() -> None:
        async with running([SCRIPTED, "--broken-handshake"]) as h:
            with pytest.raises(ConnectionError):
                await h.conn.initialize(protocol_version=PROTOCOL_VERSION)
            assert await asyncio.wait_for(h.proc.wait(), 5) == 2
        async with running([SCRIPTED, "--exit-on-start"]) as h:
            assert await asyncio.wait_for(h.proc.wait(), 5) == 1
        assert b"boom at start" in h.stderr
        async with running([SCRIPTED, "--fail-new-session"]) as h:
            await h.conn.initialize(protocol_version=PROTOCOL_VERSION)
            with pytest.raises(RequestError) as err:
                await h.conn.new_session(cwd=str(REPO), mcp_servers=[])
            assert err.value.code == -32603

    run(body)


def test_scripted_stderr_flood_and_exit0() -> None:
    async def body() -> None:
        async with running([SCRIPTED, "--stderr-at-start", "300000"]) as h:
            session_id = await h.start()
            assert await h.prompt(session_id, "stderr 1100000") == "end_turn"
            assert h.texts() == ["stderr done"]
            with pytest.raises(ConnectionError):
                await h.prompt(session_id, "exit0")
            assert await asyncio.wait_for(h.proc.wait(), 5) == 0
            assert h.texts()[-1] == "c0 "
        assert len(h.stderr) >= 1_400_000

    run(body)
