"""The ceiling for any ACP client: bare clients on the `acp` SDK, same scripted agent, same `stream N` turn.

Both spawn `tests/agents/scripted_agent.py` (the daemon's `scripted` provider command line), initialize, open
a session and, per turn, time prompt sent → prompt response while checking every chunk text (complete, in
order): the least work any client can do with the chunks. Both read the agent's stdout with the daemon's
buffer limit: with the SDK's default (64 KiB) the pipe stalls the agent far more often, and on a loaded
2-core machine every stall waits for the scheduler, which would make the ceiling look lower than it is.

- `transport`: the SDK's `Connection` on its NDJSON stdio transport, session/update notifications taken off
  in the receive loop as plain dicts (what the daemon's driver does). The ceiling: JSON decode per line only.
- `typed`: the SDK's documented `ClientSideConnection`, which validates each notification into pydantic models
  and runs its handler in a task of its own; its `prompt` returns after every handler of the turn ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acp import PROTOCOL_VERSION, spawn_agent_process, spawn_stdio_transport, text_block
from acp._transport import NdjsonTransport
from acp.connection import Connection
from acp.exceptions import RequestError
from acp.schema import Implementation
from acp.task import MessageSender, TaskSupervisor

from bench.harness import cpu_seconds
from bench.sse_client import ChunkChecker
from sessions.acp.transport import STDIO_LIMIT_BYTES
from tests.conftest import SCRIPTED

CLIENT_INFO = {"name": "compozy-bench", "version": "1"}


@dataclass
class BareRun:
    chunks: int
    seconds: float
    checker: ChunkChecker
    stop_reason: str
    agent_cpu: float
    client_cpu: float

    @property
    def rate(self) -> float:
        return self.chunks / self.seconds if self.seconds > 0 else 0.0


def agent_command(prompt_log: Path) -> list[str]:
    return [sys.executable, str(SCRIPTED), "--prompt-log", str(prompt_log)]


class BareClient:
    """One agent process and session; `stream` runs one timed turn."""

    def __init__(self, process: asyncio.subprocess.Process, prompt: Any) -> None:
        self.process = process
        self._prompt = prompt  # async (text) -> stop reason
        self.checker = ChunkChecker()

    async def stream(self, chunks: int) -> BareRun:
        self.checker = checker = ChunkChecker()
        agent0, client0 = cpu_seconds(self.process.pid), time.process_time()
        start = time.perf_counter()
        stop_reason = await self._prompt(f"stream {chunks}")
        seconds = time.perf_counter() - start
        return BareRun(checker.count, seconds, checker, str(stop_reason), cpu_seconds(self.process.pid) - agent0,
                       time.process_time() - client0)

    def see_update(self, update: dict[str, Any]) -> None:
        if update.get("sessionUpdate") == "agent_message_chunk":
            text = (update.get("content") or {}).get("text")
            if isinstance(text, str):
                self.checker.feed(text)


class CountingTransport(NdjsonTransport):
    """The SDK's NDJSON framing; session/update notifications are counted here, in arrival order."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, sink: BareClient) -> None:
        self._supervisor = TaskSupervisor(source="bench.CountingTransport")
        super().__init__(reader, MessageSender(writer, self._supervisor))
        self._sink = sink

    async def receive(self) -> dict[str, Any] | None:
        while True:
            message = await super().receive()
            if message is None or message.get("method") != "session/update" or "id" in message:
                return message
            self._sink.see_update((message.get("params") or {}).get("update") or {})

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            await self._supervisor.shutdown()


@contextlib.asynccontextmanager
async def transport_client(cwd: Path, prompt_log: Path) -> AsyncIterator[BareClient]:
    """The ceiling: the SDK's Connection and transport, no models."""
    command = agent_command(prompt_log)
    async with spawn_stdio_transport(command[0], *command[1:], cwd=cwd, limit=STDIO_LIMIT_BYTES) as (
            reader, writer, process):
        session: dict[str, str] = {}

        async def prompt(text: str) -> str:
            response = await conn.send_request("session/prompt", {
                "sessionId": session["id"], "prompt": [{"type": "text", "text": text}]})
            return str(response.get("stopReason"))

        client = BareClient(process, prompt)

        async def no_requests(method: str, params: Any, is_notification: bool) -> Any:
            if not is_notification:
                raise RequestError.method_not_found(method)

        conn = Connection(no_requests, CountingTransport(reader, writer, client))
        try:
            await conn.send_request("initialize", {"protocolVersion": PROTOCOL_VERSION, "clientCapabilities": {},
                                                   "clientInfo": CLIENT_INFO})
            opened = await conn.send_request("session/new", {"cwd": str(cwd), "mcpServers": []})
            session["id"] = opened["sessionId"]
            yield client
        finally:
            await conn.close()


class TypedHandler:
    """The `Client` side of ClientSideConnection: typed session updates, counted."""

    def __init__(self) -> None:
        self.client: BareClient | None = None

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        if self.client is not None and getattr(update, "session_update", None) == "agent_message_chunk":
            text = getattr(update.content, "text", None)
            if isinstance(text, str):
                self.client.checker.feed(text)

    async def request_permission(self, *_: Any, **__: Any) -> Any:
        raise RequestError.method_not_found("session/request_permission")


@contextlib.asynccontextmanager
async def typed_client(cwd: Path, prompt_log: Path) -> AsyncIterator[BareClient]:
    """The SDK's documented client API (ClientSideConnection)."""
    command = agent_command(prompt_log)
    handler = TypedHandler()
    async with spawn_agent_process(handler, command[0], *command[1:], cwd=cwd,
                                   transport_kwargs={"limit": STDIO_LIMIT_BYTES}) as (conn, process):
        await conn.initialize(protocol_version=PROTOCOL_VERSION, client_info=Implementation(**CLIENT_INFO))
        session = await conn.new_session(cwd=str(cwd), mcp_servers=[])

        async def prompt(text: str) -> str:
            response = await conn.prompt(session_id=session.session_id, prompt=[text_block(text)])
            return str(response.stop_reason)

        handler.client = BareClient(process, prompt)
        yield handler.client
