"""A session's memory (docs/reference/memory.md §3): the frozen snapshot its first prompt carries, and the memory
MCP server handed to its agent at session/new.

The server is `memory/mcp_server.py`, which the agent starts as any stdio MCP server, inside its sandbox. That
sandbox hides `$COMPOZY_HOME` (memory, the journal, the token, the daemon's socket: memory/mcp_server.py says
why), so the server relays each tool call to a socket the daemon opens for this session alone, in an owner-only
folder under /tmp (which the sandbox shares, and which a Unix socket reaches even with the network cut). The daemon
runs the call through memory's one write path, attributed to the session the socket belongs to: no credential
travels, and none is needed. The socket and its folder go when the session stops."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import memory.mcp_server
from compozy_base.config.mcp_servers import McpServer
from memory import service, snapshot
from memory.errors import MemoryFailure
from sessions.core.enums import EventType

if TYPE_CHECKING:
    from sessions.runtime.host import SessionCore

logger = logging.getLogger(__name__)

SERVER_NAME = "compozy-memory"
MAX_REQUEST = 1024 * 1024
SCRIPT = Path(memory.mcp_server.__file__).resolve()


def _socket_folder() -> Path:
    """A fresh owner-only (0700) folder under /tmp, the folder the sandbox shares with the agent."""
    base = "/tmp" if Path("/tmp").is_dir() else None
    return Path(tempfile.mkdtemp(prefix="compozy-mcp-", dir=base))


class MemoryTools:
    def __init__(self, session: SessionCore) -> None:
        self._session = session
        self._server: asyncio.base_events.Server | None = None
        self._folder: Path | None = None

    @property
    def _workspace(self) -> Path:
        return self._session.roots[0]

    async def take_snapshot(self) -> str | None:
        """The resolved scopes, frozen now: the block the first prompt carries, and a `memory_snapshot` row that
        says what was given (the dashboard's Memory page shows it per session)."""
        session = self._session
        cfg = session.config.memory
        if not cfg.enabled or cfg.snapshot_max_chars <= 0:
            return None
        try:
            snap = await asyncio.to_thread(snapshot.take, self._workspace, session.rec.agent_name,
                                           cfg.snapshot_max_chars)
        except Exception as exc:
            logger.exception("session %s: the memory snapshot could not be taken", session.rec.id)
            session.record(EventType.SYSTEM, {"title": "memory_snapshot_failed", "text": str(exc)[:500]}, turn_id="")
            return None
        if not snap.text:
            return None
        session.record(EventType.SYSTEM, {"title": "memory_snapshot", "text": snap.text,
                                          "raw": {"entries": snap.slugs, "left_out": snap.truncated,
                                                  "chars": len(snap.text)}}, turn_id="")
        return snap.text

    async def open(self) -> McpServer | None:
        """The session's socket, listening, and the stdio server entry that reaches it; None when memory is off."""
        session = self._session
        if not session.config.memory.enabled:
            return None
        if self._server is None:
            self._folder = _socket_folder()
            path = self._folder / "s"
            self._server = await asyncio.start_unix_server(self._serve, path=str(path), limit=MAX_REQUEST)
            path.chmod(0o600)
            asyncio.get_running_loop().create_task(self._close_when_stopped())
        assert self._folder is not None
        return McpServer(SERVER_NAME, "stdio", command=sys.executable,
                         args=("-I", str(SCRIPT), "--socket", str(self._folder / "s"), "--session", session.rec.id))

    async def _close_when_stopped(self) -> None:
        await self._session.stopped.wait()
        await self.close()

    async def close(self) -> None:
        server, folder = self._server, self._folder
        self._server = self._folder = None
        if server is not None:
            server.close()
            with contextlib.suppress(Exception):
                await server.wait_closed()
        if folder is not None:
            await asyncio.to_thread(shutil.rmtree, folder, True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 30.0)
            answer = await self._answer(line)
            writer.write(json.dumps(answer, ensure_ascii=False).encode() + b"\n")
            await writer.drain()
        except (TimeoutError, ConnectionError, asyncio.LimitOverrunError, ValueError) as exc:
            logger.info("session %s: a memory tool call was dropped: %s", self._session.rec.id, exc)
        finally:
            writer.close()

    async def _answer(self, line: bytes) -> dict[str, Any]:
        try:
            request = json.loads(line)
            tool, arguments = request["tool"], request.get("arguments") or {}
            if not isinstance(arguments, dict):
                raise TypeError("arguments must be an object")
            result = await asyncio.to_thread(self._call, str(tool), arguments)
            return {"ok": True, "result": result}
        except MemoryFailure as exc:
            return {"ok": False, "error": exc.message, "code": exc.code}
        except (ValueError, KeyError, TypeError) as exc:
            return {"ok": False, "error": f"bad tool call: {exc}", "code": "invalid_request"}
        except Exception:
            logger.exception("session %s: memory tool call failed", self._session.rec.id)
            return {"ok": False, "error": "the memory tool failed (the daemon's log says why)", "code": "internal"}

    def _call(self, tool: str, args: dict[str, Any]) -> Any:
        """Off the loop: memory's service, as this session (its workspace, its agent, its id)."""
        sid, agent, ws = self._session.rec.id, self._session.rec.agent_name, self._workspace
        if tool == "memory_search":
            return {"results": service.search(str(args.get("query") or ""), workspace=ws, agent=agent,
                                              session_id=sid)}
        if tool == "memory_show":
            return service.show(str(args["slug"]), type_=args.get("type"), workspace=ws, agent=agent, session_id=sid)
        if tool == "memory_write":
            return service.write(scope=str(args.get("scope") or "workspace"), type_=str(args.get("type") or ""),
                                 name=str(args.get("name") or ""), description=str(args.get("description") or ""),
                                 body=str(args.get("body") or ""), workspace=ws, agent=agent, actor="agent",
                                 session_id=sid)
        raise ValueError(f"no tool {tool!r:.60}")
